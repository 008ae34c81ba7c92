// Dropout on the GPU: mask = kept ? 1 / (1 - p) : 0 and out = x * mask in one pass. Element i is
// kept iff philox_uniform(seed, offset, i) >= p (kernels/dropout.h), and one Philox block holds
// the draws of four consecutive elements, so a thread takes a block: four neighbouring elements
// from one evaluation (grid-stride over blocks, kThreads threads a CUDA block). A draw depends on
// i alone, so any grid gives the CPU's mask.
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/core/cuda_check.h"
#include "kiln/core/philox.h"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/dropout.h"

namespace kiln::cuda {

namespace {

// A scalar of the op's dtype as the CPU's wrap_scalar makes it: the 16-bit floats via float.
template <class T>
__host__ __device__ T from_double(double v) {
  if constexpr (is_reduced_float_v<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// `u >= p` in double is the CPU's comparison: there u comes from uniform(..., f64), which holds
// philox_uniform's float exactly.
template <class T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ out, T* __restrict__ mask,
                               int64_t n, double p, T scale, uint64_t seed, uint64_t offset) {
  using A = acc_type_t<T>;
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = global_thread_index(); b < blocks; b += grid_stride()) {
    const PhiloxCounter words = philox_block(seed, offset, static_cast<uint64_t>(b));
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * b + k;
      if (i >= n) break;
      const bool keep = static_cast<double>(uint32_to_uniform_float(words.x[k])) >= p;
      const T m = keep ? scale : T(0.0f);
      mask[i] = m;
      out[i] = T(static_cast<A>(x[i]) * static_cast<A>(m));
    }
  }
}

}  // namespace

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out,
             const Tensor& mask) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const unsigned grid = grid_for((n + 3) / 4);  // a thread per Philox block of four
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || is_reduced_float_v<T>) {
      KILN_LAUNCH(grid, kThreads, 0, stream(), dropout_kernel<T>)
      (x.data<T>(), out.data<T>(), mask.data<T>(), n, p, from_double<T>(1.0 / (1.0 - p)), seed,
       offset);
      KILN_CUDA_CHECK_LAUNCH();
    } else {
      throw DTypeError(std::string("dropout: expected a floating dtype, got ") +
                       dtype_name(x.dtype()));
    }
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr DropoutKernels kCuda{.dropout = cuda::dropout};
}  // namespace

const DropoutKernels* const DropoutKernels::cuda = &kCuda;

}  // namespace kiln
