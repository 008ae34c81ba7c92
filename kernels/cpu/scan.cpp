#include "kiln/kernels/scan.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

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

void cumprod(const Tensor& x, int64_t dim, const Tensor& out) {
  const int64_t n = x.shape()[dim];
  const int64_t x_step = x.strides()[dim], out_step = out.strides()[dim];
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
        Acc acc = 1;
        for (int64_t i = 0; i < n; ++i) {
          acc *= convert<Acc>(in[k[1] + i * x_step]);
          o[k[0] + i * out_step] = convert<O>(acc);
        }
      });
    });
  });
}

void cumprod_backward(const Tensor& x, const Tensor& g, int64_t dim, const Tensor& out) {
  const int64_t n = x.shape()[dim];
  const int64_t x_step = x.strides()[dim], g_step = g.strides()[dim], out_step = out.strides()[dim];
  Shape lines = x.shape();
  lines[dim] = 1;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<acc_type_t<T>>) {
      const T* in = static_cast<const T*>(x.data_ptr());
      const T* grad = static_cast<const T*>(g.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      for_each_offset<3>(
          lines, {out.strides(), x.strides(), g.strides()}, [&](const std::array<int64_t, 3>& k) {
            // The products before each element, then r from the end. Lines
            // may run on several threads: a buffer per thread.
            thread_local std::vector<double> before;
            before.resize(static_cast<size_t>(n));
            double product = 1;
            for (int64_t i = 0; i < n; ++i) {
              before[i] = product;
              product *= convert<double>(in[k[1] + i * x_step]);
            }
            double r = 0;
            for (int64_t i = n - 1; i >= 0; --i) {
              const double next = i + 1 < n ? convert<double>(in[k[1] + (i + 1) * x_step]) : 0.0;
              r = convert<double>(grad[k[2] + i * g_step]) + next * r;
              o[k[0] + i * out_step] = convert<T>(before[i] * r);
            }
          });
    } else {
      throw DTypeError(std::string("cumprod_backward: expected a floating dtype, got ") +
                       dtype_name(x.dtype()));
    }
  });
}

}  // namespace kiln::cpu

namespace kiln {

const ScanKernels ScanKernels::cpu{
    .cumsum = cpu::cumsum, .cumprod = cpu::cumprod, .cumprod_backward = cpu::cumprod_backward};

}  // namespace kiln
