// Device and pinned memory, copies and sets. Streams run in order and at once, so the Async forms
// are done when they return. A device-side span must lie inside one live allocation and a host
// side must not be device memory: the simulator says which, where a GPU would fault or corrupt.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

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

cudaError_t copy(const char* function, void* dst, const void* src, std::size_t count,
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
  if (error != cudaSuccess) return error;
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t set(const char* function, void* pointer, int value, std::size_t count) {
  if (count == 0) return cudaSuccess;
  if (const cudaError_t error = check_device_span(function, "devPtr", pointer, count))
    return error;
  std::memset(pointer, value, count);
  return cudaSuccess;
}

cudaError_t set_2d(const char* function, void* pointer, std::size_t pitch, int value,
                   std::size_t width, std::size_t height) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > pitch) return invalid(function, "width " + std::to_string(width) + " > pitch " +
                                                  std::to_string(pitch));
  if (const cudaError_t error =
          check_device_span(function, "devPtr", pointer, (height - 1) * pitch + width))
    return error;
  for (std::size_t row = 0; row < height; ++row)
    std::memset(static_cast<char*>(pointer) + row * pitch, value, width);
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaMalloc(void** devPtr, size_t size) {
  kiln::sim::runtime::use_context();
  *devPtr = nullptr;
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
  *pHost = rt::allocate_pinned(size);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocHost(void** ptr, size_t size) {
  kiln::sim::runtime::use_context();
  *ptr = rt::allocate_pinned(size);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeHost(void* ptr) {
  kiln::sim::runtime::use_context();
  if (ptr == nullptr || rt::release_pinned(ptr)) return cudaSuccess;
  return invalid("cudaFreeHost", address(ptr) + " is not a live pinned allocation");
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  kiln::sim::runtime::use_context();
  return copy("cudaMemcpy", dst, src, count, kind);
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                      cudaMemcpyKind kind, cudaStream_t) {
  kiln::sim::runtime::use_context();
  return copy("cudaMemcpyAsync", dst, src, count, kind);
}

cudaError_t CUDARTAPI cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice,
                                     size_t count) {
  kiln::sim::runtime::use_context();
  if (count == 0) return cudaSuccess;
  if (const cudaError_t error = check_device_span("cudaMemcpyPeer", "dst", dst, count, dstDevice))
    return error;
  if (const cudaError_t error = check_device_span("cudaMemcpyPeer", "src", src, count, srcDevice))
    return error;
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src,
                                          int srcDevice, size_t count, cudaStream_t) {
  kiln::sim::runtime::use_context();
  return cudaMemcpyPeer(dst, dstDevice, src, srcDevice, count);
}

cudaError_t CUDARTAPI cudaMemset(void* devPtr, int value, size_t count) {
  kiln::sim::runtime::use_context();
  return set("cudaMemset", devPtr, value, count);
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t) {
  kiln::sim::runtime::use_context();
  return set("cudaMemsetAsync", devPtr, value, count);
}

cudaError_t CUDARTAPI cudaMemset2D(void* devPtr, size_t pitch, int value, size_t width,
                                   size_t height) {
  kiln::sim::runtime::use_context();
  return set_2d("cudaMemset2D", devPtr, pitch, value, width, height);
}

cudaError_t CUDARTAPI cudaMemset2DAsync(void* devPtr, size_t pitch, int value, size_t width,
                                        size_t height, cudaStream_t) {
  kiln::sim::runtime::use_context();
  return set_2d("cudaMemset2DAsync", devPtr, pitch, value, width, height);
}

}  // extern "C"
