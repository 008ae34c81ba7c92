// GradScaler's unscale-and-check on the CPU: each gradient in turn, its elements split across
// OpenMP threads. A thread notes a non-finite element in a flag of its own chunk; found_inf is
// written once, after every gradient is done, so no two threads ever write it.
#include "kiln/kernels/amp.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

namespace {

// The multiplication happens in T's accumulation type with PyTorch's f32 inv_scale: for f64
// gradients that is an f64 product with the f32 factor, as PyTorch's `val * *inv_scale_ptr`.
template <class T>
bool unscale_one(T* data, int64_t n, float inv_scale) {
  using A = acc_type_t<T>;
  const A factor = static_cast<A>(inv_scale);
  std::atomic<bool> found{false};
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    bool local = false;
    for (int64_t i = begin; i < end; ++i) {
      const A v = convert<A>(data[i]);
      local = local || !std::isfinite(v);
      data[i] = convert<T>(v * factor);
    }
    if (local) found.store(true, std::memory_order_relaxed);
  });
  return found.load(std::memory_order_relaxed);
}

}  // namespace

namespace {

void unscale_all(const std::vector<Tensor>& grads, float inv_scale_f32, const Tensor& found_inf) {
  bool found = false;
  for (const Tensor& g : grads) {
    visit_dtype(g.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T> || is_reduced_float_v<T>) {
        found = unscale_one(g.data<T>(), g.numel(), inv_scale_f32) || found;
      } else {
        throw DTypeError(std::string("unscale_and_check: expected floating gradients, got ") +
                         dtype_name(g.dtype()));
      }
    });
  }
  if (found) found_inf.data<float>()[0] = 1.0f;
}

}  // namespace

void unscale_and_check(const std::vector<Tensor>& grads, double inv_scale,
                       const Tensor& found_inf) {
  unscale_all(grads, static_cast<float>(inv_scale), found_inf);
}

void unscale_and_check_on_device(const std::vector<Tensor>& grads, const Tensor& inv_scale,
                                 const Tensor& found_inf) {
  unscale_all(grads, inv_scale.data<float>()[0], found_inf);
}

void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                  double growth_factor, double backoff_factor, int64_t growth_interval) {
  float& s = scale.data<float>()[0];
  int64_t& tracker = growth_tracker.data<int64_t>()[0];
  if (found_inf.data<float>()[0] != 0.0f) {
    s = static_cast<float>(static_cast<double>(s) * backoff_factor);
    tracker = 0;
    return;
  }
  const int64_t successful = tracker + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(s) * growth_factor);
    if (std::isfinite(grown)) s = grown;
    tracker = 0;
  } else {
    tracker = successful;
  }
}

}  // namespace kiln::cpu

namespace kiln {

const AmpKernels AmpKernels::cpu{.unscale_and_check = cpu::unscale_and_check,
                                 .unscale_and_check_on_device = cpu::unscale_and_check_on_device,
                                 .update_scale = cpu::update_scale};

}  // namespace kiln
