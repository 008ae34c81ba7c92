#include "kiln/dist/ring.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/core/memory_format.h"
#include "kiln/core/profiler.h"
#include "kiln/core/tensor.h"
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

// The messages of one chunk: one per `segment` elements, none for an empty chunk. The sender and
// the receiver of a chunk count them from that chunk alone, so both post the same messages.
// Counting from both chunks a rank touches in a step (the one it sends and the one it receives,
// which differ by one element when the buffer does not split evenly) made a rank post one more send
// than its neighbour posted receives; Gloo drops a 0-byte message, but NCCL pairs each send with
// the peer's receive in posting order, whatever the tag, and a 0-byte message is a real
// synchronisation there.
int64_t segments_of(int64_t length, int64_t segment) {
  return (length + segment - 1) / segment;
}

// Ends the point-to-point batch of a ring step on every way out: an exception thrown while
// posting (a failed check, a dead peer) must not leave the group open, or the backend would queue
// every later operation of this thread into it.
class PointToPointBatch {
 public:
  explicit PointToPointBatch(ProcessGroup& group) : group_(group) { group_.begin_point_to_point(); }
  ~PointToPointBatch() {
    if (open_) {
      try {
        group_.end_point_to_point();
      } catch (...) {  // unwinding already: the first error is the one to report
      }
    }
  }
  void end() {
    open_ = false;
    group_.end_point_to_point();
  }
  PointToPointBatch(const PointToPointBatch&) = delete;
  PointToPointBatch& operator=(const PointToPointBatch&) = delete;

 private:
  ProcessGroup& group_;
  bool open_ = true;
};

// One ring step: send chunk `send_chunk` to the right, receive chunk `recv_chunk` from the left,
// segment by segment. With `reduce`, each received segment is combined into the local chunk as it
// arrives; without, it lands on the local chunk directly.
void ring_step(ProcessGroup& group, Tensor flat, const Tensor& scratch, int send_chunk,
               int recv_chunk, bool reduce, ReduceOp op, int64_t segment, uint32_t tag) {
  const int n = group.size(), right = wrap(group.rank() + 1, n), left = wrap(group.rank() - 1, n);
  const Span out = chunk_span(flat.numel(), n, send_chunk);
  const Span in = chunk_span(flat.numel(), n, recv_chunk);

  // Receives first, so a neighbour's sends find them posted; all of the step in one batch.
  std::vector<std::shared_ptr<Work>> receives, sends;
  std::vector<Span> pieces;
  PointToPointBatch batch(group);
  for (int64_t s = 0; s < segments_of(in.length, segment); ++s) {
    const int64_t begin = s * segment;
    const Span piece{in.begin + begin, std::min(in.length, begin + segment) - begin};
    pieces.push_back(piece);
    const Tensor target =
        reduce ? scratch.narrow(0, begin, piece.length) : flat.narrow(0, piece.begin, piece.length);
    receives.push_back(group.recv_async(target, left, tag + static_cast<uint32_t>(s)));
  }
  for (int64_t s = 0; s < segments_of(out.length, segment); ++s) {
    const int64_t begin = s * segment;
    const int64_t length = std::min(out.length, begin + segment) - begin;
    sends.push_back(group.send_async(flat.narrow(0, out.begin + begin, length), right,
                                     tag + static_cast<uint32_t>(s)));
  }
  batch.end();
  for (size_t s = 0; s < receives.size(); ++s) {
    receives[s]->wait();
    if (!reduce) continue;
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
  MemoryFormat format = MemoryFormat::contiguous;
  KILN_CHECK(tensor.defined() && dense_format(tensor, &format), ValueError,
             "ring_all_reduce: expected a tensor whose elements fill one block of memory "
             "(contiguous or channels-last), got {}",
             describe(tensor));
  KILN_CHECK(op != ReduceOp::average || is_floating(tensor.dtype()), DTypeError,
             "ring_all_reduce: an average needs a floating-point tensor, got {}",
             dtype_name(tensor.dtype()));
  KILN_CHECK(options.segment_bytes > 0, ValueError,
             "ring_all_reduce: segment_bytes must be positive, got {}", options.segment_bytes);
  NoGradGuard no_grad;
  profiler::OpScope event("dist::ring_all_reduce", {&tensor},
                          tensor.numel() * static_cast<int64_t>(dtype_size(tensor.dtype())));
  const int n = group.size(), r = group.rank();
  // The elements as the flat array they fill, in memory order: every rank reduces element i of its
  // array with element i of the others', which is the same element when their layouts agree (DDP
  // checks that the ranks' models do).
  Tensor flat =
      make_tensor(tensor.storage(), {tensor.numel()}, {1}, tensor.offset(), tensor.dtype());
  const int64_t segment = std::max<int64_t>(
      1, options.segment_bytes / static_cast<int64_t>(dtype_size(tensor.dtype())));
  // The largest chunk, for the segments received before they are added.
  const Tensor scratch =
      empty({chunk_span(flat.numel(), n, n - 1).length + 1}, tensor.dtype(), tensor.device());
  // Tags for every message of this call, the same on every rank (they reserve in the same order).
  const uint32_t tags = static_cast<uint32_t>(
      std::max<int64_t>(1, segments_of(chunk_span(flat.numel(), n, n - 1).length, segment)));
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
