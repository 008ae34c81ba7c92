#include "kiln/dist/ring.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"

namespace kiln::dist {

namespace {

// Chunk c of n over `numel` elements: [c * numel / n, (c + 1) * numel / n), so chunk sizes differ
// by at most one element and a buffer smaller than n leaves some chunks empty.
struct Span {
  int64_t begin, length;
};

Span chunk_span(int64_t numel, int n, int c) {
  const int64_t begin = numel * c / n, end = numel * (c + 1) / n;
  return {begin, end - begin};
}

int wrap(int r, int n) {
  return ((r % n) + n) % n;
}

// One ring step: send chunk `send_chunk` to the right, receive chunk `recv_chunk` from the left,
// segment by segment. With `reduce`, each received segment is combined into the local chunk as it
// arrives; without, it lands on the local chunk directly.
void ring_step(ProcessGroup& group, Tensor flat, const Tensor& scratch, int send_chunk,
               int recv_chunk, bool reduce, ReduceOp op, int64_t segment, uint32_t tag) {
  const int n = group.size(), right = wrap(group.rank() + 1, n), left = wrap(group.rank() - 1, n);
  const Span out = chunk_span(flat.numel(), n, send_chunk);
  const Span in = chunk_span(flat.numel(), n, recv_chunk);
  const int64_t segments =
      std::max<int64_t>(1, (std::max(out.length, in.length) + segment - 1) / segment);

  // Receives first, so a neighbour's sends find them posted; all of the step in one batch.
  std::vector<std::shared_ptr<Work>> receives, sends;
  group.begin_point_to_point();
  std::vector<Span> pieces;
  for (int64_t s = 0; s < segments; ++s) {
    const int64_t begin = std::min(in.length, s * segment);
    const Span piece{in.begin + begin, std::min(in.length, begin + segment) - begin};
    pieces.push_back(piece);
    const Tensor target =
        reduce ? scratch.narrow(0, begin, piece.length) : flat.narrow(0, piece.begin, piece.length);
    receives.push_back(group.recv_async(target, left, tag + static_cast<uint32_t>(s)));
  }
  for (int64_t s = 0; s < segments; ++s) {
    const int64_t begin = std::min(out.length, s * segment);
    const int64_t length = std::min(out.length, begin + segment) - begin;
    sends.push_back(group.send_async(flat.narrow(0, out.begin + begin, length), right,
                                     tag + static_cast<uint32_t>(s)));
  }
  group.end_point_to_point();
  for (int64_t s = 0; s < segments; ++s) {
    receives[s]->wait();
    if (!reduce || pieces[s].length == 0) continue;
    Tensor mine = flat.narrow(0, pieces[s].begin, pieces[s].length);
    const Tensor theirs = scratch.narrow(0, pieces[s].begin - in.begin, pieces[s].length);
    if (op == ReduceOp::max)
      mine.copy_(maximum(mine, theirs));
    else
      mine.add_(theirs);
  }
  for (const auto& w : sends) w->wait();
}

}  // namespace

void ring_all_reduce(ProcessGroup& group, const Tensor& tensor, ReduceOp op, RingOptions options) {
  KILN_CHECK(tensor.defined() && tensor.is_contiguous(), ValueError,
             "ring_all_reduce: expected a contiguous tensor, got {}", describe(tensor));
  KILN_CHECK(op != ReduceOp::average || is_floating(tensor.dtype()), DTypeError,
             "ring_all_reduce: an average needs a floating-point tensor, got {}",
             dtype_name(tensor.dtype()));
  KILN_CHECK(options.segment_bytes > 0, ValueError,
             "ring_all_reduce: segment_bytes must be positive, got {}", options.segment_bytes);
  NoGradGuard no_grad;
  profiler::OpScope event("dist::ring_all_reduce", {&tensor},
                          tensor.numel() * static_cast<int64_t>(dtype_size(tensor.dtype())));
  const int n = group.size(), r = group.rank();
  Tensor flat = tensor.view({tensor.numel()});
  const int64_t segment = std::max<int64_t>(
      1, options.segment_bytes / static_cast<int64_t>(dtype_size(tensor.dtype())));
  // The largest chunk, for the segments received before they are added.
  const Tensor scratch =
      empty({chunk_span(flat.numel(), n, n - 1).length + 1}, tensor.dtype(), tensor.device());
  // Tags for every message of this call, the same on every rank (they reserve in the same order).
  const int64_t max_segments =
      std::max<int64_t>(1, (chunk_span(flat.numel(), n, n - 1).length + segment) / segment + 1);
  const uint32_t tags = static_cast<uint32_t>(max_segments);
  const uint32_t base = group.reserve_tags(tags * 2 * static_cast<uint32_t>(std::max(n - 1, 1)));

  for (int s = 0; s < n - 1; ++s)
    ring_step(group, flat, scratch, wrap(r - s, n), wrap(r - s - 1, n), true, op, segment,
              base + tags * s);
  for (int s = 0; s < n - 1; ++s)
    ring_step(group, flat, scratch, wrap(r + 1 - s, n), wrap(r - s, n), false, op, segment,
              base + tags * (n - 1 + s));
  if (op == ReduceOp::average) flat.div_(static_cast<double>(n));
}

}  // namespace kiln::dist
