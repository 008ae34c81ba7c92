#include "kiln/optim/fused.h"

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <string>

#include "kiln/core/backends.h"
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

bool fuses_on(Device device, bool capturable, const char* optimizer) {
  if (!device.is_cuda() || capturable || backends::fused_optimizer_on_gpu()) return true;
  static std::once_flag told;
  std::call_once(told, [&] {
    std::fprintf(stderr,
                 "kiln: %s on %s steps op by op: the fused optimizer kernels have not run on a GPU "
                 "yet (docs/results.md, \"Where each GPU path ran\"); KILN_FUSED_OPTIMIZER=1 or "
                 "backends::set_fused_optimizer_on_gpu(true) uses them\n",
                 optimizer, device.str().c_str());
  });
  return false;
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
