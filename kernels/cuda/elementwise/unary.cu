// The unary ops on the GPU, for every dtype (kernels/cuda/elementwise/elementwise.h says how the
// family is split and computed).
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/kernels/cuda/elementwise/elementwise.h"
#include "kiln/kernels/cuda/loops.cuh"
#include "kiln/kernels/elementwise.h"

namespace kiln::cuda {

namespace {

using AllUnaryOps =
    OpList<UnaryOp::neg, UnaryOp::abs, UnaryOp::sign, UnaryOp::exp, UnaryOp::log, UnaryOp::sqrt,
           UnaryOp::rsqrt, UnaryOp::square, UnaryOp::reciprocal, UnaryOp::erf, UnaryOp::sin,
           UnaryOp::cos, UnaryOp::relu, UnaryOp::leaky_relu, UnaryOp::sigmoid, UnaryOp::tanh,
           UnaryOp::gelu, UnaryOp::gelu_tanh, UnaryOp::silu, UnaryOp::clamp, UnaryOp::pow_scalar,
           UnaryOp::logical_not, UnaryOp::isnan, UnaryOp::floor, UnaryOp::ceil, UnaryOp::round,
           UnaryOp::trunc>;

// The ops the CPU kernel also accepts for integer and bool dtypes; the rest need a floating A.
template <UnaryOp kOp, class A>
constexpr bool unary_defined() {
  switch (kOp) {
    case UnaryOp::neg:
    case UnaryOp::abs:
    case UnaryOp::sign:
    case UnaryOp::square:
    case UnaryOp::relu:
    case UnaryOp::clamp:
    case UnaryOp::pow_scalar:
    case UnaryOp::logical_not:
    case UnaryOp::isnan:
    case UnaryOp::floor:
    case UnaryOp::ceil:
    case UnaryOp::round:
    case UnaryOp::trunc:
      return true;
    default:
      return std::is_floating_point_v<A>;
  }
}

template <UnaryOp kOp>
inline constexpr bool unary_writes_bool = kOp == UnaryOp::logical_not || kOp == UnaryOp::isnan;

template <class A>
__device__ __forceinline__ A sigmoid_of(A v) {
  return A(1) / (A(1) + exp(-v));
}

// One op on the compute type A. p0/p1: leaky_relu's slope, clamp's bounds, pow_scalar's exponent
// (already cast to A on the host, as the CPU casts them); int_exponent: pow_scalar on integers.
template <UnaryOp kOp, class A>
struct UnaryMath {
  A p0{}, p1{};
  int64_t int_exponent = 0;

  __device__ __forceinline__ auto operator()(A v) const {
    if constexpr (kOp == UnaryOp::neg) {
      return static_cast<A>(-v);
    } else if constexpr (kOp == UnaryOp::abs) {
      if constexpr (std::is_unsigned_v<A>)
        return v;
      else if constexpr (std::is_floating_point_v<A>)
        return fabs(v);  // clears the sign bit, as the CPU: -0.0 gives +0.0
      else
        return v < A(0) ? static_cast<A>(-v) : v;
    } else if constexpr (kOp == UnaryOp::sign) {
      if constexpr (std::is_unsigned_v<A>)
        return static_cast<A>(A(0) < v);
      else
        return static_cast<A>((A(0) < v) - (v < A(0)));
    } else if constexpr (kOp == UnaryOp::square) {
      return static_cast<A>(v * v);
    } else if constexpr (kOp == UnaryOp::relu) {
      if constexpr (std::is_unsigned_v<A>)
        return v;
      else
        return v < A(0) ? A(0) : v;  // NaN passes, as on the CPU and in PyTorch
    } else if constexpr (kOp == UnaryOp::clamp) {
      // NaN stays NaN: both comparisons are false for it.
      return v < p0 ? p0 : (v > p1 ? p1 : v);
    } else if constexpr (kOp == UnaryOp::logical_not) {
      return v == A(0);
    } else if constexpr (kOp == UnaryOp::isnan) {
      if constexpr (std::is_floating_point_v<A>)
        return static_cast<bool>(isnan(v));
      else
        return false;
    } else if constexpr (kOp == UnaryOp::floor || kOp == UnaryOp::ceil || kOp == UnaryOp::round ||
                         kOp == UnaryOp::trunc) {
      // Integers are already whole: the rounding ops copy them, as torch's.
      if constexpr (!std::is_floating_point_v<A>)
        return v;
      else if constexpr (kOp == UnaryOp::floor)
        return floor(v);
      else if constexpr (kOp == UnaryOp::ceil)
        return ceil(v);
      else if constexpr (kOp == UnaryOp::round)
        return rint(v);  // halves to even, as the CPU's nearbyint and torch.round
      else
        return trunc(v);
    } else if constexpr (kOp == UnaryOp::pow_scalar) {
      if constexpr (std::is_floating_point_v<A>) {
        return pow(v, p0);
      } else {
        A r = 1;
        for (int64_t i = 0; i < int_exponent; ++i) r = static_cast<A>(r * v);
        return r;
      }
    } else if constexpr (kOp == UnaryOp::exp) {
      return exp(v);
    } else if constexpr (kOp == UnaryOp::log) {
      return log(v);
    } else if constexpr (kOp == UnaryOp::sqrt) {
      return sqrt(v);
    } else if constexpr (kOp == UnaryOp::rsqrt) {
      // 1 / sqrt rather than rsqrt(): the CPU rounds twice too, and the results stay within an ulp.
      return A(1) / sqrt(v);
    } else if constexpr (kOp == UnaryOp::reciprocal) {
      return A(1) / v;
    } else if constexpr (kOp == UnaryOp::erf) {
      return erf(v);
    } else if constexpr (kOp == UnaryOp::sin) {
      return sin(v);
    } else if constexpr (kOp == UnaryOp::cos) {
      return cos(v);
    } else if constexpr (kOp == UnaryOp::tanh) {
      return tanh(v);
    } else if constexpr (kOp == UnaryOp::sigmoid) {
      return sigmoid_of(v);
    } else if constexpr (kOp == UnaryOp::silu) {
      return v * sigmoid_of(v);
    } else if constexpr (kOp == UnaryOp::leaky_relu) {
      return v > A(0) ? v : v * p0;
    } else if constexpr (kOp == UnaryOp::gelu) {
      return A(0.5) * v * (A(1) + erf(v * A(M_SQRT1_2)));
    } else {
      static_assert(kOp == UnaryOp::gelu_tanh);
      const A k = A(0.7978845608028654);  // sqrt(2 / pi)
      return A(0.5) * v * (A(1) + tanh(k * (v + A(0.044715) * v * v * v)));
    }
  }
};

// Storage in, storage out: converts to the compute type and back around the math.
template <class T, class O, class Math>
struct UnaryFn {
  Math math;
  __device__ __forceinline__ O operator()(T x) const {
    return device_convert<O>(math(device_convert<device_acc_t<T>>(x)));
  }
};

template <class T, UnaryOp kOp>
void run_unary(const Tensor& x, const Tensor& out, UnaryParams p) {
  using D = device_t<T>;
  using A = device_acc_t<D>;
  if constexpr (!unary_defined<kOp, A>()) {
    throw DTypeError(std::string("cuda::unary: op ") + std::to_string(static_cast<int>(kOp)) +
                     " is not defined for " + dtype_name(x.dtype()));
  } else {
    UnaryMath<kOp, A> math;
    if constexpr (kOp == UnaryOp::clamp) {
      math.p0 = static_cast<A>(p.a);
      math.p1 = static_cast<A>(p.b);
    } else if constexpr (kOp == UnaryOp::leaky_relu) {
      math.p0 = static_cast<A>(p.a);
    } else if constexpr (kOp == UnaryOp::pow_scalar) {
      if constexpr (std::is_floating_point_v<A>)
        math.p0 = static_cast<A>(p.a);
      else
        math.int_exponent = static_cast<int64_t>(p.a);
    }
    using O = std::conditional_t<unary_writes_bool<kOp>, bool, D>;
    elementwise<O, D>("unary", UnaryFn<D, O, UnaryMath<kOp, A>>{math}, out, x);
  }
}

template <class T, UnaryOp... kOps>
void dispatch_unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams p,
                    OpList<kOps...>) {
  const bool found = ((op == kOps && (run_unary<T, kOps>(x, out, p), true)) || ...);
  if (!found) throw DTypeError("cuda::unary: unknown op");
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params) {
  visit_dtype(x.dtype(), [&](auto tag) {
    dispatch_unary<typename decltype(tag)::type>(op, x, out, params, AllUnaryOps{});
  });
}

}  // namespace kiln::cuda
