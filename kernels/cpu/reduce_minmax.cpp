#include "kiln/kernels/reduce_minmax.h"

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/loops.h"
#include "kiln/kernels/layout.h"

namespace kiln::cpu {

namespace {

template <class A>
bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>)
    return std::isnan(v);
  else
    return false;
}

// For each row i of x2d: values[i] = its max (or min), indices[i] = the column of its first
// occurrence.
void minmax_rows(const Tensor& x2d, bool is_max, const Tensor& values, const Tensor& indices) {
  const int64_t rows = x2d.shape()[0], cols = x2d.shape()[1];
  visit_dtype(x2d.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_type_t<T>;
    const T* in = static_cast<const T*>(x2d.data_ptr());
    T* out_values = values.defined() ? static_cast<T*>(values.data_ptr()) : nullptr;
    int64_t* out_indices = indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr;
    parallel_for(rows, cols, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* row = in + r * cols;
        A best = convert<A>(row[0]);
        int64_t best_index = 0;
        // A NaN wins and stays: once found, nothing can replace it, so the scan can stop.
        for (int64_t c = 1; c < cols && !is_nan(best); ++c) {
          A v = convert<A>(row[c]);
          if ((is_max ? v > best : v < best) || is_nan(v)) best = v, best_index = c;
        }
        if (out_values) out_values[r] = convert<T>(best);
        if (out_indices) out_indices[r] = best_index;
      }
    });
  });
}

}  // namespace

void minmax(const Tensor& x, const std::vector<bool>& reduced, bool is_max, const Tensor& values,
            const Tensor& indices) {
  minmax_rows(reduced_last_2d(CopyKernels::cpu, x, reduced), is_max, values, indices);
}

}  // namespace kiln::cpu

namespace kiln {

const MinMaxKernels MinMaxKernels::cpu{.minmax = cpu::minmax};

}  // namespace kiln
