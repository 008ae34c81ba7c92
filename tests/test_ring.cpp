// kiln's ring all-reduce over a recording fake network (tests/support/recording_network.h), which
// pairs sends and receives as NCCL does: per pair of ranks, in posting order, tags ignored, a
// 0-byte message a message. So this checks what the Gloo tests of tests/test_dist.cpp cannot see
// (Gloo drops 0-byte messages): every send a rank posts has its receive on the neighbour, same
// size, same order, for every rank count from 2 to 8 and sizes on both sides of every place where
// a chunk's length crosses a multiple of the segment. Inputs are small integers, so sums are
// exact and the results are compared bit for bit: rank r's element i is (r + 1) * (i % 7) - 3r.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dist_ranks.h"
#include "kiln/dist/ring.h"
#include "kiln/kiln.h"
#include "recording_network.h"

using namespace kiln;
using kiln::dist::ReduceOp;
using kiln::testing::expected_reduction;
using kiln::testing::rank_input;
using kiln::testing::RecordingGroup;
using kiln::testing::RecordingNetwork;

namespace {

struct RingRun {
  std::vector<Tensor> results;      // each rank's tensor after the all-reduce
  std::vector<std::string> errors;  // each rank's exception, empty when none
};

// Every rank of `network` runs ring_all_reduce on its own thread.
RingRun run_ring(RecordingNetwork& network, int64_t numel, DType dtype, ReduceOp op,
                 int64_t segment_bytes) {
  const int n = network.ranks();
  RingRun run{std::vector<Tensor>(n), std::vector<std::string>(n)};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        RecordingGroup group(network, r);
        Tensor t = rank_input(r, numel, dtype);
        dist::ring_all_reduce(group, t, op, dist::RingOptions{.segment_bytes = segment_bytes});
        run.results[r] = t;
      } catch (const std::exception& e) {
        run.errors[r] = e.what();
        network.fail(e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return run;
}

// The first pair of ranks whose sends and receives do not pair one for one, or "".
std::string first_unpaired(const RecordingNetwork& network) {
  for (int from = 0; from < network.ranks(); ++from) {
    for (int to = 0; to < network.ranks(); ++to) {
      const std::vector<int64_t> sent = network.sizes(from, to, true);
      const std::vector<int64_t> received = network.sizes(from, to, false);
      if (sent == received) continue;
      size_t k = 0;
      while (k < sent.size() && k < received.size() && sent[k] == received[k]) ++k;
      return "rank " + std::to_string(from) + " posts " + std::to_string(sent.size()) +
             " sends to rank " + std::to_string(to) + ", which posts " +
             std::to_string(received.size()) + " receives; they part at message #" +
             std::to_string(k);
    }
  }
  return "";
}

// Chunk c of n over numel elements, as the ring cuts the buffer.
int64_t chunk_length(int64_t numel, int n, int c) {
  return numel * (c + 1) / n - numel * c / n;
}

int64_t bytes_sent(const RecordingNetwork& network, int rank) {
  int64_t total = 0;
  for (const testing::PostedMessage& m : network.posted(rank))
    if (m.send) total += m.bytes;
  return total;
}

// Sizes on both sides of each place where the chunk length floor(numel / n) becomes a multiple of
// the segment: there some chunks fill their last segment exactly and the others spill one element
// into a new one. The sizes below n leave chunks empty.
std::vector<int64_t> sizes_across_chunk_boundaries(int n, int64_t segment) {
  std::set<int64_t> sizes;
  for (int64_t k = 0; k <= 3; ++k)
    for (int64_t d = -n; d <= n; ++d)
      if (k * n * segment + d >= 0) sizes.insert(k * n * segment + d);
  return {sizes.begin(), sizes.end()};
}

}  // namespace

TEST_CASE("ring: every send has its receive, in order and of its size, for 2 to 8 ranks") {
  for (int n = 2; n <= 8; ++n) {
    // 6 bytes of f32 is one element a segment, as 4 is.
    for (int64_t segment_bytes : {4, 6, 8, 12, 40}) {
      const int64_t segment = std::max<int64_t>(1, segment_bytes / 4);
      for (int64_t numel : sizes_across_chunk_boundaries(n, segment)) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
          INFO(n << " ranks, " << numel << " f32, " << segment_bytes << "-byte segments, "
                 << (op == ReduceOp::sum ? "sum" : "max"));
          RecordingNetwork network(n);
          const RingRun run = run_ring(network, numel, DType::f32, op, segment_bytes);
          REQUIRE(first_unpaired(network) == "");
          for (int r = 0; r < n; ++r) {
            INFO("rank " << r);
            REQUIRE(run.errors[r] == "");
            REQUIRE(equal(run.results[r], expected_reduction(n, numel, DType::f32, op)));
            // Each chunk but one per phase leaves each rank once: (n - 1) chunks of the
            // reduce-scatter (all but r + 1) and of the all-gather (all but r + 2).
            const int64_t elements = 2 * numel - chunk_length(numel, n, (r + 1) % n) -
                                     chunk_length(numel, n, (r + 2) % n);
            REQUIRE(bytes_sent(network, r) == elements * 4);
          }
        }
      }
    }
  }
}

TEST_CASE("ring: the review's case, 4 ranks, 1001 f32 in 40-byte segments") {
  // Chunks of 250, 250, 250 and 251 elements, 10 a segment. Counting a step's segments from both
  // of its chunks made rank 0 post 154 sends to rank 1, which posted 153 receives.
  RecordingNetwork network(4);
  const RingRun run = run_ring(network, 1001, DType::f32, ReduceOp::sum, 40);
  CHECK(first_unpaired(network) == "");
  // Rank 0 sends chunks 0, 3, 2 (25, 26, 25 segments), then 1, 0, 3 (25, 25, 26).
  CHECK(network.sizes(0, 1, true).size() == 152);
  CHECK(network.sizes(0, 1, false).size() == 152);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(run.errors[r] == "");
    CHECK(equal(run.results[r], expected_reduction(4, 1001, DType::f32, ReduceOp::sum)));
  }
}

TEST_CASE("ring: integer and f64 buffers, and an average, pair the same way") {
  for (DType dtype : {DType::i64, DType::f64}) {
    INFO(dtype_name(dtype));
    RecordingNetwork network(5);
    const RingRun run = run_ring(network, 203, dtype, ReduceOp::sum, 16);
    CHECK(first_unpaired(network) == "");
    for (int r = 0; r < 5; ++r)
      CHECK(equal(run.results[r], expected_reduction(5, 203, dtype, ReduceOp::sum)));
  }
  RecordingNetwork network(4);
  const RingRun run = run_ring(network, 41, DType::f64, ReduceOp::average, 24);
  CHECK(first_unpaired(network) == "");
  // A sum of integers divided by 4 is exact in f64.
  const Tensor want = div(expected_reduction(4, 41, DType::f64, ReduceOp::sum), 4.0);
  for (int r = 0; r < 4; ++r) CHECK(equal(run.results[r], want));
}

TEST_CASE("ring: a send that throws still ends the step's point-to-point batch") {
  // Left open, the batch would swallow every later operation of the thread (on NCCL, an
  // ncclGroupStart without its ncclGroupEnd): the caller that catches the error and goes on would
  // wait on collectives that never run.
  RecordingNetwork network(2);
  RecordingGroup group(network, 0);
  group.fail_sends = true;
  Tensor t = rank_input(0, 100, DType::f32);
  CHECK_THROWS_WITH(
      dist::ring_all_reduce(group, t, ReduceOp::sum, dist::RingOptions{.segment_bytes = 40}),
      Catch::Contains("this send fails"));
  CHECK(group.open_batches == 0);
}
