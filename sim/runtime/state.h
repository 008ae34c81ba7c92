// The simulated devices' state that the cudart entry points (sim/runtime/*.cpp) and the launch
// checks (sim/grid.cpp) share: devices and their memory, pinned host memory, the current device
// and last error of each host thread, streams and events.
#pragma once

#include <driver_types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace kiln::sim::runtime {
struct Capture;  // sim/runtime/capture.cpp
}

// cudaStream_t and cudaEvent_t point to these (driver_types.h only declares them). The capture
// fields belong to sim/runtime/capture.cpp, under its lock.
struct CUstream_st {
  int device;
  unsigned flags;
  kiln::sim::runtime::Capture* capture = nullptr;  // the capture sequence it takes part in
};
struct CUevent_st {
  int device;
  unsigned flags;
  bool recorded = false;
  std::chrono::steady_clock::time_point time{};
  // The capture sequence it was last recorded in (0: none; its ids start at 1), and the nodes of
  // that capture a stream waiting for it then depends on.
  std::atomic<unsigned long long> captured_by{0};
  std::vector<std::size_t> capture_dependencies{};
  // The lazy stream it was last recorded on, and how many nodes had been queued there then
  // (sim/runtime/lazy_streams.h, under its lock); nullptr when recorded on an eager stream.
  cudaStream_t lazy_stream = nullptr;
  unsigned long long lazy_mark = 0;
};

namespace kiln::sim::runtime {

int device_count();     // KILN_SIM_DEVICES, default 2
int& current_device();  // of this host thread
bool valid_device(int device);

// The primary contexts, as CUDA 12 makes them: cudaSetDevice makes the chosen device's, and every
// runtime call that works on a device (memory, copies, streams, events, launches) makes the
// calling thread's current device's, device 0 on a thread that never chose one. Only device
// queries, versions and errors make none. A context costs a real GPU about 0.5 GiB, and a rank
// of a job must make one on its own device only: has_context() lets a test check that.
void use_context();  // at the top of each such entry point
bool has_context(int device);

// Bytes of device memory each simulated device reports and reserves.
inline constexpr std::size_t kDeviceMemoryBytes = std::size_t{16} << 30;

// The device whose memory holds `pointer`, or -1 for host memory.
int device_of(const void* pointer);
// Whether [pointer, pointer + bytes) lies in one live allocation of `device`.
bool within_allocation(int device, const void* pointer, std::size_t bytes);
void* allocate(int device, std::size_t bytes);  // nullptr when the device is full
bool release(const void* pointer);              // false: not a live device allocation
std::size_t used_bytes(int device);

void* allocate_pinned(std::size_t bytes);
bool release_pinned(void* pointer);
bool is_pinned(const void* pointer);  // inside a live pinned allocation

// The device a stream belongs to (the legacy and per-thread handles: the current device).
int stream_device(cudaStream_t stream);

// Records `error` as this thread's last error, with a sentence cudaGetErrorString returns for it
// until another error is recorded; returns `error`.
cudaError_t fail(cudaError_t error, const std::string& detail);
cudaError_t& last_error();
const char* error_detail(cudaError_t error);  // nullptr when there is none for `error`

// The largest dynamic shared memory cudaFuncSetAttribute allowed on `device` (48 KiB without).
std::size_t dynamic_shared_limit(int device);
void raise_dynamic_shared_limit(int device, std::size_t bytes);
inline constexpr std::size_t kDefaultSharedBytes = 48 * 1024;
inline constexpr std::size_t kMaxSharedBytes = 227 * 1024;  // sm_90's opt-in limit

}  // namespace kiln::sim::runtime
