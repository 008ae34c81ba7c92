// The consumer's own CUDA kernel (block_sum.cu), as plain C++ code sees it: no CUDA header needed.
#pragma once

#include <cstdint>

struct CUstream_st;  // a cudaStream_t is a CUstream_st*

// *total += x[0] + ... + x[n - 1], all three on the current GPU, queued on `stream` (kiln's
// current stream: kiln::cuda::current_stream_handle()).
void block_sum(const float* x, int64_t n, float* total, CUstream_st* stream);
