#!/usr/bin/env python3
"""scripts/gpu-check.sh and scripts/gpu-lab.sh on a machine without a GPU: each runs from a copy of
the scripts in a scratch folder, with fake cmake, ctest, nvidia-smi, nvcc, compute-sanitizer and
python3 first on PATH, and fake programs where the build would put kiln's. What is checked is the
scripts' own logic, the part that failed review (dist.md C1-C4, C6, C7):

- what comes back fits the device tool's rule: at most 8 files under OUT_DIR, at most 2 folders
  down, plain names; the summary and one archive of every log are among them, from the exit trap,
  whatever way the run ends;
- a CMake warning in the configure log fails the run;
- the time budget skips the steps it cannot fit and says so, exit status 2;
- the nccl test is a step of its own;
- a sanitizer run stopped by its time limit is incomplete, not failed, unless it reported an error;
- a carry folder with no package, or one that does not unpack, fails the run;
- DRY_RUN=1 goes through every step without running one;
- shellcheck, where installed, finds nothing in them.

Run: python3 tests/scripts/test_gpu_scripts.py (ctest: scripts_gpu_check).
"""
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_FILES = 8
NAME = re.compile(r"^[A-Za-z0-9._-]+$")

FAKE_CMAKE = r"""#!/usr/bin/env bash
# cmake --version | cmake -S . -B DIR ... | cmake --build DIR ...
case "$1" in
  --version) echo "cmake version 4.4.0" ;;
  -S)
    while [ $# -gt 0 ]; do [ "$1" = -B ] && dir=$2; shift; done
    mkdir -p "$dir" && touch "$dir/build.ninja"
    echo "-- kiln: CUDA backend ON (fake)"
    [ -n "${FAKE_CMAKE_WARNING:-}" ] && echo "CMake Warning at CMakeLists.txt:1 (message):"
    exit 0 ;;
  --build)
    dir=$2
    for program in apps/kiln-device-info apps/kiln-train tests/gpu_test_lab \
                   tests/gpu_test_lab_attention tests/gpu_test_nccl \
                   tests/gpu_test_reduce tests/gpu_test_cuda_allocator tests/test_grad_scaler \
                   benchmarks/train_throughput benchmarks/kiln_bench/kiln-bench; do
      mkdir -p "$dir/$(dirname "$program")"
      cp "$FAKE_DIR/program" "$dir/$program"
    done ;;
esac
"""

# Every program of the fake build: sleeps FAKE_SLEEP seconds, then prints what the scripts read.
FAKE_PROGRAM = r"""#!/usr/bin/env bash
sleep "${FAKE_SLEEP:-0}"
case "$(basename "$0")" in
  kiln-train) echo "epoch 1: loss 0.4"; echo "test accuracy: 91.70%" ;;
  kiln-bench)
    while [ $# -gt 0 ]; do [ "$1" = --csv ] && echo "family,version" > "$2"; shift; done
    echo "kiln-bench lab: all in 1 s; every version checked" ;;
  *) echo "ok" ;;
esac
"""

FAKE_CTEST = r"""#!/usr/bin/env bash
sleep "${FAKE_SLEEP:-0}"
echo "$*" >> "$FAKE_DIR/ctest-calls"
echo "100% tests passed, 0 tests failed out of 1"
"""

# A sanitizer run that takes FAKE_SANITIZER_SLEEP seconds; with FAKE_RACE it reports a race first.
FAKE_SANITIZER = r"""#!/usr/bin/env bash
[ -n "${FAKE_RACE:-}" ] && echo "========= Error: Race reported between Write access and Read access"
sleep "${FAKE_SANITIZER_SLEEP:-0}"
echo "========= ERROR SUMMARY: 0 errors"
"""

FAKE_SIMPLE = "#!/usr/bin/env bash\necho fake\n"

# python3 -c (the scripts' probes for torch and the wheels) fails: no PyTorch here; a script runs
# as a no-op that succeeds.
FAKE_PYTHON = "#!/usr/bin/env bash\n[ \"$1\" = -c ] && exit 1\necho \"fake python3 $*\"\n"


def executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class Sandbox:
    def __init__(self, base):
        self.base = pathlib.Path(base)
        self.repo = self.base / "repo"
        (self.repo / "scripts").mkdir(parents=True)
        for name in ("gpu-check.sh", "gpu-common.sh", "gpu-lab.sh"):
            shutil.copy(ROOT / "scripts" / name, self.repo / "scripts" / name)
        (self.repo / "docs" / "kernels").mkdir(parents=True)
        self.fakes = self.base / "fakes"
        self.fakes.mkdir()
        executable(self.fakes / "cmake", FAKE_CMAKE)
        executable(self.fakes / "program", FAKE_PROGRAM)
        executable(self.fakes / "ctest", FAKE_CTEST)
        executable(self.fakes / "compute-sanitizer", FAKE_SANITIZER)
        executable(self.fakes / "nvidia-smi", FAKE_SIMPLE)
        executable(self.fakes / "nvcc", FAKE_SIMPLE)
        executable(self.fakes / "python3", FAKE_PYTHON)
        self.runs = 0

    def run(self, script, **env):
        self.runs += 1
        out = self.base / f"out{self.runs}"
        environment = dict(os.environ)
        environment.update(
            PATH=f"{self.fakes}:{os.environ['PATH']}", FAKE_DIR=str(self.fakes), OUT_DIR=str(out),
            LOG_DIR=str(self.base / f"logs{self.runs}"),
            WORK_DIR=str(self.base / f"work{self.runs}"), BUILD_DIR=str(self.base / "build"))
        environment.update({k: str(v) for k, v in env.items()})
        result = subprocess.run(["bash", str(self.repo / "scripts" / script)], env=environment,
                                capture_output=True, text=True, timeout=120)
        summary = (out / "summary.txt").read_text() if (out / "summary.txt").exists() else ""
        return result.returncode, summary, out


failures = []


def check(ok, what, detail=""):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)
        if detail:
            print("      " + detail.replace("\n", "\n      "))


def check_returned_files(out, archive, wanted_logs, what):
    files = [p for p in out.rglob("*") if p.is_file()]
    check(len(files) <= MAX_FILES, f"{what}: {len(files)} files come back, at most {MAX_FILES}",
          "\n".join(str(p) for p in files))
    deep = [p for p in files if len(p.relative_to(out).parts) > 3]
    check(not deep, f"{what}: no file more than 2 folders down", "\n".join(map(str, deep)))
    odd = [p for p in files if not all(NAME.match(part) for part in p.relative_to(out).parts)]
    check(not odd, f"{what}: every name is letters, digits, '.', '_' and '-'", str(odd))
    check((out / "summary.txt").exists(), f"{what}: summary.txt comes back")
    tar = out / archive
    check(tar.exists(), f"{what}: {archive} comes back")
    if tar.exists():
        with tarfile.open(tar) as t:
            names = {pathlib.PurePath(n).name for n in t.getnames()}
        missing = [n for n in wanted_logs if n not in names]
        check(not missing, f"{what}: the archive holds every log", f"missing {missing}")


def main():
    if shutil.which("shellcheck"):
        scripts = [str(ROOT / "scripts" / name)
                   for name in ("gpu-check.sh", "gpu-lab.sh", "gpu-common.sh")]
        lint = subprocess.run(["shellcheck", "-x", "-s", "bash", *scripts], cwd=ROOT,
                              capture_output=True, text=True)
        check(lint.returncode == 0, "shellcheck finds nothing in the GPU scripts", lint.stdout)
    else:
        print("skip  shellcheck: not installed here")
    with tempfile.TemporaryDirectory() as base:
        box = Sandbox(base)

        status, summary, out = box.run("gpu-check.sh")
        check(status == 0, "gpu-check, every step passing: exit 0", f"exit {status}\n{summary}")
        check("done: every step passed" in summary, "gpu-check: the summary's last line says so")
        check(re.search(r"^pass  nccl", summary, re.M) is not None, "gpu-check: nccl is a step")
        calls = (box.fakes / "ctest-calls").read_text()
        check("-E ^gpu_test_nccl$" in calls and "-R ^gpu_test_nccl$" in calls,
              "gpu-check: gpu-tests leaves the nccl test to its own step", calls)
        check(re.search(r"^pass  sanitize .*runs clean", summary, re.M) is not None,
              "gpu-check: the sanitizer runs pass", summary)
        check_returned_files(out, "gpu-check-logs.tar.gz",
                             ["summary.txt", "configure.log", "build.log", "gpu-tests.log",
                              "nccl.log", "kiln-train.log", "bench.log", "sanitize.txt",
                              "memcheck-gpu_test_reduce.log", "racecheck-gpu_test_lab.log"],
                             "gpu-check")

        status, summary, out = box.run("gpu-check.sh", DRY_RUN=1, BUILD_DIR=box.base / "none")
        check(status == 0 and "pass  configure (dry run)" in summary
              and "pass  sanitize (dry run" in summary,
              "gpu-check, DRY_RUN=1: every step logged, none run", f"exit {status}\n{summary}")
        check_returned_files(out, "gpu-check-logs.tar.gz", ["configure.log", "kiln-train.log"],
                             "gpu-check, DRY_RUN=1")

        status, summary, out = box.run("gpu-check.sh", FAKE_CMAKE_WARNING=1, SANITIZE=0, BENCH=0,
                                       SKIP_TRAIN=1)
        check(status == 1 and "FAIL  configure warnings: 1" in summary,
              "gpu-check: a CMake warning in the configure log fails the run",
              f"exit {status}\n{summary}")

        status, summary, out = box.run("gpu-check.sh", GPU_CHECK_BUDGET_S=9, KEEP_S=1,
                                       MIN_STEP_S=2, FAKE_SLEEP=2)
        check(status == 2, "gpu-check over its budget: exit 2", f"exit {status}\n{summary}")
        check(re.search(r"^skip  \S+ \(time", summary, re.M) is not None
              and "skipped for time" in summary,
              "gpu-check over its budget: the skipped steps are named", summary)
        check((out / "gpu-check-logs.tar.gz").exists(), "gpu-check over its budget: the archive")

        status, summary, out = box.run("gpu-check.sh", BENCH=0, SKIP_TRAIN=1, SANITIZE_LIMIT=1,
                                       RACECHECK_LIMIT=1, FAKE_SANITIZER_SLEEP=3)
        check(status == 2 and re.search(r"^skip  sanitize .*stopped", summary, re.M) is not None
              and "FAIL" not in summary,
              "gpu-check: sanitizer runs stopped by their limit are incomplete, not failed",
              f"exit {status}\n{summary}")

        status, summary, out = box.run("gpu-check.sh", BENCH=0, SKIP_TRAIN=1, SANITIZE_LIMIT=1,
                                       RACECHECK_LIMIT=1, FAKE_SANITIZER_SLEEP=3, FAKE_RACE=1)
        check(status == 1 and re.search(r"^FAIL  sanitize", summary, re.M) is not None,
              "gpu-check: a run that reported a race before its limit fails",
              f"exit {status}\n{summary}")

        if shutil.which("dpkg"):
            debs = box.repo / ".device-carry" / "debs"
            debs.mkdir(parents=True)
            status, summary, out = box.run("gpu-check.sh")
            check(status == 1 and "FAIL  carry" in summary,
                  "gpu-check: a carry folder without packages fails", f"exit {status}\n{summary}")
            (debs / "broken.deb").write_bytes(b"not a Debian package")
            status, summary, out = box.run("gpu-check.sh")
            check(status == 1 and "FAIL  carry: dpkg -x" in summary,
                  "gpu-check: a package that does not unpack fails", f"exit {status}\n{summary}")
            check((out / "gpu-check-logs.tar.gz").exists(),
                  "gpu-check stopped early: the archive still comes back")
            shutil.rmtree(box.repo / ".device-carry")
        else:
            print("skip  the carry cases: no dpkg here")

        status, summary, out = box.run("gpu-lab.sh")
        check(status == 0, "gpu-lab, every step passing: exit 0", f"exit {status}\n{summary}")
        check((out / "lab.csv").exists(), "gpu-lab: lab.csv comes back on its own")
        check_returned_files(out, "gpu-lab-logs.tar.gz",
                             ["summary.txt", "build.log", "gpu-test-lab.log",
                              "gpu-test-lab-attention.log", "lab-all.log", "lab.csv",
                              "lab-report.log"], "gpu-lab")

        status, summary, out = box.run("gpu-lab.sh", GPU_LAB_BUDGET_S=5, KEEP_S=1, MIN_STEP_S=2,
                                       FAKE_SLEEP=3)
        check(status == 2 and "skipped for time" in summary,
              "gpu-lab over its budget: exit 2, the skipped steps named",
              f"exit {status}\n{summary}")

    print(f"{len(failures)} failed" if failures else "every check passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
