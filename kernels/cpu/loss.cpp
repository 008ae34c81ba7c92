#include "kiln/kernels/loss.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

namespace {

// Targets summed per block, then the blocks in order, so the total does not depend on the number
// of threads.
constexpr int64_t kSumBlock = 4096;

}  // namespace

NllTargetScan scan_nll_targets(const Tensor& target, const Tensor& weight, int64_t num_classes,
                               int64_t ignore_index) {
  NllTargetScan scan;
  const int64_t* t = target.data<int64_t>();
  const int64_t count = target.numel();
  for (int64_t i = 0; i < count; ++i) {
    if (t[i] == ignore_index) continue;
    if (t[i] < 0 || t[i] >= num_classes) {
      scan.bad_position = i;
      return scan;
    }
  }
  if (!weight.defined()) {
    for (int64_t i = 0; i < count; ++i) scan.total_weight += t[i] != ignore_index ? 1.0 : 0.0;
    return scan;
  }
  visit_loss_dtype(weight.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = static_cast<const T*>(weight.data_ptr());
    for (int64_t i = 0; i < count; ++i)
      if (t[i] != ignore_index) scan.total_weight += convert<double>(w[t[i]]);
  });
  return scan;
}

double nll_loss_forward(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                        int64_t ignore_index, const Tensor& losses) {
  const int64_t classes = log_probs.shape()[1], inner = log_probs.shape()[2];
  const int64_t count = target.numel();
  const int64_t blocks = (count + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(blocks, 0.0);
  visit_loss_dtype(log_probs.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* lp = static_cast<const T*>(log_probs.data_ptr());
    const T* w = weight.defined() ? static_cast<const T*>(weight.data_ptr()) : nullptr;
    T* out = losses.defined() ? static_cast<T*>(losses.data_ptr()) : nullptr;
    const int64_t* t = target.data<int64_t>();
    parallel_for(blocks, kSumBlock, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        double acc = 0.0;
        for (int64_t i = b * kSumBlock; i < std::min(count, (b + 1) * kSumBlock); ++i) {
          double loss = 0.0;
          if (t[i] != ignore_index) {
            const int64_t n = i / inner, s = i % inner;
            const double wt = w ? convert<double>(w[t[i]]) : 1.0;
            loss = -wt * convert<double>(lp[(n * classes + t[i]) * inner + s]);
          }
          if (out) out[i] = convert<T>(loss);
          acc += loss;
        }
        partial[b] = acc;
      }
    });
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& weight,
                       int64_t ignore_index, const Tensor& grad_input) {
  const int64_t classes = grad_input.shape()[1], inner = grad_input.shape()[2];
  visit_loss_dtype(grad_input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_type_t<T>;
    const T* g = static_cast<const T*>(grad.data_ptr());
    const T* w = weight.defined() ? static_cast<const T*>(weight.data_ptr()) : nullptr;
    T* gi = static_cast<T*>(grad_input.data_ptr());
    const int64_t* t = target.data<int64_t>();
    // Each target writes its own (n, t, s) entry, so the targets split across threads freely.
    parallel_for(target.numel(), 4, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        if (t[i] == ignore_index) continue;
        const int64_t n = i / inner, s = i % inner;
        const Acc wt = w ? convert<Acc>(w[t[i]]) : Acc(1);
        gi[(n * classes + t[i]) * inner + s] = convert<T>(-wt * convert<Acc>(g[i]));
      }
    });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const LossKernels LossKernels::cpu{.scan_nll_targets = cpu::scan_nll_targets,
                                   .nll_loss_forward = cpu::nll_loss_forward,
                                   .nll_loss_backward = cpu::nll_loss_backward};

}  // namespace kiln
