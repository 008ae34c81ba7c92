// The CUDA caching allocator's pool logic, on the CPU: a fake segment backend hands out made-up
// addresses (never dereferenced) and can be told to report out of memory, so every rule of the
// pool (size classes, splitting, merging, streams, empty_cache, statistics, the out-of-memory
// retry) is checked exactly, in every build. The same logic on real memory: tests/cuda/.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/cuda_caching_allocator.h"
#include "kiln/kiln.h"

using namespace kiln;
using cuda::CachingAllocator;

namespace {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;
constexpr size_t GiB = size_t{1} << 30;

constexpr CachingAllocator::StreamId kStream1 = 0x1000;
constexpr CachingAllocator::StreamId kStream2 = 0x2000;

class FakeSegments final : public cuda::SegmentBackend {
 public:
  int fail_next = 0;                      // how many coming allocate calls report out of memory
  std::vector<size_t> requested;          // every allocate's size, failed ones included
  std::vector<size_t> freed;              // every free's size
  std::map<std::uintptr_t, size_t> live;  // segments handed out and not freed
  bool bad_free = false;                  // a free of something not live, or with the wrong size

  void* allocate(size_t nbytes) override {
    requested.push_back(nbytes);
    if (fail_next > 0) {
      --fail_next;
      return nullptr;
    }
    std::uintptr_t address = next_;
    // A gap after every segment, so that two segments are never adjacent by accident.
    next_ += (nbytes + MiB - 1) / MiB * MiB + MiB;
    live[address] = nbytes;
    return reinterpret_cast<void*>(address);
  }
  void free(void* ptr, size_t nbytes) noexcept override {
    auto it = live.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == live.end() || it->second != nbytes) {
      bad_free = true;
      return;
    }
    live.erase(it);
    freed.push_back(nbytes);
  }
  std::string device_name() const override { return "cuda:7 (Fake GPU)"; }
  void memory_info(size_t* free_bytes, size_t* total_bytes) const override {
    *free_bytes = 1 * GiB;
    *total_bytes = 80 * GiB;
  }

  std::map<EventId, bool> events;             // recorded and not released: happened yet?
  std::vector<std::uintptr_t> event_streams;  // the stream of every event recorded
  EventId record_event(std::uintptr_t stream) override {
    event_streams.push_back(stream);
    events[next_event_] = false;
    return next_event_++;
  }
  bool event_done(EventId event) override { return events.at(event); }
  void release_event(EventId event) noexcept override { events.erase(event); }
  void finish_work_on(size_t k) { events.at(first_event_ + k) = true; }  // the k-th event recorded

  std::map<std::uintptr_t, uint64_t> captures;  // stream -> the capture it takes part in
  int capture_allocations = 0;                  // segments asked for through allocate_for_capture
  uint64_t capture_of(std::uintptr_t stream) override {
    auto it = captures.find(stream);
    return it == captures.end() ? 0 : it->second;
  }
  void* allocate_for_capture(size_t nbytes) override {
    ++capture_allocations;
    return allocate(nbytes);
  }

 private:
  std::uintptr_t next_ = std::uintptr_t{1} << 40;
  static constexpr EventId first_event_ = 0xE000;
  EventId next_event_ = first_event_;
};

char* as_bytes(void* ptr) {
  return static_cast<char*>(ptr);
}

}  // namespace

TEST_CASE("caching allocator: sizes round up to 512 bytes") {
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::round_size(1000) == 1024);
  CHECK(CachingAllocator::round_size(MiB) == MiB);
  CHECK(CachingAllocator::round_size(MiB + 1) == MiB + 512);
}

TEST_CASE("caching allocator: segment sizes follow the small and large classes") {
  CHECK(CachingAllocator::segment_size(512) == 2 * MiB);
  CHECK(CachingAllocator::segment_size(MiB) == 2 * MiB);         // the largest small request
  CHECK(CachingAllocator::segment_size(MiB + 512) == 20 * MiB);  // mid-size share 20 MiB
  CHECK(CachingAllocator::segment_size(10 * MiB - 512) == 20 * MiB);
  CHECK(CachingAllocator::segment_size(10 * MiB) == 10 * MiB);  // large: rounded to 2 MiB
  CHECK(CachingAllocator::segment_size(10 * MiB + 512) == 12 * MiB);
}

TEST_CASE("caching allocator: a freed block is reused by the same size class") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* first = pool.allocate(1000, kStream1);
  REQUIRE(first != nullptr);
  pool.free(first);
  void* again = pool.allocate(700, kStream1);  // also 1024 bytes once rounded
  CHECK(again == first);
  CHECK(fake.requested == std::vector<size_t>{2 * MiB});
  CHECK(pool.stats().device_allocs == 1);
  pool.free(again);
}

TEST_CASE("caching allocator: small requests share one 2 MiB segment") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* a = pool.allocate(1000, kStream1);
  void* b = pool.allocate(3000, kStream1);
  void* c = pool.allocate(MiB, kStream1);
  CHECK(as_bytes(b) == as_bytes(a) + 1024);
  CHECK(as_bytes(c) == as_bytes(b) + 3072);
  CHECK(fake.requested.size() == 1);
  // 2 MiB - 4 KiB - 1 MiB are left: one more MiB needs a new segment.
  void* d = pool.allocate(MiB, kStream1);
  CHECK(fake.requested.size() == 2);
  for (void* p : {a, b, c, d}) pool.free(p);
}

TEST_CASE("caching allocator: a large segment is split, and merged again on free") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* a = pool.allocate(4 * MiB, kStream1);
  REQUIRE(fake.requested == std::vector<size_t>{20 * MiB});
  void* b = pool.allocate(4 * MiB, kStream1);
  void* c = pool.allocate(12 * MiB, kStream1);  // exactly what is left
  CHECK(as_bytes(b) == as_bytes(a) + 4 * MiB);
  CHECK(as_bytes(c) == as_bytes(a) + 8 * MiB);
  CHECK(fake.requested.size() == 1);

  pool.free(b);  // a hole between two live blocks
  void* b2 = pool.allocate(3 * MiB + 1, kStream1);
  CHECK(b2 == b);  // served from the hole; its 1 MiB rest is too small to split off
  CHECK(pool.stats().current_bytes == static_cast<int64_t>(20 * MiB));

  pool.free(a);
  pool.free(c);
  pool.free(b2);
  // All three merged into the whole segment again: one request for most of it fits.
  void* whole = pool.allocate(18 * MiB, kStream1);
  CHECK(whole == a);
  CHECK(fake.requested.size() == 1);
  pool.free(whole);
  pool.empty_cache();
  CHECK(fake.freed == std::vector<size_t>{20 * MiB});
  CHECK(fake.live.empty());
  CHECK_FALSE(fake.bad_free);
}

TEST_CASE("caching allocator: a large block is not split when the rest is 1 MiB or less") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* a = pool.allocate(5 * MiB, kStream1);
  pool.free(a);
  void* b = pool.allocate(20 * MiB - 512 * KiB, kStream1);
  CHECK(b == a);
  CHECK(pool.stats().current_bytes == static_cast<int64_t>(20 * MiB));  // the whole block
  pool.free(b);
  // With more than 1 MiB left, the rest is its own block.
  void* c = pool.allocate(18 * MiB, kStream1);
  CHECK(pool.stats().current_bytes == static_cast<int64_t>(18 * MiB));
  void* d = pool.allocate(2 * MiB, kStream1);
  CHECK(as_bytes(d) == as_bytes(c) + 18 * MiB);
  CHECK(fake.requested.size() == 1);
  pool.free(c);
  pool.free(d);
}

TEST_CASE("caching allocator: a block freed on one stream is not reused on another") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* small1 = pool.allocate(1000, kStream1);
  void* large1 = pool.allocate(4 * MiB, kStream1);
  pool.free(small1);
  pool.free(large1);
  void* small2 = pool.allocate(1000, kStream2);
  void* large2 = pool.allocate(4 * MiB, kStream2);
  CHECK(small2 != small1);
  CHECK(large2 != large1);
  CHECK(pool.stats().device_allocs == 4);
  // Back on the first stream, its cached blocks serve again.
  CHECK(pool.allocate(1000, kStream1) == small1);
  CHECK(pool.allocate(4 * MiB, kStream1) == large1);
  CHECK(pool.stats().device_allocs == 4);
  for (void* p : {small1, large1, small2, large2}) pool.free(p);
}

TEST_CASE("caching allocator: a block used on another stream waits for that stream's work") {
  // The prefetcher: a side stream writes a buffer, the main stream reads it, the buffer is freed.
  // Without record_stream the next allocation on the side stream takes the block back and
  // overwrites it while the main stream may still be reading.
  constexpr CachingAllocator::StreamId kStream3 = 0x3000;
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* buffer = pool.allocate(1000, kStream1);
  pool.record_stream(buffer, kStream2);
  pool.record_stream(buffer, kStream2);  // once is enough
  pool.record_stream(buffer, kStream1);  // its own stream needs no event
  pool.record_stream(buffer, kStream3);
  pool.free(buffer);
  CHECK(fake.event_streams == std::vector<std::uintptr_t>{kStream2, kStream3});
  CHECK(pool.stats().current_bytes == 0);  // freed for the statistics, as PyTorch counts it

  void* next = pool.allocate(1000, kStream1);
  CHECK(next != buffer);
  pool.free(next);
  fake.finish_work_on(0);  // stream 2's work is done, stream 3's not yet
  next = pool.allocate(1000, kStream1);
  CHECK(next != buffer);
  pool.free(next);
  fake.finish_work_on(1);
  next = pool.allocate(1000, kStream1);
  CHECK(next == buffer);
  CHECK(fake.events.empty());  // every event released
  pool.free(next);
  CHECK(fake.event_streams.size() == 2);  // a block freed without marks records no event
}

TEST_CASE("caching allocator: a capture's allocations come from its private pool") {
  constexpr CachingAllocator::PoolId kPool = 7;
  constexpr uint64_t kCapture = 42;
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* before = pool.allocate(1000, kStream1);  // the default pool's
  pool.free(before);

  fake.captures[kStream1] = kCapture;
  pool.begin_allocate_to_pool(kPool, kCapture);
  CHECK(pool.capturing());
  void* a = pool.allocate(1000, kStream1);
  CHECK(a != before);  // a cached block of the default pool is not the capture's
  CHECK(fake.capture_allocations == 1);
  void* outside = pool.allocate(1000, kStream2);  // a stream outside the capture: the default pool
  CHECK(fake.capture_allocations == 1);
  CHECK(fake.requested.size() == 3);
  CachingAllocator::PoolStats s = pool.pool_stats(kPool);
  CHECK(s.segments == 1);
  CHECK(s.reserved_bytes == static_cast<int64_t>(2 * MiB));
  CHECK(s.allocated_bytes == 1024);
  CHECK(s.holders == 1);
  // Freed during the capture, a block is the capture's to reuse.
  pool.free(a);
  void* b = pool.allocate(1000, kStream1);
  CHECK(b == a);
  // Nothing goes back to the backend while a capture routes here: not at empty_cache, not on an
  // out-of-memory retry (which then fails at once).
  pool.free(outside);
  pool.empty_cache();
  CHECK(fake.freed.empty());
  fake.fail_next = 1;
  CHECK_THROWS_AS(pool.allocate(4 * MiB, kStream1), OutOfMemoryError);
  CHECK(fake.freed.empty());
  CHECK(pool.stats().alloc_retries == 0);

  fake.captures.clear();
  pool.end_allocate_to_pool(kPool);
  CHECK_FALSE(pool.capturing());
  // The pool's blocks serve no one outside it, even on the capture's stream after it.
  void* after = pool.allocate(1000, kStream1);
  CHECK(after == before);
  pool.free(after);
  pool.free(b);  // back to the private pool, which a graph still holds
  pool.empty_cache();
  CHECK(pool.pool_stats(kPool).segments == 1);
  pool.retain_pool(kPool);  // a second graph captured into it
  pool.release_pool(kPool);
  pool.release_pool(kPool);
  CHECK(pool.pool_stats(kPool).holders == 0);
  pool.empty_cache();
  CHECK(pool.pool_stats(kPool).segments == 0);
  CHECK(pool.pool_stats(kPool).reserved_bytes == 0);
  CHECK(pool.stats().reserved_bytes == 0);
  CHECK_THROWS_AS(pool.release_pool(kPool), ValueError);  // gone with its last segment
  CHECK_FALSE(fake.bad_free);
}

TEST_CASE(
    "caching allocator: a block used on another stream and freed in a capture waits after it") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  fake.captures[kStream1] = 9;
  pool.begin_allocate_to_pool(3, 9);
  void* shared = pool.allocate(1000, kStream1);
  pool.record_stream(shared, kStream2);
  pool.free(shared);
  CHECK(fake.event_streams.empty());  // no event recorded (nor queried) during the capture
  CHECK(pool.allocate(1000, kStream1) != shared);
  fake.captures.clear();
  pool.end_allocate_to_pool(3);
  CHECK(fake.event_streams == std::vector<std::uintptr_t>{kStream2});  // recorded at the end
  pool.release_pool(3);
}

TEST_CASE("caching allocator: private pools need ids, and one pool per capture") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  CHECK_THROWS_AS(pool.begin_allocate_to_pool(0, 5), ValueError);
  CHECK_THROWS_AS(pool.begin_allocate_to_pool(5, 0), ValueError);
  pool.begin_allocate_to_pool(5, 1);
  CHECK_THROWS_AS(pool.begin_allocate_to_pool(6, 1), ValueError);
  pool.end_allocate_to_pool(5);
  CHECK_THROWS_AS(pool.retain_pool(99), ValueError);
  CHECK(pool.pool_stats(99).segments == 0);
}

TEST_CASE("caching allocator: a waiting block is not merged, nor its segment given back") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* a = pool.allocate(4 * MiB, kStream1);
  void* b = pool.allocate(4 * MiB, kStream1);
  pool.record_stream(a, kStream2);
  pool.free(a);
  pool.free(b);
  // a still waits: b merged with the rest of the segment only, and nothing can be given back.
  void* c = pool.allocate(16 * MiB, kStream1);
  CHECK(as_bytes(c) == as_bytes(a) + 4 * MiB);
  pool.free(c);
  pool.empty_cache();
  CHECK(fake.freed.empty());
  fake.finish_work_on(0);
  pool.empty_cache();
  CHECK(fake.freed == std::vector<size_t>{20 * MiB});
  CHECK(fake.live.empty());
  CHECK_FALSE(fake.bad_free);
}

TEST_CASE("caching allocator: record_stream of memory it does not hand out is a ValueError") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* a = pool.allocate(1000, kStream1);
  CHECK_THROWS_WITH(
      pool.record_stream(as_bytes(a) + 512, kStream2),
      Catch::Contains("record_stream") && Catch::Contains("not the start of a block"));
  pool.free(a);
  CHECK_THROWS_AS(pool.record_stream(a, kStream2), ValueError);
}

TEST_CASE("caching allocator: caching off frees a block used on other streams at once") {
  // cudaFree waits for the whole device, so no event is needed.
  FakeSegments fake;
  CachingAllocator pool(fake, false);
  void* a = pool.allocate(1000, kStream1);
  pool.record_stream(a, kStream2);
  pool.free(a);
  CHECK(fake.freed == std::vector<size_t>{1000});
  CHECK(fake.event_streams.empty());
}

TEST_CASE("caching allocator: empty_cache frees only wholly free segments") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* kept_small = pool.allocate(1000, kStream1);         // segment A (2 MiB), stays in use
  void* kept_large = pool.allocate(4 * MiB, kStream1);      // segment B (20 MiB), split, in use
  void* dropped = pool.allocate(1000, kStream2);            // segment C (2 MiB), freed below
  void* dropped_large = pool.allocate(12 * MiB, kStream2);  // segment D (12 MiB), freed below
  pool.free(dropped);
  pool.free(dropped_large);
  CHECK(pool.stats().reserved_bytes == static_cast<int64_t>(36 * MiB));
  pool.empty_cache();
  CHECK(fake.freed == std::vector<size_t>{2 * MiB, 12 * MiB});
  CHECK(pool.stats().reserved_bytes == static_cast<int64_t>(22 * MiB));
  CHECK(pool.stats().device_frees == 2);
  CHECK(fake.live.size() == 2);
  pool.free(kept_small);
  pool.free(kept_large);
  pool.empty_cache();
  CHECK(pool.stats().reserved_bytes == 0);
  CHECK(fake.live.empty());
  CHECK_FALSE(fake.bad_free);
}

TEST_CASE("caching allocator: statistics are exact") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  MemoryStats zero = pool.stats();
  CHECK(zero.current_bytes == 0);
  CHECK(zero.reserved_bytes == 0);
  CHECK(zero.allocations == 0);

  void* a = pool.allocate(1000, kStream1);     // 1024 of a 2 MiB segment
  void* b = pool.allocate(4 * MiB, kStream1);  // 4 MiB of a 20 MiB segment
  MemoryStats s = pool.stats();
  CHECK(s.current_bytes == static_cast<int64_t>(4 * MiB + 1024));
  CHECK(s.peak_bytes == s.current_bytes);
  CHECK(s.reserved_bytes == static_cast<int64_t>(22 * MiB));
  CHECK(s.peak_reserved_bytes == static_cast<int64_t>(22 * MiB));
  CHECK(s.allocations == 2);
  CHECK(s.live_allocations == 2);
  CHECK(s.device_allocs == 2);
  CHECK(s.device_frees == 0);
  CHECK(s.alloc_retries == 0);

  pool.free(b);
  s = pool.stats();
  CHECK(s.current_bytes == 1024);
  CHECK(s.peak_bytes == static_cast<int64_t>(4 * MiB + 1024));
  CHECK(s.reserved_bytes == static_cast<int64_t>(22 * MiB));  // cached, still reserved
  CHECK(s.live_allocations == 1);
  CHECK(s.allocations == 2);

  pool.reset_peak();
  s = pool.stats();
  CHECK(s.peak_bytes == 1024);
  CHECK(s.peak_reserved_bytes == static_cast<int64_t>(22 * MiB));

  pool.empty_cache();
  s = pool.stats();
  CHECK(s.reserved_bytes == static_cast<int64_t>(2 * MiB));
  CHECK(s.peak_reserved_bytes == static_cast<int64_t>(22 * MiB));
  CHECK(s.device_frees == 1);
  pool.reset_peak();
  CHECK(pool.stats().peak_reserved_bytes == static_cast<int64_t>(2 * MiB));
  pool.free(a);
  CHECK(pool.stats().current_bytes == 0);
  CHECK(pool.stats().live_allocations == 0);
}

TEST_CASE("caching allocator: zero bytes is a null pointer and counts nothing") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  CHECK(pool.allocate(0, kStream1) == nullptr);
  pool.free(nullptr);
  CHECK(pool.stats().allocations == 0);
  CHECK(fake.requested.empty());
}

TEST_CASE("caching allocator: freeing a pointer it does not own is a ValueError") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* a = pool.allocate(1000, kStream1);
  CHECK_THROWS_AS(pool.free(as_bytes(a) + 512), ValueError);
  CHECK_THROWS_WITH(pool.free(as_bytes(a) + 512), Catch::Contains("did not allocate"));
  pool.free(a);
  CHECK_THROWS_AS(pool.free(a), ValueError);  // twice
}

TEST_CASE("caching allocator: out of memory frees the cache and retries once") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* cached = pool.allocate(1000, kStream1);
  void* live = pool.allocate(1000, kStream2);
  pool.free(cached);  // its 2 MiB segment is now wholly free
  fake.fail_next = 1;
  void* big = pool.allocate(4 * MiB, kStream1);
  CHECK(big != nullptr);
  CHECK(fake.requested == std::vector<size_t>{2 * MiB, 2 * MiB, 20 * MiB, 20 * MiB});
  CHECK(fake.freed == std::vector<size_t>{2 * MiB});  // the cached segment, not the live one
  MemoryStats s = pool.stats();
  CHECK(s.alloc_retries == 1);
  CHECK(s.device_frees == 1);
  CHECK(s.device_allocs == 3);
  CHECK(s.reserved_bytes == static_cast<int64_t>(22 * MiB));
  pool.free(big);
  pool.free(live);
  CHECK_FALSE(fake.bad_free);
}

TEST_CASE("caching allocator: out of memory twice is an OutOfMemoryError that says why") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  void* live = pool.allocate(1000, kStream1);  // 1.00 KiB allocated, 2.00 MiB reserved
  fake.fail_next = 2;
  CHECK_THROWS_AS(pool.allocate(2 * GiB, kStream1), OutOfMemoryError);
  std::string message;
  fake.fail_next = 2;
  try {
    pool.allocate(2 * GiB, kStream1);
  } catch (const OutOfMemoryError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Contains("tried to allocate 2.00 GiB"));
  CHECK_THAT(message, Catch::Contains("cuda:7 (Fake GPU)"));
  CHECK_THAT(message, Catch::Contains("80.00 GiB total"));
  CHECK_THAT(message, Catch::Contains("1.00 GiB free"));
  CHECK_THAT(message, Catch::Contains("1.00 KiB allocated"));
  CHECK_THAT(message, Catch::Contains("2.00 MiB reserved"));
  // Nothing changed but the retry count, and the allocator goes on working.
  MemoryStats s = pool.stats();
  CHECK(s.alloc_retries == 2);
  CHECK(s.live_allocations == 1);
  CHECK(s.reserved_bytes == static_cast<int64_t>(2 * MiB));
  void* after = pool.allocate(1000, kStream1);
  CHECK(as_bytes(after) == as_bytes(live) + 1024);
  pool.free(after);
  pool.free(live);
}

TEST_CASE("caching allocator: the out-of-memory message names the segment a request needed") {
  FakeSegments fake;
  CachingAllocator pool(fake);
  fake.fail_next = 2;
  CHECK_THROWS_WITH(pool.allocate(3 * MiB, kStream1),
                    Catch::Contains("3.00 MiB (as a segment of 20.00 MiB)"));
}

TEST_CASE("caching allocator: caching off gives every allocation and free to the backend") {
  FakeSegments fake;
  CachingAllocator pool(fake, false);
  CHECK_FALSE(pool.caching());
  void* a = pool.allocate(1000, kStream1);
  CHECK(fake.requested == std::vector<size_t>{1000});  // the exact size: no rounding to hide bugs
  CHECK(pool.stats().reserved_bytes == 1000);
  CHECK(pool.stats().current_bytes == 1000);
  pool.free(a);
  CHECK(fake.freed == std::vector<size_t>{1000});
  CHECK(pool.stats().reserved_bytes == 0);
  void* b = pool.allocate(1000, kStream1);
  MemoryStats s = pool.stats();
  CHECK(s.device_allocs == 2);
  CHECK(s.device_frees == 1);
  CHECK(s.peak_reserved_bytes == 1000);
  pool.free(b);
  CHECK(fake.live.empty());
  CHECK_FALSE(fake.bad_free);
}

TEST_CASE("caching allocator: caching off still reports out of memory with the message") {
  FakeSegments fake;
  CachingAllocator pool(fake, false);
  fake.fail_next = 2;
  CHECK_THROWS_AS(pool.allocate(1000, kStream1), OutOfMemoryError);
  CHECK(pool.allocate(1000, kStream1) != nullptr);
  CHECK(pool.stats().live_allocations == 1);
}

TEST_CASE("caching allocator: sizes print in human units") {
  CHECK(cuda::format_bytes(0) == "0 bytes");
  CHECK(cuda::format_bytes(1023) == "1023 bytes");
  CHECK(cuda::format_bytes(1024) == "1.00 KiB");
  CHECK(cuda::format_bytes(1536) == "1.50 KiB");
  CHECK(cuda::format_bytes(static_cast<int64_t>(20 * MiB)) == "20.00 MiB");
  CHECK(cuda::format_bytes(static_cast<int64_t>(2 * GiB)) == "2.00 GiB");
}

TEST_CASE("caching allocator: the CPU allocator reports reserved as allocated") {
  Tensor t = empty({1000}, DType::f32);
  MemoryStats s = memory_stats();
  CHECK(s.reserved_bytes == s.current_bytes);
  CHECK(s.peak_reserved_bytes == s.peak_bytes);
  CHECK(s.device_allocs == s.allocations);
  CHECK(s.device_frees == s.allocations - s.live_allocations);
  CHECK_FALSE(t.is_pinned());
}

TEST_CASE("caching allocator: pinned memory needs a GPU, and pins when there is one") {
  Tensor host = arange(0.0, 10.0, 1.0, DType::f32);
  if (!cuda::is_available()) {
    CHECK_THROWS_AS(host.pin_memory(), DeviceError);
    CHECK_THROWS_AS(empty_pinned({4}), DeviceError);
    return;
  }
  Tensor pinned = host.pin_memory();
  CHECK(pinned.is_pinned());
  CHECK(pinned.device() == Device::cpu());
  CHECK(equal(pinned, host));
  CHECK(pinned.pin_memory().is_same(pinned));
}

TEST_CASE("caching allocator: without a GPU the runtime says so") {
  if (cuda::is_available()) {
    CHECK(cuda::device_count() >= 1);
    return;
  }
  CHECK(cuda::device_count() == 0);
  CHECK_THROWS_AS(cuda::current_stream(), DeviceError);
  CHECK_THROWS_AS(cuda::DeviceGuard(0), DeviceError);
  CHECK_THROWS_AS(cuda::memory_allocated(), DeviceError);
  CHECK_THROWS_AS(cuda::get_device_properties(0), DeviceError);
  cuda::empty_cache();  // nothing to free: not an error, as torch.cuda.empty_cache
  cuda::Event event;
  CHECK_FALSE(event.is_recorded());
}
