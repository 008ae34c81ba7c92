#include <cstdint>
#include <string>

#include "kiln/core/cuda_check.h"
#include "kiln/core/philox.h"
#include "kiln/kernels/cuda/random.h"

namespace kiln::cuda {

namespace {

// One thread per element: the element's value depends on its index alone, so any launch shape
// reproduces the CPU stream.
template <class T>
__global__ void uniform_fill_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double low,
                                    double high) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = philox_uniform_in<T>(seed, offset, static_cast<uint64_t>(i), low, high);
}

}  // namespace

void uniform_fill(void* out, DType dtype, int64_t n, uint64_t seed, uint64_t offset, double low,
                  double high) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  switch (dtype) {
    case DType::f32:
      uniform_fill_kernel<<<blocks, kThreads>>>(static_cast<float*>(out), n, seed, offset, low,
                                                high);
      break;
    case DType::f64:
      uniform_fill_kernel<<<blocks, kThreads>>>(static_cast<double*>(out), n, seed, offset, low,
                                                high);
      break;
    default:
      throw DTypeError(std::string("cuda::uniform_fill: expected f32 or f64, got ") +
                       dtype_name(dtype));
  }
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
