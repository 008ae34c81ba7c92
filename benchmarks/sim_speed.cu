// What the CUDA simulator costs (docs/simulator.md quotes it): two kernels over 1M floats, each
// under the fiberless fast path and with every thread a fiber, on 1 and 2 workers.
//   scale:    y = 2x, 4096 blocks of 256 threads that never wait (the fast path's case);
//   row sum:  1024 rows of 1024, a block of 256 threads a row reducing with kiln's row_allreduce
//             (5 shuffles and 2 barriers a thread: every block is promoted to fibers).
// Prints the median of 5 runs in ms. Usage: sim_speed (build with -DKILN_CUDA=SIM).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ratio>
#include <vector>

#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/sim/grid.h"

namespace {

__global__ void scale_kernel(const float* x, float* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = 2.0f * x[i];
}

__global__ void row_sum_kernel(const float* x, float* out, int cols) {
  __shared__ kiln::cuda::RowReduceSmem<float> smem;
  float v = 0;
  for (int c = static_cast<int>(threadIdx.x); c < cols; c += static_cast<int>(blockDim.x))
    v += x[static_cast<int64_t>(blockIdx.x) * cols + c];
  v = kiln::cuda::row_allreduce(v, kiln::cuda::Sum{}, 0.0f, smem);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}

template <class F>
double median_ms(F run) {
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

}  // namespace

int main() {
  const int rows = 1024, cols = 1024, n = rows * cols;
  float *x = nullptr, *y = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&x), n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&y), n * sizeof(float)) != cudaSuccess ||
      cudaMemset(x, 0, n * sizeof(float)) != cudaSuccess)
    return 1;
  std::printf("%-8s %-7s %-9s %9s\n", "kernel", "workers", "threads", "ms");
  for (int workers : {1, 2}) {
    for (bool fibers : {false, true}) {
      kiln::sim::set_schedule({0, workers, fibers});
      const char* mode = fibers ? "fibers" : "fast";
      std::printf("%-8s %-7d %-9s %9.1f\n", "scale", workers, mode, median_ms([&] {
                    KILN_LAUNCH(n / 256, 256, 0, nullptr, scale_kernel)
                    (x, y, n);
                  }));
      std::printf("%-8s %-7d %-9s %9.1f\n", "row sum", workers, mode, median_ms([&] {
                    KILN_LAUNCH(rows, 256, 0, nullptr, row_sum_kernel)(x, y, cols);
                  }));
    }
  }
  return cudaFree(x) == cudaSuccess && cudaFree(y) == cudaSuccess ? 0 : 1;
}
