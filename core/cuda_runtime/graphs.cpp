// CUDA graphs of a build with CUDA (core/cuda_graph.h): CUDAGraph's capture on a side stream with
// the caching allocator routing the capture's allocations to a private pool, instantiation, replay,
// and the check that refuses, naming the op, what a graph cannot hold.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/cuda_runtime/internal.h"
#include "kiln/core/error.h"
#include "kiln/core/op_name.h"

namespace kiln::cuda {

namespace {

// The capture this thread is running, if any: kiln's checks refuse what it cannot hold.
struct ThreadCapture {
  const CUDAGraph* graph = nullptr;
  int device = -1;
};
ThreadCapture& this_thread() {
  thread_local ThreadCapture capture;
  return capture;
}

std::atomic<uint64_t> next_pool{1};

cudaStreamCaptureMode to_cuda(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::global:
      return cudaStreamCaptureModeGlobal;
    case CaptureMode::thread:
      return cudaStreamCaptureModeThreadLocal;
    case CaptureMode::relaxed:
      return cudaStreamCaptureModeRelaxed;
  }
  return cudaStreamCaptureModeGlobal;
}

// The stream captures use when the caller names none, one per device: a pool stream (the legacy
// default stream cannot capture), the same one every time, as PyTorch keeps one capture stream.
Stream default_capture_stream(int device) {
  constexpr int kMaxDevices = 64;
  static std::mutex mutex;
  static std::array<std::optional<Stream>, kMaxDevices> streams;
  KILN_CHECK(device < kMaxDevices, DeviceError, "CUDAGraph: device cuda:{} (at most {})", device,
             kMaxDevices);
  std::lock_guard<std::mutex> lock(mutex);
  std::optional<Stream>& stream = streams[static_cast<size_t>(device)];
  if (!stream) stream = Stream::create(device);
  return *stream;
}

std::string cuda_error(cudaError_t status) {
  return fmt::format("{} ({})", cudaGetErrorName(status), cudaGetErrorString(status));
}

}  // namespace

GraphPool graph_pool_handle() {
  return {next_pool.fetch_add(1)};
}

GraphPoolStats graph_pool_stats(GraphPool pool, int device) {
  device = detail::resolve("cuda::graph_pool_stats", device);
  const CachingAllocator::PoolStats s = detail::pool_stats(device, pool.id);
  return {s.allocated_bytes, s.reserved_bytes, s.segments, s.holders};
}

bool is_current_stream_capturing(int device) {
  const ThreadCapture& capture = this_thread();
  return capture.graph != nullptr && (device < 0 || device == capture.device);
}

void check_not_capturing(const std::string& what) {
  const ThreadCapture& capture = this_thread();
  if (capture.graph == nullptr) return;
  const char* outer = OpNameScope::outermost();
  const char* inner = OpNameScope::innermost();
  std::string op = outer == nullptr ? std::string("a call outside kiln's ops") : outer;
  if (outer != nullptr && inner != nullptr && std::strcmp(inner, outer) != 0)
    op += fmt::format(" (in {})", inner);
  throw GraphCaptureError(fmt::format(
      "{}: {} while this thread captures a CUDA graph on cuda:{}; a graph cannot hold that, so "
      "the capture fails. Keep host reads and synchronisations out of the captured work: copy new "
      "inputs into the graph's static tensors before replay() and read results after it",
      op, what, capture.device));
}

CUDAGraph::~CUDAGraph() {
  reset();
}

void CUDAGraph::capture(const std::function<void()>& work, const CaptureOptions& options) {
  capture_begin(options);
  try {
    work();
  } catch (...) {
    abandon();
    throw;
  }
  capture_end();
}

void CUDAGraph::capture_begin(const CaptureOptions& options) {
  KILN_CHECK(!capturing_, GraphCaptureError,
             "CUDAGraph::capture_begin: this graph is capturing already (capture_end first)");
  KILN_CHECK(exec_ == nullptr, GraphCaptureError,
             "CUDAGraph::capture_begin: this graph holds a captured graph already (reset() it to "
             "capture again)");
  KILN_CHECK(this_thread().graph == nullptr, GraphCaptureError,
             "CUDAGraph::capture_begin: another CUDAGraph is capturing on this thread (captures "
             "do not nest)");
  const int device = current_device();
  KILN_CHECK(detail::caching_allocator_enabled(), GraphCaptureError,
             "CUDAGraph::capture_begin: the caching allocator is off (KILN_CUDA_CACHING_ALLOCATOR="
             "0), and a graph needs its private memory pool");
  const Stream stream = options.stream ? *options.stream : default_capture_stream(device);
  KILN_CHECK(!stream.is_default(), GraphCaptureError,
             "CUDAGraph::capture_begin: the default stream cannot capture; pass a stream from "
             "cuda::Stream::create() or none");
  KILN_CHECK(stream.device() == device, GraphCaptureError,
             "CUDAGraph::capture_begin: the stream is on cuda:{} but the current device is cuda:{}",
             stream.device(), device);
  // As torch.cuda.graph: the work queued so far (the static inputs' copies) is done before the
  // capture, whose stream runs apart from the current one.
  synchronize(device);
  const Stream previous = current_stream(device);
  set_current_stream(stream);
  const cudaError_t begun = cudaStreamBeginCapture(stream.handle(), to_cuda(options.mode));
  if (begun != cudaSuccess) {
    cudaGetLastError();
    set_current_stream(previous);
    throw GraphCaptureError(fmt::format(
        "CUDAGraph::capture_begin: cudaStreamBeginCapture failed: {}", cuda_error(begun)));
  }
  const GraphPool pool = options.pool.id != 0 ? options.pool : graph_pool_handle();
  try {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    KILN_CUDA_CHECK(cudaStreamGetCaptureInfo(stream.handle(), &status, &id));
    detail::begin_allocate_to_pool(device, pool.id, id);
  } catch (...) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream.handle(), &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    set_current_stream(previous);
    throw;
  }
  pool_ = pool;
  device_ = device;
  stream_ = stream;
  previous_ = previous;
  capturing_ = true;
  this_thread() = {this, device};
}

void CUDAGraph::capture_end() {
  KILN_CHECK(capturing_, GraphCaptureError,
             "CUDAGraph::capture_end: this graph is not capturing (capture_begin first)");
  KILN_CHECK(this_thread().graph == this, GraphCaptureError,
             "CUDAGraph::capture_end: the capture was begun on another thread");
  const DeviceGuard guard(device_);
  this_thread() = {};
  capturing_ = false;
  set_current_stream(*previous_);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_->handle(), &graph);
  detail::end_allocate_to_pool(device_, pool_.id);
  auto give_up = [&](const std::string& why) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    detail::release_pool(device_, pool_.id);
    pool_ = {};
    throw GraphCaptureError("CUDAGraph::capture_end: " + why);
  };
  if (ended != cudaSuccess)
    give_up(fmt::format("CUDA ended the capture with {}: there is no graph", cuda_error(ended)));
  size_t nodes = 0;
  if (cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess)
    give_up(fmt::format("cudaGraphGetNodes failed: {}", cuda_error(cudaGetLastError())));
  const cudaError_t made = cudaGraphInstantiate(&exec_, graph, 0);
  if (made != cudaSuccess) {
    exec_ = nullptr;
    give_up(fmt::format("cudaGraphInstantiate failed: {}", cuda_error(made)));
  }
  cudaGraphDestroy(graph);
  nodes_ = nodes;
}

void CUDAGraph::abandon() noexcept {
  if (!capturing_) return;
  if (this_thread().graph == this) this_thread() = {};
  capturing_ = false;
  int previous_device = -1;
  cudaGetDevice(&previous_device);
  cudaSetDevice(device_);
  // None of these may throw here: an exception is on its way already.
  detail::thread_streams()[static_cast<size_t>(device_)] = previous_->handle();
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream_->handle(), &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  detail::end_allocate_to_pool(device_, pool_.id);
  detail::release_pool(device_, pool_.id);
  pool_ = {};
  detail::restore_device(previous_device);
}

void CUDAGraph::replay() {
  KILN_CHECK(exec_ != nullptr, GraphCaptureError,
             "CUDAGraph::replay: nothing was captured (capture() first)");
  const DeviceGuard guard(device_);
  KILN_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream_handle()));
}

void CUDAGraph::reset() {
  abandon();
  if (exec_ != nullptr) {
    cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
    detail::release_pool(device_, pool_.id);
  }
  pool_ = {};
  nodes_ = 0;
}

}  // namespace kiln::cuda
