// kiln's ring all-reduce over NCCL's point-to-point (the model's strict pairing: per peer, in
// posting order, 0-byte messages included) against the backend's all-reduce of the same input:
// sizes around every chunk and segment boundary, every dtype, sum, max and average. The review of
// 2026-11-25 (A1) found the ring posting one more send than its neighbour's receives when a chunk
// length is a multiple of the segment; those shapes are here.
#include <cstdint>
#include <string>
#include <vector>

#include "job.h"
#include "kiln/dist/process_group.h"
#include "kiln/dist/ring.h"
#include "kiln/kiln.h"

namespace nccl_job {

using namespace kiln;
using dist::ReduceOp;

namespace {

void check_ring(dist::ProcessGroup& g, int64_t numel, int64_t segment_bytes, DType dtype,
                ReduceOp op) {
  const std::string what = "ring of " + std::to_string(numel) + " " + dtype_name(dtype) +
                           " in segments of " + std::to_string(segment_bytes) + " bytes, " +
                           (op == ReduceOp::sum   ? "sum"
                            : op == ReduceOp::max ? "max"
                                                  : "average");
  const Tensor input = rank_input(g.rank(), numel, dtype).to(gpu());
  const Tensor want = input.clone();
  g.all_reduce(want, op);
  const Tensor got = input.clone();
  dist::ring_all_reduce(g, got, op, {.segment_bytes = segment_bytes});
  if (op == ReduceOp::average) {
    // Both divide a sum that is exact; the model divides in float, the ring in the dtype.
    const double rtol = dtype == DType::bf16 ? 8e-3 : dtype == DType::f16 ? 1e-3 : 1e-6;
    expect_close(got, want, rtol, 0.0, what);
  } else {
    expect_equal(got, want, what);
  }
}

}  // namespace

void ring() {
  dist::ProcessGroup& g = dist::default_group();
  const int n = g.size();
  // Chunk lengths q and q + 1 around 1 and 2 segments, with every remainder of the split.
  for (int64_t segment : {int64_t{1}, int64_t{3}, int64_t{8}})
    for (int64_t q :
         {segment - 1, segment, segment + 1, 2 * segment - 1, 2 * segment, 2 * segment + 1})
      for (int64_t extra = 0; extra < n; ++extra)
        for (DType dtype : {DType::f32, DType::i64}) {
          const int64_t size = static_cast<int64_t>(dtype_size(dtype));
          check_ring(g, q * n + extra, segment * size, dtype, ReduceOp::sum);
        }
  // Every dtype the ring takes, and every op, at sizes below, at and above the rank count.
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64})
    for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{n + 1}, int64_t{1001}})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::average}) {
        if (op == ReduceOp::average && !is_floating(dtype)) continue;
        check_ring(g, numel, 2 * static_cast<int64_t>(dtype_size(dtype)), dtype, op);
      }
  // The review's shapes: 1001 f32 in 40-byte segments (154 sends from rank 0 to rank 1 against
  // 153 receives on 4 ranks), and 3 x 2^18 + 1 f32 in the default 1 MiB segments on 3 ranks.
  check_ring(g, 1001, 40, DType::f32, ReduceOp::sum);
  if (n == 3)
    check_ring(g, 3 * (int64_t{1} << 18) + 1, int64_t{1} << 20, DType::f32, ReduceOp::sum);
}

}  // namespace nccl_job
