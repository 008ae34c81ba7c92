#include "kiln/kernels/sort.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <type_traits>

#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

namespace {

// a before b in ascending order: NaN above every number.
template <class A>
bool ascending_less(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

}  // namespace

void sort_rows(const Tensor& x, bool descending, const Tensor& indices) {
  const int64_t rows = x.size(0), n = x.size(1);
  int64_t* out = indices.data<int64_t>();
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_type_t<T>;
    const T* in = static_cast<const T*>(x.data_ptr());
    // n log n comparisons a row.
    const int64_t cost = n * std::max<int64_t>(1, static_cast<int64_t>(std::log2(n + 1)));
    parallel_for(rows, cost, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* row = in + r * n;
        int64_t* order = out + r * n;
        std::iota(order, order + n, int64_t{0});
        auto value = [&](int64_t i) { return convert<A>(row[i]); };
        if (descending) {
          std::stable_sort(order, order + n, [&](int64_t a, int64_t b) {
            return ascending_less(value(b), value(a));
          });
        } else {
          std::stable_sort(order, order + n, [&](int64_t a, int64_t b) {
            return ascending_less(value(a), value(b));
          });
        }
      }
    });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const SortKernels SortKernels::cpu{.sort_rows = cpu::sort_rows};

}  // namespace kiln
