// copy (with a dtype conversion and any strides) and fill on the GPU. A same-dtype copy between
// contiguous tensors is one cudaMemcpyAsync: raw bytes, nothing to convert or index. The rest is
// cuda::elementwise (loops.cuh): a thread per element (or 16-byte vector) in a grid-stride loop,
// converting through device_convert so that values round as kiln::convert rounds them on the CPU.
#include <cstddef>

#include "kiln/kernels/copy.h"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/cuda/loops.cuh"

namespace kiln::cuda {

namespace {

template <class D, class S>
struct Cast {
  __device__ D operator()(S v) const { return device_convert<D>(v); }
};

template <class T>
struct Constant {
  T value;
  __device__ T operator()() const { return value; }
};

}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    if (src.data_ptr() == dst.data_ptr()) return;
    cuda::DeviceGuard guard(dst.device());
    // copy_ hands in no overlapping pair other than a tensor with itself (it clones first).
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(),
                                    static_cast<size_t>(dst.numel()) * dst.element_size(),
                                    cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  visit_dtype(src.dtype(), [&](auto src_tag) {
    using S = device_t<typename decltype(src_tag)::type>;
    visit_dtype(dst.dtype(), [&](auto dst_tag) {
      using D = device_t<typename decltype(dst_tag)::type>;
      elementwise<D, S>("copy", Cast<D, S>{}, dst, src);
    });
  });
}

void fill(const Tensor& dst, double value) {
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = device_t<T>;
    elementwise<D>("fill", Constant<D>{to_device_value(convert<T>(value))}, dst);
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr CopyKernels kCuda{.copy = cuda::copy, .fill = cuda::fill};
}  // namespace

const CopyKernels* const CopyKernels::cuda = &kCuda;

}  // namespace kiln
