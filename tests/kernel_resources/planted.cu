// A planted kernel for scripts/check-kernel-resources.py, built as objects and linked into
// nothing: its 96 loads stay live to the end, so ptxas gives it about 128 registers, and without
// __launch_bounds__ the check holds it to a block of 1024 threads, twice a multiprocessor's 65536
// registers. The ctest check_kernel_resources_planted expects the check to name it and fail. Its
// twin with __launch_bounds__(256) fits (128 x 256 = 32768) and must not be named.
constexpr int kValues = 96;
constexpr int kStride = 1024;

__device__ __forceinline__ void all_pairs(float* out, const float* in) {
  float values[kValues];
#pragma unroll
  for (int i = 0; i < kValues; ++i) values[i] = in[threadIdx.x + i * kStride];
#pragma unroll
  for (int k = 0; k < kValues; ++k) {
    float sum = 0;
#pragma unroll
    for (int i = 0; i < kValues; ++i) sum += values[i] * values[(i + k) % kValues];
    out[threadIdx.x + k * kStride] = sum;
  }
}

__global__ void planted_register_hungry_kernel(float* out, const float* in) {
  all_pairs(out, in);
}

__global__ void __launch_bounds__(256) planted_bounded_kernel(float* out, const float* in) {
  all_pairs(out, in);
}
