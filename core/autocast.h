// Autocast: a per-thread mixed-precision scope, as torch.autocast. Inside one, each op follows a
// dtype policy written in one table (ops/autocast.cpp, at the device switch): matrix products and
// convolutions run in the scope's 16-bit type; softmax, losses, sums and the other ops that need
// f32's range run in f32; the rest run in their inputs' dtype, and mixed inputs promote. Weights
// stay f32 (the master copy the optimizer updates); their 16-bit copies are made once per scope
// and cached, so a weight used twice is cast once. Backward runs outside the policy: each
// gradient comes back in its leaf's own dtype.
//
//   {
//     kiln::autocast amp(DType::bf16);
//     loss = nn::cross_entropy(model.forward(images), labels);  // logits bf16, loss f32
//   }
//   loss.backward();  // parameter gradients in f32
//
// Scopes nest (an inner autocast(dtype, false) turns the policy off for its scope); the cache is
// emptied when the outermost scope of the thread ends.
#pragma once

#include <cstdint>

#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"

namespace kiln {

class autocast {
 public:
  // dtype is DType::f16 or DType::bf16 (ValueError otherwise). enabled = false makes a scope in
  // which ops run as written, inside an enabled one too.
  explicit autocast(DType dtype, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

// This thread's innermost scope: whether the policy applies, and the 16-bit type it casts to.
bool is_autocast_enabled();
DType autocast_dtype();

// Turns the policy off for its scope without ending a scope's cache: the autograd engine runs
// backward under it, and an op under autocast runs its body under it, so the ops it calls
// internally keep the dtypes the policy gave it.
class AutocastSuspend {
 public:
  AutocastSuspend();
  ~AutocastSuspend();
  AutocastSuspend(const AutocastSuspend&) = delete;
  AutocastSuspend& operator=(const AutocastSuspend&) = delete;

 private:
  bool previous_enabled_;
};

// The weight-cast cache of this thread's scope: the copy of `source` in `dtype` made earlier in
// the scope, while the source is unchanged (same version) and grad mode is what it was then; an
// undefined tensor otherwise. Outside any scope, finds nothing and stores nothing.
Tensor autocast_cache_find(const Tensor& source, DType dtype);
void autocast_cache_store(const Tensor& source, const Tensor& cast);
// How many casts the cache holds (for tests and the guide).
int64_t autocast_cache_size();

}  // namespace kiln
