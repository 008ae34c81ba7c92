// What the files of core/cuda_runtime/ share: the CUDA build's runtime functions are split by topic
// (devices, streams and events, device memory, pinned memory, copies), and these few helpers are
// used by more than one of them. Not part of kiln's API.
#pragma once

#include <cuda_runtime.h>

#include <vector>

namespace kiln::cuda::detail {

// A device index from the caller (-1: the current device), checked; `what` names the caller.
int resolve(const char* what, int device);

// This thread's current stream of each device; null is the legacy default stream.
std::vector<cudaStream_t>& thread_streams();

// The answer of cudaStreamQuery / cudaEventQuery: true when done, false when not yet; else throws.
bool done(cudaError_t status, const char* call);

// Devices kiln has made current in this process (so they have a primary context).
void note_device_in_use(int device);
bool device_in_use(int device);
// A device that already has a context, for calls that need one but no particular device (pinned
// host memory): the one set_device chose, else the current one, else the first in use; -1: none.
int device_with_context();
// Makes `previous` current again after a scope switched away from it, unless kiln never used it.
void restore_device(int previous) noexcept;

// Keeps host_ptr's pinned block unreused until the copy just queued is done; false: not pinned.
bool record_pinned_use(const void* host_ptr, cudaStream_t stream, int device);

}  // namespace kiln::cuda::detail
