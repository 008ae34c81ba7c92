// max and min over any set of dims, with the index of the first occurrence, on the reduction
// engine (reduction.cuh), which decides how the work is split across blocks and threads: this
// file only says what an extreme is and how two of them combine.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/reduction.cuh"
#include "kiln/kernels/reduce_minmax.h"

namespace kiln::cuda {

namespace {

template <class A>
struct Extreme {
  A value;
  int64_t index;
};

// Compares in A (float for the 16-bit floats, as the CPU). The combine is associative and
// commutative — NaN beats everything, then the larger (smaller) value, then the smaller index —
// so a tree of combines picks exactly the element the CPU's left-to-right scan picks.
template <class T, class A, bool IsMax>
struct MinMaxOp {
  using acc_t = Extreme<A>;
  A worst;  // -inf for max (+inf for min), or the type's extreme: see worst_value()
  __device__ acc_t identity() const { return {worst, INT64_MAX}; }
  __device__ acc_t load(T v, int64_t j) const { return {device_convert<A>(v), j}; }
  __device__ acc_t combine(acc_t a, acc_t b) const {
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.index <= b.index ? a : b;
      return a_nan ? a : b;
    }
    if (IsMax ? a.value > b.value : a.value < b.value) return a;
    if (IsMax ? b.value > a.value : b.value < a.value) return b;
    return a.index <= b.index ? a : b;
  }
};

// Any element ties or beats it, and wins the tie by its smaller index.
template <class A>
A worst_value(bool is_max) {
  if constexpr (std::numeric_limits<A>::has_infinity)
    return is_max ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
  else
    return is_max ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
}

template <class D, class A>
struct MinMaxFinish {
  D* values;
  int64_t* indices;
  __device__ void operator()(int64_t o, Extreme<A> acc) const {
    if (values) values[o] = device_convert<D>(acc.value);
    if (indices) indices[o] = acc.index;
  }
};

void check_output(const Tensor& t, int64_t outputs, DType dtype, const char* what) {
  if (!t.defined()) return;
  if (t.numel() != outputs || !t.is_contiguous() || t.dtype() != dtype)
    throw ShapeError(std::string("max/min: the GPU kernel needs contiguous ") + what + " of " +
                     std::to_string(outputs) + " elements of " + dtype_name(dtype));
}

}  // namespace

void minmax_reduce(const Tensor& x, const std::vector<bool>& reduced, bool is_max,
                   const Tensor& values, const Tensor& indices) {
  const red::Plan plan = red::make_plan(x, reduced, is_max ? "max" : "min");
  if (plan.outputs == 0) return;
  if (plan.count == 0)
    throw ValueError(
        "max/min: the reduction covers zero elements; the max or min of nothing is "
        "undefined");
  check_output(values, plan.outputs, x.dtype(), "values");
  check_output(indices, plan.outputs, DType::i64, "indices");
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = device_t<T>;
    using A = acc_type_t<T>;
    const D* in = static_cast<const D*>(x.data_ptr());
    const MinMaxFinish<D, A> finish{
        values.defined() ? static_cast<D*>(values.data_ptr()) : nullptr,
        indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr};
    if (is_max)
      red::reduce(in, plan, MinMaxOp<D, A, true>{worst_value<A>(true)}, finish, x.device());
    else
      red::reduce(in, plan, MinMaxOp<D, A, false>{worst_value<A>(false)}, finish, x.device());
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr MinMaxKernels kCuda{.minmax = cuda::minmax_reduce};
}  // namespace

const MinMaxKernels* const MinMaxKernels::cuda = &kCuda;

}  // namespace kiln
