// CUDA graphs, as torch.cuda.CUDAGraph and torch.cuda.graph: the GPU work of a function (a whole
// training step) is captured once on a side stream and then replayed with one launch, which
// spares the host the per-kernel launch cost. Every build has these: without a GPU, capture()
// throws a DeviceError that says so.
//
//   cuda::CUDAGraph graph;
//   graph.capture([&] { static_loss = train_step(static_x, static_y); });  // records, runs nothing
//   for (...) {
//     static_x.copy_(next_x), static_y.copy_(next_y);  // new inputs into the same memory
//     graph.replay();                                  // the whole step, on the current stream
//   }
//
// What a graph holds, as in PyTorch:
// - Fixed addresses. The tensors the captured work reads (inputs, parameters) and makes (outputs,
//   gradients, optimizer state) are the same memory at every replay: copy new inputs into the
//   static inputs before replay() and read the outputs after it. Memory allocated during the
//   capture comes from a private pool of the caching allocator that the graph keeps alive (and
//   reuses at every replay without allocating); graphs may share one (graph_pool_handle()).
// - No host synchronisation: while capturing, an op that would wait for the GPU or read a value
//   back (item(), cpu(), a synchronize, a copy between host and GPU, a GradScaler or optimizer
//   deciding on the host) throws a GraphCaptureError naming the op, and the capture is abandoned:
//   no graph, the stream as it was, the pool given back. kiln's capturable paths keep those
//   decisions on the GPU (the GradScaler and the optimizers with `capturable`).
// - No random numbers: dropout and the random factories on the GPU are refused during a capture,
//   since the offset into the Philox stream would be frozen into the graph and every replay would
//   draw the same numbers (PyTorch registers generator state with the graph instead; kiln does not
//   yet).
// - Warm up first: run the function eagerly a few times on the capture's stream before capturing,
//   as PyTorch's documentation asks, so that what is made lazily (optimizer state, the GradScaler's
//   device state, cuBLAS and cuDNN workspaces, autocast's weight casts) exists before the capture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kiln/core/cuda.h"

struct CUgraphExec_st;

namespace kiln::cuda {

// A memory pool of the caching allocator for graphs (torch.cuda.graph_pool_handle()): graphs
// captured into the same pool share its memory, which suits graphs replayed one after another in
// the order they were captured. The default (id 0) gives each graph a pool of its own.
struct GraphPool {
  uint64_t id = 0;
  bool operator==(const GraphPool&) const = default;
};
GraphPool graph_pool_handle();

// Which calls CUDA refuses while the capture runs (cudaStreamCaptureMode): the potentially unsafe
// ones (cudaMalloc, synchronous copies, event queries) from the capturing thread only (`thread`,
// kiln's default: DataLoader workers allocating pinned memory go on), from any thread (`global`,
// PyTorch's default), or none (`relaxed`).
enum class CaptureMode { global, thread, relaxed };

struct CaptureOptions {
  // The stream to capture on, of the current device; none: one kept for captures, per device (the
  // default stream cannot capture).
  std::optional<Stream> stream{};
  GraphPool pool{};
  CaptureMode mode = CaptureMode::thread;
};

// The private pool's figures (the caching allocator's, for the blocks of one pool).
struct GraphPoolStats {
  int64_t allocated_bytes = 0;  // in blocks handed out from it and not freed
  int64_t reserved_bytes = 0;   // in its segments
  int64_t segments = 0;
  int64_t graphs = 0;  // graphs (and captures under way) holding it
};
// Zeros for a pool that no longer exists (its last graph was reset and its memory given back).
GraphPoolStats graph_pool_stats(GraphPool pool, int device = -1);

class CUDAGraph {
 public:
  CUDAGraph() = default;
  ~CUDAGraph();  // reset()
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  // Captures the GPU work `work` queues from this thread on the current device: the capture's
  // stream is made current for the call (after it has waited for the current stream), and the
  // allocations it makes come from the graph's pool. An exception from `work` (a refused op
  // among them) abandons the capture and is rethrown; an error CUDA reports at the end (work
  // queued on a stream that was never joined back, a capture invalidated by a call kiln did not
  // see) throws a GraphCaptureError. Throws when this graph already holds one (reset() first) or
  // another capture runs on this thread.
  void capture(const std::function<void()>& work, const CaptureOptions& options = {});
  // The same in two halves, as PyTorch's capture_begin and capture_end: between them the capture's
  // stream is the current stream of this thread. When the work between them throws, reset()
  // abandons the capture (capture() does that itself).
  void capture_begin(const CaptureOptions& options = {});
  void capture_end();

  // Launches the graph on the current stream of its device: ordered after the work queued there
  // before (the copies into the static inputs), and before the work queued after (reading the
  // outputs). Throws GraphCaptureError when nothing was captured.
  void replay();
  // Drops the graph, or abandons a capture under way, and gives its pool back (memory of the
  // pool's tensors still alive stays until they go). The graph may capture again.
  void reset();

  bool has_graph() const { return exec_ != nullptr; }
  bool capturing() const { return capturing_; }  // between capture_begin and capture_end
  GraphPool pool() const { return pool_; }
  int device() const { return device_; }
  std::size_t num_nodes() const { return nodes_; }  // kernels, copies, sets, library calls

 private:
  void abandon() noexcept;

  CUgraphExec_st* exec_ = nullptr;
  GraphPool pool_;
  int device_ = -1;
  std::size_t nodes_ = 0;
  bool capturing_ = false;
  std::optional<Stream> stream_;    // the capture's
  std::optional<Stream> previous_;  // the current stream before capture_begin
};

// Whether this thread is capturing a CUDA graph (CUDAGraph) on `device`'s current stream; -1: on
// any device (torch.cuda.is_current_stream_capturing).
bool is_current_stream_capturing(int device = -1);

// Throws GraphCaptureError when this thread is capturing a CUDA graph: for the calls a graph
// cannot hold. `what` says what the call would do ("a copy of 4 bytes from cuda:0 to the host,
// which waits for the GPU"); the error names the op running (core/op_name.h).
void check_not_capturing(const std::string& what);

}  // namespace kiln::cuda
