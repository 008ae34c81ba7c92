#include "kiln/kernels/elementwise.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kiln/core/half.h"
#include "kiln/kernels/cpu/convert/convert.h"
#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

namespace {

// The 16-bit floats in and out, contiguous: a block at a time is converted to f32, the op runs on
// floats, and the block is rounded back with the vector conversions of convert.h, which round as
// Half and BFloat16 do; so the values are the element-wise loop's bit for bit (each element to
// float, f, rounded once), without its scalar conversions, which cost more than the op itself
// (a bf16 add took 2.5 times an f32 add's time for half the bytes).
template <class T>
constexpr bool kSixteenBitFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

constexpr int64_t kFloatBlock = 512;

template <class T>
void to_floats(const ConvertKernels& k, const T* src, float* dst, int64_t n) {
  static_assert(sizeof(T) == sizeof(uint16_t));
  if constexpr (std::is_same_v<T, BFloat16>) {
    k.bf16_to_f32(&src->bits, dst, n);
  } else {
    k.f16_to_f32(&src->bits, dst, n);
  }
}

template <class T>
void from_floats(const ConvertKernels& k, const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    k.f32_to_bf16(src, &dst->bits, n);
  } else {
    k.f32_to_f16(src, &dst->bits, n);
  }
}

// out[i] = f(in[0][i], ..., in[N - 1][i]) over n contiguous 16-bit floats, through float blocks.
template <class T, size_t N, class F>
void float_blocks(const std::array<const T*, N>& in, T* out, int64_t n, F f) {
  const ConvertKernels& k = convert_kernels();
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    float block[N][kFloatBlock];
    for (int64_t i = begin; i < end; i += kFloatBlock) {
      const int64_t m = std::min(kFloatBlock, end - i);
      for (size_t a = 0; a < N; ++a) to_floats(k, in[a] + i, block[a], m);
      for (int64_t j = 0; j < m; ++j) {
        if constexpr (N == 1) {
          block[0][j] = f(block[0][j]);
        } else {
          block[0][j] = f(block[0][j], block[1][j]);
        }
      }
      from_floats(k, block[0], out + i, m);
    }
  });
}

// out[i] = f(x[i]), computing in acc_type_t<T> (float for the 16-bit floats).
template <class T, class O, class F>
void unary_loop(const Tensor& x, const Tensor& out, F f) {
  using A = acc_type_t<T>;
  const T* in = static_cast<const T*>(x.data_ptr());
  O* o = static_cast<O*>(out.data_ptr());
  if constexpr (kSixteenBitFloat<T> && std::is_same_v<O, T>) {
    if (x.is_contiguous() && out.is_contiguous())
      return float_blocks<T, 1>({in}, o, out.numel(), f);
  }
  if (x.is_contiguous() && out.is_contiguous()) {
    parallel_for(out.numel(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = convert<O>(f(static_cast<A>(in[i])));
    });
    return;
  }
  for_each_offset<2>(
      out.shape(), {out.strides(), x.strides()},
      [&](const std::array<int64_t, 2>& k) { o[k[0]] = convert<O>(f(static_cast<A>(in[k[1]]))); });
}

template <class T, class O, class F>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  using A = acc_type_t<T>;
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  O* o = static_cast<O*>(out.data_ptr());
  if constexpr (kSixteenBitFloat<T> && std::is_same_v<O, T>) {
    if (a.is_contiguous() && b.is_contiguous() && out.is_contiguous())
      return float_blocks<T, 2>({pa, pb}, o, out.numel(), f);
  }
  if (a.is_contiguous() && b.is_contiguous() && out.is_contiguous()) {
    parallel_for(out.numel(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        o[i] = convert<O>(f(static_cast<A>(pa[i]), static_cast<A>(pb[i])));
    });
    return;
  }
  for_each_offset<3>(out.shape(), {out.strides(), a.strides(), b.strides()},
                     [&](const std::array<int64_t, 3>& k) {
                       o[k[0]] = convert<O>(f(static_cast<A>(pa[k[1]]), static_cast<A>(pb[k[2]])));
                     });
}

template <class A>
A sigmoid_of(A v) {
  return A(1) / (A(1) + std::exp(-v));
}

template <class T>
void unary_typed(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams p) {
  using A = acc_type_t<T>;
  constexpr bool floating = std::is_floating_point_v<A>;
  switch (op) {
    case UnaryOp::neg:
      return unary_loop<T, T>(x, out, [](A v) { return static_cast<A>(-v); });
    case UnaryOp::abs:
      if constexpr (std::is_unsigned_v<A>)
        return unary_loop<T, T>(x, out, [](A v) { return v; });
      else if constexpr (floating)
        // Clears the sign bit, as torch.abs: -0.0 gives +0.0, which v < 0 ? -v : v would keep.
        return unary_loop<T, T>(x, out, [](A v) { return std::fabs(v); });
      else
        return unary_loop<T, T>(x, out, [](A v) { return v < A(0) ? static_cast<A>(-v) : v; });
    case UnaryOp::sign:
      return unary_loop<T, T>(x, out, [](A v) { return static_cast<A>((A(0) < v) - (v < A(0))); });
    case UnaryOp::square:
      return unary_loop<T, T>(x, out, [](A v) { return static_cast<A>(v * v); });
    case UnaryOp::relu:
      // As PyTorch's clamp_min(x, 0): NaN fails the test and passes through, so a diverging
      // model shows NaN instead of training on zeros.
      return unary_loop<T, T>(x, out, [](A v) { return v < A(0) ? A(0) : v; });
    case UnaryOp::clamp: {
      A lo = static_cast<A>(p.a), hi = static_cast<A>(p.b);
      // NaN stays NaN: both comparisons are false for it.
      return unary_loop<T, T>(x, out, [=](A v) { return v < lo ? lo : (v > hi ? hi : v); });
    }
    case UnaryOp::logical_not:
      return unary_loop<T, bool>(x, out, [](A v) { return v == A(0); });
    case UnaryOp::isnan:
      if constexpr (floating)
        return unary_loop<T, bool>(x, out, [](A v) { return std::isnan(v); });
      else
        return unary_loop<T, bool>(x, out, [](A) { return false; });
    // Integers are already whole: the rounding ops copy them, as torch's.
    case UnaryOp::floor:
      if constexpr (floating) return unary_loop<T, T>(x, out, [](A v) { return std::floor(v); });
      return unary_loop<T, T>(x, out, [](A v) { return v; });
    case UnaryOp::ceil:
      if constexpr (floating) return unary_loop<T, T>(x, out, [](A v) { return std::ceil(v); });
      return unary_loop<T, T>(x, out, [](A v) { return v; });
    case UnaryOp::round:
      // nearbyint rounds halves to even in the default rounding mode, as torch.round.
      if constexpr (floating)
        return unary_loop<T, T>(x, out, [](A v) { return std::nearbyint(v); });
      return unary_loop<T, T>(x, out, [](A v) { return v; });
    case UnaryOp::trunc:
      if constexpr (floating) return unary_loop<T, T>(x, out, [](A v) { return std::trunc(v); });
      return unary_loop<T, T>(x, out, [](A v) { return v; });
    default:
      break;
  }
  if constexpr (floating) {
    switch (op) {
      case UnaryOp::exp:
        return unary_loop<T, T>(x, out, [](A v) { return std::exp(v); });
      case UnaryOp::log:
        return unary_loop<T, T>(x, out, [](A v) { return std::log(v); });
      case UnaryOp::sqrt:
        return unary_loop<T, T>(x, out, [](A v) { return std::sqrt(v); });
      case UnaryOp::rsqrt:
        return unary_loop<T, T>(x, out, [](A v) { return A(1) / std::sqrt(v); });
      case UnaryOp::reciprocal:
        return unary_loop<T, T>(x, out, [](A v) { return A(1) / v; });
      case UnaryOp::erf:
        return unary_loop<T, T>(x, out, [](A v) { return std::erf(v); });
      case UnaryOp::sin:
        return unary_loop<T, T>(x, out, [](A v) { return std::sin(v); });
      case UnaryOp::cos:
        return unary_loop<T, T>(x, out, [](A v) { return std::cos(v); });
      case UnaryOp::tanh:
        return unary_loop<T, T>(x, out, [](A v) { return std::tanh(v); });
      case UnaryOp::sigmoid:
        return unary_loop<T, T>(x, out, [](A v) { return sigmoid_of(v); });
      case UnaryOp::silu:
        return unary_loop<T, T>(x, out, [](A v) { return v * sigmoid_of(v); });
      case UnaryOp::leaky_relu: {
        A slope = static_cast<A>(p.a);
        return unary_loop<T, T>(x, out, [=](A v) { return v > A(0) ? v : v * slope; });
      }
      case UnaryOp::gelu:
        return unary_loop<T, T>(
            x, out, [](A v) { return A(0.5) * v * (A(1) + std::erf(v * A(M_SQRT1_2))); });
      case UnaryOp::gelu_tanh:
        return unary_loop<T, T>(x, out, [](A v) {
          const A k = A(0.7978845608028654);  // sqrt(2 / pi)
          return A(0.5) * v * (A(1) + std::tanh(k * (v + A(0.044715) * v * v * v)));
        });
      case UnaryOp::pow_scalar: {
        A e = static_cast<A>(p.a);
        return unary_loop<T, T>(x, out, [=](A v) { return std::pow(v, e); });
      }
      default:
        break;
    }
  } else if (op == UnaryOp::pow_scalar) {
    int64_t e = static_cast<int64_t>(p.a);
    return unary_loop<T, T>(x, out, [=](A v) {
      A r = 1;
      for (int64_t i = 0; i < e; ++i) r = static_cast<A>(r * v);
      return r;
    });
  }
  throw DTypeError(fmt::format("cpu::unary: op {} is not defined for {}", static_cast<int>(op),
                               dtype_name(x.dtype())));
}

template <class A>
A integer_pow(A base, A exponent) {
  A r = 1;
  for (A i = 0; i < exponent; ++i) r = static_cast<A>(r * base);
  return r;
}

template <class T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  using A = acc_type_t<T>;
  switch (op) {
    case BinaryOp::eq:
      return binary_loop<T, bool>(a, b, out, [](A x, A y) { return x == y; });
    case BinaryOp::ne:
      return binary_loop<T, bool>(a, b, out, [](A x, A y) { return x != y; });
    case BinaryOp::lt:
      return binary_loop<T, bool>(a, b, out, [](A x, A y) { return x < y; });
    case BinaryOp::le:
      return binary_loop<T, bool>(a, b, out, [](A x, A y) { return x <= y; });
    case BinaryOp::gt:
      return binary_loop<T, bool>(a, b, out, [](A x, A y) { return x > y; });
    case BinaryOp::ge:
      return binary_loop<T, bool>(a, b, out, [](A x, A y) { return x >= y; });
    case BinaryOp::logical_and:
      return binary_loop<T, bool>(a, b, out, [](A x, A y) { return x != A(0) && y != A(0); });
    case BinaryOp::logical_or:
      return binary_loop<T, bool>(a, b, out, [](A x, A y) { return x != A(0) || y != A(0); });
    default:
      break;
  }
  if constexpr (std::is_same_v<A, bool>) {
    switch (op) {
      case BinaryOp::add:
        return binary_loop<T, T>(a, b, out, [](A x, A y) { return x || y; });
      case BinaryOp::mul:
        return binary_loop<T, T>(a, b, out, [](A x, A y) { return x && y; });
      case BinaryOp::maximum:
        return binary_loop<T, T>(a, b, out, [](A x, A y) { return x || y; });
      case BinaryOp::minimum:
        return binary_loop<T, T>(a, b, out, [](A x, A y) { return x && y; });
      default:
        throw DTypeError(
            fmt::format("cpu::binary: op {} is not defined for bool", static_cast<int>(op)));
    }
  } else {
    A s = static_cast<A>(alpha);
    switch (op) {
      case BinaryOp::add:
        if (alpha == 1.0)
          return binary_loop<T, T>(a, b, out, [](A x, A y) { return static_cast<A>(x + y); });
        return binary_loop<T, T>(a, b, out, [=](A x, A y) { return static_cast<A>(x + s * y); });
      case BinaryOp::sub:
        if (alpha == 1.0)
          return binary_loop<T, T>(a, b, out, [](A x, A y) { return static_cast<A>(x - y); });
        return binary_loop<T, T>(a, b, out, [=](A x, A y) { return static_cast<A>(x - s * y); });
      case BinaryOp::mul:
        return binary_loop<T, T>(a, b, out, [](A x, A y) { return static_cast<A>(x * y); });
      case BinaryOp::div:
        if constexpr (std::is_floating_point_v<A>)
          return binary_loop<T, T>(a, b, out, [](A x, A y) { return x / y; });
        else
          throw DTypeError("cpu::binary: integer div reaches the kernel; the op promotes to f32");
      case BinaryOp::pow:
        if constexpr (std::is_floating_point_v<A>)
          return binary_loop<T, T>(a, b, out, [](A x, A y) { return std::pow(x, y); });
        else
          return binary_loop<T, T>(a, b, out, [](A x, A y) { return integer_pow(x, y); });
      // NaN propagates, as torch.maximum.
      case BinaryOp::maximum:
        return binary_loop<T, T>(a, b, out, [](A x, A y) { return (x != x || x > y) ? x : y; });
      case BinaryOp::minimum:
        return binary_loop<T, T>(a, b, out, [](A x, A y) { return (x != x || x < y) ? x : y; });
      default:
        break;
    }
  }
  throw DTypeError("cpu::binary: unknown op");
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params) {
  visit_dtype(x.dtype(),
              [&](auto tag) { unary_typed<typename decltype(tag)::type>(op, x, out, params); });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  visit_dtype(a.dtype(),
              [&](auto tag) { binary_typed<typename decltype(tag)::type>(op, a, b, out, alpha); });
}

void relu_backward(const Tensor& grad, const Tensor& output, const Tensor& out) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_type_t<T>;
    // PyTorch's threshold_backward: the gradient passes unless y <= 0, so it passes at NaN.
    binary_loop<T, T>(grad, output, out, [](A g, A y) { return y <= A(0) ? A(0) : g; });
  });
}

void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* c = static_cast<const bool*>(condition.data_ptr());
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    for_each_offset<4>(
        out.shape(), {out.strides(), condition.strides(), a.strides(), b.strides()},
        [&](const std::array<int64_t, 4>& k) { o[k[0]] = c[k[1]] ? pa[k[2]] : pb[k[3]]; });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const ElementwiseKernels ElementwiseKernels::cpu{.unary = cpu::unary,
                                                 .binary = cpu::binary,
                                                 .relu_backward = cpu::relu_backward,
                                                 .where = cpu::where};

}  // namespace kiln
