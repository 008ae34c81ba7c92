// The stacks the simulator's fibers run on, and the fiber switch with the annotations
// AddressSanitizer needs to follow a stack change (without them it reports false stack-buffer
// overflows once a fiber has switched: google/sanitizers#189).
#pragma once

#include <boost/context/fiber.hpp>
#include <cstddef>
#include <utility>

namespace kiln::sim {

// A stack of fixed size below a guard page, so an overflow faults instead of writing into the next
// fiber's stack. 64 KiB, 256 KiB under AddressSanitizer (its frames are larger).
class FiberStack {
 public:
  // `index`: the fiber's place in its pool. Stacks are page-aligned, so their tops would all fall
  // into the same cache sets; each starts a different multiple of 256 bytes below its top.
  explicit FiberStack(unsigned index = 0);
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;

  void* bottom() const { return bottom_; }
  std::size_t size() const { return size_; }
  // A fiber on this stack that starts with fn(caller). The stack is reused by the next fiber once
  // this one has returned.
  template <class Fn>
  boost::context::fiber make_fiber(Fn&& fn) {
    boost::context::stack_context context;
    context.size = size_;
    context.sp = static_cast<char*>(bottom_) + size_;
    void* top = static_cast<char*>(context.sp) - offset_;
    return boost::context::fiber(std::allocator_arg,
                                 boost::context::preallocated(top, context.size - offset_, context),
                                 KeepStack{}, std::forward<Fn>(fn));
  }

 private:
  struct KeepStack {
    void deallocate(boost::context::stack_context&) {}
  };
  void* mapping_ = nullptr;
  void* bottom_ = nullptr;
  std::size_t size_ = 0;
  std::size_t offset_ = 0;
};

// Where a context's stack lies, for AddressSanitizer; {nullptr, 0} when it is not known.
struct StackBounds {
  const void* bottom = nullptr;
  std::size_t size = 0;
};
StackBounds this_thread_stack();

// Resumes `target` (whose stack is `bounds`) and returns the context that resumed this one back.
boost::context::fiber switch_to(boost::context::fiber&& target, StackBounds bounds);
// The first statement of a fiber's function, and the last before it returns the fiber to resume
// (whose stack is `bounds`).
void fiber_started();
void fiber_finishing(StackBounds bounds);

}  // namespace kiln::sim
