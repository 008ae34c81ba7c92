// The kernel lab (docs/kernels/README.md): for each kernel family a folder
// kernels/cuda/lab/<family>/ holding
//
//   reference.h  the family's CPU reference (plain C++, double accumulation): what version 0 is
//                checked against by the GPU test, and what the runner's CPU smoke path runs;
//   tiling.h     the host-side arithmetic of every version (threads, grids, tiles, shared-memory
//                bytes, workspace) as plain C++, so a CPU test checks it
//                (tests/test_lab_tiling.cpp);
//   versions.h   the family's Args and its table of versions;
//   v0_*.cu      the library version (cuBLAS, cuBLASLt, CUB, or kiln's own op kernel): the
//                correctness reference and the speed baseline of every other version;
//   vN_*.cu      one file per version, each adding one idea to the one before.
//
// The runner (benchmarks/kiln_bench, `kiln-bench lab <family>`) and the GPU test
// (tests/cuda/test_lab.cpp) walk the tables, so a new version is one file and one table row.
#pragma once

#include "kiln/core/device_code.h"

// The tiling headers' index arithmetic is called by the kernels and by the CPU tests alike.
#ifndef KILN_HOST_DEVICE
#ifdef KILN_DEVICE_CODE
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
#endif

namespace kiln::lab {

// One row of a family's table. run() launches on kiln's current stream (cuda::stream(), so
// StreamGuard steers it) and returns without waiting, as every kiln kernel does.
template <class Args>
struct LabVersion {
  const char* name;  // the file's name without .cu: "v3_shared_tiling"
  const char* idea;  // one line: what this version adds to the one before it
  void (*run)(const Args& args);
};

}  // namespace kiln::lab
