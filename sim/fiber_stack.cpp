#include "kiln/sim/fiber_stack.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <new>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define KILN_SIM_ASAN 1
#endif

namespace kiln::sim {

namespace {
#if defined(KILN_SIM_ASAN)
constexpr std::size_t kStackBytes = 256 * 1024;
#else
constexpr std::size_t kStackBytes = 64 * 1024;
#endif
}  // namespace

FiberStack::FiberStack(unsigned index) : offset_(index % 16 * 256) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  mapping_ = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping_ == MAP_FAILED) throw std::bad_alloc();
  mprotect(mapping_, page, PROT_NONE);  // the stack grows down into this page
  bottom_ = static_cast<char*>(mapping_) + page;
  size_ = kStackBytes;
}

FiberStack::~FiberStack() {
#if defined(KILN_SIM_ASAN)
  // The frames of fibers that never returned leave their redzones poisoned; the next mapping at
  // this address (another thread's fiber stack) would inherit them.
  __asan_unpoison_memory_region(bottom_, size_);
#endif
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  munmap(mapping_, kStackBytes + page);
}

StackBounds this_thread_stack() {
  StackBounds bounds;
  pthread_attr_t attributes;
  if (pthread_getattr_np(pthread_self(), &attributes) != 0) return bounds;
  void* bottom = nullptr;
  std::size_t size = 0;
  if (pthread_attr_getstack(&attributes, &bottom, &size) == 0) bounds = {bottom, size};
  pthread_attr_destroy(&attributes);
  return bounds;
}

#if defined(KILN_SIM_ASAN)
boost::context::fiber switch_to(boost::context::fiber&& target, StackBounds bounds) {
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, bounds.bottom, bounds.size);
  boost::context::fiber back = std::move(target).resume();
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
  return back;
}
void fiber_started() {
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
}
void fiber_finishing(StackBounds bounds) {
  __sanitizer_start_switch_fiber(nullptr, bounds.bottom, bounds.size);
}
#else
boost::context::fiber switch_to(boost::context::fiber&& target, StackBounds) {
  return std::move(target).resume();
}
void fiber_started() {}
void fiber_finishing(StackBounds) {}
#endif

}  // namespace kiln::sim
