// Streams and events of a build with CUDA: the per-device stream pools, this thread's current
// stream of each device (and current_stream_handle(), the one kernels launch on), and Event.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/cuda_runtime/internal.h"
#include "kiln/core/op_name.h"

namespace kiln::cuda {

// ---- streams ----

namespace {

constexpr int kStreamsPerDevice = 32;

struct StreamPool {
  std::once_flag created;
  std::array<cudaStream_t, kStreamsPerDevice> streams{};
  std::atomic<unsigned> next{0};
};

StreamPool& stream_pool(int device) {
  static std::vector<std::unique_ptr<StreamPool>>* pools = [] {
    auto* all = new std::vector<std::unique_ptr<StreamPool>>;
    for (int i = 0; i < device_count(); ++i) all->push_back(std::make_unique<StreamPool>());
    return all;
  }();
  return *(*pools)[static_cast<size_t>(device)];
}

}  // namespace

std::vector<cudaStream_t>& detail::thread_streams() {
  thread_local std::vector<cudaStream_t> streams(static_cast<size_t>(device_count()), nullptr);
  return streams;
}

// cudaStreamQuery and cudaEventQuery report "not yet" as an error code, which also becomes the
// thread's last error; it is a normal answer, so clear it.
bool detail::done(cudaError_t status, const char* call) {
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  if (status != cudaSuccess)
    throw Error(fmt::format("CUDA error {} ({}) in {}", cudaGetErrorName(status),
                            cudaGetErrorString(status), call));
  return true;
}

Stream Stream::default_stream(int device) {
  return Stream(detail::resolve("cuda::Stream::default_stream", device), nullptr);
}

Stream Stream::create(int device) {
  device = detail::resolve("cuda::Stream::create", device);
  StreamPool& pool = stream_pool(device);
  std::call_once(pool.created, [&] {
    DeviceGuard guard(device);
    // Non-blocking: work on a pool stream does not wait for the legacy default stream (nor it for
    // them), or concurrency with the default stream would be impossible.
    for (cudaStream_t& s : pool.streams)
      KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  });
  unsigned slot = pool.next.fetch_add(1) % kStreamsPerDevice;
  return Stream(device, pool.streams[slot]);
}

void Stream::synchronize() const {
  const OpNameScope name("cuda::Stream::synchronize");
  check_not_capturing("waits for a stream");
  DeviceGuard guard(device_);
  KILN_CUDA_CHECK(cudaStreamSynchronize(handle_));
}

bool Stream::query() const {
  const OpNameScope name("cuda::Stream::query");
  check_not_capturing("asks whether a stream's work is done");
  DeviceGuard guard(device_);
  return detail::done(cudaStreamQuery(handle_), "cudaStreamQuery");
}

void Stream::wait_event(const Event& event) const {
  if (!event.is_recorded()) return;
  DeviceGuard guard(device_);
  KILN_CUDA_CHECK(cudaStreamWaitEvent(handle_, event.handle(), 0));
}

void Stream::wait_stream(const Stream& other) const {
  if (other == *this) return;
  Event ready;
  ready.record(other);
  wait_event(ready);
}

Stream current_stream(int device) {
  device = detail::resolve("cuda::current_stream", device);
  return Stream(device, detail::thread_streams()[static_cast<size_t>(device)]);
}

void set_current_stream(const Stream& stream) {
  detail::thread_streams()[static_cast<size_t>(stream.device())] = stream.handle();
}

StreamGuard::StreamGuard(const Stream& stream)
    : device_(stream.device()), previous_(current_stream(stream.device())) {
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() {
  set_current_stream(previous_);
}

// ---- events ----

Event::Event(bool enable_timing) : enable_timing_(enable_timing) {}

Event::~Event() {
  // Safe while a record is pending: the driver releases it once the event has happened.
  if (event_ != nullptr) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept
    : event_(other.event_), device_(other.device_), enable_timing_(other.enable_timing_) {
  other.event_ = nullptr;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = other.event_;
    device_ = other.device_;
    enable_timing_ = other.enable_timing_;
    other.event_ = nullptr;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  DeviceGuard guard(stream.device());
  if (event_ == nullptr) {
    // An event belongs to the device current at its creation, and records only on its streams.
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(
        &event_, enable_timing_ ? cudaEventDefault : cudaEventDisableTiming));
    device_ = stream.device();
  }
  KILN_CHECK(device_ == stream.device(), DeviceError,
             "cuda::Event::record: the event belongs to cuda:{}, the stream to cuda:{}", device_,
             stream.device());
  KILN_CUDA_CHECK(cudaEventRecord(event_, stream.handle()));
}

void Event::record() {
  record(current_stream());
}

void Event::wait(const Stream& stream) const {
  stream.wait_event(*this);
}

void Event::synchronize() const {
  const OpNameScope name("cuda::Event::synchronize");
  check_not_capturing("waits for an event");
  if (event_ != nullptr) KILN_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::query() const {
  const OpNameScope name("cuda::Event::query");
  check_not_capturing("asks whether an event has happened");
  return event_ == nullptr || detail::done(cudaEventQuery(event_), "cudaEventQuery");
}

float Event::elapsed_time(const Event& end) const {
  KILN_CHECK(enable_timing_ && end.enable_timing_, ValueError,
             "cuda::Event::elapsed_time: both events need enable_timing = true");
  KILN_CHECK(event_ != nullptr && end.event_ != nullptr, ValueError,
             "cuda::Event::elapsed_time: both events must be recorded first");
  // cudaEventElapsedTime fails with "not ready" until both have happened: wait for them here
  // rather than make every caller remember to.
  synchronize();
  end.synchronize();
  float ms = 0.0f;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

CUstream_st* current_stream_handle() {
  int device = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  return detail::thread_streams()[static_cast<size_t>(device)];
}

}  // namespace kiln::cuda
