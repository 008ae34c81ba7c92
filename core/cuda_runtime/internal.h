// What the files of core/cuda_runtime/ share: the CUDA build's runtime functions are split by topic
// (devices, streams and events, device memory, pinned memory, copies), and these few helpers are
// used by more than one of them. Not part of kiln's API.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kiln/core/cuda_caching_allocator.h"

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

// The private pools of `device`'s caching allocator, for CUDAGraph (graphs.cpp): allocations on
// the streams of capture `capture` come from `pool` until the end; a graph holds its pool until
// release_pool.
bool caching_allocator_enabled();
void begin_allocate_to_pool(int device, uint64_t pool, uint64_t capture);
void end_allocate_to_pool(int device, uint64_t pool);
void release_pool(int device, uint64_t pool);
CachingAllocator::PoolStats pool_stats(int device, uint64_t pool);

}  // namespace kiln::cuda::detail
