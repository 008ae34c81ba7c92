#!/usr/bin/env bash
# The test job: install dependencies, then
#   1. build the library and every header on its own with clang and LLVM's libc++: a second
#      compiler and a second standard library, whose headers include each other differently, so
#      a file that relies on a transitive include fails here (scripts/check-includes.py, a ctest,
#      checks the standard includes by name);
#   2. build and run the test suite under AddressSanitizer + UBSan, where CUDA's headers are
#      installed with kiln's CUDA backend on the CUDA simulator (KILN_CUDA=SIM, docs/simulator.md):
#      the gpu_test_* programs, the determinism pass, kiln-train --device cuda and kiln-bench lab
#      run there, on the CPU, instead of skipping; CPU only (without the programs) otherwise;
#   3. build and run it normally (with CUDA when nvcc is present; GPU tests report themselves
#      skipped without a GPU; without one, nvcc compiles for sm_90 alone, as nothing runs the
#      kernels here and the sources have no per-architecture code). ctest's summary of this build
#      is printed last.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's header says when it began, in minutes since the start (CI's time budget), and the
# disk space left (a full disk kills a link with a bus error, not a message).
stage() {
  printf '== %s (at %d min %02d s; %s free) ==\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)) \
         "$(df -h --output=avail . | tail -1 | tr -d ' ')"
}

KILN_DEPS=test scripts/install-deps.sh
jobs=$(nproc)

stage "clang + libc++ build of the library and its headers"
# -O0: this stage checks that the code compiles (includes, warnings as errors), not what the
# optimiser makes of it (the stage: 205 s at -O3, 189 s at -O0 on 2 cores).
cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_CXX_FLAGS="-stdlib=libc++ -Werror" -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" \
      -DKILN_CUDA=OFF -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_APPS=OFF
cmake --build build-clang -j "$jobs" --target kiln kiln_header_check

stage "sanitizer build (ASan + UBSan; kiln's CUDA backend on the simulator where CUDA's headers are)"
sim=OFF
apps=OFF
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then sim=SIM; apps=ON; fi
# -g1: line tables for the sanitizers' reports, without the full debug information of -g, which
# costs a quarter of this build's compile time. KILN_SHARED: one libkiln.so, not a copy of the
# instrumented library in each of the ~100 test programs (18 GB of disk, and their links).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_BUILD_APPS="$apps" \
      -DKILN_CUDA="$sim" -DKILN_SHARED=ON -DCMAKE_CXX_FLAGS="-O1" -DCMAKE_CXX_FLAGS_DEBUG="-g1"
cmake --build build-asan -j "$jobs"
stage "sanitizer tests"
# detect_leaks stays on; OpenMP's thread pool is reused, not leaked.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -j "$jobs" --output-on-failure --timeout 600 > build-asan/ctest.log 2>&1 \
  || { tail -100 build-asan/ctest.log; echo "sanitizer tests failed"; exit 1; }
tail -3 build-asan/ctest.log

stage "release build"
archs=()
if ! nvidia-smi -L 2> /dev/null | grep -q GPU; then archs=(-DCMAKE_CUDA_ARCHITECTURES=90); fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=ON -DKILN_BUILD_APPS=ON \
      "${archs[@]}"
cmake --build build -j "$jobs"
stage "release tests"
ctest --test-dir build -j "$jobs" --output-on-failure --timeout 600
stage "done"
