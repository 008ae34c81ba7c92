// CPU matrix products: f32 through oneDNN's sgemm (JIT kernels for the CPU that runs, as PyTorch's
// BLAS), bf16 through oneDNN's matmul (kernels/cpu/matmul_onednn.h: AVX512-BF16 or AMX), f64 and
// every product oneDNN cannot take through Eigen; f16, and bf16 where oneDNN has no kernel, go
// through f32 copies rounded once at the end.
#include "kiln/kernels/matmul.h"

#if KILN_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>

#include "kiln/core/backends.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/kernels/cpu/onednn_isa.h"
#endif

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/kernels/copy.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/loops.h"
#include "kiln/kernels/cpu/matmul_onednn.h"
#include "kiln/kernels/layout.h"

namespace kiln::cpu {

namespace {

template <class T, int Order>
using ConstMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, 0,
                            Eigen::OuterStride<>>;
template <class T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
                          Eigen::OuterStride<>>;

// A transposed row-major buffer is the same bytes read column-major: no copy, Eigen packs either.
template <class T, class F>
void with_operand(bool trans, const T* data, int64_t rows, int64_t cols, int64_t ld, F&& f) {
  if (trans) {
    f(ConstMap<T, Eigen::ColMajor>(data, rows, cols, Eigen::OuterStride<>(ld)));
  } else {
    f(ConstMap<T, Eigen::RowMajor>(data, rows, cols, Eigen::OuterStride<>(ld)));
  }
}

#if KILN_WITH_ONEDNN
// dnnl_sgemm (row-major, as kiln) where oneDNN is on, capped to kiln's level and the strides are
// ones it takes; false leaves the product to Eigen. Inside a parallel region (many small products)
// oneDNN runs on the calling thread.
bool onednn_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                  bool accumulate) {
  if (!backends::onednn_enabled() || onednn_level() != cpu_isa()) return false;
  if (lda < std::max<int64_t>(1, trans_a ? m : k) || ldb < std::max<int64_t>(1, trans_b ? k : n) ||
      ldc < std::max<int64_t>(1, n))
    return false;
  return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb,
                    accumulate ? 1.0f : 0.0f, c, ldc) == dnnl_success;
}
#endif

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  if (m == 0 || n == 0) return;
#if KILN_WITH_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (k > 0 && onednn_sgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate))
      return;
  }
#endif
  OutMap<T> cm(c, m, n, Eigen::OuterStride<>(ldc));
  if (k == 0) {
    if (!accumulate) cm.setZero();
    return;
  }
  with_operand(trans_a, a, m, k, lda, [&](const auto& am) {
    with_operand(trans_b, b, k, n, ldb, [&](const auto& bm) {
      if (accumulate) {
        cm.noalias() += am * bm;
      } else {
        cm.noalias() = am * bm;
      }
    });
  });
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                          const float*, int64_t, float*, int64_t, bool);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                           const double*, int64_t, double*, int64_t, bool);

namespace {

// Element offsets of every batch matrix of t, in row-major order of the batch dims.
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  const int64_t count = shape_numel(batch);
  std::vector<int64_t> offsets(count, 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, offset = 0;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      offset += (rest % batch[d]) * t.strides()[d];
      rest /= batch[d];
    }
    offsets[i] = offset;
  }
  return offsets;
}

}  // namespace

Tensor as_gemm_operand(const Tensor& t) {
  return matrix_layout(t).ok ? t : contiguous_with(CopyKernels::cpu, t);
}

namespace {

// A contiguous f32 copy of a 16-bit t.
Tensor widened(const Tensor& t) {
  Tensor wide = empty(t.shape(), DType::f32, Device::cpu());
  CopyKernels::cpu.copy(t, wide);
  return wide;
}

}  // namespace

void batched_matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  if (out.dtype() == DType::bf16 || out.dtype() == DType::f16) {
    if (onednn_bf16_matmul(a, b, out, accumulate)) return;
    // f16, or a bf16 product oneDNN does not take: through f32 copies, rounded once at the end.
    const Tensor wide_out =
        accumulate ? widened(out) : empty(out.shape(), DType::f32, Device::cpu());
    batched_matmul(widened(a), widened(b), wide_out, accumulate);
    CopyKernels::cpu.copy(wide_out, out);
    return;
  }
  const int64_t d = out.dim();
  const int64_t n = out.shape()[d - 2], m = out.shape()[d - 1], k = a.shape()[d - 1];
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  const int64_t count = shape_numel(batch);
  if (count == 0 || n == 0 || m == 0) return;
  const GemmLayout la = matrix_layout(a), lb = matrix_layout(b);
  KILN_CHECK(la.ok && lb.ok, ValueError,
             "batched_matmul: operands must be row- or column-major matrices (strides {} and {})",
             shape_str(a.strides()), shape_str(b.strides()));
  const std::vector<int64_t> a_offsets = batch_offsets(a, batch);
  const std::vector<int64_t> b_offsets = batch_offsets(b, batch);
  visit_f32_f64("matmul", out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = out.data<T>();
    // Many small products run one per thread, each on Eigen's single-threaded path (Eigen sees the
    // parallel region); a lone large product is left to Eigen's own threads.
    parallel_for(count, n * m * std::max<int64_t>(k, 1), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        gemm<T>(la.trans, lb.trans, n, m, k, pa + a_offsets[i], la.ld, pb + b_offsets[i], lb.ld,
                pc + i * n * m, m, accumulate);
    });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const MatmulKernels MatmulKernels::cpu{.batched_matmul = cpu::batched_matmul,
                                       .as_gemm_operand = cpu::as_gemm_operand,
                                       .takes_half = true};

}  // namespace kiln
