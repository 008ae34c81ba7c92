// CUDA joining and indexing kernels: the twins of kernels/cpu/index.h, same signatures and the
// same contract (indices i64 and already checked in range by the entry points, which use
// first_out_of_range below on the GPU). scatter_add_ and index_add_ add with atomics, so where
// several indices hit one element the order of the adds, and with floats the last bits of the
// sum, may vary from run to run; gather, index_select, cat and one_hot are deterministic.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
void cat(const std::vector<Tensor>& inputs, int64_t dim, const Tensor& out);
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
void one_hot(const Tensor& labels, const Tensor& out);
// The flat position of the first value of `index` (contiguous i64 on a GPU) outside [0, size),
// or -1 when all are inside. A kernel cannot throw, so the entry points check before launching;
// the answer comes back to the host, so this is a synchronisation point.
int64_t first_out_of_range(const Tensor& index, int64_t size);
#else
[[noreturn]] inline void cat(const std::vector<Tensor>&, int64_t, const Tensor&) {
  not_built("cat");
}
[[noreturn]] inline void index_select(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  not_built("index_select");
}
[[noreturn]] inline void gather(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  not_built("gather");
}
[[noreturn]] inline void scatter_add_(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  not_built("scatter_add");
}
[[noreturn]] inline void index_add_(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  not_built("index_add");
}
[[noreturn]] inline void one_hot(const Tensor&, const Tensor&) {
  not_built("one_hot");
}
[[noreturn]] inline int64_t first_out_of_range(const Tensor&, int64_t) {
  not_built("index check");
}
#endif

}  // namespace kiln::gpu
