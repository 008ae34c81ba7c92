#include "kiln/core/autocast.h"

#include <cstdint>
#include <unordered_map>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"

namespace kiln {

namespace {

struct CacheEntry {
  Tensor source;  // held, so its address cannot be reused by another tensor within the scope
  Tensor cast;
  uint64_t version;
  bool grad_enabled;
};

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::f16;
  int depth = 0;  // open scopes, enabled or not
  std::unordered_map<const TensorImpl*, CacheEntry> cache;
};

thread_local AutocastState state;

}  // namespace

autocast::autocast(DType dtype, bool enabled)
    : previous_enabled_(state.enabled), previous_dtype_(state.dtype) {
  KILN_CHECK(dtype == DType::f16 || dtype == DType::bf16, ValueError,
             "autocast: expected DType::f16 or DType::bf16, got {}", dtype_name(dtype));
  state.enabled = enabled;
  if (enabled) state.dtype = dtype;
  ++state.depth;
}

autocast::~autocast() {
  state.enabled = previous_enabled_;
  state.dtype = previous_dtype_;
  if (--state.depth == 0) state.cache.clear();
}

bool is_autocast_enabled() {
  return state.enabled;
}

DType autocast_dtype() {
  return state.dtype;
}

AutocastSuspend::AutocastSuspend() : previous_enabled_(state.enabled) {
  state.enabled = false;
}

AutocastSuspend::~AutocastSuspend() {
  state.enabled = previous_enabled_;
}

Tensor autocast_cache_find(const Tensor& source, DType dtype) {
  auto it = state.cache.find(source.impl());
  if (it == state.cache.end()) return Tensor();
  const CacheEntry& e = it->second;
  if (e.cast.dtype() != dtype || e.version != source.version() ||
      e.grad_enabled != GradMode::is_enabled())
    return Tensor();
  return e.cast;
}

void autocast_cache_store(const Tensor& source, const Tensor& cast) {
  if (state.depth == 0) return;
  state.cache.insert_or_assign(source.impl(),
                               CacheEntry{source, cast, source.version(), GradMode::is_enabled()});
}

int64_t autocast_cache_size() {
  return static_cast<int64_t>(state.cache.size());
}

}  // namespace kiln
