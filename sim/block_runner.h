// Runs one block of a grid on the calling OS thread, with CUDA's semantics for barriers and warp
// collectives.
//
// A block starts fiberless: its threads run one after another as plain calls, which is all a
// block that never waits needs. The first thread to wait (at __syncthreads or a warp collective)
// promotes the block: that thread keeps the OS thread's own stack, the threads not yet run become
// fibers that start at the kernel's entry, and the threads already run count as exited, so a
// barrier they skipped is reported. From then on a scheduler fiber resumes every runnable thread in
// the schedule's order until it waits or exits, releases a block barrier once every thread waits
// at the same one, and a warp collective once every lane of its mask waits at the same one. When no
// thread can run and nothing can be released, the block is in an error CUDA calls undefined (a
// thread exited without reaching a barrier, a lane never reaches a shuffle, a deadlock): the
// remaining threads are unwound and run() throws KernelError naming the kernel, block and threads.
#pragma once

#include <vector_types.h>

#include <boost/context/fiber.hpp>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "kiln/sim/device_api.h"
#include "kiln/sim/fiber_stack.h"
#include "kiln/sim/grid.h"

namespace kiln::sim {

class BlockRunner {
 public:
  // This OS thread's runner (one block at a time, its fiber stacks kept for the next block).
  static BlockRunner& here();

  // Throws KernelError when the block fails.
  void run(const GridLaunch& launch, uint3 block, const Schedule& schedule);
  // Whether a block is running on this OS thread (a launch now would come from a kernel).
  bool running() const { return launch_ != nullptr; }

  void block_barrier(const std::source_location& where);
  std::uint64_t warp_collective(const WarpRequest& request, const std::source_location& where);
  void* dynamic_shared_memory();

 private:
  enum class State : std::uint8_t { ready, block_barrier, warp, exited };
  struct Thread {
    uint3 index{};  // threadIdx
    State state = State::ready;
    bool started = false;  // has run: its context is a fiber, or the OS stack when promoted
    boost::context::fiber context;
    std::source_location where;
    WarpRequest request{};
    std::uint64_t result = 0;
  };
  struct Abort {};  // thrown into the threads still waiting when the block fails

  void run_thread(unsigned t);
  void wait(unsigned t);
  void promote();
  boost::context::fiber schedule(boost::context::fiber&& main);
  boost::context::fiber thread_main(unsigned t, boost::context::fiber&& scheduler);
  void resume(unsigned t);
  void make_order(std::uint64_t round);
  bool release();
  bool release_warp_group(unsigned first);
  void report_stuck();
  void fail(const std::string& message);
  void exit_thread(unsigned t);
  StackBounds bounds_of(unsigned t) const;

  std::string where_text(const std::source_location& where) const;
  std::string thread_text(unsigned t) const;
  std::string prefix() const;

  const GridLaunch* launch_ = nullptr;
  uint3 block_{};
  unsigned threads_per_block_ = 0;
  Schedule schedule_;
  std::vector<Thread> threads_;
  std::vector<unsigned> order_;
  std::vector<std::unique_ptr<FiberStack>> stacks_;
  FiberStack scheduler_stack_;
  StackBounds os_stack_ = this_thread_stack();
  boost::context::fiber scheduler_;  // while a thread runs: the scheduler to switch back to
  boost::context::fiber waiter_;     // while the scheduler runs: run(), waiting for the block
  bool fiberless_ = true;
  int promoted_ = -1;  // the thread on the OS stack once promoted
  unsigned self_ = 0;
  unsigned exited_ = 0;
  bool aborting_ = false;
  std::exception_ptr error_;
  std::unique_ptr<unsigned char[]> shared_;
  std::size_t shared_bytes_ = 0;
};

}  // namespace kiln::sim
