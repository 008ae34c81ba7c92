#!/usr/bin/env bash
# The test job: install dependencies, then build and run the test suite twice: first the CPU build
# under AddressSanitizer + UBSan, then the normal build (with CUDA when nvcc is present; GPU tests
# report themselves skipped without a GPU). ctest's summary of the normal build is printed last.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
jobs=$(nproc)

echo "== sanitizer build (ASan + UBSan, CPU only) =="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_BUILD_APPS=OFF \
      -DCMAKE_CXX_FLAGS="-O1"
cmake --build build-asan -j "$jobs"
# detect_leaks stays on; OpenMP's thread pool is reused, not leaked.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -j "$jobs" --output-on-failure --timeout 600 > build-asan/ctest.log 2>&1 \
  || { tail -100 build-asan/ctest.log; echo "sanitizer tests failed"; exit 1; }
tail -3 build-asan/ctest.log

echo "== release build =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=ON -DKILN_BUILD_APPS=ON
cmake --build build -j "$jobs"
ctest --test-dir build -j "$jobs" --output-on-failure --timeout 600
