#include "kiln/sim/block_runner.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "kiln/sim/metrics/recorder.h"
#include "kiln/sim/metrics/strict_memory.h"

namespace kiln::sim {

namespace {
constexpr unsigned kWarp = 32;
std::atomic<std::uint64_t> fibers{0};

std::string hex(unsigned mask) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", mask);
  return text;
}
}  // namespace

const char* warp_op_name(WarpOp op) {
  switch (op) {
    case WarpOp::shfl:
      return "__shfl_sync";
    case WarpOp::shfl_xor:
      return "__shfl_xor_sync";
    case WarpOp::shfl_up:
      return "__shfl_up_sync";
    case WarpOp::shfl_down:
      return "__shfl_down_sync";
    case WarpOp::ballot:
      return "__ballot_sync";
    case WarpOp::any:
      return "__any_sync";
    case WarpOp::all:
      return "__all_sync";
    case WarpOp::sync:
      return "__syncwarp";
  }
  return "a warp collective";
}

std::uint64_t fibers_started() {
  return fibers.load(std::memory_order_relaxed);
}

BlockRunner& BlockRunner::here() {
  static thread_local BlockRunner runner;
  return runner;
}

std::string BlockRunner::where_text(const std::source_location& where) const {
  return std::string(where.file_name()) + ":" + std::to_string(where.line());
}

std::string BlockRunner::thread_text(unsigned t) const {
  const unsigned x = launch_->block.x, y = launch_->block.y;
  return "thread (" + std::to_string(t % x) + "," + std::to_string(t / x % y) + "," +
         std::to_string(t / (x * y)) + ")";
}

std::string BlockRunner::prefix() const {
  return "kiln-sim: kernel " + std::string(launch_->kernel) + ", block (" +
         std::to_string(block_.x) + "," + std::to_string(block_.y) + "," +
         std::to_string(block_.z) + "): ";
}

void BlockRunner::fail(const std::string& message) {
  if (!error_) error_ = std::make_exception_ptr(KernelError(prefix() + message));
}

StackBounds BlockRunner::bounds_of(unsigned t) const {
  if (static_cast<int>(t) == promoted_) return os_stack_;
  return {stacks_[t]->bottom(), stacks_[t]->size()};
}

// The same call site: source_location's file names are string literals, usually one per file.
static bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

void BlockRunner::exit_thread(unsigned t) {
  threads_[t].state = State::exited;
  ++exited_;
}

void BlockRunner::make_order(std::uint64_t round) {
  std::iota(order_.begin(), order_.end(), 0u);
  if (schedule_.seed == 1) {
    std::reverse(order_.begin(), order_.end());
  } else if (schedule_.seed > 1) {
    const std::uint64_t block =
        (static_cast<std::uint64_t>(block_.z) * launch_->grid.y + block_.y) * launch_->grid.x +
        block_.x;
    std::seed_seq seeds{schedule_.seed, schedule_.seed >> 32, block, block >> 32, round};
    std::mt19937_64 random(seeds);
    std::shuffle(order_.begin(), order_.end(), random);
  }
}

void BlockRunner::run(const GridLaunch& launch, uint3 block, const Schedule& schedule) {
  launch_ = &launch;
  block_ = block;
  schedule_ = schedule;
  threads_per_block_ = launch.block.x * launch.block.y * launch.block.z;
  threads_.clear();
  threads_.resize(threads_per_block_);
  for (unsigned t = 0; t < threads_per_block_; ++t)
    threads_[t].index = {t % launch.block.x, t / launch.block.x % launch.block.y,
                         t / (launch.block.x * launch.block.y)};
  order_.resize(threads_per_block_);
  fiberless_ = !schedule.fibers;
  promoted_ = -1;
  exited_ = 0;
  aborting_ = false;
  error_ = nullptr;
  if (!shared_ || shared_bytes_ != launch.shared_bytes) {
    shared_ = std::make_unique<unsigned char[]>(launch.shared_bytes);
    shared_bytes_ = launch.shared_bytes;
  }
  std::memset(shared_.get(), 0xFF, shared_bytes_);
  current::block_idx = block;
  current::block_dim = launch.block;
  current::grid_dim = launch.grid;

  metrics::begin_block(threads_per_block_, shared_.get(), shared_bytes_);
  strict::begin_block(shared_.get(), shared_bytes_);
  make_order(0);
  if (fiberless_) {
    for (const unsigned t : order_) {
      run_thread(t);
      exit_thread(t);
      if (!fiberless_) {
        // t waited, so the block was promoted: hand the rest of it to the scheduler.
        scheduler_ =
            switch_to(std::move(scheduler_), {scheduler_stack_.bottom(), scheduler_stack_.size()});
        break;
      }
      if (error_) break;
    }
  } else {
    boost::context::fiber scheduler = scheduler_stack_.make_fiber(
        [this](boost::context::fiber&& main) { return this->schedule(std::move(main)); });
    switch_to(std::move(scheduler), {scheduler_stack_.bottom(), scheduler_stack_.size()});
  }
  metrics::end_block();
  strict::end_block();
  launch_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void BlockRunner::run_thread(unsigned t) {
  self_ = t;
  current::thread_idx = threads_[t].index;
  threads_[t].started = true;
  try {
    launch_->run(launch_->context);
  } catch (const Abort&) {
  } catch (...) {
    if (!error_) error_ = std::current_exception();
  }
}

void BlockRunner::promote() {
  fiberless_ = false;
  promoted_ = static_cast<int>(self_);
  scheduler_ = scheduler_stack_.make_fiber(
      [this](boost::context::fiber&& main) { return this->schedule(std::move(main)); });
}

void BlockRunner::wait(unsigned t) {
  if (fiberless_) promote();
  scheduler_ =
      switch_to(std::move(scheduler_), {scheduler_stack_.bottom(), scheduler_stack_.size()});
  self_ = t;
  if (aborting_) throw Abort{};
}

boost::context::fiber BlockRunner::thread_main(unsigned t, boost::context::fiber&& scheduler) {
  fiber_started();
  scheduler_ = std::move(scheduler);
  run_thread(t);
  exit_thread(t);
  fiber_finishing({scheduler_stack_.bottom(), scheduler_stack_.size()});
  return std::move(scheduler_);
}

void BlockRunner::resume(unsigned t) {
  Thread& thread = threads_[t];
  current::thread_idx = thread.index;
  self_ = t;
  if (!thread.started) {
    thread.started = true;
    fibers.fetch_add(1, std::memory_order_relaxed);
    while (stacks_.size() <= t)
      stacks_.push_back(std::make_unique<FiberStack>(static_cast<unsigned>(stacks_.size())));
    thread.context = stacks_[t]->make_fiber([this, t](boost::context::fiber&& scheduler) {
      return thread_main(t, std::move(scheduler));
    });
  }
  boost::context::fiber back = switch_to(std::move(thread.context), bounds_of(t));
  if (thread.state == State::exited) {
    // A fiber that returned gives back nothing; the promoted thread's return hands over run().
    if (back) waiter_ = std::move(back);
  } else {
    thread.context = std::move(back);
  }
}

boost::context::fiber BlockRunner::schedule(boost::context::fiber&& main) {
  fiber_started();
  if (promoted_ >= 0)
    threads_[static_cast<unsigned>(promoted_)].context = std::move(main);
  else
    waiter_ = std::move(main);
  for (std::uint64_t round = 1; !error_ && exited_ < threads_per_block_; ++round) {
    bool ran = false;
    make_order(round);
    for (const unsigned t : order_) {
      if (threads_[t].state != State::ready) continue;
      resume(t);
      ran = true;
      if (error_) break;
    }
    if (error_ || exited_ == threads_per_block_) break;
    if (!release() && !ran && !error_) report_stuck();
  }
  if (error_) {
    aborting_ = true;
    for (unsigned t = 0; t < threads_per_block_; ++t) {
      if (threads_[t].state == State::exited) continue;
      if (threads_[t].started)
        resume(t);
      else
        exit_thread(t);
    }
  }
  fiber_finishing(os_stack_);  // run() waits on the OS stack
  return std::move(waiter_);
}

bool BlockRunner::release() {
  bool released = false;
  unsigned at_barrier = 0;
  for (const Thread& thread : threads_) at_barrier += thread.state == State::block_barrier;
  if (at_barrier > 0 && at_barrier == threads_per_block_ && exited_ == 0) {
    const std::source_location& first = threads_[0].where;
    const bool same = std::all_of(threads_.begin(), threads_.end(), [&](const Thread& thread) {
      return same_site(thread.where, first);
    });
    if (same) {
      for (Thread& thread : threads_) thread.state = State::ready;
      released = true;
    }
  }
  for (unsigned t = 0; t < threads_per_block_ && !error_; ++t)
    if (threads_[t].state == State::warp && release_warp_group(t)) released = true;
  return released;
}

// Releases the collective lane t waits at if every lane of its mask waits at it too.
bool BlockRunner::release_warp_group(unsigned t) {
  const WarpRequest& request = threads_[t].request;
  const unsigned base = t - t % kWarp;
  unsigned group = 0;  // the lanes of the mask that exist in this block
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    if (!(request.mask >> lane & 1u) || base + lane >= threads_per_block_) continue;
    const Thread& other = threads_[base + lane];
    if (other.state != State::warp || other.request.op != request.op ||
        other.request.mask != request.mask || !same_site(other.where, threads_[t].where))
      return false;
    group |= 1u << lane;
  }
  unsigned votes = 0;
  for (unsigned lane = 0; lane < kWarp; ++lane)
    if ((group >> lane & 1u) && threads_[base + lane].request.value != 0) votes |= 1u << lane;
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    if (!(group >> lane & 1u)) continue;
    Thread& thread = threads_[base + lane];
    const WarpRequest& mine = thread.request;
    const unsigned width = static_cast<unsigned>(mine.width);
    const unsigned argument = static_cast<unsigned>(mine.argument);
    const unsigned segment = lane - lane % width;
    unsigned source = lane;
    switch (mine.op) {
      case WarpOp::shfl:
        source = segment + argument % width;
        break;
      case WarpOp::shfl_xor:
        source = lane ^ argument;
        if (source >= segment + width) source = lane;  // a later segment: the lane keeps its own
        break;
      case WarpOp::shfl_up:
        source = lane % width >= argument ? lane - argument : lane;
        break;
      case WarpOp::shfl_down:
        source = lane % width + argument < width ? lane + argument : lane;
        break;
      case WarpOp::ballot:
        thread.result = votes;
        break;
      case WarpOp::any:
        thread.result = votes != 0;
        break;
      case WarpOp::all:
        thread.result = votes == group;
        break;
      case WarpOp::sync:
        thread.result = 0;
        break;
    }
    if (mine.op == WarpOp::shfl || mine.op == WarpOp::shfl_xor || mine.op == WarpOp::shfl_up ||
        mine.op == WarpOp::shfl_down) {
      if (!(group >> source & 1u)) {
        fail(thread_text(base + lane) + " at " + warp_op_name(mine.op) + " (" +
             where_text(thread.where) + ", mask " + hex(mine.mask) + ") reads lane " +
             std::to_string(source) + ", which is " +
             (base + source < threads_per_block_ ? "not in the mask" : "past the block's end"));
        return false;
      }
      thread.result = threads_[base + source].request.value;
    }
  }
  for (unsigned lane = 0; lane < kWarp; ++lane)
    if (group >> lane & 1u) threads_[base + lane].state = State::ready;
  return true;
}

void BlockRunner::report_stuck() {
  for (unsigned t = 0; t < threads_per_block_; ++t) {
    const Thread& thread = threads_[t];
    if (thread.state != State::warp) continue;
    const std::string waiting = thread_text(t) + " waits at " + warp_op_name(thread.request.op) +
                                " (" + where_text(thread.where) + ", mask " +
                                hex(thread.request.mask) + ") for lane ";
    const unsigned base = t - t % kWarp;
    for (unsigned lane = 0; lane < kWarp; ++lane) {
      const unsigned u = base + lane;
      if (!(thread.request.mask >> lane & 1u) || u >= threads_per_block_) continue;
      const Thread& other = threads_[u];
      const std::string lane_text = waiting + std::to_string(lane) + ", " + thread_text(u);
      if (other.state == State::exited)
        return fail(lane_text + ", which exited without reaching it");
      if (other.state == State::block_barrier)
        return fail(lane_text + ", which waits at __syncthreads (" + where_text(other.where) +
                    "): a deadlock");
      if (other.request.op != thread.request.op || other.request.mask != thread.request.mask ||
          !same_site(other.where, thread.where))
        return fail(lane_text + ", which waits at " + warp_op_name(other.request.op) + " (" +
                    where_text(other.where) + ", mask " + hex(other.request.mask) + ")");
    }
  }
  unsigned waiting = 0;
  while (waiting < threads_per_block_ && threads_[waiting].state != State::block_barrier) ++waiting;
  if (waiting == threads_per_block_) return fail("no thread can make progress");
  const std::string text = thread_text(waiting) + " waits at __syncthreads (" +
                           where_text(threads_[waiting].where) + ")";
  for (unsigned t = 0; t < threads_per_block_; ++t)
    if (threads_[t].state == State::exited)
      return fail(text + ", but " + thread_text(t) + " exited without reaching it");
  for (unsigned t = 0; t < threads_per_block_; ++t)
    if (!same_site(threads_[t].where, threads_[waiting].where))
      return fail(text + " and " + thread_text(t) + " at another one (" +
                  where_text(threads_[t].where) + ")");
  fail(text + ": no thread can make progress");
}

void BlockRunner::block_barrier(const std::source_location& where) {
  if (!launch_) throw std::logic_error("kiln-sim: __syncthreads called outside a kernel");
  const unsigned t = self_;
  threads_[t].state = State::block_barrier;
  threads_[t].where = where;
  wait(t);
}

std::uint64_t BlockRunner::warp_collective(const WarpRequest& request,
                                           const std::source_location& where) {
  if (!launch_)
    throw std::logic_error(std::string("kiln-sim: ") + warp_op_name(request.op) +
                           " called outside a kernel");
  const unsigned t = self_;
  const unsigned lane = t % kWarp;
  const auto misuse = [&](const std::string& what) {
    return KernelError(prefix() + thread_text(t) + " at " + warp_op_name(request.op) + " (" +
                       where_text(where) + "): " + what);
  };
  if (!(request.mask >> lane & 1u))
    throw misuse("the mask " + hex(request.mask) + " leaves out the calling lane " +
                 std::to_string(lane));
  if (request.width < 1 || request.width > static_cast<int>(kWarp) ||
      (request.width & (request.width - 1)) != 0)
    throw misuse("width " + std::to_string(request.width) + ", expected a power of two up to 32");
  Thread& thread = threads_[t];
  thread.state = State::warp;
  thread.request = request;
  thread.where = where;
  wait(t);
  return threads_[t].result;
}

void* BlockRunner::dynamic_shared_memory() {
  if (!launch_)
    throw std::logic_error("kiln-sim: dynamic shared memory asked for outside a kernel");
  return shared_.get();
}

void block_barrier(const std::source_location& where) {
  BlockRunner::here().block_barrier(where);
}

std::uint64_t warp_collective(const WarpRequest& request, const std::source_location& where) {
  return BlockRunner::here().warp_collective(request, where);
}

void* dynamic_shared_memory() {
  return BlockRunner::here().dynamic_shared_memory();
}

}  // namespace kiln::sim
