// The CUDA simulator's matmul (KILN_CUDA=SIM, docs/simulator.md): cuBLAS is not simulated, so in
// this build matmul on a cuda device runs the CPU's kernels (MatmulKernels::cpu, Eigen) on the
// simulated device memory, which is host memory, and cuda::gemm is a plain loop on the host; each
// call is noted as a library call (sim::library_calls) where cuBLAS would launch its kernels.
// Each product goes through sim::library_call on the current stream, so it runs in that stream's
// order: at once on a default stream, when waited for on a lazy one, and on a capturing stream at
// each launch of the graph. Replaces kernels/cuda/matmul.cpp in this
// build only (CMakeLists.txt).
//
// With backends::cuda_matmul_allow_tf32() (off by default, as PyTorch's), kiln asks cuBLAS for
// CUBLAS_COMPUTE_32F_FAST_TF32, which lets it use TF32 tensor cores: on a GPU of compute
// capability 8.0 or newer the f32 products here round both operands to TF32 (tf32.h); below 8.0
// there are none, and cuBLAS computes in f32, as this does.
//
// Nothing kiln sends is refused: cublasGemmEx and its strided-batched form take f16 and bf16 with
// f32 compute on every GPU CUDA 13 builds for (7.5 and newer; bf16 GEMMs run on a T4, sm_75, in
// PyTorch's CI, pytorch/pytorch#57773, since #50442 removed its Ampere-only check), f32 with or
// without FAST_TF32 and f64 everywhere.
#include "kiln/kernels/matmul.h"

#include <cstdint>

#include "kiln/core/backends.h"
#include "kiln/core/cuda.h"
#include "kiln/core/dtype.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/cuda/gemm.h"
#include "kiln/kernels/cuda/simulator/borrowed.h"
#include "kiln/kernels/cuda/simulator/tf32.h"
#include "kiln/kernels/layout.h"
#include "kiln/sim/grid.h"

namespace kiln::cuda {

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  sim::note_library_call("cublas gemm");
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += (trans_a ? a[p * lda + i] : a[i * lda + p]) *
               (trans_b ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + sum : sum;
    }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                          const float*, int64_t, float*, int64_t, bool);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                           const double*, int64_t, double*, int64_t, bool);

}  // namespace kiln::cuda

namespace kiln {

namespace {

using sim_library::Borrowed;

// An f32 operand rounded to TF32, as a contiguous host copy (host memory: the call may run inside
// any cudart call that waits for its stream, as conv2d.cpp's copies).
Tensor tf32_operand(const Tensor& t) {
  Tensor out = empty(t.shape(), DType::f32, Device::cpu());
  CopyKernels::cpu.copy(t, out);
  float* data = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) data[i] = sim_library::round_to_tf32(data[i]);
  return out;
}

void batched_matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  // Decided when the op runs (at capture for a graph), as cuBLAS takes the compute type per call.
  const bool tf32 = out.dtype() == DType::f32 && backends::cuda_matmul_allow_tf32() &&
                    sim_library::has_tf32(out.device().index);
  sim::library_call("cublas batched matmul", cuda::current_stream_handle(),
                    [a = Borrowed(a), b = Borrowed(b), out = Borrowed(out), accumulate, tf32] {
                      if (!tf32) return MatmulKernels::cpu.batched_matmul(*a, *b, *out, accumulate);
                      MatmulKernels::cpu.batched_matmul(tf32_operand(*a), tf32_operand(*b), *out,
                                                        accumulate);
                    });
}

// As the CPU's, but a copy is made by the GPU's copy kernel: stream-ordered, so recorded in a
// capture like the product that reads it.
Tensor as_gemm_operand(const Tensor& t) {
  return matrix_layout(t).ok ? t : contiguous_with(*CopyKernels::cuda, t);
}

// takes_half false: f16 and bf16 go through f32 copies made by the op (the CPU's table takes bf16
// itself, for oneDNN).
const MatmulKernels kSimulated{batched_matmul, as_gemm_operand, false};

}  // namespace

const MatmulKernels* const MatmulKernels::cuda = &kSimulated;

}  // namespace kiln
