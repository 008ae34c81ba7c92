#!/usr/bin/env bash
# The GPU verification of issue 4, for a machine with a GPU (for example the lent H100):
#   1. build kiln with CUDA (or take a build folder made elsewhere: BUILD_DIR=...),
#   2. kiln-device-info, then every GPU test executable (ctest -R '^gpu_'),
#   3. compute-sanitizer memcheck and racecheck on each GPU test, with caching off so the
#      sanitizer sees every tensor's exact bounds,
#   4. kiln-train's default recipe (2 epochs of Fashion-MNIST) on the GPU, and the PyTorch peer
#      of the same recipe on the same GPU when python3 has torch.
# Everything is logged under OUT_DIR (default gpu-check/), with summary.txt listing each step's
# result. Data: DATA_DIR (default /usr/share/datasets/fashion-mnist). Exit status: 0 only when
# every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${BUILD_DIR:-build-gpu}"
OUT_DIR="${OUT_DIR:-gpu-check}"
DATA_DIR="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
EPOCHS="${EPOCHS:-2}"
mkdir -p "$OUT_DIR"
summary="$OUT_DIR/summary.txt"
failed=0

step() {  # step NAME COMMAND...: runs it, logs it, records pass/fail and seconds
  local name="$1"; shift
  local start=$SECONDS
  if "$@" >"$OUT_DIR/$name.log" 2>&1; then
    echo "pass  $name ($((SECONDS - start)) s)" | tee -a "$summary"
  else
    echo "FAIL  $name ($((SECONDS - start)) s, exit $?): see $OUT_DIR/$name.log" | tee -a "$summary"
    failed=1
  fi
}

{
  echo "kiln gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
} | tee "$summary"

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  step configure cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON \
    -DKILN_BUILD_TESTS=ON -DKILN_BUILD_APPS=ON
fi
step build cmake --build "$BUILD_DIR" -j "$(nproc)"
step device-info "$BUILD_DIR/apps/kiln-device-info"
step gpu-tests ctest --test-dir "$BUILD_DIR" -R '^gpu_' --output-on-failure

if command -v compute-sanitizer >/dev/null; then
  for test in "$BUILD_DIR"/tests/gpu_test_*; do
    name=$(basename "$test")
    for tool in memcheck racecheck; do
      step "$tool-$name" env KILN_CUDA_CACHING_ALLOCATOR=0 compute-sanitizer --tool "$tool" \
        --error-exitcode 1 "$test"
    done
  done
else
  echo "skip  compute-sanitizer (not installed)" | tee -a "$summary"
  failed=1
fi

step kiln-train "$BUILD_DIR/apps/kiln-train" --device cuda --data-dir "$DATA_DIR" --epochs "$EPOCHS" \
  --checkpoint-dir "$OUT_DIR/train"
grep -E "^epoch|test accuracy" "$OUT_DIR/kiln-train.log" | sed 's/^/      kiln: /' | tee -a "$summary"
if python3 -c "import torch" 2>/dev/null; then
  step torch-recipe python3 benchmarks/train_recipe_torch.py --device cuda --data-dir "$DATA_DIR" \
    --epochs "$EPOCHS"
  grep -E "^epoch|test accuracy" "$OUT_DIR/torch-recipe.log" | sed 's/^/      torch: /' | tee -a "$summary"
fi
exit $failed
