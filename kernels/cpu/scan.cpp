#include "kiln/kernels/scan.h"

#include <array>
#include <cstdint>
#include <type_traits>

#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

void cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out) {
  const int64_t n = x.shape()[dim];
  const int64_t x_step = x.strides()[dim], out_step = out.strides()[dim];
  // One call per line along dim: the line's start is the element with index 0 in dim.
  Shape lines = x.shape();
  lines[dim] = 1;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_floating_point_v<acc_type_t<T>>, double, int64_t>;
    const T* in = static_cast<const T*>(x.data_ptr());
    visit_dtype(out.dtype(), [&](auto out_tag) {
      using O = typename decltype(out_tag)::type;
      O* o = static_cast<O*>(out.data_ptr());
      for_each_offset<2>(lines, {out.strides(), x.strides()}, [&](const std::array<int64_t, 2>& k) {
        Acc acc = 0;
        for (int64_t i = 0; i < n; ++i) {
          int64_t j = reverse ? n - 1 - i : i;
          acc += convert<Acc>(in[k[1] + j * x_step]);
          o[k[0] + j * out_step] = convert<O>(acc);
        }
      });
    });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const ScanKernels ScanKernels::cpu{.cumsum = cpu::cumsum};

}  // namespace kiln
