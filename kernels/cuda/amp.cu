// GradScaler's unscale-and-check on the GPU, in the manner of PyTorch's multi_tensor_apply: the
// gradients' addresses, sizes and dtypes travel in the kernel's parameters, kTensorsPerLaunch at a
// time, so a model's hundreds of gradients take a few launches instead of one each. Each gradient
// is cut into chunks of kChunk elements; a block takes a chunk (grid-stride over the launch's
// chunks, kThreads threads a block) and its threads walk the chunk with a block stride, so loads
// are coalesced and a 3-million-element gradient spreads over hundreds of blocks while a
// one-element one costs one block. A thread that meets inf or NaN stores 1 to found_inf at the
// end: every such store writes the same value, so the race between them is benign.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/kernels/amp.h"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::cuda {

namespace {

enum class GradType : uint8_t { f32, f64, f16, bf16 };

// 96 gradients take 96 * 25 bytes of parameters: within the 4 KiB that every CUDA version passes
// to a kernel.
constexpr int kTensorsPerLaunch = 96;
// Sixteen elements a thread: enough work per block to hide its start, small enough that a
// 3-million-element gradient gives ~700 blocks to fill the GPU.
constexpr int64_t kChunk = int64_t{kThreads} * 16;

// One launch's gradients. first_chunk holds prefix sums of their chunk counts, so chunk c of the
// launch belongs to the gradient t with first_chunk[t] <= c < first_chunk[t + 1] (empty gradients
// have none and are never found).
struct GradList {
  void* data[kTensorsPerLaunch];
  int64_t numel[kTensorsPerLaunch];
  int64_t first_chunk[kTensorsPerLaunch + 1];
  GradType type[kTensorsPerLaunch];
  int count;
};

// PyTorch's arithmetic: the value in its accumulation type (float, or double for f64) times the
// f32 inv_scale.
template <class T>
__device__ bool unscale_chunk(void* data, int64_t begin, int64_t end, float inv_scale) {
  using A = device_acc_t<T>;
  T* values = static_cast<T*>(data);
  const A factor = static_cast<A>(inv_scale);
  bool found = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const A v = device_convert<A>(values[i]);
    found = found || !isfinite(v);
    values[i] = device_convert<T>(v * factor);
  }
  return found;
}

// __grid_constant__: the list is read in place from the parameter space, never copied per thread.
__global__ void unscale_and_check_kernel(const __grid_constant__ GradList list, float inv_scale,
                                         float* __restrict__ found_inf) {
  const int64_t chunks = list.first_chunk[list.count];
  bool found = false;
  int t = 0;
  // A block's chunks only increase, so its gradient index only moves forward.
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    while (c >= list.first_chunk[t + 1]) ++t;
    const int64_t begin = (c - list.first_chunk[t]) * kChunk;
    const int64_t end = begin + kChunk < list.numel[t] ? begin + kChunk : list.numel[t];
    // The dtype is the same for the whole block: the switch never diverges.
    switch (list.type[t]) {
      case GradType::f32:
        found = unscale_chunk<float>(list.data[t], begin, end, inv_scale) || found;
        break;
      case GradType::f64:
        found = unscale_chunk<double>(list.data[t], begin, end, inv_scale) || found;
        break;
      case GradType::f16:
        found = unscale_chunk<__half>(list.data[t], begin, end, inv_scale) || found;
        break;
      case GradType::bf16:
        found = unscale_chunk<__nv_bfloat16>(list.data[t], begin, end, inv_scale) || found;
        break;
    }
  }
  if (found) *found_inf = 1.0f;
}

GradType grad_type(const Tensor& g) {
  switch (g.dtype()) {
    case DType::f32:
      return GradType::f32;
    case DType::f64:
      return GradType::f64;
    case DType::f16:
      return GradType::f16;
    case DType::bf16:
      return GradType::bf16;
    default:
      throw DTypeError(std::string("unscale_and_check: expected floating gradients, got ") +
                       dtype_name(g.dtype()));
  }
}

void launch(const GradList& list, float inv_scale, float* found_inf) {
  const int64_t chunks = list.first_chunk[list.count];
  if (chunks == 0) return;
  unscale_and_check_kernel<<<grid_for(chunks, 1), kThreads, 0, stream()>>>(list, inv_scale,
                                                                           found_inf);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void unscale_and_check(const std::vector<Tensor>& grads, double inv_scale,
                       const Tensor& found_inf) {
  // Every dtype is checked before the first launch, so a bad list leaves every gradient as it was.
  std::vector<GradType> types;
  types.reserve(grads.size());
  for (const Tensor& g : grads) types.push_back(grad_type(g));
  const DeviceGuard guard(found_inf.device());
  const float inv_scale_f32 = static_cast<float>(inv_scale);
  float* flag = found_inf.data<float>();
  GradList list{};
  for (size_t i = 0; i < grads.size(); ++i) {
    const int64_t n = grads[i].numel();
    if (n == 0) continue;
    list.data[list.count] = grads[i].data_ptr();
    list.numel[list.count] = n;
    list.type[list.count] = types[i];
    list.first_chunk[list.count + 1] = list.first_chunk[list.count] + ceil_div(n, kChunk);
    if (++list.count == kTensorsPerLaunch) {
      launch(list, inv_scale_f32, flag);
      list = GradList{};
    }
  }
  if (list.count > 0) launch(list, inv_scale_f32, flag);
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr AmpKernels kCuda{.unscale_and_check = cuda::unscale_and_check};
}  // namespace

const AmpKernels* const AmpKernels::cuda = &kCuda;

}  // namespace kiln
