// Pinned (page-locked) host memory of a build with CUDA: the allocator behind
// cuda::pinned_allocator(), which asynchronous host <-> device copies need.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_caching_allocator.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/cuda_runtime/internal.h"

namespace kiln::cuda {

namespace {

// cudaHostAlloc is slow (it maps pages for the device) and synchronising, so freed blocks are kept
// by size class, as PyTorch's host allocator does. A block an asynchronous copy still reads or
// writes is not handed out again until that copy is done: each such copy leaves an event on the
// block, and a block is reusable once all its events have happened.
class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    // cudaHostAlloc and the event queries that find a reusable block are what a capture forbids
    // the capturing thread.
    check_not_capturing(fmt::format("allocates {} of pinned host memory",
                                    format_bytes(static_cast<int64_t>(nbytes))));
    size_t size = size_class(nbytes);
    // cudaHostAlloc and the event queries need a context. On a thread that never chose a device
    // (a DataLoader worker) the runtime would bind device 0's, making one on GPU 0 in every rank
    // of a job: they run on a device this process already uses, as PyTorch's host allocator
    // does. The memory is portable, pinned for every device whichever is current.
    std::optional<DeviceGuard> device;
    if (const int d = detail::device_with_context(); d >= 0) device.emplace(d);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = take_free_block(size);
    if (ptr == nullptr) ptr = host_alloc(nbytes, size);
    blocks_.at(reinterpret_cast<uintptr_t>(ptr)).in_use = true;
    record_allocate(nbytes);
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    Block& block = blocks_.at(reinterpret_cast<uintptr_t>(ptr));
    block.in_use = false;
    free_.emplace(block.size, ptr);
    record_free(nbytes);
  }

  Device device() const override { return Device::cpu(); }
  bool is_pinned() const override { return true; }

  // Called after queuing an async copy that reads or writes host_ptr: false when host_ptr is not
  // in a pinned block of this allocator (then the caller must wait for the copy itself).
  bool record_use(const void* host_ptr, cudaStream_t stream, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto address = reinterpret_cast<uintptr_t>(host_ptr);
    auto it = blocks_.upper_bound(address);
    if (it == blocks_.begin()) return false;
    --it;
    if (address >= it->first + it->second.size) return false;
    DeviceGuard guard(device);
    cudaEvent_t event = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    cudaError_t status = cudaEventRecord(event, stream);
    if (status != cudaSuccess) cudaEventDestroy(event);
    KILN_CUDA_CHECK(status);
    it->second.events.push_back(event);
    return true;
  }

 private:
  struct Block {
    size_t size = 0;
    bool in_use = false;
    std::vector<cudaEvent_t> events;  // copies queued on it that may not have happened yet
  };

  // Powers of two: few classes, so a freed batch buffer serves the next batch of the same shape.
  static size_t size_class(size_t nbytes) {
    size_t size = 512;
    while (size < nbytes) size *= 2;
    return size;
  }

  // Drops the events that have happened; true when none is left.
  static bool copies_done(Block& block) {
    while (!block.events.empty()) {
      if (!detail::done(cudaEventQuery(block.events.back()), "cudaEventQuery")) return false;
      cudaEventDestroy(block.events.back());
      block.events.pop_back();
    }
    return true;
  }

  void* take_free_block(size_t size) {
    auto [first, last] = free_.equal_range(size);
    for (auto it = first; it != last; ++it) {
      void* ptr = it->second;
      if (!copies_done(blocks_.at(reinterpret_cast<uintptr_t>(ptr)))) continue;
      free_.erase(it);
      return ptr;
    }
    return nullptr;
  }

  void* host_alloc(size_t nbytes, size_t size) {
    void* ptr = nullptr;
    // Portable: pinned for every device's context, so any GPU copies from it asynchronously.
    cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_free_blocks();
      status = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
      if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        throw OutOfMemoryError(fmt::format(
            "pinned allocator: out of page-locked host memory allocating {} (kiln holds {} of "
            "pinned memory in tensors)",
            format_bytes(static_cast<int64_t>(nbytes)), format_bytes(stats().current_bytes)));
      }
    }
    KILN_CUDA_CHECK(status);
    blocks_[reinterpret_cast<uintptr_t>(ptr)].size = size;
    return ptr;
  }

  void release_free_blocks() {
    for (auto it = free_.begin(); it != free_.end();) {
      auto block = blocks_.find(reinterpret_cast<uintptr_t>(it->second));
      if (!copies_done(block->second)) {
        ++it;
        continue;
      }
      cudaFreeHost(it->second);
      blocks_.erase(block);
      it = free_.erase(it);
    }
  }

  std::mutex mutex_;
  std::map<uintptr_t, Block> blocks_;  // every pinned block, by address (finds a pointer's block)
  std::multimap<size_t, void*> free_;  // the free ones, by size class
};

PinnedAllocator& pinned() {
  static auto* allocator = new PinnedAllocator;  // never destroyed, as the others
  return *allocator;
}

}  // namespace

bool detail::record_pinned_use(const void* host_ptr, cudaStream_t stream, int device) {
  return pinned().record_use(host_ptr, stream, device);
}

Allocator& pinned_allocator() {
  KILN_CHECK(is_available(), DeviceError,
             "cuda::pinned_allocator: no GPU is visible, and pinned memory needs one");
  return pinned();
}

}  // namespace kiln::cuda
