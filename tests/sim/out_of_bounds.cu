// A kernel that writes one element past its buffer, for the AddressSanitizer build of the
// simulator (tests/sim/CMakeLists.txt runs it and expects ASan's report naming this file):
//   out_of_bounds global: one past a cudaMalloc'd buffer of 1000 floats;
//   out_of_bounds shared: one past the launch's dynamic shared memory;
//   out_of_bounds static: one past a __shared__ array (compiled with KILN_SIM_SERIAL, so that
//   __shared__ is a plain static, which ASan checks).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

namespace {

__global__ void off_by_one_kernel(float* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i <= n) y[i] = 1.0f;
}

__global__ void shared_off_by_one_kernel(float* y) {
  KILN_DYNAMIC_SHARED(float, values);
  values[threadIdx.x + 1] = static_cast<float>(threadIdx.x);
  __syncthreads();
  y[threadIdx.x] = values[threadIdx.x];
}

// Through a pointer, which UBSan's bounds check (direct indexing of an array) does not see.
__global__ void static_off_by_one_kernel(float* y) {
  __shared__ float values[64];
  float* slots = values;
  slots[threadIdx.x + 1] = static_cast<float>(threadIdx.x);
  __syncthreads();
  y[threadIdx.x] = values[threadIdx.x];
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "global";
  const int n = 1000;
  float* y = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&y), n * sizeof(float)) != cudaSuccess) return 2;
  if (std::strcmp(mode, "shared") == 0)
    KILN_LAUNCH(1, 64, 64 * sizeof(float), nullptr, shared_off_by_one_kernel)(y);
  else if (std::strcmp(mode, "static") == 0)
    KILN_LAUNCH(4, 64, 0, nullptr, static_off_by_one_kernel)(y);
  else
    KILN_LAUNCH((n + 255) / 256, 256, 0, nullptr, off_by_one_kernel)(y, n);
  std::printf("no out-of-bounds access was reported\n");
  return cudaFree(y) == cudaSuccess ? 0 : 2;
}
