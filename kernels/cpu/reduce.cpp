#include "kiln/kernels/reduce.h"

#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/loops.h"
#include "kiln/kernels/layout.h"

namespace kiln::cpu {

namespace {

// out[i] = sum_j x2d[i, j] (or the mean); out is contiguous with x2d.size(0) elements.
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

}  // namespace

// Each reduction first lays its input out as a contiguous [outer, inner] matrix with the reduced
// dims last, so every output element reduces one contiguous run.
void sum(const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, bool mean) {
  sum_rows(reduced_last_2d(CopyKernels::cpu, x, reduced), out, mean);
}

}  // namespace kiln::cpu

namespace kiln {

const ReduceKernels ReduceKernels::cpu{.sum = cpu::sum};

}  // namespace kiln
