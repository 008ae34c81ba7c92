#include "kiln/optim/fused.h"

#include <cstdint>
#include <initializer_list>
#include <string>

#include "kiln/core/storage.h"

namespace kiln::optim {

bool fusable(const Tensor& p, const Tensor& grad, std::initializer_list<const Tensor*> state) {
  // The kernels walk each tensor as a flat array: a channels-last parameter fuses as well, as
  // long as its gradient and state lie in the same order.
  auto fits = [&](const Tensor& t) {
    return same_dense_layout(t, p) && t.dtype() == p.dtype() && t.device() == p.device();
  };
  MemoryFormat format = MemoryFormat::contiguous;
  if (!is_floating(p.dtype()) || !dense_format(p, &format) || !fits(grad)) return false;
  for (const Tensor* s : state)
    if (s->defined() && !fits(*s)) return false;
  return true;
}

void FusedBatch::bump_versions() const {
  for (const Tensor& p : params) p.storage()->bump_version();
  for (const auto& list : state)
    for (const Tensor& t : list) t.storage()->bump_version();
  for (const Tensor& t : steps) t.storage()->bump_version();
}

int64_t FusedBatch::param_bytes() const {
  int64_t bytes = 0;
  for (const Tensor& p : params) bytes += p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
  return bytes;
}

FusedBatch& FusedBatches::of(const Tensor& p, double step) {
  for (FusedBatch& b : all)
    if (b.device == p.device() && b.dtype == p.dtype() && b.step == step) return b;
  FusedBatch& b = all.emplace_back();
  b.device = p.device();
  b.dtype = p.dtype();
  b.step = step;
  return b;
}

Tensor checked_found_inf(const std::string& optimizer, const Tensor& found_inf, Device device) {
  if (!found_inf.defined()) return found_inf;
  KILN_CHECK(
      found_inf.device() == device && found_inf.dtype() == DType::f32 && found_inf.numel() == 1,
      DeviceError,
      "{}.step_unless: found_inf must be one f32 value on the parameters' device {}, got {}",
      optimizer, device.str(), describe(found_inf));
  return found_inf;
}

}  // namespace kiln::optim
