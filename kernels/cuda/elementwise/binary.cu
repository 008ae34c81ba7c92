// The binary ops on the GPU, for every dtype (kernels/cuda/elementwise/elementwise.h says how the
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

}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  visit_dtype(a.dtype(), [&](auto tag) {
    dispatch_binary<typename decltype(tag)::type>(op, a, b, out, alpha, AllBinaryOps{});
  });
}

}  // namespace kiln::cuda
