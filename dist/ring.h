// kiln's ring all-reduce, written to be read (after Patarasuk and Yuan's bandwidth-optimal
// all-reduce, the algorithm inside NCCL and Gloo's ring). n ranks stand in a ring; each sends to
// its right neighbour and receives from its left. The buffer is cut into n chunks.
//
//   reduce-scatter, n - 1 steps: at step s rank r sends chunk (r - s) mod n and receives chunk
//     (r - s - 1) mod n, which it adds into its own copy. Each chunk travels once around the ring,
//     gathering one more rank's contribution at each hop, so after n - 1 steps rank r holds the
//     full reduction of chunk (r + 1) mod n.
//   all-gather, n - 1 steps: at step s rank r sends chunk (r + 1 - s) mod n, finished, and
//     receives chunk (r - s) mod n over its own copy. After n - 1 steps every rank has every
//     finished chunk.
//
// Every rank sends 2 (n - 1) / n of the buffer whatever n is, which is why a ring's bus bandwidth
// (nccl-tests' busbw = bytes / time x 2 (n - 1) / n) is the link's. Each chunk is cut again into
// segments that pipeline: all of a step's receives are posted at once, and a segment is added as
// soon as it arrives while the next are still on the wire.
//
// It runs over any ProcessGroup's send/recv (Gloo's TCP pairs on CPUs, NCCL's point-to-point on
// GPUs), with the additions done by kiln's own ops on the tensor's device.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/dist/process_group.h"

namespace kiln::dist {

struct RingOptions {
  // Bytes per pipelined segment: small enough that a step's first additions start early, large
  // enough that each message amortises its latency.
  int64_t segment_bytes = int64_t{1} << 20;
};

// `tensor` (contiguous, on the group's device) becomes the reduction over every rank's, as
// group.all_reduce(tensor, op) does; sum, average (a sum divided by the world size) or max.
void ring_all_reduce(ProcessGroup& group, const Tensor& tensor, ReduceOp op = ReduceOp::sum,
                     RingOptions options = {});

}  // namespace kiln::dist
