// The op this thread is running, for errors raised far below its entry point: a host
// synchronisation refused while a CUDA graph is being captured names the op that asked for it
// ("item", "cross_entropy"), not the copy deep inside. Every op entry point holds one (its
// profiler::OpScope does), as do a few calls that are not ops (GradScaler.step). The outermost
// scope is what the user called; the innermost what did the deed.
#pragma once

namespace kiln {

class OpNameScope {
 public:
  explicit OpNameScope(const char* name) : previous_inner_(inner()) {
    if (outer() == nullptr) {
      outer() = name;
      owns_outer_ = true;
    }
    inner() = name;
  }
  ~OpNameScope() {
    inner() = previous_inner_;
    if (owns_outer_) outer() = nullptr;
  }
  OpNameScope(const OpNameScope&) = delete;
  OpNameScope& operator=(const OpNameScope&) = delete;

  // The outermost and innermost ops running on this thread; null outside every op.
  static const char* outermost() { return outer(); }
  static const char* innermost() { return inner(); }

 private:
  static const char*& outer() {
    thread_local const char* name = nullptr;
    return name;
  }
  static const char*& inner() {
    thread_local const char* name = nullptr;
    return name;
  }
  const char* previous_inner_;
  bool owns_outer_ = false;
};

}  // namespace kiln
