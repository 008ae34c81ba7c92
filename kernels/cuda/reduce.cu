// sum and mean over any set of dims, on the reduction engine (reduction.cuh), which decides how
// the work is split across blocks and threads: this file only says what a sum is. Floating sums
// accumulate in float (f16, bf16, f32) or double (f64), integer sums in i64; a mean divides in
// double, as the CPU's does (kernels/cpu/reduce.cpp).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/kernels/copy.h"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/lab_routes.h"
#include "kiln/kernels/cuda/reduction.cuh"
#include "kiln/kernels/reduce.h"

namespace kiln::cuda {

namespace {

template <class T, class Acc>
struct SumOp {
  using acc_t = Acc;
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc load(T v, int64_t) const { return device_convert<Acc>(v); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
};

template <class Acc, class O>
struct SumFinish {
  O* out;
  int64_t count;
  bool mean;
  __device__ void operator()(int64_t o, Acc acc) const {
    if (mean) {
      // As the CPU: the mean is taken in double, and the mean of nothing is nan.
      out[o] = device_convert<O>(count ? static_cast<double>(acc) / static_cast<double>(count)
                                       : ::nan(""));
    } else {
      out[o] = device_convert<O>(acc);
    }
  }
};

template <class T>
using sum_acc_t =
    std::conditional_t<std::is_same_v<T, double>, double,
                       std::conditional_t<std::is_floating_point_v<acc_type_t<T>>, float, int64_t>>;

}  // namespace

namespace {

// The reduction lab's row sums take an f32 sum over the trailing dims of a contiguous,
// 16-byte-aligned tensor, as [outputs, count].
bool lab_shaped(const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, bool mean) {
  if (mean || x.dtype() != DType::f32 || out.dtype() != DType::f32 || !x.is_contiguous() ||
      reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 != 0)
    return false;
  bool seen_reduced = false;
  for (bool r : reduced) {
    if (seen_reduced && !r) return false;
    seen_reduced = seen_reduced || r;
  }
  return true;
}

}  // namespace

void sum_reduce(const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, bool mean) {
  const char* op = mean ? "mean" : "sum";
  const red::Plan plan = red::make_plan(x, reduced, op);
  if (out.numel() != plan.outputs || !out.is_contiguous())
    throw ShapeError(std::string(op) + ": the GPU kernel needs a contiguous output of " +
                     std::to_string(plan.outputs) + " elements");
  // A shape the lab's table routes runs that version instead (lab_routes.h; none by default).
  if (lab_shaped(x, reduced, out, mean)) {
    if (const lab::ReductionVersion* version = routed_sum(plan.outputs, plan.count)) {
      const Tensor workspace =
          empty({static_cast<int64_t>(lab::reduction_workspace_bytes(plan.outputs, plan.count))},
                DType::u8, x.device());
      CopyKernels::cuda->fill(workspace, 0.0);
      version->run(
          {x.data<float>(), out.data<float>(), plan.outputs, plan.count, workspace.data_ptr()});
      return;
    }
  }
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = device_t<T>;
    using Acc = sum_acc_t<T>;
    const D* in = static_cast<const D*>(x.data_ptr());
    const SumOp<D, Acc> sum_op{};
    auto run = [&](auto* o) {
      using O = std::remove_pointer_t<decltype(o)>;
      red::reduce(in, plan, sum_op, SumFinish<Acc, O>{o, plan.count, mean}, x.device());
    };
    if (out.dtype() == x.dtype()) {
      run(static_cast<D*>(out.data_ptr()));
    } else if (out.dtype() == DType::i64 && !is_floating(x.dtype())) {
      run(static_cast<int64_t*>(out.data_ptr()));
    } else {
      throw DTypeError(std::string(op) + ": the GPU kernel writes " + dtype_name(x.dtype()) +
                       " (or i64 for integers), not " + dtype_name(out.dtype()));
    }
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr ReduceKernels kCuda{.sum = cuda::sum_reduce};
}  // namespace

const ReduceKernels* const ReduceKernels::cuda = &kCuda;

}  // namespace kiln
