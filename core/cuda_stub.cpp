// The CUDA runtime functions of a build without CUDA: nothing is available, and asking for a CUDA
// device is an error that says how to get one.
#include <fmt/format.h>

#include "kiln/core/cuda.h"
#include "kiln/core/error.h"

namespace kiln::cuda {

namespace {
[[noreturn]] void not_built(const char* what) {
  throw DeviceError(
      fmt::format("{}: kiln was built without CUDA (configure with KILN_CUDA=ON and "
                  "a CUDA toolkit to use cuda devices)",
                  what));
}
}  // namespace

bool is_built() {
  return false;
}
bool is_available() {
  return false;
}
int device_count() {
  return 0;
}
std::string device_name(int) {
  not_built("cuda::device_name");
}
Allocator& allocator(int) {
  not_built("cuda::allocator");
}
void copy_bytes(void*, Device, const void*, Device, size_t) {
  not_built("cuda::copy_bytes");
}
void memset_zero(void*, Device, size_t) {
  not_built("cuda::memset_zero");
}
void synchronize() {
  not_built("cuda::synchronize");
}

}  // namespace kiln::cuda
