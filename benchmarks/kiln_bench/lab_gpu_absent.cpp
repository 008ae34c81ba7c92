// kiln-bench lab in a build without CUDA: main.cpp never gets here (no GPU is ever available), but
// the program links the same way in every build.
#include "kiln/core/error.h"
#include "lab.h"

namespace kiln::bench {

int run_lab_gpu(const LabOptions&) {
  throw DeviceError("kiln-bench lab: kiln was built without CUDA");
}

}  // namespace kiln::bench
