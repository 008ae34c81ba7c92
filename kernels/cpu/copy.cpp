#include "kiln/kernels/copy.h"

#include <array>
#include <cstdint>
#include <cstring>

#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

void copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    std::memmove(dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size());
    return;
  }
  visit_dtype(src.dtype(), [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    visit_dtype(dst.dtype(), [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      const S* in = static_cast<const S*>(src.data_ptr());
      D* out = static_cast<D*>(dst.data_ptr());
      for_each_offset<2>(
          dst.shape(), {dst.strides(), src.strides()},
          [&](const std::array<int64_t, 2>& o) { out[o[0]] = convert<D>(in[o[1]]); });
    });
  });
}

void fill(const Tensor& dst, double value) {
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = convert<T>(value);
    T* out = static_cast<T*>(dst.data_ptr());
    for_each_offset<1>(dst.shape(), {dst.strides()},
                       [&](const std::array<int64_t, 1>& o) { out[o[0]] = v; });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const CopyKernels CopyKernels::cpu{.copy = cpu::copy, .fill = cpu::fill};

}  // namespace kiln
