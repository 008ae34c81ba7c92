// The elementwise family on the GPU: unary and binary ops, relu's backward and where, for every
// dtype. The math of each op lives in UnaryMath / BinaryMath, written on the compute type A exactly
// as in kernels/cpu/elementwise.cpp (same formulas, same NaN behaviour); cuda::elementwise
// (loops.cuh) splits the work, a thread per element (or per 16-byte vector of them) in a
// grid-stride loop, and picks the vectorised, contiguous or strided kernel. Each op is its own
// template instance, so the per-element code has no switch.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/kernels/cuda/loops.cuh"
#include "kiln/kernels/elementwise.h"

namespace kiln::cuda {

namespace {

template <auto... kOps>
struct OpList {};

// ---- unary ----

using AllUnaryOps =
    OpList<UnaryOp::neg, UnaryOp::abs, UnaryOp::sign, UnaryOp::exp, UnaryOp::log, UnaryOp::sqrt,
           UnaryOp::rsqrt, UnaryOp::square, UnaryOp::reciprocal, UnaryOp::erf, UnaryOp::sin,
           UnaryOp::cos, UnaryOp::relu, UnaryOp::leaky_relu, UnaryOp::sigmoid, UnaryOp::tanh,
           UnaryOp::gelu, UnaryOp::gelu_tanh, UnaryOp::silu, UnaryOp::clamp, UnaryOp::pow_scalar,
           UnaryOp::logical_not, UnaryOp::isnan>;

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

// ---- binary ----

using AllBinaryOps =
    OpList<BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::pow,
           BinaryOp::maximum, BinaryOp::minimum, BinaryOp::eq, BinaryOp::ne, BinaryOp::lt,
           BinaryOp::le, BinaryOp::gt, BinaryOp::ge, BinaryOp::logical_and, BinaryOp::logical_or>;

template <BinaryOp kOp>
inline constexpr bool binary_writes_bool =
    kOp == BinaryOp::eq || kOp == BinaryOp::ne || kOp == BinaryOp::lt || kOp == BinaryOp::le ||
    kOp == BinaryOp::gt || kOp == BinaryOp::ge || kOp == BinaryOp::logical_and ||
    kOp == BinaryOp::logical_or;

// Empty when defined; otherwise the message the CPU kernel throws for the same case.
template <BinaryOp kOp, class A>
constexpr const char* binary_undefined_reason() {
  if constexpr (binary_writes_bool<kOp>) {
    return nullptr;
  } else if constexpr (std::is_same_v<A, bool>) {
    if (kOp == BinaryOp::add || kOp == BinaryOp::mul || kOp == BinaryOp::maximum ||
        kOp == BinaryOp::minimum)
      return nullptr;
    return "is not defined for bool";
  } else if constexpr (!std::is_floating_point_v<A>) {
    return kOp == BinaryOp::div ? "integer div reaches the kernel; the op promotes to f32"
                                : nullptr;
  } else {
    return nullptr;
  }
}

template <BinaryOp kOp, class A>
struct BinaryMath {
  A alpha{};  // add and sub scale their second operand by it

  __device__ __forceinline__ auto operator()(A x, A y) const {
    if constexpr (kOp == BinaryOp::eq) {
      return x == y;
    } else if constexpr (kOp == BinaryOp::ne) {
      return x != y;
    } else if constexpr (kOp == BinaryOp::lt) {
      return x < y;
    } else if constexpr (kOp == BinaryOp::le) {
      return x <= y;
    } else if constexpr (kOp == BinaryOp::gt) {
      return x > y;
    } else if constexpr (kOp == BinaryOp::ge) {
      return x >= y;
    } else if constexpr (kOp == BinaryOp::logical_and) {
      return x != A(0) && y != A(0);
    } else if constexpr (kOp == BinaryOp::logical_or) {
      return x != A(0) || y != A(0);
    } else if constexpr (std::is_same_v<A, bool>) {
      if constexpr (kOp == BinaryOp::add || kOp == BinaryOp::maximum)
        return x || y;
      else
        return x && y;  // mul, minimum
    } else if constexpr (kOp == BinaryOp::add) {
      return static_cast<A>(x + alpha * y);
    } else if constexpr (kOp == BinaryOp::sub) {
      return static_cast<A>(x - alpha * y);
    } else if constexpr (kOp == BinaryOp::mul) {
      return static_cast<A>(x * y);
    } else if constexpr (kOp == BinaryOp::div) {
      return x / y;
    } else if constexpr (kOp == BinaryOp::pow) {
      if constexpr (std::is_floating_point_v<A>) {
        return pow(x, y);
      } else {
        A r = 1;
        for (A i = 0; i < y; ++i) r = static_cast<A>(r * x);
        return r;
      }
    } else if constexpr (kOp == BinaryOp::maximum) {
      // NaN propagates, as torch.maximum.
      return (x != x || x > y) ? x : y;
    } else {
      static_assert(kOp == BinaryOp::minimum);
      return (x != x || x < y) ? x : y;
    }
  }
};

template <class T, class O, class Math>
struct BinaryFn {
  Math math;
  __device__ __forceinline__ O operator()(T x, T y) const {
    using A = device_acc_t<T>;
    return device_convert<O>(math(device_convert<A>(x), device_convert<A>(y)));
  }
};

template <class T, BinaryOp kOp>
void run_binary(const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  using D = device_t<T>;
  using A = device_acc_t<D>;
  constexpr const char* reason = binary_undefined_reason<kOp, A>();
  if constexpr (reason != nullptr) {
    throw DTypeError(std::string("cuda::binary: op ") + std::to_string(static_cast<int>(kOp)) +
                     " " + reason + " (" + dtype_name(a.dtype()) + ")");
  } else {
    BinaryMath<kOp, A> math;
    if constexpr (!std::is_same_v<A, bool>) math.alpha = static_cast<A>(alpha);
    using O = std::conditional_t<binary_writes_bool<kOp>, bool, D>;
    elementwise<O, D, D>("binary", BinaryFn<D, O, BinaryMath<kOp, A>>{math}, out, a, b);
  }
}

template <class T, BinaryOp... kOps>
void dispatch_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
                     OpList<kOps...>) {
  const bool found = ((op == kOps && (run_binary<T, kOps>(a, b, out, alpha), true)) || ...);
  if (!found) throw DTypeError("cuda::binary: unknown op");
}

// ---- relu_backward and where ----

template <class T>
struct ReluBackwardFn {
  __device__ __forceinline__ T operator()(T g, T y) const {
    using A = device_acc_t<T>;
    // PyTorch's threshold_backward: the gradient passes unless y <= 0, so it passes at NaN.
    return device_convert<T>(device_convert<A>(y) <= A(0) ? A(0) : device_convert<A>(g));
  }
};

template <class T>
struct WhereFn {
  __device__ __forceinline__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params) {
  visit_dtype(x.dtype(), [&](auto tag) {
    dispatch_unary<typename decltype(tag)::type>(op, x, out, params, AllUnaryOps{});
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  visit_dtype(a.dtype(), [&](auto tag) {
    dispatch_binary<typename decltype(tag)::type>(op, a, b, out, alpha, AllBinaryOps{});
  });
}

void relu_backward(const Tensor& grad, const Tensor& output, const Tensor& out) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using D = device_t<typename decltype(tag)::type>;
    elementwise<D, D, D>("relu_backward", ReluBackwardFn<D>{}, out, grad, output);
  });
}

void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using D = device_t<typename decltype(tag)::type>;
    elementwise<D, bool, D, D>("where", WhereFn<D>{}, out, condition, a, b);
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr ElementwiseKernels kCuda{.unary = cuda::unary,
                                   .binary = cuda::binary,
                                   .relu_backward = cuda::relu_backward,
                                   .where = cuda::where};
}  // namespace

const ElementwiseKernels* const ElementwiseKernels::cuda = &kCuda;

}  // namespace kiln
