#!/usr/bin/env bash
# The kernel lab on a GPU machine, build included, in one call of under 10 minutes (the lent
# H200: about 2 minutes to build, 1 to test, up to LAB_LIMIT seconds for the runner), each step
# skipped once the time budget GPU_LAB_BUDGET_S (default 540 s) is spent:
#   OUT_DIR=$OUT/lab scripts/gpu-lab.sh          (device tool: carry [".device-carry"])
# 1. On a bare machine, unpacks .device-carry/ (scripts/gpu-prepare-carry.sh) as gpu-check.sh
#    does; configures BUILD_DIR (default build-gpu) unless gpu-check.sh already did, and builds
#    only what the lab needs: kiln, gpu_test_lab, gpu_test_lab_attention and kiln-bench.
# 2. gpu_test_lab and gpu_test_lab_attention: every version of every family against version 0 and
#    the CPU references, on ragged sizes.
# 3. kiln-bench lab all --csv lab.csv: every version checked and timed at the sizes of
#    docs/kernels/ (each row is written as it is measured, so a run cut short keeps its rows).
# 4. scripts/lab-report.py: the tables of docs/kernels/*.md from that CSV (and the plots, where
#    gnuplot is installed).
# What comes back (scripts/gpu-common.sh): OUT_DIR/summary.txt, OUT_DIR/lab.csv, and
# OUT_DIR/gpu-lab-logs.tar.gz with every log and the updated pages under docs-kernels/, to be
# committed. Exit status: 0 when every step passed, 1 when one failed, 2 when none failed but
# some were skipped for time.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT_DIR="${OUT_DIR:-gpu-lab}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
LAB_LIMIT="${LAB_LIMIT:-360}"
TEST_LIMIT="${TEST_LIMIT:-120}"
BUDGET_S="${GPU_LAB_BUDGET_S:-540}"
LOG_NAME=gpu-lab-logs
jobs=$(nproc)
export BUILD_DIR
source scripts/gpu-common.sh

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
note "kiln gpu-lab, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit, budget $BUDGET_S s"
note "$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1 | head -1)"

# 1. A bare machine: Debian's packages from the carry folder, into a prefix of our own.
use_carry || exit 1
use_wheel_libraries

configure() {
  [ -f "$BUILD_DIR/build.ninja" ] && return 0
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON \
        -DKILN_BUILD_TESTS=ON -DKILN_BUILD_APPS=ON
}
export -f configure
if ! step configure configure ||
   ! step build cmake --build "$BUILD_DIR" -j "$jobs" --target kiln-bench gpu_test_lab \
        gpu_test_lab_attention; then
  note "stopping: no build"
  exit 1
fi

# 2. The checks on the GPU.
step gpu-test-lab timeout "$TEST_LIMIT" "$BUILD_DIR/tests/gpu_test_lab"
grep -E "test cases|assertions" "$LOG_DIR/gpu-test-lab.log" 2>/dev/null | sed 's/^/      /' | tee -a "$summary"
step gpu-test-lab-attention timeout "$TEST_LIMIT" "$BUILD_DIR/tests/gpu_test_lab_attention"
grep -E "test cases|assertions" "$LOG_DIR/gpu-test-lab-attention.log" 2>/dev/null |
  sed 's/^/      /' | tee -a "$summary"

# 3. The runner. A version that fails its check is reported in the table and fails the step.
step lab-all timeout "$LAB_LIMIT" "$BUILD_DIR/benchmarks/kiln_bench/kiln-bench" lab all \
  --csv "$LOG_DIR/lab.csv"
grep -E "FAIL|ERROR|kiln-bench lab:" "$LOG_DIR/lab-all.log" 2>/dev/null | sed 's/^/      /' | tee -a "$summary"
deliver "$LOG_DIR/lab.csv"

# 4. The tables, from whatever rows the runner wrote; the pages go back inside the archive.
if [ -s "$LOG_DIR/lab.csv" ]; then
  step lab-report python3 scripts/lab-report.py "$LOG_DIR/lab.csv" --commit "$commit"
  mkdir -p "$LOG_DIR/docs-kernels"
  cp -r docs/kernels/. "$LOG_DIR/docs-kernels/"
fi
