// The Catch2 main of the GPU test executables: without a visible GPU it exits 77, ctest's skip
// code, so such a machine reports the tests skipped rather than passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "kiln/core/cuda.h"

int main(int argc, char** argv) {
  if (!kiln::cuda::is_available()) {
    std::printf("no GPU visible: skipped\n");
    return 77;
  }
  // Catch returns the failure count, which could be 77 itself: any failure is reported as 1.
  return Catch::Session().run(argc, argv) == 0 ? 0 : 1;
}
