#!/usr/bin/env bash
# The test job: install dependencies, then
#   1. check the formatting of every C++ and CUDA source (clang-format 14, the .clang-format at the
#      top), and build the library and every header on its own with clang and LLVM's libc++: a
#      second compiler and a second standard library, whose headers include each other
#      differently, so a file that relies on a transitive include fails here
#      (scripts/check-includes.py, a ctest, checks the standard includes by name);
#   2. build and run the test suite under AddressSanitizer + UBSan, where CUDA's headers are
#      installed with kiln's CUDA backend on the CUDA simulator (KILN_CUDA=SIM, docs/simulator.md):
#      the gpu_test_* programs, the determinism pass, kiln-train --device cuda and kiln-bench lab
#      run there, on the CPU, instead of skipping; CPU only (without the programs) otherwise;
#   3. build and run it normally (with CUDA when nvcc is present; without a GPU, nvcc compiles for
#      sm_90 alone, as nothing runs the kernels here and the sources have no per-architecture
#      code, and of the GPU test programs, which would only report themselves skipped, one is
#      built, to show that the skip works; nor are the headers the clang stage compiled compiled
#      again). ctest's summary of this build is printed before the job's own account.
# Every compile goes through ccache where it is installed (cmake/KilnCcache.cmake): a second
# clone of the same commit compiles almost nothing. The cache saves time only; CCACHE_DISABLE=1
# gives the same result from scratch. The job ends with each stage's time and the cache's hits.
set -euo pipefail
cd "$(dirname "$0")/.."

stage_names=()
stage_starts=()
# Each stage's header says when it began, in minutes since the start (CI's time budget), and the
# disk space left (a full disk kills a link with a bus error, not a message).
stage() {
  stage_names+=("$1")
  stage_starts+=("$SECONDS")
  printf '== %s (at %d min %02d s; %s free) ==\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)) \
         "$(df -h --output=avail . | tail -1 | tr -d ' ')"
}

# The job's own account, printed however it ends: each stage's wall time, and how many compiles
# the cache answered (from this run's own stats log, not ccache's machine-wide counters).
account() {
  local status=$?
  echo "== the test job's account (exit status $status) =="
  local i end
  for i in "${!stage_names[@]}"; do
    if [ $((i + 1)) -lt ${#stage_names[@]} ]; then end=${stage_starts[$((i + 1))]}; else end=$SECONDS; fi
    local took=$((end - stage_starts[i]))
    printf '  %-34s %3d min %02d s\n' "${stage_names[$i]}" $((took / 60)) $((took % 60))
  done
  printf '  %-34s %3d min %02d s\n' "total" $((SECONDS / 60)) $((SECONDS % 60))
  if [ -n "${CCACHE_STATSLOG:-}" ] && [ -s "$CCACHE_STATSLOG" ]; then
    ccache --show-log-stats | awk '
      /^ *Hits:/   { hits = $2; calls = $4 }
      /^ *Misses:/ { misses = $2 }
      END { if (calls > 0) printf "  ccache: %d of %d compiles from the cache (%.1f%%), %d compiled\n",
                              hits, calls, 100 * hits / calls, misses }'
  elif [ -n "${CCACHE_STATSLOG:-}" ]; then
    echo "  ccache: no compile went through it"
  else
    echo "  ccache: not installed, every file compiled"
  fi
}
trap account EXIT

stage "packages"
KILN_DEPS=test scripts/install-deps.sh
jobs=$(nproc)
if command -v ccache > /dev/null; then
  mkdir -p build-ccache
  export CCACHE_STATSLOG="$PWD/build-ccache/stats.log"
  : > "$CCACHE_STATSLOG"
fi

# OpenMP threads that wait sleep instead of spinning: ctest -j runs two test processes on the two
# cores, and a spinning thread of one takes the core the other needs (the sanitizer tests: 317 s
# against 350 s wall, 539 against 585 s of user time; docs/results-history.md, "The test job").
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

stage "formatting; clang + libc++ build"
scripts/check-format.sh
# -O0: this stage checks that the code compiles (includes, warnings as errors), not what the
# optimiser makes of it (the stage: 205 s at -O3, 189 s at -O0 on 2 cores).
cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_CXX_FLAGS="-stdlib=libc++ -Werror" -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" \
      -DKILN_CUDA=OFF -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_APPS=OFF
cmake --build build-clang -j "$jobs" --target kiln kiln_header_check

stage "sanitizer build"
sim=OFF
apps=OFF
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then sim=SIM; apps=ON; fi
# -g1: line tables for the sanitizers' reports, without the full debug information of -g, which
# costs a quarter of this build's compile time. KILN_SHARED: one libkiln.so, not a copy of the
# instrumented library in each of the ~100 programs (18 GB of disk, and their links).
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
gpu_options=(-DKILN_GPU_TESTS=ALL)
if ! nvidia-smi -L 2> /dev/null | grep -q GPU; then
  gpu_options=(-DCMAKE_CUDA_ARCHITECTURES=90 -DKILN_GPU_TESTS=SKIP_CHECK)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=ON -DKILN_BUILD_APPS=ON \
      -DKILN_HEADER_CHECK=CUDA "${gpu_options[@]}"
cmake --build build -j "$jobs"
stage "release tests"
ctest --test-dir build -j "$jobs" --output-on-failure --timeout 600
