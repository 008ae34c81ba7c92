// GradScaler's unscale-and-check on the GPU, as multi-tensor launches (multi_tensor.cuh, in the
// manner of PyTorch's multi_tensor_apply): the gradients of one dtype travel in the kernel's
// parameters, kTensorsPerLaunch at a time, so a model's hundreds of gradients take a few launches
// instead of one each; a 3-million-element gradient spreads over hundreds of blocks while a
// one-element one costs one. A thread that meets inf or NaN stores 1 to found_inf at the
// end: every such store writes the same value, so the race between them is benign.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/kernels/amp.h"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/cuda/multi_tensor.cuh"

namespace kiln::cuda {

namespace {

// 96 gradients take 96 * 24 bytes of parameters: within the 4 KiB that every CUDA version passes
// to a kernel.
constexpr int kTensorsPerLaunch = 96;
using GradLists = TensorLists<1, kTensorsPerLaunch>;

// PyTorch's arithmetic: the value in its accumulation type (float, or double for f64) times the
// f32 inv_scale, read from the device when inv_scale_on_device is given.
template <class T>
__global__ void unscale_and_check_kernel(const __grid_constant__ GradLists lists, float inv_scale,
                                         const float* __restrict__ inv_scale_on_device,
                                         float* __restrict__ found_inf) {
  using A = device_acc_t<T>;
  const A factor = static_cast<A>(inv_scale_on_device ? *inv_scale_on_device : inv_scale);
  const int64_t chunks = lists.first_chunk[lists.count];
  bool found = false;
  int t = 0;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    int64_t begin, end;
    chunk_range(lists, c, t, begin, end);
    T* values = static_cast<T*>(lists.data[0][t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const A v = device_convert<A>(values[i]);
      found = found || !isfinite(v);
      values[i] = device_convert<T>(v * factor);
    }
  }
  if (found) *found_inf = 1.0f;
}

// One thread: the whole update of the scale and its growth tracker (kernels/amp.h).
__global__ void update_scale_kernel(float* scale, int64_t* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor,
                                    int64_t growth_interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(static_cast<double>(*scale) * backoff_factor);
    *growth_tracker = 0;
    return;
  }
  const int64_t successful = *growth_tracker + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(*scale) * growth_factor);
    if (isfinite(grown)) *scale = grown;
    *growth_tracker = 0;
  } else {
    *growth_tracker = successful;
  }
}

void unscale(const std::vector<Tensor>& grads, float inv_scale_f32,
             const float* inv_scale_on_device, const Tensor& found_inf) {
  // The gradients by dtype, each dtype checked before the first launch, so a bad list leaves
  // every gradient as it was.
  std::vector<DType> dtypes;
  std::vector<std::vector<Tensor>> by_dtype;
  for (const Tensor& g : grads) {
    visit_floating_device("unscale_and_check", g.dtype(), [](auto) {});
    size_t k = 0;
    while (k < dtypes.size() && dtypes[k] != g.dtype()) ++k;
    if (k == dtypes.size()) {
      dtypes.push_back(g.dtype());
      by_dtype.emplace_back();
    }
    by_dtype[k].push_back(g);
  }
  const DeviceGuard guard(found_inf.device());
  float* flag = found_inf.data<float>();
  for (size_t k = 0; k < dtypes.size(); ++k) {
    visit_floating_device("unscale_and_check", dtypes[k], [&](auto tag) {
      using T = typename decltype(tag)::type;
      for_each_batch<1, kTensorsPerLaunch>(
          {&by_dtype[k]}, [&](const GradLists& lists, int64_t chunks) {
            KILN_LAUNCH(grid_for(chunks, 1), kThreads, 0, stream(), unscale_and_check_kernel<T>)
            (lists, inv_scale_f32, inv_scale_on_device, flag);
            KILN_CUDA_CHECK_LAUNCH();
          });
    });
  }
}

}  // namespace

void unscale_and_check(const std::vector<Tensor>& grads, double inv_scale,
                       const Tensor& found_inf) {
  unscale(grads, static_cast<float>(inv_scale), nullptr, found_inf);
}

void unscale_and_check_on_device(const std::vector<Tensor>& grads, const Tensor& inv_scale,
                                 const Tensor& found_inf) {
  unscale(grads, 0.0f, inv_scale.data<float>(), found_inf);
}

void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                  double growth_factor, double backoff_factor, int64_t growth_interval) {
  const DeviceGuard guard(scale.device());
  KILN_LAUNCH(1, 1, 0, stream(), update_scale_kernel)
  (scale.data<float>(), growth_tracker.data<int64_t>(), found_inf.data<float>(), growth_factor,
   backoff_factor, growth_interval);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr AmpKernels kCuda{.unscale_and_check = cuda::unscale_and_check,
                           .unscale_and_check_on_device = cuda::unscale_and_check_on_device,
                           .update_scale = cuda::update_scale};
}  // namespace

const AmpKernels* const AmpKernels::cuda = &kCuda;

}  // namespace kiln
