// Method forms of common ops (x.sum(), x.matmul(w)): each forwards to the one entry point in
// ops, so a method never behaves differently from its free function.
#include <cstdint>
#include <vector>

#include "kiln/ops/elementwise.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/softmax.h"

namespace kiln {

Tensor Tensor::sum() const {
  return kiln::sum(*this);
}
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const {
  return kiln::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const {
  return kiln::mean(*this);
}
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const {
  return kiln::mean(*this, dims, keepdim);
}
Tensor Tensor::max() const {
  return kiln::max(*this);
}
Tensor Tensor::min() const {
  return kiln::min(*this);
}
Tensor Tensor::argmax(int64_t dim, bool keepdim) const {
  return kiln::argmax(*this, dim, keepdim);
}
Tensor Tensor::exp() const {
  return kiln::exp(*this);
}
Tensor Tensor::log() const {
  return kiln::log(*this);
}
Tensor Tensor::sqrt() const {
  return kiln::sqrt(*this);
}
Tensor Tensor::abs() const {
  return kiln::abs(*this);
}
Tensor Tensor::relu() const {
  return kiln::relu(*this);
}
Tensor Tensor::sigmoid() const {
  return kiln::sigmoid(*this);
}
Tensor Tensor::tanh() const {
  return kiln::tanh(*this);
}
Tensor Tensor::pow(double exponent) const {
  return kiln::pow(*this, exponent);
}
Tensor Tensor::matmul(const Tensor& other) const {
  return kiln::matmul(*this, other);
}
Tensor Tensor::softmax(int64_t dim) const {
  return kiln::softmax(*this, dim);
}
Tensor Tensor::log_softmax(int64_t dim) const {
  return kiln::log_softmax(*this, dim);
}

}  // namespace kiln
