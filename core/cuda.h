// The CUDA runtime as kiln sees it, named as torch.cuda names it. Every function here exists in
// every build: without CUDA, is_built() and is_available() are false, device_count() is 0, and the
// rest throw a DeviceError that says so. No CUDA header is needed to include this file.
//
// A `device` argument of -1 means the current device (set_device / DeviceGuard).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/core/allocator.h"

// cudaStream_t is CUstream_st*, cudaEvent_t is CUevent_st*: declared, so g++ files need no CUDA.
struct CUstream_st;
struct CUevent_st;

namespace kiln {
class Tensor;
}

namespace kiln::cuda {

bool is_built();      // kiln was compiled with the CUDA toolkit
bool is_available();  // is_built() and at least one GPU is visible now
int device_count();   // 0 when not available
std::string device_name(int index);

struct DeviceProperties {
  std::string name;
  int major = 0;  // compute capability, e.g. 9.0 for an H100
  int minor = 0;
  size_t total_memory = 0;  // bytes
  int multi_processor_count = 0;
  int warp_size = 0;
  int max_threads_per_block = 0;
  size_t l2_cache_size = 0;  // bytes
};
DeviceProperties get_device_properties(int device = -1);

// Versions as major * 1000 + minor * 10 (CUDA's encoding; cuDNN's and NCCL's own encodings are
// decoded into the same), 0 where the library is missing: what `kiln-device-info` prints.
struct LibraryVersions {
  int runtime = 0;  // the CUDA runtime kiln was linked with
  int driver = 0;   // the newest CUDA the installed driver supports (0: no driver)
  int cublas = 0;
  int cudnn = 0;
  int nccl_headers = 0;  // the NCCL headers kiln was compiled against
};
LibraryVersions library_versions();

struct MemoryInfo {
  size_t free_bytes = 0;  // as the driver sees it: other processes' memory is not free
  size_t total_bytes = 0;
};
MemoryInfo mem_get_info(int device = -1);

int current_device();
void set_device(int device);

// Makes `device` current for the enclosing scope, then restores the previous one, unless kiln
// never used that one in this process: a thread that never chose a device is "on" device 0, and
// switching back to it would make a context on GPU 0 (about 0.5 GiB) in every rank of a job, so
// the scope's device stays current instead (PyTorch's guard behaves the same).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  explicit DeviceGuard(Device device) : DeviceGuard(device.index) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int current_ = -1;
};

class Event;

// A handle on a cudaStream_t of one device. It never owns the stream: the default stream belongs
// to the driver, and created streams come from a pool that lives as long as the process, as
// PyTorch's do. Streams must outlive the memory freed on them (the caching allocator remembers
// each block's stream), and a destroyed stream's handle could be reused by a new stream.
class Stream {
 public:
  // The device's default (legacy, null) stream: every thread's current stream until changed.
  static Stream default_stream(int device = -1);
  // A stream for concurrent work, as torch.cuda.Stream(): round robin over a pool of 32 per
  // device. Pool streams do not synchronise with the default stream; order work with events.
  static Stream create(int device = -1);

  int device() const { return device_; }
  CUstream_st* handle() const { return handle_; }  // a cudaStream_t
  bool is_default() const { return handle_ == nullptr; }

  void synchronize() const;  // waits until all work queued on it is done
  bool query() const;        // true when all work queued on it is done
  // Later work on this stream waits for the event (or for the other stream's work queued so far).
  void wait_event(const Event& event) const;
  void wait_stream(const Stream& other) const;

  bool operator==(const Stream&) const = default;

 private:
  Stream(int device, CUstream_st* handle) : device_(device), handle_(handle) {}
  friend Stream current_stream(int device);
  int device_ = 0;
  CUstream_st* handle_ = nullptr;
};

// The stream this thread's kernels on `device` launch on.
Stream current_stream(int device = -1);
void set_current_stream(const Stream& stream);
// current_stream().handle() of the current device, without building a Stream: what kiln's CUDA
// kernels launch on (a cudaStream_t).
CUstream_st* current_stream_handle();

// Makes `stream` current on its device, and its device current, for the enclosing scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  DeviceGuard device_;
  Stream previous_;
};

// A cudaEvent_t, created on its first record() on the device of that stream. Owns the event.
class Event {
 public:
  // Timing costs a little on every record: off unless elapsed_time is wanted.
  explicit Event(bool enable_timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void record();                          // on the current stream of the current device
  void wait(const Stream& stream) const;  // = stream.wait_event(*this); nothing if never recorded
  void synchronize() const;               // blocks the host until the event has happened
  bool query() const;                     // true when it has happened (or was never recorded)
  float elapsed_time(const Event& end) const;  // milliseconds from this event to `end`
  bool is_recorded() const { return event_ != nullptr; }
  CUevent_st* handle() const { return event_; }

 private:
  CUevent_st* event_ = nullptr;
  int device_ = -1;
  bool enable_timing_ = false;
};

// Waits for all work on the device (every stream).
void synchronize(int device = -1);

// An NVTX range on this thread (NVTX 3, header-only from the toolkit), which Nsight Systems and
// Nsight Compute show by name; nothing without CUDA. The profiler opens one per event it records.
void nvtx_range_push(const char* name);
void nvtx_range_pop();

// The caching allocator of a device (see core/cuda_caching_allocator.h). Setting the environment
// variable KILN_CUDA_CACHING_ALLOCATOR=0 turns caching off: every allocation is a cudaMalloc and
// every free a cudaFree, so compute-sanitizer sees each tensor's exact bounds.
Allocator& allocator(int index);
// Marks `tensor` (on a CUDA device) as used by the work queued so far on `stream` too, as torch's
// Tensor.record_stream: when its memory is freed, the caching allocator hands it out again only
// after that work is done. Needed when a tensor made on one stream is used on another and freed
// before that stream has caught up (the allocator otherwise reuses a block on its own stream at
// once, and that stream does not wait for the other).
void record_stream(const Tensor& tensor, const Stream& stream);
// Gives every cached, wholly free segment of every device back to the driver
// (torch.cuda.empty_cache).
void empty_cache();
// Bytes in tensors / held from the driver, now and at most since reset_peak_memory_stats.
int64_t memory_allocated(int device = -1);
int64_t memory_reserved(int device = -1);
int64_t max_memory_allocated(int device = -1);
int64_t max_memory_reserved(int device = -1);

// Page-locked host memory with its own cache: the source of asynchronous host-to-device copies.
// Its tensors are CPU tensors for which is_pinned() is true.
Allocator& pinned_allocator();

// Copies nbytes between any two of host and device memory, on the current stream of the device
// involved (of the source device between two GPUs). When host memory is involved it waits for
// the copy, so the copy is done when it returns; between GPUs it is only stream-ordered.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
// The same without waiting, for host memory from pinned_allocator(): the pinned block is not
// reused until the copy is done. Pageable host memory makes it wait, as copy_bytes.
void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device,
                      size_t nbytes);
// Stream-ordered, on the current stream of `device`.
void memset_zero(void* ptr, Device device, size_t nbytes);

}  // namespace kiln::cuda
