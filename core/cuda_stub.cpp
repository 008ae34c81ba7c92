// The CUDA runtime functions of a build without CUDA: nothing is available, and asking for a CUDA
// device is an error that says how to get one. Destructors and moves do nothing (nothing can have
// been created), and empty_cache has nothing to free, as torch.cuda.empty_cache without CUDA.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/cuda_simulated.h"
#include "kiln/core/error.h"

namespace kiln::cuda {

namespace {
[[noreturn]] void not_built(const char* what) {
  throw DeviceError(
      fmt::format("{}: kiln was built without CUDA (configure with KILN_CUDA=ON and "
                  "a CUDA toolkit to use cuda devices)",
                  what));
}
}  // namespace

bool is_built() {
  return false;
}
bool is_available() {
  return false;
}
bool is_simulated() {
  return false;
}
SimulatedLaunches simulated_launches() {
  return {};
}
bool simulator_can_count() {
  return false;
}
void set_simulator_counting(bool on) {
  if (on) not_built("cuda::set_simulator_counting");
}
std::vector<sim::KernelCounts> take_simulator_counts() {
  return {};
}
bool simulator_varies_library_sums() {
  return false;
}
void set_simulator_varies_library_sums(bool on) {
  if (on) not_built("cuda::set_simulator_varies_library_sums");
}
int device_count() {
  return 0;
}
std::string device_name(int) {
  not_built("cuda::device_name");
}
DeviceProperties get_device_properties(int) {
  not_built("cuda::get_device_properties");
}
LibraryVersions library_versions() {
  return {};
}

MemoryInfo mem_get_info(int) {
  not_built("cuda::mem_get_info");
}
int current_device() {
  not_built("cuda::current_device");
}
void set_device(int) {
  not_built("cuda::set_device");
}

DeviceGuard::DeviceGuard(int) {
  not_built("cuda::DeviceGuard");
}
DeviceGuard::~DeviceGuard() = default;

Stream Stream::default_stream(int) {
  not_built("cuda::Stream::default_stream");
}
Stream Stream::create(int) {
  not_built("cuda::Stream::create");
}
void Stream::synchronize() const {
  not_built("cuda::Stream::synchronize");
}
bool Stream::query() const {
  not_built("cuda::Stream::query");
}
void Stream::wait_event(const Event&) const {
  not_built("cuda::Stream::wait_event");
}
void Stream::wait_stream(const Stream&) const {
  not_built("cuda::Stream::wait_stream");
}
Stream current_stream(int) {
  not_built("cuda::current_stream");
}
CUstream_st* current_stream_handle() {
  not_built("cuda::current_stream_handle");
}
void set_current_stream(const Stream&) {
  not_built("cuda::set_current_stream");
}

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()), previous_(stream) {}
StreamGuard::~StreamGuard() = default;

Event::Event(bool enable_timing) : enable_timing_(enable_timing) {}
Event::~Event() = default;
Event::Event(Event&& other) noexcept
    : event_(other.event_), device_(other.device_), enable_timing_(other.enable_timing_) {}
Event& Event::operator=(Event&& other) noexcept {
  event_ = other.event_;
  device_ = other.device_;
  enable_timing_ = other.enable_timing_;
  return *this;
}
void Event::record(const Stream&) {
  not_built("cuda::Event::record");
}
void Event::record() {
  not_built("cuda::Event::record");
}
void Event::wait(const Stream&) const {
  not_built("cuda::Event::wait");
}
void Event::synchronize() const {
  not_built("cuda::Event::synchronize");
}
bool Event::query() const {
  not_built("cuda::Event::query");
}
float Event::elapsed_time(const Event&) const {
  not_built("cuda::Event::elapsed_time");
}

void nvtx_range_push(const char*) {}
void nvtx_range_pop() {}
void synchronize(int) {
  not_built("cuda::synchronize");
}

Allocator& allocator(int) {
  not_built("cuda::allocator");
}
void record_stream(const Tensor&, const Stream&) {
  not_built("cuda::record_stream");
}
void empty_cache() {}
int64_t memory_allocated(int) {
  not_built("cuda::memory_allocated");
}
int64_t memory_reserved(int) {
  not_built("cuda::memory_reserved");
}
int64_t max_memory_allocated(int) {
  not_built("cuda::max_memory_allocated");
}
int64_t max_memory_reserved(int) {
  not_built("cuda::max_memory_reserved");
}
Allocator& pinned_allocator() {
  not_built("cuda::pinned_allocator");
}

void copy_bytes(void*, Device, const void*, Device, size_t) {
  not_built("cuda::copy_bytes");
}
void copy_bytes_async(void*, Device, const void*, Device, size_t) {
  not_built("cuda::copy_bytes_async");
}
void memset_zero(void*, Device, size_t) {
  not_built("cuda::memset_zero");
}

GraphPool graph_pool_handle() {
  not_built("cuda::graph_pool_handle");
}
GraphPoolStats graph_pool_stats(GraphPool, int) {
  not_built("cuda::graph_pool_stats");
}
bool is_current_stream_capturing(int) {
  return false;
}
void check_not_capturing(const std::string&) {}

// Nothing can have been captured, so there is nothing to reset.
CUDAGraph::~CUDAGraph() = default;
void CUDAGraph::capture(const std::function<void()>&, const CaptureOptions&) {
  not_built("cuda::CUDAGraph::capture");
}
void CUDAGraph::capture_begin(const CaptureOptions&) {
  not_built("cuda::CUDAGraph::capture_begin");
}
void CUDAGraph::capture_end() {
  not_built("cuda::CUDAGraph::capture_end");
}
void CUDAGraph::replay() {
  not_built("cuda::CUDAGraph::replay");
}
void CUDAGraph::reset() {}
void CUDAGraph::abandon() noexcept {}

}  // namespace kiln::cuda
