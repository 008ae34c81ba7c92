#!/usr/bin/env bash
# The GPU verification, one command on a machine with a GPU, a bare one included (the lent H200:
# CUDA, CMake, g++ and PyTorch, with cuDNN and NCCL only inside PyTorch's pip wheels):
#   OUT_DIR=$OUT/gpu-check scripts/gpu-check.sh        (device tool: carry [".device-carry"])
# The steps, most important first, each skipped once the time budget GPU_CHECK_BUDGET_S (default
# 540 s, inside the device's 10-minute call with a minute to spare) is spent:
# 1. On a machine without Debian's packages, unpacks .device-carry/ (made by
#    scripts/gpu-prepare-carry.sh on the build machine) into a private prefix, and takes its data;
#    a package that does not unpack stops the run.
# 2. Configures (a CMake warning fails the step) and builds kiln with CUDA for the visible GPU;
#    cmake/KilnCuda.cmake finds cuDNN and NCCL under the toolkit or in PyTorch's wheels.
# 3. kiln-device-info, then every GPU test executable (ctest -R '^gpu_'), the nccl backend's
#    (gpu_test_nccl: a group of one rank, its collectives, DDP, a timeout and its abort) as a step
#    of its own, the convolution, parity and CUDA-graph tests again under cuDNN's graph API
#    (KILN_CUDNN_API=v9, not yet the default), and the GradScaler's scale sequence against PyTorch's
#    (tests/reference/grad_scaler_sequence.py).
#    Then kiln-train --cuda-graph, one short epoch (it has never run on a GPU).
# 4. kiln-train's default recipe (2 epochs of Fashion-MNIST) on the GPU, which must land within
#    0.3 points of the CPU's accuracy (CPU_ACCURACY, the README command's figure in
#    docs/results.md), and the PyTorch peer of the recipe when python3 has torch.
# 5. The same recipe with --amp fp16 and --amp bf16, each within 0.3 points of step 4's f32 run.
# 6. Training throughput against PyTorch in the same call (BENCH=0 skips it): ResNet-50 on
#    ImageNet shapes, batch 128, f32 with TF32 and with autocast bf16/fp16 channels-last (both
#    frameworks alike), and ResNet-20 on 28x28, eager and captured as a CUDA graph (--cuda-graph:
#    kiln's CUDAGraph against torch.cuda.graph), all with cuDNN's benchmark search, after the op
#    bandwidths and matmul rates of `kiln-bench ops` and its peer ops_torch.py; bench.log. Then
#    the profiler's table of one ResNet-50 step on the GPU (profile.log).
# 7. compute-sanitizer memcheck and racecheck on every GPU test but the nccl one (NCCL's kernels
#    are not kiln's, and its timeout case waits on purpose) without their [heavy] cases (each
#    kernel those reach is reached by a lighter case too), SANITIZE_JOBS at a time, each under
#    SANITIZE_LIMIT (memcheck) or RACECHECK_LIMIT (racecheck) seconds and what is left of the
#    budget. A run the limit stops counts as incomplete, not failed, unless it had reported an
#    error by then; the allocator's deliberate out-of-memory case [oom] runs under memcheck with
#    API errors unreported, so only real memory errors fail it. SANITIZE=0 skips this step; it
#    comes last, so a run short of time leaves it out first; a call of its own runs it with
#    SKIP_TRAIN=1 BENCH=0 (the build still comes first: the device keeps nothing between calls).
# What comes back (scripts/gpu-common.sh): OUT_DIR/summary.txt, each step's result line by line,
# OUT_DIR/gpu-check-logs.tar.gz, every log and CSV (not the checkpoints), and
# grad_scaler_sequence.json when PyTorch wrote it. Exit status: 0 when every step passed, 1 when
# one failed, 2 when none failed but some were skipped for time.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT_DIR="${OUT_DIR:-gpu-check}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
EPOCHS="${EPOCHS:-2}"
CPU_ACCURACY="${CPU_ACCURACY:-91.74}"
SANITIZE_LIMIT="${SANITIZE_LIMIT:-60}"
RACECHECK_LIMIT="${RACECHECK_LIMIT:-180}"
SANITIZE_JOBS="${SANITIZE_JOBS:-4}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-540}"
LOG_NAME=gpu-check-logs
jobs=$(nproc)
export BUILD_DIR jobs
source scripts/gpu-common.sh

note "kiln gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), budget $BUDGET_S s"
note "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
note "$(nvcc --version 2>/dev/null | tail -1); $(g++ --version | head -1); $(cmake --version | head -1)"

# 1. A bare machine: Debian's packages from the carry folder, into a prefix of our own.
DATA_DIR="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
use_carry || exit 1
if [ "$carried" = 1 ]; then
  DATA_DIR="$PWD/.device-carry/data"
  note "data from $DATA_DIR"
fi
use_wheel_libraries

# 2. Configure and build. The warning check reads the configure log after the step has closed it.
if ! step configure cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON \
       -DKILN_BUILD_TESTS=ON -DKILN_BUILD_APPS=ON; then
  note "stopping: no configuration"
  exit 1
fi
if configure_warnings "$LOG_DIR/configure.log"; then
  note "FAIL  configure warnings: $(wc -l <"$LOG_DIR/configure-warnings.txt") (see configure-warnings.txt)"
  sed 's/^/      /' "$LOG_DIR/configure-warnings.txt" | head -5 | tee -a "$summary"
  failed=1
fi
grep "kiln: CUDA backend" "$LOG_DIR/configure.log" | sed 's/^-- /      /' | tee -a "$summary"
if ! step build cmake --build "$BUILD_DIR" -j "$jobs"; then
  note "stopping: no build"
  exit 1
fi

# 3. Device info, the GPU tests, the nccl backend.
step device-info "$BUILD_DIR/apps/kiln-device-info"
step gpu-tests ctest --test-dir "$BUILD_DIR" -R '^gpu_' -E '^gpu_test_nccl$' --output-on-failure \
  --timeout 300
grep -E "tests passed|Test +#" "$LOG_DIR/gpu-tests.log" 2>/dev/null | sed 's/^/      /' | tee -a "$summary"
step nccl ctest --test-dir "$BUILD_DIR" -R '^gpu_test_nccl$' --no-tests=error --output-on-failure \
  --timeout 120
# cuDNN's graph API, which has never run on a GPU and so is not the default (core/backends.h): the
# convolution, parity and CUDA-graph tests again under it. Its pass here is what may make it the
# default; the check flips nothing itself (docs/results.md, "Where each GPU path ran").
step cudnn-v9 env KILN_CUDNN_API=v9 ctest --test-dir "$BUILD_DIR" \
  -R '^gpu_test_(conv2d|parity|cuda_graph)$' --no-tests=error --output-on-failure --timeout 300

# GradScaler against PyTorch's own (torch >= 2.3 runs its scaler on the CPU): the reference file
# the CPU test compares with when it exists; the file comes back in OUT_DIR to be committed.
if python3 -c "import torch; torch.amp.GradScaler('cpu')" 2>/dev/null; then
  step grad-scaler-reference python3 tests/reference/grad_scaler_sequence.py &&
    deliver tests/reference/grad_scaler_sequence.json &&
    step grad-scaler-vs-torch "$BUILD_DIR/tests/test_grad_scaler"
fi

# kiln-train --cuda-graph, which has never run on a GPU: early and short (one epoch of 2048
# synthetic images, the captured step replayed from the fourth batch on), before the long steps
# the budget may cut. kiln-device-info's log names the cuDNN API the convolutions ran on.
step kiln-train-cuda-graph "$BUILD_DIR/apps/kiln-train" --device cuda --cuda-graph \
  --dataset synthetic --synthetic-size 2048 --epochs 1 --workers 2
grep -E "captured|test accuracy" "$LOG_DIR/kiln-train-cuda-graph.log" 2>/dev/null |
  sed 's/^/      /' | tee -a "$summary"
grep -E "cuDNN convolution API" "$LOG_DIR/device-info.log" 2>/dev/null | sed 's/^/      /' |
  tee -a "$summary"

# 4. The training recipe on the GPU, and its PyTorch peer (checkpoints in WORK_DIR, not returned).
accuracy_of() { sed -n 's/^test accuracy: \([0-9.]*\)%.*/\1/p' "$1" 2>/dev/null | tail -1; }
# within_points WHAT GOT WANT WANT_NAME: notes whether GOT (a run's accuracy, or empty) is within 0.3
# points of WANT (empty: no reference run), and sets failed when not; nothing in a dry run.
within_points() {
  [ "$DRY_RUN" = 1 ] && return 0
  if awk -v a="${2:-0}" -v c="${3:-none}" 'BEGIN { d = a - c; exit !(c != "none" && d <= 0.3 && d >= -0.3) }'; then
    note "pass  $1: ${2}% vs $4 ${3}% (within 0.3 points)"
  else
    note "FAIL  $1: ${2:-none}% vs $4 ${3:-none}% (more than 0.3 points apart)"
    failed=1
  fi
}
if [ "${SKIP_TRAIN:-0}" != 1 ]; then
  if step kiln-train "$BUILD_DIR/apps/kiln-train" --device cuda --data-dir "$DATA_DIR" \
       --epochs "$EPOCHS" --workers 8 --checkpoint-dir "$WORK_DIR/train"; then
    grep -E "^epoch [0-9]+:|test accuracy" "$LOG_DIR/kiln-train.log" | sed 's/^/      kiln: /' | tee -a "$summary"
    accuracy=$(accuracy_of "$LOG_DIR/kiln-train.log")
    within_points "accuracy: GPU" "$accuracy" "$CPU_ACCURACY" CPU
  fi
  if python3 -c "import torch" 2>/dev/null; then
    step torch-recipe python3 benchmarks/train_recipe_torch.py --device cuda --data-dir "$DATA_DIR" \
      --epochs "$EPOCHS" &&
      grep -E "^epoch|test accuracy" "$LOG_DIR/torch-recipe.log" | sed 's/^/      torch: /' | tee -a "$summary"
  fi
  # 5. Mixed precision: the recipe's accuracy under autocast against the f32 run above. The bf16
  #    run steps with the fused optimizer kernels (opt-in on a GPU until a run like this passes).
  for amp in fp16 bf16; do
    fused=0
    [ "$amp" = bf16 ] && fused=1
    if step "kiln-train-$amp" env KILN_FUSED_OPTIMIZER=$fused "$BUILD_DIR/apps/kiln-train" \
         --device cuda --data-dir "$DATA_DIR" \
         --epochs "$EPOCHS" --workers 8 --amp "$amp" --checkpoint-dir "$WORK_DIR/train-$amp"; then
      grep -E "^epoch [0-9]+:|test accuracy" "$LOG_DIR/kiln-train-$amp.log" | sed "s/^/      kiln $amp: /" | tee -a "$summary"
      amp_accuracy=$(accuracy_of "$LOG_DIR/kiln-train-$amp.log")
      within_points "accuracy $amp" "$amp_accuracy" "$accuracy" f32
    fi
  done
else
  note "skip  kiln-train, torch-recipe, kiln-train-fp16, kiln-train-bf16 (SKIP_TRAIN=1)"
fi

# 6. Throughput against PyTorch, one after the other on the same GPU, then a profiled step.
bench() {  # bench ARGS...: kiln's and PyTorch's train_throughput with the same arguments
  "$BUILD_DIR/benchmarks/train_throughput" --device cuda --cudnn-benchmark "$@" || return 1
  if python3 -c "import torch" 2>/dev/null; then
    python3 benchmarks/train_throughput_torch.py --device cuda --cudnn-benchmark "$@"
  fi
}
bench_all() {
  "$BUILD_DIR/benchmarks/kiln_bench/kiln-bench" ops --device cuda --csv "$LOG_DIR/ops-kiln.csv" || return 1
  if python3 -c "import torch" 2>/dev/null; then
    python3 benchmarks/kiln_bench/ops_torch.py --device cuda --csv "$LOG_DIR/ops-torch.csv" || return 1
  fi
  local r50=(--model resnet50 --imagenet --batch-size 128 --steps 30 --warmup 5)
  local r20=(--model resnet20 --batch-size 128 --steps 100 --warmup 10 --tf32)
  bench "${r50[@]}" --tf32 && bench "${r50[@]}" --amp bf16 --channels-last &&
    bench "${r50[@]}" --amp fp16 --channels-last &&
    bench "${r20[@]}" && bench "${r20[@]}" --cuda-graph
}
export -f bench bench_all
if [ "${BENCH:-1}" != 0 ]; then
  step bench bench_all &&
    grep -E "images/s|GB/s|TFLOP/s|us/op" "$LOG_DIR/bench.log" | sed 's/^/      /' | tee -a "$summary"
  # Where a ResNet-50 step's GPU time goes, per op (the profiler's table, by self GPU time).
  step profile "$BUILD_DIR/benchmarks/train_throughput" --device cuda --cudnn-benchmark \
       --model resnet50 --imagenet --batch-size 128 --steps 5 --warmup 5 --tf32 \
       --profile-steps 1 --profile-rows 30 &&
    sed -n '/^profile of/,$p' "$LOG_DIR/profile.log" | head -12 | sed 's/^/      /' | tee -a "$summary"
else
  note "skip  bench, profile (BENCH=0)"
fi

# 7. compute-sanitizer, in parallel: one line per run in sanitize.txt.
sanitize_one() {  # TOOL TEST [FILTER [EXTRA...]]: one line, "pass", "FAIL" or "incomplete"
  local tool="$1" test="$2" filter="${3:-~[heavy]}"
  shift 3 2>/dev/null || shift $#
  local name log start=$SECONDS status limit left
  name="$tool-$(basename "$test")$( [ "$filter" = "[oom]" ] && echo "-oom")"
  log="$LOG_DIR/sanitize/$name.log"
  limit=$SANITIZE_LIMIT
  [ "$tool" = racecheck ] && limit=$RACECHECK_LIMIT
  left=$((SANITIZE_DEADLINE - $(date +%s)))
  if [ "$left" -lt 5 ]; then
    echo "skip  $name (time: the budget is spent)"
    return 0
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$DRY_RUN" = 1 ]; then
    echo "dry run: compute-sanitizer --tool $tool $* $test $filter" >"$log"
    echo "pass  $name (dry run)"
    return 0
  fi
  # The caching allocator off, so memcheck sees each tensor's own allocation; on for the CUDA
  # graph tests, whose captures need its private pool (off, they only report themselves skipped).
  local caching=0
  [ "$(basename "$test")" = gpu_test_cuda_graph ] && caching=1
  KILN_CUDA_CACHING_ALLOCATOR=$caching timeout "$limit" compute-sanitizer --tool "$tool" \
    --error-exitcode 1 "$@" "$test" "$filter" >"$log" 2>&1
  status=$?
  local result=pass
  if [ $status -eq 124 ]; then
    # Stopped by the limit: a failure only if it had already reported an error.
    if grep -qE "^========= +(Error|Invalid|Race|Program hit|Uninitialized|Leaked)" "$log"; then
      result="FAIL (errors reported, then stopped after $limit s)"
    else
      result="incomplete (no error reported in the $limit s it had)"
    fi
  elif [ $status -ne 0 ]; then
    result="FAIL (exit $status)"
  fi
  echo "$result  $name ($((SECONDS - start)) s): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)"
}
export -f sanitize_one
export LOG_DIR SANITIZE_LIMIT RACECHECK_LIMIT DRY_RUN
if [ "${SANITIZE:-1}" = 0 ]; then
  note "skip  sanitize (SANITIZE=0)"
elif [ "$(seconds_left)" -lt "$MIN_STEP_S" ]; then
  note "skip  sanitize (time: $(seconds_left) s left of the $BUDGET_S s budget)"
  skipped+=(sanitize)
elif [ "$DRY_RUN" != 1 ] && ! command -v compute-sanitizer >/dev/null; then
  note "FAIL  sanitize: compute-sanitizer is not installed"
  failed=1
else
  mkdir -p "$LOG_DIR/sanitize"
  start=$SECONDS
  SANITIZE_DEADLINE=$(( $(date +%s) + $(seconds_left) ))
  export SANITIZE_DEADLINE
  {
    for test in "$BUILD_DIR"/tests/gpu_test_*; do
      [ -x "$test" ] || continue
      name=$(basename "$test")
      [ "$name" = gpu_test_nccl ] && continue
      for tool in memcheck racecheck; do
        if [ "$name" = gpu_test_cuda_allocator ] && [ $tool = memcheck ]; then
          echo "$tool $test ~[heavy]~[oom]"
          echo "$tool $test [oom] --report-api-errors no"
        else
          echo "$tool $test"
        fi
      done
    done
  } | xargs -r -P "$SANITIZE_JOBS" -L 1 bash -c 'sanitize_one "$@"' _ | sort > "$LOG_DIR/sanitize.txt"
  runs=$(wc -l < "$LOG_DIR/sanitize.txt")
  bad=$(grep -c "^FAIL" "$LOG_DIR/sanitize.txt")
  short=$(grep -c "^incomplete\|^skip" "$LOG_DIR/sanitize.txt")
  if [ "$runs" -eq 0 ] && [ "$DRY_RUN" = 1 ]; then
    note "pass  sanitize (dry run: no GPU test executable under $BUILD_DIR/tests to list)"
  elif [ "$runs" -eq 0 ]; then
    note "FAIL  sanitize: no GPU test executable under $BUILD_DIR/tests"
    failed=1
  elif [ "$bad" -gt 0 ]; then
    note "FAIL  sanitize ($((SECONDS - start)) s): $bad of $runs runs failed: see sanitize.txt"
    failed=1
  elif [ "$short" -gt 0 ]; then
    note "skip  sanitize ($((SECONDS - start)) s): $((runs - short)) of $runs runs clean, $short stopped by a time limit or not started (see sanitize.txt)"
    skipped+=(sanitize)
  else
    note "pass  sanitize ($((SECONDS - start)) s): $runs runs clean"
  fi
  grep -E "^(FAIL|incomplete|skip)" "$LOG_DIR/sanitize.txt" | sed 's/^/      /' | tee -a "$summary"
fi
