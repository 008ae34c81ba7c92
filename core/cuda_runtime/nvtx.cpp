// NVTX ranges (NVTX 3 is header-only: nothing to link), for the profiler's events.
#include <nvtx3/nvToolsExt.h>

#include "kiln/core/cuda.h"

namespace kiln::cuda {

void nvtx_range_push(const char* name) {
  nvtxRangePushA(name);
}

void nvtx_range_pop() {
  nvtxRangePop();
}

}  // namespace kiln::cuda
