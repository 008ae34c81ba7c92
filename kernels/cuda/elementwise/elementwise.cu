// relu's backward and where on the GPU, and the elementwise family's kernel table
// (kernels/cuda/elementwise/elementwise.h says how the family is split and computed).
#include "kiln/kernels/cuda/elementwise/elementwise.h"
#include "kiln/kernels/cuda/loops.cuh"
#include "kiln/kernels/elementwise.h"

namespace kiln::cuda {

namespace {

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
