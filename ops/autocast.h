// Autocast's dtype policy at the device switch (the scope itself is core/autocast.h). An op under
// the policy asks first thing, before its checks, and calls itself again with the cast operands:
//
//   Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, ...) {
//     if (AutocastArgs cast{"conv2d", {&x, &weight, &bias}})
//       return conv2d(cast[0], cast[1], cast[2], ...);
//     ...
//
// While the cast call runs, the policy is suspended, so the ops it calls internally keep the
// dtypes it was given. Ops not in the table (ops/autocast.cpp) run in their inputs' dtype, and
// mixed inputs promote as they always do (elementwise ops, cat).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <vector>

#include "kiln/core/autocast.h"
#include "kiln/core/tensor.h"

namespace kiln {

enum class CastPolicy {
  lower_precision,  // run in the scope's f16/bf16: matmul, linear, conv2d
  fp32,             // run in f32: softmax, losses, sums, layer norm, exp, log, pow, ...
};

// The table's entry for `op`; throws std::logic_error for an op the table does not list (an
// entry point that asks must have a row).
CastPolicy autocast_policy(const char* op);

// The operands of one call under the policy: true (and holding the cast operands) when autocast
// is on in this thread, false otherwise, in which case it copies nothing. Operands that are
// undefined, not floating or f64 pass through unchanged, as in PyTorch. An f32 leaf that requires
// grad (a weight) cast to f16/bf16 comes from the scope's cache when it was cast before.
class AutocastArgs {
 public:
  AutocastArgs(const char* op, std::initializer_list<const Tensor*> operands);
  explicit operator bool() const { return suspend_.has_value(); }
  const Tensor& operator[](size_t i) const { return cast_[i]; }

 private:
  std::vector<Tensor> cast_;
  std::optional<AutocastSuspend> suspend_;
};

}  // namespace kiln
