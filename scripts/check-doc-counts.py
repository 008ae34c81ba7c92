#!/usr/bin/env python3
"""Checks the numbers that README.md, the docs and the build's comments state about the tree.

Each claim below names a file, a pattern around the number as written, and the count it states,
computed here from the tree (or, for what a build links, from the build folder given). A number
written "~N" may be off by a fifth either way; one written plainly must be exact. A claim whose
text is no longer in its file fails too, so that rewording a sentence means updating its claim
here rather than losing the check.

    scripts/check-doc-counts.py [SOURCE_DIR [BUILD_DIR]]

Without BUILD_DIR the claims about a build are skipped and said to be; the ctest check_doc_counts
passes its own build folder, so the test job checks them in both of its builds.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.dirname(HERE)
BUILD = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None


def tracked_files():
    """The tree's files: git's list in a checkout, else a walk that skips build folders."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith("build") and not d.startswith(".")]
        files += [os.path.relpath(os.path.join(top, n), ROOT) for n in names]
    return files


def test_sources():
    """The C++ sources under tests/."""
    return sum(1 for f in tracked_files() if f.startswith("tests/") and f.endswith(".cpp"))


def formatted_files():
    """What scripts/check-format.sh checks: every .cpp, .h, .cu and .cuh file."""
    return sum(1 for f in tracked_files() if f.endswith((".cpp", ".h", ".cu", ".cuh")))


def programs():
    """The executables this build links (its build.ninja's link steps)."""
    ninja = os.path.join(BUILD, "build.ninja")
    with open(ninja, encoding="utf-8") as f:
        return sum(1 for line in f if re.match(r"build \S+: CXX_EXECUTABLE_LINKER", line))


# (file, pattern with one group: the number as written, what it counts, whether it needs a build)
CLAIMS = [
    ("tests/CMakeLists.txt", r"while the (~?\d+) test sources are most", test_sources, False),
    ("scripts/check-format.sh", r"All (~?\d+) files take about", formatted_files, False),
    ("README.md", r"so its (~?\d+) programs do not each carry", programs, True),
    ("README.md", r"the test suite's (~?\d+) programs link in", programs, True),
    ("scripts/test.sh", r"in each of the (~?\d+) programs", programs, True),
    ("scripts/install-deps.sh", r"its (~?\d+) programs link with", programs, True),
]


def agrees(written, actual):
    if written.startswith("~"):
        stated = int(written[1:])
        return abs(actual - stated) <= stated / 5
    return int(written) == actual


def main():
    if BUILD and not os.path.exists(os.path.join(BUILD, "build.ninja")):
        print(f"check-doc-counts: {BUILD} has no build.ninja; the claims about a build need a "
              "Ninja build folder", file=sys.stderr)
        return 1
    failures, checked, skipped = [], 0, 0
    cache = {}
    for path, pattern, count, needs_build in CLAIMS:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            text = f.read()
        # A space in a pattern matches a line break too, and a comment's leading "#".
        match = re.search(pattern.replace(" ", r"[\s#]+"), text)
        if not match:
            failures.append(f"{path}: no text matches /{pattern}/ any more; update its claim in "
                            "scripts/check-doc-counts.py")
            continue
        if needs_build and not BUILD:
            skipped += 1
            continue
        if count not in cache:
            cache[count] = count()
        actual = cache[count]
        line = text.count("\n", 0, match.start(1)) + 1
        written = match.group(1)
        checked += 1
        if not agrees(written, actual):
            failures.append(f"{path}:{line}: says {written}, counted {actual} "
                            f"({count.__doc__.strip()})")
    for failure in failures:
        print(f"check-doc-counts: {failure}", file=sys.stderr)
    if failures:
        return 1
    note = f", {skipped} about a build skipped (no build folder given)" if skipped else ""
    print(f"check-doc-counts: {checked} numbers agree with the tree{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
