// Matrix products through Eigen on the CPU.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

// NumPy matmul: 1-D operands are promoted and the added dim removed; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);   // [n,k] x [k,m]
Tensor bmm(const Tensor& a, const Tensor& b);  // [b,n,k] x [b,k,m], no broadcasting
// x [..., in] times weight [out, in] transposed, plus bias [out]; bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace kiln
