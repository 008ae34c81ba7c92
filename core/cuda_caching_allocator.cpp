#include "kiln/core/cuda_caching_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"

namespace kiln::cuda {

std::string format_bytes(int64_t nbytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (nbytes < 1024 && nbytes > -1024) return fmt::format("{} bytes", nbytes);
  double value = static_cast<double>(nbytes);
  int unit = -1;
  while ((value >= 1024.0 || value <= -1024.0) && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  auto key = [](const Block* block) {
    return std::make_tuple(block->stream, block->size,
                           reinterpret_cast<std::uintptr_t>(block->ptr));
  };
  return key(a) < key(b);
}

CachingAllocator::CachingAllocator(SegmentBackend& backend, bool caching)
    : backend_(backend), caching_(caching) {}

CachingAllocator::~CachingAllocator() {
  routes_.clear();
  release_free_segments();
  // Every block is in exactly one of the pools, in_use_, waiting_ or set_aside_. Blocks still in
  // use belong to tensors that outlive the allocator (process exit): their memory stays with the
  // driver, which frees it with the context; only the bookkeeping goes.
  for (Waiting& w : waiting_) {
    for (SegmentBackend::EventId event : w.events) backend_.release_event(event);
    delete w.block;
  }
  for (Block* block : set_aside_) delete block;
  for (Block* block : small_pool_) delete block;
  for (Block* block : large_pool_) delete block;
  for (auto& [id, pool] : private_pools_) {
    for (Block* block : pool->small) delete block;
    for (Block* block : pool->large) delete block;
    delete pool;
  }
  for (auto& entry : in_use_) delete entry.second;
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void* CachingAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!caching_) {
    Block* block = new_segment(nbytes, nbytes, stream, false, nullptr);
    on_allocated(block);
    return block->ptr;
  }
  PrivatePool* owner = route(stream);
  // Event queries wait for the GPU's answer, which a capture forbids: after it.
  if (routes_.empty()) return_waiting_blocks();
  size_t size = round_size(nbytes);
  bool small = size <= kSmallSize;
  Block* block = take_free_block(size, stream, small, owner);
  if (block == nullptr) block = new_segment(nbytes, segment_size(size), stream, small, owner);
  split(block, size);
  on_allocated(block);
  return block->ptr;
}

CachingAllocator::PrivatePool* CachingAllocator::route(StreamId stream) {
  if (routes_.empty()) return nullptr;
  const uint64_t capture = backend_.capture_of(stream);
  if (capture == 0) return nullptr;
  auto it = routes_.find(capture);
  return it == routes_.end() ? nullptr : it->second;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(ptr);
  KILN_CHECK(it != in_use_.end(), ValueError,
             "cuda caching allocator: free of {} that it did not allocate (or freed twice) on {}",
             ptr, backend_.device_name());
  Block* block = it->second;
  in_use_.erase(it);
  stats_.current_bytes -= static_cast<int64_t>(block->size);
  stats_.live_allocations -= 1;
  if (block->owner != nullptr)
    block->owner->stats.allocated_bytes -= static_cast<int64_t>(block->size);
  profiler::on_free(static_cast<int64_t>(block->size));
  if (!caching_) {
    // cudaFree waits for the whole device, other streams' work included.
    backend_.free(block->ptr, block->size);
    stats_.reserved_bytes -= static_cast<int64_t>(block->size);
    stats_.device_frees += 1;
    delete block;
    return;
  }
  if (block->used_on.empty()) {
    return_to_pool(block);
    return;
  }
  if (!routes_.empty()) {
    // Its events would be recorded on streams that may be capturing: after the capture.
    set_aside_.push_back(block);
    return;
  }
  Waiting waiting{block, {}};
  for (StreamId stream : block->used_on) waiting.events.push_back(backend_.record_event(stream));
  block->used_on.clear();
  waiting_.push_back(std::move(waiting));
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(ptr);
  KILN_CHECK(it != in_use_.end(), ValueError,
             "cuda caching allocator: record_stream of {}, which is not the start of a block in "
             "use on {}",
             ptr, backend_.device_name());
  Block* block = it->second;
  if (stream == block->stream ||
      std::find(block->used_on.begin(), block->used_on.end(), stream) != block->used_on.end())
    return;
  block->used_on.push_back(stream);
}

void CachingAllocator::return_to_pool(Block* block) {
  block->allocated = false;
  block = merge_into_neighbours(block);
  pool_of(block).insert(block);
}

void CachingAllocator::return_waiting_blocks() {
  std::vector<Waiting> still;
  for (Waiting& w : waiting_) {
    std::vector<SegmentBackend::EventId> pending;
    for (SegmentBackend::EventId event : w.events) {
      if (backend_.event_done(event))
        backend_.release_event(event);
      else
        pending.push_back(event);
    }
    if (pending.empty())
      return_to_pool(w.block);
    else
      still.push_back({w.block, std::move(pending)});
  }
  waiting_ = std::move(still);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!routes_.empty()) return;  // cudaFree waits for the GPU, which a capture forbids
  return_waiting_blocks();
  release_free_segments();
}

void CachingAllocator::begin_allocate_to_pool(PoolId pool, uint64_t capture) {
  KILN_CHECK(pool != 0 && capture != 0, ValueError,
             "cuda caching allocator: a private pool and a capture need nonzero ids, got pool {} "
             "and capture {}",
             pool, capture);
  std::lock_guard<std::mutex> lock(mutex_);
  KILN_CHECK(routes_.count(capture) == 0, ValueError,
             "cuda caching allocator: capture {} already allocates from a private pool on {}",
             capture, backend_.device_name());
  PrivatePool*& owner = private_pools_[pool];
  if (owner == nullptr) owner = new PrivatePool{pool, {}, {}, 0, {}};
  owner->holders += 1;
  routes_[capture] = owner;
}

void CachingAllocator::end_allocate_to_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = routes_.begin(); it != routes_.end();)
    it = it->second->id == pool ? routes_.erase(it) : std::next(it);
  if (!routes_.empty()) return;
  for (Block* block : set_aside_) {
    Waiting waiting{block, {}};
    for (StreamId stream : block->used_on) waiting.events.push_back(backend_.record_event(stream));
    block->used_on.clear();
    waiting_.push_back(std::move(waiting));
  }
  set_aside_.clear();
}

void CachingAllocator::retain_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = private_pools_.find(pool);
  KILN_CHECK(it != private_pools_.end(), ValueError,
             "cuda caching allocator: no private pool {} on {}", pool, backend_.device_name());
  it->second->holders += 1;
}

void CachingAllocator::release_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = private_pools_.find(pool);
  KILN_CHECK(it != private_pools_.end() && it->second->holders > 0, ValueError,
             "cuda caching allocator: private pool {} on {} is not held", pool,
             backend_.device_name());
  it->second->holders -= 1;
}

CachingAllocator::PoolStats CachingAllocator::pool_stats(PoolId pool) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = private_pools_.find(pool);
  if (it == private_pools_.end()) return {};
  PoolStats out = it->second->stats;
  out.holders = it->second->holders;
  return out;
}

bool CachingAllocator::capturing() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !routes_.empty();
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

CachingAllocator::Block* CachingAllocator::take_free_block(size_t size, StreamId stream, bool small,
                                                           PrivatePool* owner) {
  Block probe{nullptr, size, stream, small, owner};
  Pool& pool = pool_of(&probe);
  auto it = pool.lower_bound(&probe);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t nbytes, size_t segment_bytes,
                                                       StreamId stream, bool small,
                                                       PrivatePool* owner) {
  auto from_backend = [&] {
    return owner != nullptr ? backend_.allocate_for_capture(segment_bytes)
                            : backend_.allocate(segment_bytes);
  };
  void* ptr = from_backend();
  if (ptr == nullptr && routes_.empty()) {
    // Cached segments may be exactly what the driver lacks: give them all back and try once more
    // (not during a capture, which forbids the cudaFree).
    stats_.alloc_retries += 1;
    return_waiting_blocks();
    release_free_segments();
    ptr = from_backend();
  }
  if (ptr == nullptr) throw_out_of_memory(nbytes, segment_bytes);
  stats_.device_allocs += 1;
  stats_.reserved_bytes += static_cast<int64_t>(segment_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  if (owner != nullptr) {
    owner->stats.reserved_bytes += static_cast<int64_t>(segment_bytes);
    owner->stats.segments += 1;
  }
  return new Block{ptr, segment_bytes, stream, small, owner};
}

void CachingAllocator::split(Block* block, size_t size) {
  size_t remaining = block->size - size;
  // A small remainder of a large block is not worth a separate block: it could serve only small
  // requests, which the small pool serves anyway, and it would fragment the segment.
  bool worth_it = block->small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (!worth_it) return;
  auto* rest = new Block{static_cast<char*>(block->ptr) + size, remaining, block->stream,
                         block->small, block->owner};
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  pool_of(rest).insert(rest);
}

CachingAllocator::Block* CachingAllocator::merge_into_neighbours(Block* block) {
  // Free neighbours are in a pool keyed by size: take them out before their size changes.
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
    pool_of(prev).erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    pool_of(next).erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  return block;
}

void CachingAllocator::release_free_segments() {
  release_segments_of(small_pool_, nullptr);
  release_segments_of(large_pool_, nullptr);
  // A private pool's only once no graph holds it; the pool itself once it has no segment left.
  for (auto it = private_pools_.begin(); it != private_pools_.end();) {
    PrivatePool* pool = it->second;
    if (pool->holders > 0) {
      ++it;
      continue;
    }
    release_segments_of(pool->small, pool);
    release_segments_of(pool->large, pool);
    if (pool->stats.segments > 0) {
      ++it;
      continue;
    }
    delete pool;
    it = private_pools_.erase(it);
  }
}

void CachingAllocator::release_segments_of(Pool& pool, PrivatePool* owner) {
  for (auto it = pool.begin(); it != pool.end();) {
    Block* block = *it;
    // Free blocks are always merged, so a whole free segment is a block with no neighbours.
    if (block->prev != nullptr || block->next != nullptr) {
      ++it;
      continue;
    }
    backend_.free(block->ptr, block->size);
    stats_.reserved_bytes -= static_cast<int64_t>(block->size);
    stats_.device_frees += 1;
    if (owner != nullptr) {
      owner->stats.reserved_bytes -= static_cast<int64_t>(block->size);
      owner->stats.segments -= 1;
    }
    it = pool.erase(it);
    delete block;
  }
}

void CachingAllocator::on_allocated(Block* block) {
  block->allocated = true;
  if (block->owner != nullptr)
    block->owner->stats.allocated_bytes += static_cast<int64_t>(block->size);
  in_use_.emplace(block->ptr, block);
  stats_.current_bytes += static_cast<int64_t>(block->size);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  stats_.allocations += 1;
  stats_.live_allocations += 1;
  profiler::on_allocate(static_cast<int64_t>(block->size));
}

void CachingAllocator::throw_out_of_memory(size_t nbytes, size_t segment_bytes) const {
  size_t free_bytes = 0, total_bytes = 0;
  backend_.memory_info(&free_bytes, &total_bytes);
  auto bytes = [](size_t n) { return format_bytes(static_cast<int64_t>(n)); };
  std::string segment_note =
      segment_bytes != nbytes ? fmt::format(" (as a segment of {})", bytes(segment_bytes)) : "";
  throw OutOfMemoryError(fmt::format(
      "CUDA out of memory: tried to allocate {}{} on {}, which has {} total and {} free; kiln "
      "holds {} allocated by tensors and {} reserved in all (the rest of the used memory belongs "
      "to other processes or to the CUDA context). Free tensors you no longer need, or use "
      "smaller batches",
      bytes(nbytes), segment_note, backend_.device_name(), bytes(total_bytes), bytes(free_bytes),
      format_bytes(stats_.current_bytes), format_bytes(stats_.reserved_bytes)));
}

}  // namespace kiln::cuda
