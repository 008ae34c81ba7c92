// Device and pinned memory, copies and sets. The Async forms run at once on the default streams
// and, with lazy streams (sim/runtime/lazy_streams.h), when waited for on the others, except a
// copy to or from pageable host memory, which CUDA makes the host wait for. The frees and the
// synchronous forms wait as CUDA's do: frees for every stream, the rest for the device's blocking
// streams (the legacy stream's implicit synchronisation). A device-side span must lie inside one
// live allocation and a host side must not be device memory: the simulator says which, where a GPU
// would fault or corrupt. During a stream capture (sim/runtime/capture.h) the Async forms on a
// capturing stream are checked now and recorded, to copy or set at each launch of the graph; the
// allocations, frees and synchronous forms are the calls CUDA calls potentially unsafe.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

#include "kiln/sim/runtime/capture.h"
#include "kiln/sim/runtime/lazy_streams.h"
#include "kiln/sim/runtime/state.h"

namespace {

namespace rt = kiln::sim::runtime;

std::string address(const void* pointer) {
  std::ostringstream text;
  text << pointer;
  return text.str();
}

cudaError_t invalid(const char* function, const std::string& why) {
  return rt::fail(cudaErrorInvalidValue,
                  std::string("invalid argument (kiln-sim: ") + function + ": " + why + ")");
}

// The device span [pointer, pointer + bytes) is inside one allocation (of `device`, when >= 0).
cudaError_t check_device_span(const char* function, const char* which, const void* pointer,
                              std::size_t bytes, int device = -1) {
  const int owner = rt::device_of(pointer);
  if (owner < 0)
    return invalid(function, std::string(which) + " " + address(pointer) + " is not device memory");
  if (device >= 0 && owner != device)
    return invalid(function, std::string(which) + " " + address(pointer) + " is device " +
                                 std::to_string(owner) + "'s memory, expected device " +
                                 std::to_string(device) + "'s");
  if (!rt::within_allocation(owner, pointer, bytes))
    return invalid(function, std::string(which) + " " + address(pointer) + " + " +
                                 std::to_string(bytes) +
                                 " bytes is not inside one live allocation of device " +
                                 std::to_string(owner));
  return cudaSuccess;
}

cudaError_t check_host_span(const char* function, const char* which, const void* pointer) {
  if (rt::device_of(pointer) >= 0)
    return invalid(function, std::string(which) + " " + address(pointer) +
                                 " is device memory, where the copy's kind says host memory");
  return cudaSuccess;
}

cudaError_t check_copy(const char* function, void* dst, const void* src, std::size_t count,
                       cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault) {
    const bool dst_device = rt::device_of(dst) >= 0, src_device = rt::device_of(src) >= 0;
    kind = dst_device ? (src_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                      : (src_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  cudaError_t error = cudaSuccess;
  switch (kind) {
    case cudaMemcpyHostToHost:
      if ((error = check_host_span(function, "dst", dst)) == cudaSuccess)
        error = check_host_span(function, "src", src);
      break;
    case cudaMemcpyHostToDevice:
      if ((error = check_device_span(function, "dst", dst, count)) == cudaSuccess)
        error = check_host_span(function, "src", src);
      break;
    case cudaMemcpyDeviceToHost:
      if ((error = check_host_span(function, "dst", dst)) == cudaSuccess)
        error = check_device_span(function, "src", src, count);
      break;
    case cudaMemcpyDeviceToDevice:
      if ((error = check_device_span(function, "dst", dst, count)) == cudaSuccess)
        error = check_device_span(function, "src", src, count);
      break;
    default:
      return rt::fail(cudaErrorInvalidMemcpyDirection,
                      std::string("invalid copy direction for memcpy (kiln-sim: ") + function +
                          ": kind " + std::to_string(static_cast<int>(kind)) + ")");
  }
  return error;
}

cudaError_t check_set_2d(const char* function, void* pointer, std::size_t pitch, std::size_t width,
                         std::size_t height) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > pitch)
    return invalid(function,
                   "width " + std::to_string(width) + " > pitch " + std::to_string(pitch));
  return check_device_span(function, "devPtr", pointer, (height - 1) * pitch + width);
}

void set_rows(void* pointer, std::size_t pitch, int value, std::size_t width, std::size_t height) {
  for (std::size_t row = 0; row < height; ++row)
    std::memset(static_cast<char*>(pointer) + row * pitch, value, width);
}

// An Async copy or set, checked now: done now, or on a capturing stream recorded as a node of the
// graph that `work` does at each launch, or kept on a lazy stream's queue. `host_waits`: a copy
// to or from pageable host memory, which returns only once done (after the stream's earlier
// work) outside a capture.
template <class Work>
cudaError_t queue_async(const char* function, cudaStream_t stream, const std::string& what,
                        cudaError_t checked, Work work, bool host_waits = false) {
  const rt::Queue queue = rt::queue_on(function, stream);
  if (queue.action == rt::Queue::fail) return queue.error;
  if (checked != cudaSuccess) return checked;
  if (queue.action == rt::Queue::record && host_waits && stream->capture == nullptr) {
    rt::run_deferred(stream);
    work();
  } else if (queue.action == rt::Queue::record)
    rt::record(stream, {std::string(function) + " of " + what, rt::stream_device(stream), work});
  else
    work();
  return cudaSuccess;
}

// Host memory that is not pinned: a copy from or to it makes the host wait.
bool pageable(const void* pointer) {
  return rt::device_of(pointer) < 0 && !rt::is_pinned(pointer);
}

// What a free or a synchronous call waits for first, with lazy streams.
void wait_for_streams(bool every_stream) {
  if (!rt::lazy_streams()) return;
  if (every_stream)
    rt::run_all_deferred();
  else
    rt::run_deferred_on_device(rt::current_device(), true);
}

std::string bytes(std::size_t count) {
  return std::to_string(count) + " bytes";
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaMalloc(void** devPtr, size_t size) {
  kiln::sim::runtime::use_context();
  *devPtr = nullptr;
  if (const cudaError_t error = rt::check_unsafe_call("cudaMalloc")) return error;
  if (size == 0) return cudaSuccess;
  const int device = rt::current_device();
  *devPtr = rt::allocate(device, size);
  if (!*devPtr)
    return rt::fail(cudaErrorMemoryAllocation,
                    "out of memory (kiln-sim: cudaMalloc of " + std::to_string(size) +
                        " bytes on device " + std::to_string(device) + ", " +
                        std::to_string(rt::used_bytes(device)) + " in use)");
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void* devPtr) {
  kiln::sim::runtime::use_context();
  if (const cudaError_t error = rt::check_unsafe_call("cudaFree")) return error;
  wait_for_streams(true);
  if (devPtr == nullptr || rt::release(devPtr)) return cudaSuccess;
  return invalid("cudaFree", address(devPtr) + " is not a live device allocation");
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free, size_t* total) {
  kiln::sim::runtime::use_context();
  *total = rt::kDeviceMemoryBytes;
  *free = *total - rt::used_bytes(rt::current_device());
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostAlloc(void** pHost, size_t size, unsigned int) {
  kiln::sim::runtime::use_context();
  *pHost = nullptr;
  if (const cudaError_t error = rt::check_unsafe_call("cudaHostAlloc")) return error;
  *pHost = rt::allocate_pinned(size);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocHost(void** ptr, size_t size) {
  kiln::sim::runtime::use_context();
  *ptr = nullptr;
  if (const cudaError_t error = rt::check_unsafe_call("cudaMallocHost")) return error;
  *ptr = rt::allocate_pinned(size);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeHost(void* ptr) {
  kiln::sim::runtime::use_context();
  if (const cudaError_t error = rt::check_unsafe_call("cudaFreeHost")) return error;
  wait_for_streams(true);
  if (ptr == nullptr || rt::release_pinned(ptr)) return cudaSuccess;
  return invalid("cudaFreeHost", address(ptr) + " is not a live pinned allocation");
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  kiln::sim::runtime::use_context();
  if (const cudaError_t error = rt::check_synchronous_call("cudaMemcpy")) return error;
  wait_for_streams(false);
  if (const cudaError_t error = check_copy("cudaMemcpy", dst, src, count, kind)) return error;
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                      cudaStream_t stream) {
  kiln::sim::runtime::use_context();
  const cudaError_t checked = check_copy("cudaMemcpyAsync", dst, src, count, kind);
  return queue_async(
      "cudaMemcpyAsync", stream, bytes(count), checked,
      [dst, src, count] {
        if (count > 0) std::memmove(dst, src, count);
      },
      count > 0 && (pageable(dst) || pageable(src)));
}

namespace {
cudaError_t check_peer(const char* function, void* dst, int dst_device, const void* src,
                       int src_device, std::size_t count) {
  if (count == 0) return cudaSuccess;
  if (const cudaError_t error = check_device_span(function, "dst", dst, count, dst_device))
    return error;
  return check_device_span(function, "src", src, count, src_device);
}
}  // namespace

cudaError_t CUDARTAPI cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice,
                                     size_t count) {
  kiln::sim::runtime::use_context();
  if (const cudaError_t error = rt::check_synchronous_call("cudaMemcpyPeer")) return error;
  wait_for_streams(false);
  if (const cudaError_t error = check_peer("cudaMemcpyPeer", dst, dstDevice, src, srcDevice, count))
    return error;
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice,
                                          size_t count, cudaStream_t stream) {
  kiln::sim::runtime::use_context();
  const cudaError_t checked =
      check_peer("cudaMemcpyPeerAsync", dst, dstDevice, src, srcDevice, count);
  return queue_async("cudaMemcpyPeerAsync", stream, bytes(count), checked, [dst, src, count] {
    if (count > 0) std::memmove(dst, src, count);
  });
}

cudaError_t CUDARTAPI cudaMemset(void* devPtr, int value, size_t count) {
  kiln::sim::runtime::use_context();
  if (const cudaError_t error = rt::check_synchronous_call("cudaMemset")) return error;
  wait_for_streams(false);
  if (count == 0) return cudaSuccess;
  if (const cudaError_t error = check_device_span("cudaMemset", "devPtr", devPtr, count))
    return error;
  std::memset(devPtr, value, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  kiln::sim::runtime::use_context();
  const cudaError_t checked =
      count == 0 ? cudaSuccess : check_device_span("cudaMemsetAsync", "devPtr", devPtr, count);
  return queue_async("cudaMemsetAsync", stream, bytes(count), checked, [devPtr, value, count] {
    if (count > 0) std::memset(devPtr, value, count);
  });
}

cudaError_t CUDARTAPI cudaMemset2D(void* devPtr, size_t pitch, int value, size_t width,
                                   size_t height) {
  kiln::sim::runtime::use_context();
  if (const cudaError_t error = rt::check_synchronous_call("cudaMemset2D")) return error;
  wait_for_streams(false);
  if (const cudaError_t error = check_set_2d("cudaMemset2D", devPtr, pitch, width, height))
    return error;
  set_rows(devPtr, pitch, value, width, height);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemset2DAsync(void* devPtr, size_t pitch, int value, size_t width,
                                        size_t height, cudaStream_t stream) {
  kiln::sim::runtime::use_context();
  const cudaError_t checked = check_set_2d("cudaMemset2DAsync", devPtr, pitch, width, height);
  return queue_async(
      "cudaMemset2DAsync", stream, bytes(width * height), checked,
      [devPtr, pitch, value, width, height] { set_rows(devPtr, pitch, value, width, height); });
}

}  // extern "C"
