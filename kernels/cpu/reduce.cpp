#include "kiln/kernels/cpu/reduce.h"

#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

Tensor reduced_last_2d(const Tensor& x, const std::vector<bool>& reduced) {
  std::vector<int64_t> order;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!reduced[d]) order.push_back(d), outer *= x.shape()[d];
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) order.push_back(d), inner *= x.shape()[d];
  return x.permute(order).contiguous().view({outer, inner});
}

void sum_rows(const Tensor& x2d, const Tensor& out, bool mean) {
  const int64_t rows = x2d.shape()[0], cols = x2d.shape()[1];
  visit_dtype(x2d.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_floating_point_v<acc_type_t<T>>, double, int64_t>;
    const T* in = static_cast<const T*>(x2d.data_ptr());
    visit_dtype(out.dtype(), [&](auto out_tag) {
      using O = typename decltype(out_tag)::type;
      O* o = static_cast<O*>(out.data_ptr());
      parallel_for(rows, cols, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          Acc acc = 0;
          const T* row = in + r * cols;
          for (int64_t c = 0; c < cols; ++c) acc += convert<Acc>(row[c]);
          if (mean) {
            o[r] = convert<O>(cols ? static_cast<double>(acc) / static_cast<double>(cols) : NAN);
          } else {
            o[r] = convert<O>(acc);
          }
        }
      });
    });
  });
}

}  // namespace kiln::cpu
