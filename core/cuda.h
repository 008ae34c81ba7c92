// The CUDA runtime as kiln sees it. Every function here exists in every build: without CUDA,
// is_built() and is_available() are false and the rest throw a DeviceError that says so.
#pragma once

#include <cstddef>
#include <string>

#include "kiln/core/allocator.h"

namespace kiln::cuda {

bool is_built();      // kiln was compiled with the CUDA toolkit
bool is_available();  // is_built() and at least one GPU is visible now
int device_count();   // 0 when not available
std::string device_name(int index);

// Plain cudaMalloc/cudaFree per device, with statistics. The caching allocator replaces it.
Allocator& allocator(int index);

// Copies nbytes between any two of host and device memory, then waits for the copy.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
void memset_zero(void* ptr, Device device, size_t nbytes);
void synchronize();

}  // namespace kiln::cuda
