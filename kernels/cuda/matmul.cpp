// cuBLAS is column-major and kiln row-major: a row-major C = op(A) op(B) is the column-major
// Cᵀ = op(B)ᵀ op(A)ᵀ, and a row-major buffer read column-major is its transpose. So every call
// swaps the operands (B first, then A) and the sizes (n before m), and keeps each operand's own
// transpose flag: no data moves.
#include "kiln/kernels/matmul.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/core/backends.h"
#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/gemm.h"
#include "kiln/kernels/cuda/handles.h"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/layout.h"

namespace kiln::cuda {

namespace {

// One strided-batched product on raw buffers: batch i reads a + i*stride_a and b + i*stride_b
// (strides in elements, 0 for a broadcast operand) and writes c + i*stride_c.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 1, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 1, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 1, stride_c = 0;
  int64_t batch = 1;
  bool accumulate = false;
};

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      throw DTypeError(fmt::format("gemm: no cuBLAS type for {}", dtype_name(dtype)));
  }
}

// k = 0: the product is empty, so c is zero (or keeps its value when accumulating). Handled here
// because BLAS leaves c unread only by convention, and c may hold uninitialised memory.
void zero_output(DType dtype, const GemmArgs& g) {
  const size_t item = dtype_size(dtype);
  const size_t row_bytes = static_cast<size_t>(g.n) * item, pitch = g.ldc * item;
  if (g.batch == 1 || g.stride_c == g.ldc * g.m) {
    KILN_CUDA_CHECK(cudaMemset2DAsync(g.c, pitch, 0, row_bytes, g.m * g.batch, stream()));
    return;
  }
  for (int64_t i = 0; i < g.batch; ++i)
    KILN_CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(g.c) + i * g.stride_c * item, pitch, 0,
                                      row_bytes, g.m, stream()));
}

void gemm_strided_batched(DType dtype, const GemmArgs& g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  if (g.k == 0) {
    if (!g.accumulate) zero_output(dtype, g);
    return;
  }
  int device = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  cublasHandle_t handle = cublas_handle(device);
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  using ll = long long;
  if (dtype == DType::f64) {
    const double alpha = 1.0, beta = g.accumulate ? 1.0 : 0.0;
    const auto* a = static_cast<const double*>(g.a);
    const auto* b = static_cast<const double*>(g.b);
    auto* c = static_cast<double*>(g.c);
    if (g.batch == 1) {
      KILN_CUBLAS_CHECK(cublasDgemm_64(handle, op_b, op_a, g.n, g.m, g.k, &alpha, b, g.ldb, a,
                                       g.lda, &beta, c, g.ldc));
    } else {
      KILN_CUBLAS_CHECK(cublasDgemmStridedBatched_64(handle, op_b, op_a, g.n, g.m, g.k, &alpha, b,
                                                     g.ldb, static_cast<ll>(g.stride_b), a, g.lda,
                                                     static_cast<ll>(g.stride_a), &beta, c, g.ldc,
                                                     static_cast<ll>(g.stride_c), g.batch));
    }
    return;
  }
  // f16/bf16 read and write their own type but multiply and accumulate in f32 (alpha and beta are
  // then floats); f32 may drop to TF32 products only when the user allowed it.
  const cudaDataType_t type = cuda_data_type(dtype);
  const cublasComputeType_t compute = dtype == DType::f32 && backends::cuda_matmul_allow_tf32()
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  if (g.batch == 1) {
    KILN_CUBLAS_CHECK(cublasGemmEx_64(handle, op_b, op_a, g.n, g.m, g.k, &alpha, g.b, type, g.ldb,
                                      g.a, type, g.lda, &beta, g.c, type, g.ldc, compute,
                                      CUBLAS_GEMM_DEFAULT));
  } else {
    KILN_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
        handle, op_b, op_a, g.n, g.m, g.k, &alpha, g.b, type, g.ldb, static_cast<ll>(g.stride_b),
        g.a, type, g.lda, static_cast<ll>(g.stride_a), &beta, g.c, type, g.ldc,
        static_cast<ll>(g.stride_c), g.batch, compute, CUBLAS_GEMM_DEFAULT));
  }
}

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, double>) return DType::f64;
  if constexpr (std::is_same_v<T, Half>) return DType::f16;
  if constexpr (std::is_same_v<T, BFloat16>) return DType::bf16;
}

// The batch dims split in two: the innermost ones, which step through a and b with one stride
// each and so make one strided-batched call, and the outer ones, one call per index.
struct BatchPlan {
  int64_t inner = 1, stride_a = 0, stride_b = 0;
  std::vector<int64_t> outer_offsets_a, outer_offsets_b;  // element offsets per outer index
};

BatchPlan plan_batches(const Tensor& a, const Tensor& b, const Shape& batch) {
  BatchPlan plan;
  int64_t d = static_cast<int64_t>(batch.size()) - 1;
  for (; d >= 0; --d) {
    const int64_t size = batch[d], sa = a.strides()[d], sb = b.strides()[d];
    if (size == 1) continue;  // its stride never moves the offset
    if (plan.inner == 1) {
      plan.inner = size, plan.stride_a = sa, plan.stride_b = sb;
    } else if (sa == plan.inner * plan.stride_a && sb == plan.inner * plan.stride_b) {
      plan.inner *= size;
    } else {
      break;
    }
  }
  const Shape outer(batch.begin(), batch.begin() + (d + 1));
  const int64_t count = shape_numel(outer);
  plan.outer_offsets_a.resize(count);
  plan.outer_offsets_b.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, offset_a = 0, offset_b = 0;
    for (int64_t j = static_cast<int64_t>(outer.size()) - 1; j >= 0; --j) {
      offset_a += (rest % outer[j]) * a.strides()[j];
      offset_b += (rest % outer[j]) * b.strides()[j];
      rest /= outer[j];
    }
    plan.outer_offsets_a[i] = offset_a;
    plan.outer_offsets_b[i] = offset_b;
  }
  return plan;
}

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  GemmArgs g;
  g.trans_a = trans_a, g.trans_b = trans_b;
  g.m = m, g.n = n, g.k = k;
  g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.c = c, g.ldc = ldc;
  g.accumulate = accumulate;
  gemm_strided_batched(dtype_of<T>(), g);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                          const float*, int64_t, float*, int64_t, bool);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                           const double*, int64_t, double*, int64_t, bool);
template void gemm<Half>(bool, bool, int64_t, int64_t, int64_t, const Half*, int64_t, const Half*,
                         int64_t, Half*, int64_t, bool);
template void gemm<BFloat16>(bool, bool, int64_t, int64_t, int64_t, const BFloat16*, int64_t,
                             const BFloat16*, int64_t, BFloat16*, int64_t, bool);

Tensor as_gemm_operand(const Tensor& t) {
  return matrix_layout(t).ok ? t : contiguous_with(*CopyKernels::cuda, t);
}

void batched_matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  const DType dtype = out.dtype();
  KILN_CHECK(
      dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16,
      DTypeError, "batched_matmul: expected f32, f64, f16 or bf16, got {}", dtype_name(dtype));
  KILN_CHECK(a.dtype() == dtype && b.dtype() == dtype, DTypeError,
             "batched_matmul: operands {} and {} must have the output's dtype {}",
             dtype_name(a.dtype()), dtype_name(b.dtype()), dtype_name(dtype));
  const Device device = out.device();
  KILN_CHECK(device.is_cuda() && a.device() == device && b.device() == device, DeviceError,
             "batched_matmul: expected every tensor on one GPU, got {}, {} and output {}",
             a.device().str(), b.device().str(), device.str());
  KILN_CHECK(out.is_contiguous(), ValueError, "batched_matmul: the output must be contiguous");
  const int64_t d = out.dim();
  const int64_t n = out.shape()[d - 2], m = out.shape()[d - 1], k = a.shape()[d - 1];
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  if (shape_numel(batch) == 0 || n == 0 || m == 0) return;
  const GemmLayout la = matrix_layout(a), lb = matrix_layout(b);
  KILN_CHECK(la.ok && lb.ok, ValueError,
             "batched_matmul: operands must be row- or column-major matrices (strides {} and {})",
             shape_str(a.strides()), shape_str(b.strides()));

  const cuda::DeviceGuard guard(device.index);
  if (k == 0) {  // no operand is read; out is one contiguous block
    if (!accumulate)
      KILN_CUDA_CHECK(
          cudaMemsetAsync(out.data_ptr(), 0, out.numel() * dtype_size(dtype), stream()));
    return;
  }
  const BatchPlan plan = plan_batches(a, b, batch);
  const size_t item = dtype_size(dtype);
  const auto* pa = static_cast<const char*>(a.data_ptr());
  const auto* pb = static_cast<const char*>(b.data_ptr());
  auto* pc = static_cast<char*>(out.data_ptr());
  GemmArgs g;
  g.trans_a = la.trans, g.trans_b = lb.trans;
  g.m = n, g.n = m, g.k = k;  // gemm's m x n output is out's n x m matrix
  g.lda = la.ld, g.ldb = lb.ld, g.ldc = m;
  g.stride_a = plan.stride_a, g.stride_b = plan.stride_b, g.stride_c = n * m;
  g.batch = plan.inner;
  g.accumulate = accumulate;
  for (size_t i = 0; i < plan.outer_offsets_a.size(); ++i) {
    g.a = pa + plan.outer_offsets_a[i] * item;
    g.b = pb + plan.outer_offsets_b[i] * item;
    g.c = pc + static_cast<int64_t>(i) * plan.inner * n * m * item;
    gemm_strided_batched(dtype, g);
  }
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr MatmulKernels kCuda{.batched_matmul = cuda::batched_matmul,
                              .as_gemm_operand = cuda::as_gemm_operand,
                              .takes_half = true};
}  // namespace

const MatmulKernels* const MatmulKernels::cuda = &kCuda;

}  // namespace kiln
