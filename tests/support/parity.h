// The one comparison library of the tests: how close a computed result must be to a reference, per
// dtype (one table), and the checks that hold a tensor to it. The parity harness (op_table.h) and
// every test that compares numbers use these; a test that allows more names the multiple and why.
//
// An element passes when |got - want| <= atol + rtol * |want|, with NaN matching NaN and an
// infinity matching the same infinity. Integer and bool results must match exactly.
#pragma once

#include <cstddef>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"

namespace kiln::testing {

struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;

  // `factor` times looser: each use names the factor and says why it needs it.
  Tolerance times(double factor) const { return {rtol * factor, atol * factor}; }
};

// For results that are copied or selected rather than computed (views, max, indices, masks).
inline constexpr Tolerance kExact{0.0, 0.0};

// The floor, as rtol = atol = value (the absolute part covers results that cancel to near zero,
// where both sides round O(1) intermediates):
//   f64   1e-12  ~4500 ulps of 2^-52: room for sums of thousands of terms added in another order
//                (threads, tiles, the GPU's tree), while an f32 intermediate (~1e-7) still fails.
//   f32   1e-5   ~80 ulps of 2^-23: the same room for f32 sums of a few hundred terms in another
//                order (cuBLAS's tiles against Eigen's, a block-wise reduction), with a 16-bit
//                intermediate (~1e-3) still far outside.
//   f16   1e-3   one ulp of its 10-bit mantissa (2^-10): both sides compute in f32 and round the
//                result once, so two results differ by at most one rounding step.
//   bf16  1.6e-2 two ulps of its 7-bit mantissa (2^-7 = 7.8e-3): the f32 computation rounds once,
//                and an input or a saved intermediate that was rounded to bf16 first (the
//                forward's output a backward reuses, a mixed f32/bf16 path) costs up to one more.
// Integer and bool dtypes: exact.
Tolerance tolerance(DType dtype);

// Gradients in f16 and bf16 get four times the floor: a backward formula chains a few ops (the
// saved output, the upstream gradient, a derivative), each of which rounds to the 16-bit dtype on
// the CPU, and one rounding that lands half an ulp apart carries through the rest. f32 and f64
// keep the floor, whose dozens of ulps already absorb such a chain.
inline constexpr double kNarrowGradientFactor = 4.0;
Tolerance gradient_tolerance(DType dtype);

// A result that one side computes as a chain of kernels, each rounding to the dtype, and the other
// fuses in f32 (the GPU's cross_entropy and softmax backward, var and norm built from sums): 16-bit
// floats get the gradient factor above; f32 and f64 ten times the floor, for the log-probabilities
// and partial sums that each kernel rounds before the next sums them again.
inline constexpr double kWideComposedFactor = 10.0;
Tolerance composed_tolerance(DType dtype);

// A sum of `terms` values of magnitude at most 1 (or a cumsum along `terms`): its rounding error
// grows with the number of terms, not with the size of the (possibly cancelling) result, so atol
// is the floor times the count.
Tolerance sum_tolerance(DType dtype, double terms);

// rtol, and atol = rtol times the largest finite |want|: for results that subtract large terms
// (batch norm's backward, a loss's gradient), elements that cancel to near zero keep the absolute
// error of the largest ones.
Tolerance relative_to_largest(double rtol, const Tensor& want);
Tolerance relative_to_largest(double rtol, const std::vector<double>& want);

// Checks got against want element by element within tol (the shapes, or sizes, must agree),
// reporting through Catch the number of mismatches, the first of them and the largest error.
// `magnitude`, when given (the shape of want), replaces |want| in the relative part: a bound that
// scales with something else, such as sum |a||b| for a product.
void check_close(const Tensor& got, const Tensor& want, Tolerance tol,
                 const Tensor& magnitude = Tensor());
void check_close(const Tensor& got, const std::vector<double>& want, Tolerance tol);
void check_close(const std::vector<double>& got, const std::vector<double>& want, Tolerance tol);

// A GPU result against the CPU's on the same inputs: computed on the GPU, in the CPU result's
// dtype, and within tol of it.
void check_gpu_parity(const Tensor& gpu, const Tensor& cpu, Tolerance tol);

}  // namespace kiln::testing
