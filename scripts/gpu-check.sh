#!/usr/bin/env bash
# The GPU verification, one command on a machine with a GPU, a bare one included (the lent H200:
# CUDA, CMake, g++ and PyTorch, with cuDNN and NCCL only inside PyTorch's pip wheels):
#   OUT_DIR=... scripts/gpu-check.sh
# 1. On a machine without Debian's packages, unpacks .device-carry/ (made by
#    scripts/gpu-prepare-carry.sh on the build machine) into a private prefix, and takes its data.
# 2. Configures (a CMake warning fails the step) and builds kiln with CUDA for the visible GPU;
#    cmake/KilnCuda.cmake finds cuDNN and NCCL under the toolkit or in PyTorch's wheels.
# 3. kiln-device-info, then every GPU test executable (ctest -R '^gpu_'), and the GradScaler's
#    scale sequence against PyTorch's (tests/reference/grad_scaler_sequence.py).
# 4. compute-sanitizer memcheck and racecheck on every GPU test without its [heavy] cases (each
#    kernel those reach is reached by a lighter case too), in parallel, each under SANITIZE_LIMIT
#    seconds (a timeout fails); the allocator's deliberate out-of-memory case [oom] runs under
#    memcheck with API errors unreported, so only real memory errors fail it. SANITIZE=0 skips
#    this step, to fit the rest in one 10-minute call.
# 5. kiln-train's default recipe (2 epochs of Fashion-MNIST) on the GPU, which must land within
#    0.3 points of the CPU's accuracy (CPU_ACCURACY, the README command's figure in
#    docs/results.md), and the PyTorch peer of the recipe when python3 has torch.
# 6. The same recipe with --amp fp16 and --amp bf16, each within 0.3 points of step 5's f32 run.
# 7. Training throughput against PyTorch in the same call (BENCH=0 skips it): ResNet-50 on
#    ImageNet shapes, batch 128, f32 with TF32 and with autocast bf16/fp16 (PyTorch's with
#    channels-last), and ResNet-20 on 28x28, both with cuDNN's benchmark search, after the op
#    bandwidths and matmul rates of `kiln-bench ops` and its peer ops_torch.py; bench.log.
# 8. The profiler's table of one ResNet-50 step on the GPU (profile.log).
# Everything is logged under OUT_DIR (default gpu-check/); summary.txt lists each step's result.
# Exit status: 0 only when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT_DIR="${OUT_DIR:-gpu-check}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
EPOCHS="${EPOCHS:-2}"
CPU_ACCURACY="${CPU_ACCURACY:-91.74}"
SANITIZE_LIMIT="${SANITIZE_LIMIT:-60}"
jobs=$(nproc)
source scripts/gpu-common.sh

note "kiln gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
note "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
note "$(nvcc --version 2>/dev/null | tail -1); $(g++ --version | head -1); $(cmake --version | head -1)"

# 1. A bare machine: Debian's packages from the carry folder, into a prefix of our own.
DATA_DIR="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
if use_carry; then
  DATA_DIR="$PWD/.device-carry/data"
  note "data from $DATA_DIR"
fi
use_wheel_libraries

# 2. Configure and build.
configure() {
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON \
        -DKILN_BUILD_TESTS=ON -DKILN_BUILD_APPS=ON || return 1
  # CMake 4 warns about packages' removed compatibility, and any other warning is news too.
  ! grep -n "CMake Warning\|CMake Deprecation Warning" "$OUT_DIR/configure.log"
}
if ! step configure configure || ! step build cmake --build "$BUILD_DIR" -j "$jobs"; then
  note "stopping: no build"
  exit 1
fi
grep "kiln: CUDA backend" "$OUT_DIR/configure.log" | sed 's/^-- /      /' | tee -a "$summary"

# 3. Device info and the GPU tests.
step device-info "$BUILD_DIR/apps/kiln-device-info"
step gpu-tests ctest --test-dir "$BUILD_DIR" -R '^gpu_' --output-on-failure --timeout 300
grep -E "tests passed|Test +#" "$OUT_DIR/gpu-tests.log" | sed 's/^/      /' | tee -a "$summary"

# GradScaler against PyTorch's own (torch >= 2.3 runs its scaler on the CPU): the reference file
# the CPU test compares with when it exists; the file comes back in OUT_DIR to be committed.
if python3 -c "import torch; torch.amp.GradScaler('cpu')" 2>/dev/null; then
  step grad-scaler-reference python3 tests/reference/grad_scaler_sequence.py &&
    cp tests/reference/grad_scaler_sequence.json "$OUT_DIR/" &&
    step grad-scaler-vs-torch "$BUILD_DIR/tests/test_grad_scaler"
fi

# 4. compute-sanitizer, in parallel: one line per run in sanitize.txt.
sanitize_one() {  # TOOL TEST [FILTER [EXTRA...]]
  local tool="$1" test="$2" filter="${3:-~[heavy]}"
  shift 3 2>/dev/null || shift $#
  local name log start=$SECONDS status
  name="$tool-$(basename "$test")$( [ "$filter" = "[oom]" ] && echo "-oom")"
  log="$OUT_DIR/sanitize/$name.log"
  KILN_CUDA_CACHING_ALLOCATOR=0 timeout "$SANITIZE_LIMIT" compute-sanitizer --tool "$tool" \
    --error-exitcode 1 "$@" "$test" "$filter" >"$log" 2>&1
  status=$?
  local result=pass
  [ $status -eq 124 ] && result="FAIL (timed out after $SANITIZE_LIMIT s)"
  [ $status -ne 0 ] && [ $status -ne 124 ] && result="FAIL (exit $status)"
  echo "$result  $name ($((SECONDS - start)) s): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)"
}
export -f sanitize_one
export OUT_DIR SANITIZE_LIMIT
if [ "${SANITIZE:-1}" = 0 ]; then
  note "skip  sanitize (SANITIZE=0)"
elif command -v compute-sanitizer >/dev/null; then
  mkdir -p "$OUT_DIR/sanitize"
  start=$SECONDS
  {
    for test in "$BUILD_DIR"/tests/gpu_test_*; do
      name=$(basename "$test")
      for tool in memcheck racecheck; do
        if [ "$name" = gpu_test_cuda_allocator ] && [ $tool = memcheck ]; then
          echo "$tool $test ~[heavy]~[oom]"
          echo "$tool $test [oom] --report-api-errors no"
        else
          echo "$tool $test"
        fi
      done
    done
  } | xargs -P 6 -L 1 bash -c 'sanitize_one "$@"' _ | sort > "$OUT_DIR/sanitize.txt"
  runs=$(wc -l < "$OUT_DIR/sanitize.txt")
  bad=$(grep -c "^FAIL" "$OUT_DIR/sanitize.txt")
  if [ "$bad" -eq 0 ]; then
    note "pass  sanitize ($((SECONDS - start)) s): $runs runs clean, none over $SANITIZE_LIMIT s"
  else
    note "FAIL  sanitize ($((SECONDS - start)) s): $bad of $runs runs failed: see sanitize.txt"
    failed=1
  fi
  grep "^FAIL" "$OUT_DIR/sanitize.txt" | sed 's/^/      /' | tee -a "$summary"
else
  note "FAIL  sanitize: compute-sanitizer is not installed"
  failed=1
fi

# 5. The training recipe on the GPU, and its PyTorch peer.
if step kiln-train "$BUILD_DIR/apps/kiln-train" --device cuda --data-dir "$DATA_DIR" \
     --epochs "$EPOCHS" --workers 8 --checkpoint-dir "$OUT_DIR/train"; then
  grep -E "^epoch [0-9]+:|test accuracy" "$OUT_DIR/kiln-train.log" | sed 's/^/      kiln: /' | tee -a "$summary"
  accuracy=$(sed -n 's/^test accuracy: \([0-9.]*\)%.*/\1/p' "$OUT_DIR/kiln-train.log" | tail -1)
  if awk -v a="${accuracy:-0}" -v c="$CPU_ACCURACY" 'BEGIN { d = a - c; exit !(d <= 0.3 && d >= -0.3) }'; then
    note "pass  accuracy: GPU ${accuracy}% vs CPU ${CPU_ACCURACY}% (within 0.3 points)"
  else
    note "FAIL  accuracy: GPU ${accuracy:-none}% vs CPU ${CPU_ACCURACY}% (more than 0.3 points apart)"
    failed=1
  fi
fi
if python3 -c "import torch" 2>/dev/null; then
  step torch-recipe python3 benchmarks/train_recipe_torch.py --device cuda --data-dir "$DATA_DIR" \
    --epochs "$EPOCHS" &&
    grep -E "^epoch|test accuracy" "$OUT_DIR/torch-recipe.log" | sed 's/^/      torch: /' | tee -a "$summary"
fi
# 6. Mixed precision: the recipe's accuracy under autocast against the f32 run above.
for amp in fp16 bf16; do
  if step "kiln-train-$amp" "$BUILD_DIR/apps/kiln-train" --device cuda --data-dir "$DATA_DIR" \
       --epochs "$EPOCHS" --workers 8 --amp "$amp" --checkpoint-dir "$OUT_DIR/train-$amp"; then
    grep -E "^epoch [0-9]+:|test accuracy" "$OUT_DIR/kiln-train-$amp.log" | sed "s/^/      kiln $amp: /" | tee -a "$summary"
    amp_accuracy=$(sed -n 's/^test accuracy: \([0-9.]*\)%.*/\1/p' "$OUT_DIR/kiln-train-$amp.log" | tail -1)
    if awk -v a="${amp_accuracy:-0}" -v c="${accuracy:-none}" 'BEGIN { d = a - c; exit !(c != "none" && d <= 0.3 && d >= -0.3) }'; then
      note "pass  accuracy $amp: ${amp_accuracy}% vs f32 ${accuracy}% (within 0.3 points)"
    else
      note "FAIL  accuracy $amp: ${amp_accuracy:-none}% vs f32 ${accuracy:-none}% (more than 0.3 points apart)"
      failed=1
    fi
  fi
done

# 7. Throughput against PyTorch, one after the other on the same GPU.
bench() {  # bench ARGS...: kiln's and PyTorch's train_throughput with the same arguments
  "$BUILD_DIR/benchmarks/train_throughput" --device cuda --cudnn-benchmark "$@" || return 1
  if python3 -c "import torch" 2>/dev/null; then
    local torch_args=("$@")
    [[ " $* " == *" --amp "* && " $* " != *" --amp off "* ]] && torch_args+=(--channels-last)
    python3 benchmarks/train_throughput_torch.py --device cuda --cudnn-benchmark "${torch_args[@]}"
  fi
}
bench_all() {
  "$BUILD_DIR/benchmarks/kiln_bench/kiln-bench" ops --device cuda --csv "$OUT_DIR/ops-kiln.csv" || return 1
  if python3 -c "import torch" 2>/dev/null; then
    python3 benchmarks/kiln_bench/ops_torch.py --device cuda --csv "$OUT_DIR/ops-torch.csv" || return 1
  fi
  local r50=(--model resnet50 --imagenet --batch-size 128 --steps 30 --warmup 5)
  bench "${r50[@]}" --tf32 && bench "${r50[@]}" --amp bf16 && bench "${r50[@]}" --amp fp16 &&
    bench --model resnet20 --batch-size 128 --steps 100 --warmup 10 --tf32
}
if [ "${BENCH:-1}" != 0 ] && step bench bench_all; then
  grep -E "images/s|GB/s|TFLOP/s|us/op" "$OUT_DIR/bench.log" | sed 's/^/      /' | tee -a "$summary"
fi
# 8. Where a ResNet-50 step's GPU time goes, per op (the profiler's table, by self GPU time).
if [ "${BENCH:-1}" != 0 ] && step profile "$BUILD_DIR/benchmarks/train_throughput" --device cuda \
     --cudnn-benchmark --model resnet50 --imagenet --batch-size 128 --steps 5 --warmup 5 --tf32 \
     --profile-steps 1 --profile-rows 30; then
  sed -n '/^profile of/,$p' "$OUT_DIR/profile.log" | head -12 | sed 's/^/      /' | tee -a "$summary"
fi
note "done: $([ $failed -eq 0 ] && echo "every step passed" || echo "some steps FAILED")"
exit $failed
