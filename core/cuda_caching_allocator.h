// The pool logic of kiln's CUDA caching allocator, as PyTorch's: device memory is obtained in
// segments (cudaMalloc), cut into blocks, and a freed block goes back to a pool instead of to the
// driver, because cudaMalloc/cudaFree synchronise the device and cost tens of microseconds each.
//
// This file has no CUDA dependency on purpose: the class talks to the device only through a
// SegmentBackend, so it is compiled in every build and unit-tested on the CPU with a fake backend
// (tests/test_cuda_caching_allocator.cpp). core/cuda_runtime/device_memory.cpp plugs in
// cudaMalloc/cudaFree.
//
// The rules (PyTorch's numbers):
// - sizes round up to 512 bytes; a request of at most 1 MiB is "small", larger ones "large";
// - small blocks come from 2 MiB segments; a large request under 10 MiB gets a 20 MiB segment (so
//   several mid-size tensors share one cudaMalloc), a larger one a segment rounded up to 2 MiB;
// - a block found in a pool is split when the remainder is worth keeping (>= 512 bytes in the small
//   pool, > 1 MiB in the large pool), and a freed block merges with its free neighbours in the
//   same segment, so a segment whose blocks are all free is one block again;
// - a block is reused only by requests on the stream it was allocated on: work queued on that
//   stream is ordered after the previous owner's, so no synchronisation is needed, while another
//   stream could run ahead and overwrite memory a pending kernel still reads;
// - a block that a tensor also used on other streams (record_stream, as torch's
//   Tensor.record_stream) goes back to the pool only once the work queued on those streams when it
//   was freed is done: an event is recorded on each of them at the free, and the block waits,
//   neither reusable nor merged with its neighbours, until all of them have happened;
// - when the backend is out of memory, every cached whole segment is freed and the request is
//   retried once; if that fails too, OutOfMemoryError says what was asked and what is held.
//
// Private pools, for CUDA graphs (PyTorch's graph pools, core/cuda_graph.h): while a capture
// routes to a pool, every allocation on a stream taking part in that capture (the backend says
// which capture a stream is in) comes from the pool's own segments, and its blocks, freed during
// the capture or after it, go back to that pool only. A graph's replays then use exactly the
// addresses its capture saw, which no allocation outside the pool can take. A pool lives while a
// graph (or the capture under way) holds it; when none does, its wholly free segments go back to
// the backend at the next empty_cache(). While any capture routes here, nothing is given back to
// the backend and no event is queried (both wait for the GPU, which a capture forbids): blocks used
// on other streams are set aside until the capture ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/core/allocator.h"

namespace kiln::cuda {

// Where segments come from: cudaMalloc/cudaFree on one device, or a fake in tests.
class SegmentBackend {
 public:
  virtual ~SegmentBackend() = default;
  // nullptr when the memory is not there (the pool then frees its cache and retries); any other
  // failure throws.
  virtual void* allocate(size_t nbytes) = 0;
  // Must not throw: it runs from tensor destructors when caching is off.
  virtual void free(void* ptr, size_t nbytes) noexcept = 0;
  // For the out-of-memory message: "cuda:0", and the device's free and total bytes now.
  virtual std::string device_name() const = 0;
  virtual void memory_info(size_t* free_bytes, size_t* total_bytes) const = 0;

  // Events for the blocks used on other streams than their own: one recorded now on `stream` (a
  // cudaStream_t's address), whether it has happened, and its release.
  using EventId = std::uintptr_t;
  virtual EventId record_event(std::uintptr_t stream) = 0;
  virtual bool event_done(EventId event) = 0;
  virtual void release_event(EventId event) noexcept = 0;

  // The capture `stream` takes part in (cudaStreamGetCaptureInfo's id), 0 when none; asked only
  // while a capture routes to a private pool.
  virtual uint64_t capture_of(std::uintptr_t stream) {
    (void)stream;
    return 0;
  }
  // A segment of a private pool, asked for during its capture: CUDA forbids a plain cudaMalloc
  // then, so the CUDA backend allows it for this one call, as PyTorch's allocator does.
  virtual void* allocate_for_capture(size_t nbytes) { return allocate(nbytes); }
};

// "512 bytes", "1.50 KiB", "2.00 GiB": sizes as a person reads them in an error message.
std::string format_bytes(int64_t nbytes);

class CachingAllocator {
 public:
  // An opaque stream identity (a cudaStream_t's address); blocks are reused within one stream only.
  using StreamId = std::uintptr_t;
  // A private pool (0 is the default pool, never private).
  using PoolId = uint64_t;
  struct PoolStats {
    int64_t allocated_bytes = 0;
    int64_t reserved_bytes = 0;
    int64_t segments = 0;
    int64_t holders = 0;  // graphs and captures under way
  };

  static constexpr size_t kMinBlockSize = 512;                // every size rounds up to this
  static constexpr size_t kSmallSize = size_t{1} << 20;       // largest "small" request
  static constexpr size_t kSmallSegment = size_t{2} << 20;    // segment size of the small pool
  static constexpr size_t kMinLargeAlloc = size_t{10} << 20;  // below this, a large segment is...
  static constexpr size_t kLargeSegment = size_t{20} << 20;   // ...this big
  static constexpr size_t kRoundLarge = size_t{2} << 20;      // larger segments round to this

  // caching = false: every allocate is a backend allocate of exactly the request, every free a
  // backend free, so tools like compute-sanitizer see each tensor's true bounds.
  // The backend must outlive the allocator.
  explicit CachingAllocator(SegmentBackend& backend, bool caching = true);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nullptr for 0 bytes; throws OutOfMemoryError when even an emptied cache cannot serve it.
  void* allocate(size_t nbytes, StreamId stream);
  // ptr must come from allocate (null is ignored).
  void free(void* ptr);
  // The block at ptr (from allocate, not yet freed) is also used by work queued on `stream`: once
  // freed, it is reused only after that work is done. Its own stream needs no mark.
  void record_stream(void* ptr, StreamId stream);
  // Returns every segment with no block in use to the backend; segments partly in use stay. The
  // segments of private pools only once no graph holds them.
  void empty_cache();

  // From now until end_allocate_to_pool(pool), allocations on streams of capture `capture` come
  // from `pool` (made on first use), which the capture holds until release_pool(pool).
  void begin_allocate_to_pool(PoolId pool, uint64_t capture);
  void end_allocate_to_pool(PoolId pool);
  // One more or one fewer holder of `pool` (a graph made from its capture, a graph reset).
  void retain_pool(PoolId pool);
  void release_pool(PoolId pool);
  // Zeros for a pool that does not exist.
  PoolStats pool_stats(PoolId pool) const;
  // Whether a capture routes to a pool now.
  bool capturing() const;

  MemoryStats stats() const;
  void reset_peak();
  bool caching() const { return caching_; }

  // The size a request is served with, and the segment a new block of that size comes from.
  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t rounded);

 private:
  struct PrivatePool;
  struct Block {
    void* ptr;
    size_t size;
    StreamId stream;
    bool small;              // which pool it returns to
    PrivatePool* owner;      // and whose: null for the default pool
    bool allocated = false;  // in use, or freed and waiting for other streams' work
    Block* prev = nullptr;   // neighbours in the same segment, by address
    Block* next = nullptr;
    std::vector<StreamId> used_on{};  // other streams it was used on (record_stream)
  };
  // A freed block that waits for the events recorded on the other streams it was used on.
  struct Waiting {
    Block* block;
    std::vector<SegmentBackend::EventId> events;
  };
  struct BlockOrder {  // by stream, then size, then address: lower_bound is the best fit
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;
  struct PrivatePool {
    PoolId id;
    Pool small, large;  // its free blocks
    int64_t holders = 0;
    PoolStats stats;
  };

  Pool& pool_of(const Block* block) {
    if (block->owner != nullptr) return block->small ? block->owner->small : block->owner->large;
    return block->small ? small_pool_ : large_pool_;
  }
  PrivatePool* route(StreamId stream);
  Block* take_free_block(size_t size, StreamId stream, bool small, PrivatePool* owner);
  Block* new_segment(size_t nbytes, size_t segment_bytes, StreamId stream, bool small,
                     PrivatePool* owner);
  void split(Block* block, size_t size);
  Block* merge_into_neighbours(Block* block);
  void return_to_pool(Block* block);
  void return_waiting_blocks();
  void release_free_segments();
  void release_segments_of(Pool& pool, PrivatePool* owner);
  void on_allocated(Block* block);
  [[noreturn]] void throw_out_of_memory(size_t nbytes, size_t segment_bytes) const;

  SegmentBackend& backend_;
  const bool caching_;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;              // free blocks
  std::unordered_map<void*, Block*> in_use_;  // blocks handed out, by address
  std::vector<Waiting> waiting_;              // freed blocks not yet reusable
  std::vector<Block*> set_aside_;  // freed during a capture, used on other streams: no events yet
  std::unordered_map<PoolId, PrivatePool*> private_pools_;
  std::unordered_map<uint64_t, PrivatePool*> routes_;  // capture id -> the pool it allocates from
  MemoryStats stats_;
};

}  // namespace kiln::cuda
