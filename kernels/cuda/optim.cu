// The fused SGD and Adam updates on the GPU (the CPU's twin is kernels/cpu/optim.cpp): one
// multi-tensor launch (multi_tensor.cuh) per 64 parameters for SGD and per 48 for Adam, each
// element's whole update in registers, in the parameter's accumulation type (f32 for the 16-bit
// floats). A ResNet-50's SGD step is 161 parameters: 3 launches where the op-by-op update made
// several per parameter. A capturable step (kernels/optim.h's DeviceStep) reads lr and momentum
// (or beta1) and Adam's step counts on the device and derives its scalars there, once per chunk,
// as the host derives them; the GradScaler's flag skips it there; one more launch per 128
// parameters counts Adam's steps.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/cuda/multi_tensor.cuh"
#include "kiln/kernels/optim.h"

namespace kiln::cuda {

namespace {

constexpr int kSgdTensors = 64;   // 3 lists: 64 * 40 bytes of parameters
constexpr int kAdamTensors = 48;  // 6 lists: 48 * 64 bytes
constexpr int kStepCounts = 128;  // 1 list: 128 * 24 bytes

// The scalars of a step in the accumulation type A, rounded as the op-by-op update rounds them.
template <class A>
struct SgdScalars {
  A weight_decay, momentum, keep, step;
  bool decay, has_momentum, nesterov;
};

template <class A>
struct AdamScalars {
  A beta1, beta2, keep1, keep2, weight_decay, shrink, root_bias2, eps, step;
  bool decay, decoupled, amsgrad;
  double beta2_d, weight_decay_d;  // what a capturable step derives its scalars with
};

__device__ inline bool skipped(const float* found_inf) {
  return found_inf != nullptr && *found_inf != 0.0f;
}

// lists: 0 params, 1 grads, 2 momentum buffers; bit t of first_step: the buffer of tensor t is
// new this step (it takes d as it is).
static_assert(kSgdTensors <= 64, "first_step has one bit per tensor of a launch");
template <class T>
__global__ void sgd_kernel(const __grid_constant__ TensorLists<3, kSgdTensors> lists,
                           uint64_t first_step, SgdScalars<device_acc_t<T>> s,
                           const double* __restrict__ options,
                           const float* __restrict__ found_inf) {
  using A = device_acc_t<T>;
  if (skipped(found_inf)) return;
  if (options != nullptr) {
    s.step = static_cast<A>(-options[0]);
    s.momentum = static_cast<A>(options[1]);
  }
  const int64_t chunks = lists.first_chunk[lists.count];
  int t = 0;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    int64_t begin, end;
    chunk_range(lists, c, t, begin, end);
    T* p = static_cast<T*>(lists.data[0][t]);
    const T* g = static_cast<const T*>(lists.data[1][t]);
    T* buf = static_cast<T*>(lists.data[2][t]);
    const bool first = s.has_momentum && ((first_step >> t) & 1) != 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const A w = device_convert<A>(p[i]);
      A d = device_convert<A>(g[i]);
      if (s.decay) d = d + s.weight_decay * w;
      if (s.has_momentum) {
        A b = d;
        if (!first) b = device_convert<A>(buf[i]) * s.momentum + s.keep * d;
        buf[i] = device_convert<T>(b);
        d = s.nesterov ? d + s.momentum * b : b;
      }
      p[i] = device_convert<T>(w + s.step * d);
    }
  }
}

// lists: 0 params, 1 grads, 2 exp_avg, 3 exp_avg_sq, 4 max_exp_avg_sq (amsgrad only), 5 the
// step counts (a capturable step only, with options).
template <class T>
__global__ void adam_kernel(const __grid_constant__ TensorLists<6, kAdamTensors> lists,
                            AdamScalars<device_acc_t<T>> s, const double* __restrict__ options,
                            const float* __restrict__ found_inf) {
  using A = device_acc_t<T>;
  if (skipped(found_inf)) return;
  const int64_t chunks = lists.first_chunk[lists.count];
  int t = 0;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    int64_t begin, end;
    chunk_range(lists, c, t, begin, end);
    if (options != nullptr) {
      // adam.cpp's host arithmetic, on this tensor's step count.
      const double lr = options[0], beta1 = options[1];
      const double count = *static_cast<const double*>(lists.data[5][t]) + 1.0;
      const double bias1 = 1.0 - pow(beta1, count), bias2 = 1.0 - pow(s.beta2_d, count);
      s.beta1 = static_cast<A>(beta1);
      s.keep1 = static_cast<A>(1.0 - beta1);
      s.shrink = static_cast<A>(1.0 - lr * s.weight_decay_d);
      s.root_bias2 = static_cast<A>(sqrt(bias2));
      s.step = static_cast<A>(-lr / bias1);
    }
    T* p = static_cast<T*>(lists.data[0][t]);
    const T* g = static_cast<const T*>(lists.data[1][t]);
    T* m = static_cast<T*>(lists.data[2][t]);
    T* v = static_cast<T*>(lists.data[3][t]);
    T* v_max = static_cast<T*>(lists.data[4][t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      A w = device_convert<A>(p[i]);
      A grad = device_convert<A>(g[i]);
      if (s.decay) {
        if (s.decoupled)
          w = w * s.shrink;
        else
          grad = grad + s.weight_decay * w;
      }
      const A first = device_convert<A>(m[i]) * s.beta1 + s.keep1 * grad;
      A second = device_convert<A>(v[i]) * s.beta2 + s.keep2 * (grad * grad);
      m[i] = device_convert<T>(first);
      v[i] = device_convert<T>(second);
      if (s.amsgrad) {
        const A previous = device_convert<A>(v_max[i]);
        second = (previous != previous || previous > second) ? previous : second;  // NaN wins
        v_max[i] = device_convert<T>(second);
      }
      const A denom = sqrt(second) / s.root_bias2 + s.eps;
      p[i] = device_convert<T>(w + s.step * (first / denom));
    }
  }
}

// Counts every step up by one, unless the step was skipped.
__global__ void count_steps_kernel(const __grid_constant__ TensorLists<1, kStepCounts> lists,
                                   const float* __restrict__ found_inf) {
  if (skipped(found_inf)) return;
  for (int i = static_cast<int>(threadIdx.x); i < lists.count; i += static_cast<int>(blockDim.x))
    *static_cast<double*>(lists.data[0][i]) += 1.0;
}

const double* options_of(const DeviceStep& device) {
  return device.options.defined() ? device.options.data<double>() : nullptr;
}
const float* found_inf_of(const DeviceStep& device) {
  return device.found_inf.defined() ? device.found_inf.data<float>() : nullptr;
}

void sgd(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
         const std::vector<Tensor>& momentum_buffers, const std::vector<uint8_t>& first,
         const SgdStep& step, const DeviceStep& device) {
  if (params.empty()) return;
  const DeviceGuard guard(params[0].device());
  // The first-step flags of the non-empty parameters, in the order for_each_batch takes them.
  std::vector<bool> flags;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].numel() > 0) flags.push_back(step.momentum != 0 && first[i] != 0);
  visit_floating_device("sgd", params[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = device_acc_t<T>;
    const SgdScalars<A> s{static_cast<A>(step.weight_decay),
                          static_cast<A>(step.momentum),
                          static_cast<A>(1.0 - step.dampening),
                          static_cast<A>(-step.lr),
                          step.weight_decay != 0,
                          step.momentum != 0,
                          step.nesterov};
    size_t offset = 0;
    for_each_batch<3, kSgdTensors>(
        {&params, &grads, &momentum_buffers}, [&](const auto& lists, int64_t chunks) {
          uint64_t first_step = 0;
          for (int t = 0; t < lists.count; ++t)
            if (flags[offset + static_cast<size_t>(t)]) first_step |= uint64_t{1} << t;
          offset += static_cast<size_t>(lists.count);
          KILN_LAUNCH(grid_for(chunks, 1), kThreads, 0, stream(), sgd_kernel<T>)
          (lists, first_step, s, options_of(device), found_inf_of(device));
          KILN_CUDA_CHECK_LAUNCH();
        });
  });
}

void adam(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
          const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
          const std::vector<Tensor>& max_exp_avg_sq, const AdamStep& step,
          const DeviceStep& device) {
  if (params.empty()) return;
  const DeviceGuard guard(params[0].device());
  visit_floating_device("adam", params[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = device_acc_t<T>;
    const AdamScalars<A> s{static_cast<A>(step.beta1),
                           static_cast<A>(step.beta2),
                           static_cast<A>(1.0 - step.beta1),
                           static_cast<A>(1.0 - step.beta2),
                           static_cast<A>(step.weight_decay),
                           static_cast<A>(1.0 - step.lr * step.weight_decay),
                           static_cast<A>(std::sqrt(step.bias2)),
                           static_cast<A>(step.eps),
                           static_cast<A>(-step.lr / step.bias1),
                           step.weight_decay != 0,
                           step.decoupled,
                           step.amsgrad,
                           step.beta2,
                           step.weight_decay};
    for_each_batch<6, kAdamTensors>(
        {&params, &grads, &exp_avg, &exp_avg_sq, &max_exp_avg_sq, &device.steps},
        [&](const auto& lists, int64_t chunks) {
          KILN_LAUNCH(grid_for(chunks, 1), kThreads, 0, stream(), adam_kernel<T>)
          (lists, s, options_of(device), found_inf_of(device));
          KILN_CUDA_CHECK_LAUNCH();
        });
  });
  for_each_batch<1, kStepCounts>({&device.steps}, [&](const auto& lists, int64_t) {
    KILN_LAUNCH(1, kStepCounts, 0, stream(), count_steps_kernel)(lists, found_inf_of(device));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr OptimizerKernels kCuda{.sgd = cuda::sgd, .adam = cuda::adam};
}  // namespace

const OptimizerKernels* const OptimizerKernels::cuda = &kCuda;

}  // namespace kiln
