// Copies of a build with CUDA: copy_bytes, copy_bytes_async and memset_zero, between host and
// device and between two devices, ordered on the current streams.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_caching_allocator.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/cuda_runtime/internal.h"

namespace kiln::cuda {

namespace {

void copy_between_devices(void* dst, int dst_device, const void* src, int src_device,
                          size_t nbytes) {
  // As PyTorch: the copy runs on the source device's current stream, after the work already
  // queued on the destination's current stream (which may still use the destination memory), and
  // later work there waits for the copy.
  Stream src_stream = current_stream(src_device);
  Stream dst_stream = current_stream(dst_device);
  Event dst_ready;
  dst_ready.record(dst_stream);
  src_stream.wait_event(dst_ready);
  {
    DeviceGuard guard(src_device);
    // Without peer access enabled the driver stages the copy through the host; still correct.
    KILN_CUDA_CHECK(
        cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, src_stream.handle()));
  }
  Event copied;
  copied.record(src_stream);
  dst_stream.wait_event(copied);
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
          bool non_blocking) {
  if (nbytes == 0) return;
  KILN_CHECK(dst_device.is_cuda() || src_device.is_cuda(), DeviceError,
             "cuda::copy_bytes: one side must be a GPU, got {} -> {}", src_device.str(),
             dst_device.str());
  // Only a copy within one GPU is stream-ordered work a graph can hold: one with the host waits
  // for it (or leaves a pinned block to events a capture cannot query), and one between GPUs
  // orders two devices' streams.
  if (!(dst_device == src_device)) {
    const bool host = !(dst_device.is_cuda() && src_device.is_cuda());
    check_not_capturing(fmt::format(
        "copies {} from {} to {}{}", format_bytes(static_cast<int64_t>(nbytes)),
        src_device.is_cpu() ? std::string("the host") : src_device.str(),
        dst_device.is_cpu() ? std::string("the host") : dst_device.str(),
        !host          ? " (between two GPUs)"
        : non_blocking ? " asynchronously, which a graph would repeat from the same host memory "
                         "at every replay,"
                       : ", which waits for the GPU,"));
  }
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
    copy_between_devices(dst, dst_device.index, src, src_device.index, nbytes);
    return;
  }
  int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  DeviceGuard guard(device);
  cudaStream_t stream = detail::thread_streams()[static_cast<size_t>(device)];
  // Unified addressing tells the driver which side is which.
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
  if (dst_device.is_cuda() && src_device.is_cuda()) return;  // stream-ordered like a kernel
  const void* host = dst_device.is_cpu() ? dst : src;
  if (non_blocking && detail::record_pinned_use(host, stream, device)) return;
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  copy(dst, dst_device, src, src_device, nbytes, false);
}

void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device,
                      size_t nbytes) {
  copy(dst, dst_device, src, src_device, nbytes, true);
}

void memset_zero(void* ptr, Device device, size_t nbytes) {
  if (nbytes == 0) return;
  DeviceGuard guard(device.index);
  KILN_CUDA_CHECK(
      cudaMemsetAsync(ptr, 0, nbytes, detail::thread_streams()[static_cast<size_t>(device.index)]));
}

}  // namespace kiln::cuda
