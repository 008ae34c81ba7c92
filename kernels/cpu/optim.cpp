// The fused SGD and Adam updates on the CPU: each parameter's elements split across OpenMP
// threads, every element's whole update in registers. The arithmetic is the op-by-op update's
// (optim/sgd.cpp, optim/adam.cpp) in its order, with each scalar rounded to the dtype as the
// scalar operand of an op is; where the compiler fuses a multiply and an add (FMA) differs from
// the op-by-op kernels, so the two agree to an ulp or so per step, not bit for bit.
#include "kiln/kernels/optim.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

namespace {

template <class F>
void visit_parameter_dtype(const char* op, DType dtype, F&& f) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || is_reduced_float_v<T>) {
      f(tag);
    } else {
      throw DTypeError(std::string(op) + ": expected floating parameters, got " +
                       dtype_name(dtype));
    }
  });
}

// lr and momentum: the step's, or a capturable step's from the device (kernels/optim.h);
// s.momentum != 0 still decides whether there are buffers.
template <class T>
void sgd_one(T* p, const T* g, T* buf, bool first, int64_t n, const SgdStep& s, double lr,
             double momentum_value) {
  using A = acc_type_t<T>;
  const A weight_decay = static_cast<A>(s.weight_decay), momentum = static_cast<A>(momentum_value);
  const A keep = static_cast<A>(1.0 - s.dampening), step = static_cast<A>(-lr);
  const bool decay = s.weight_decay != 0, has_momentum = s.momentum != 0;
  parallel_for(n, 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const A w = convert<A>(p[i]);
      A d = convert<A>(g[i]);
      if (decay) d = d + weight_decay * w;
      if (has_momentum) {
        A b = d;
        if (!first) {
          b = convert<A>(buf[i]) * momentum;
          b = b + keep * d;
        }
        buf[i] = convert<T>(b);
        d = s.nesterov ? d + momentum * b : b;
      }
      p[i] = convert<T>(w + step * d);
    }
  });
}

template <class T>
void adam_one(T* p, const T* g, T* m, T* v, T* v_max, int64_t n, const AdamStep& s) {
  using A = acc_type_t<T>;
  const A beta1 = static_cast<A>(s.beta1), beta2 = static_cast<A>(s.beta2);
  const A keep1 = static_cast<A>(1.0 - s.beta1), keep2 = static_cast<A>(1.0 - s.beta2);
  const A weight_decay = static_cast<A>(s.weight_decay);
  const A shrink = static_cast<A>(1.0 - s.lr * s.weight_decay);
  const A root_bias2 = static_cast<A>(std::sqrt(s.bias2)), eps = static_cast<A>(s.eps);
  const A step = static_cast<A>(-s.lr / s.bias1);
  const bool decay = s.weight_decay != 0;
  parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      A w = convert<A>(p[i]);
      A grad = convert<A>(g[i]);
      if (decay) {
        if (s.decoupled)
          w = w * shrink;
        else
          grad = grad + weight_decay * w;
      }
      A first = convert<A>(m[i]) * beta1;
      first = first + keep1 * grad;
      const A square = grad * grad;
      A second = convert<A>(v[i]) * beta2;
      second = second + keep2 * square;
      m[i] = convert<T>(first);
      v[i] = convert<T>(second);
      if (s.amsgrad) {
        const A previous = convert<A>(v_max[i]);
        // torch.maximum: NaN propagates.
        second = (previous != previous || previous > second) ? previous : second;
        v_max[i] = convert<T>(second);
      }
      A denom = std::sqrt(second) / root_bias2;
      denom = denom + eps;
      p[i] = convert<T>(w + step * (first / denom));
    }
  });
}

bool skipped(const DeviceStep& device) {
  return device.found_inf.defined() && device.found_inf.data<float>()[0] != 0.0f;
}

void sgd(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
         const std::vector<Tensor>& momentum_buffers, const std::vector<uint8_t>& first,
         const SgdStep& s, const DeviceStep& device) {
  if (skipped(device)) return;
  double lr = s.lr, momentum = s.momentum;
  if (device.options.defined()) {
    lr = device.options.data<double>()[0];
    momentum = device.options.data<double>()[1];
  }
  for (size_t i = 0; i < params.size(); ++i) {
    visit_parameter_dtype("sgd", params[i].dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* buf = s.momentum != 0 ? momentum_buffers[i].data<T>() : nullptr;
      sgd_one<T>(params[i].data<T>(), grads[i].data<T>(), buf, s.momentum != 0 && first[i] != 0,
                 params[i].numel(), s, lr, momentum);
    });
  }
}

void adam(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
          const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
          const std::vector<Tensor>& max_exp_avg_sq, const AdamStep& s, const DeviceStep& device) {
  if (skipped(device)) return;
  for (size_t i = 0; i < params.size(); ++i) {
    // A capturable step's scalars, from the device values as adam.cpp makes them on the host.
    AdamStep step = s;
    if (device.options.defined()) {
      step.lr = device.options.data<double>()[0];
      step.beta1 = device.options.data<double>()[1];
    }
    if (!device.steps.empty()) {
      const double t = device.steps[i].data<double>()[0] + 1.0;
      step.bias1 = 1.0 - std::pow(step.beta1, t);
      step.bias2 = 1.0 - std::pow(step.beta2, t);
    }
    visit_parameter_dtype("adam", params[i].dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* v_max = s.amsgrad ? max_exp_avg_sq[i].data<T>() : nullptr;
      adam_one<T>(params[i].data<T>(), grads[i].data<T>(), exp_avg[i].data<T>(),
                  exp_avg_sq[i].data<T>(), v_max, params[i].numel(), step);
    });
  }
  for (const Tensor& count : device.steps) count.data<double>()[0] += 1.0;
}

}  // namespace

}  // namespace kiln::cpu

namespace kiln {

const OptimizerKernels OptimizerKernels::cpu{.sgd = cpu::sgd, .adam = cpu::adam};

}  // namespace kiln
