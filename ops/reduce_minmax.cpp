// max/min along a dim (values and indices) or over dims (amax/amin), and argmax/argmin.

#include "kiln/kernels/reduce_minmax.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/profiler.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/reduce_dims.h"

namespace kiln {

namespace {

struct Extremes {
  Tensor values, indices;  // either undefined when not asked for
  ReducedShape shape;
};

Extremes reduce_extremes(const char* op, const Tensor& x, const Dims& dims, bool keepdim,
                         bool is_max, bool want_values, bool want_indices) {
  require_defined(op, x);
  Extremes e;
  e.shape = reduced_shape(op, x, dims, keepdim);
  KILN_CHECK(e.shape.count > 0, ValueError,
             "{}: the reduction covers zero elements (input {}, dims {}); the max or min of "
             "nothing is undefined, so every reduced dim must be non-empty",
             op, describe(x), dims.empty() ? std::string("all") : shape_str(dims));
  if (want_values) e.values = empty(e.shape.out_shape, x.dtype(), x.device());
  if (want_indices) e.indices = empty(e.shape.out_shape, DType::i64, x.device());
  kernels_for<MinMaxKernels>(op, x.device())
      .minmax(x.detach(), e.shape.reduced, is_max, e.values, e.indices);
  return e;
}

// The gradient goes to the one element each index names (not to its ties), as in PyTorch.
struct MaxDimBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor indices;
  Shape input_shape, kept_shape;
  int64_t dim = 0;
  bool is_max = true;
  std::string name() const override { return is_max ? "MaxBackward" : "MinBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    if (input_shape.empty()) return {g};
    Tensor chosen_index = indices.unpack(*this).reshape(kept_shape);
    Shape line(input_shape.size(), 1);
    line[dim] = input_shape[dim];
    Tensor positions = arange(input_shape[dim], DType::i64, g.device()).view(line);
    Tensor chosen = eq(positions, chosen_index);  // broadcasts to the input's shape
    return {where(chosen, g.reshape(kept_shape), zeros({}, g.dtype(), g.device()))};
  }
  void release_saved() override { indices.reset(); }
};

ValuesIndices max_min_dim(const char* op, const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  profiler::OpScope profile(op, {&x});
  Extremes e = reduce_extremes(op, x, {dim}, keepdim, is_max, true, true);
  if (should_record({&x})) {
    auto node = std::make_shared<MaxDimBackward>();
    node->indices = SavedTensor(e.indices);
    node->input_shape = x.shape();
    node->kept_shape = e.shape.kept_shape;
    node->dim = wrap_dim(op, dim, x.dim());
    node->is_max = is_max;
    record(e.values, node, {&x});
  }
  return {e.values, e.indices};
}

// Every element equal to the result shares the gradient evenly, as PyTorch's amax. A NaN result
// equals no element: amax (as PyTorch's) then gives the whole slice NaN, while max() over every
// element (PyTorch's evenly_distribute_backward) hands the gradient to the NaN elements.
struct AmaxBackward : Node {
  bool differentiable_backward() const override { return true; }
  std::string op_name;
  SavedTensor input, result;
  Dims dims;
  Shape kept_shape;
  bool nan_takes_gradient = false;
  std::string name() const override { return op_name + "Backward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor x = input.unpack(*this);
    Tensor r = result.unpack(*this).reshape(kept_shape);
    Tensor hit = eq(x, r);
    if (nan_takes_gradient) hit = where(isnan(r), isnan(x), hit);
    hit = hit.to(g.dtype());
    Tensor share = div(hit, sum(hit, dims, true));
    return {mul(share, g.reshape(kept_shape))};
  }
  void release_saved() override { input.reset(), result.reset(); }
};

Tensor amax_amin(const char* op, const Tensor& x, const Dims& dims, bool keepdim, bool is_max,
                 bool nan_takes_gradient = false) {
  profiler::OpScope profile(op, {&x});
  Extremes e = reduce_extremes(op, x, dims, keepdim, is_max, true, false);
  if (should_record({&x})) {
    auto node = std::make_shared<AmaxBackward>();
    node->op_name = op;
    node->nan_takes_gradient = nan_takes_gradient;
    node->input = SavedTensor(x);
    node->result = SavedTensor(e.values);
    node->dims = dims;
    node->kept_shape = e.shape.kept_shape;
    record(e.values, node, {&x});
  }
  return e.values;
}

}  // namespace

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_dim("max", x, dim, keepdim, true);
}

ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_dim("min", x, dim, keepdim, false);
}

Tensor max(const Tensor& x) {
  return amax_amin("max", x, {}, false, true, true);
}
Tensor min(const Tensor& x) {
  return amax_amin("min", x, {}, false, false, true);
}

Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) {
  return amax_amin("amax", x, dims, keepdim, true);
}

Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) {
  return amax_amin("amin", x, dims, keepdim, false);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_extremes("argmax", x, {dim}, keepdim, true, false, true).indices;
}

Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_extremes("argmin", x, {dim}, keepdim, false, false, true).indices;
}

// Reducing every dim lays the input out row-major, so the column is the flattened index.
Tensor argmax(const Tensor& x) {
  return reduce_extremes("argmax", x, {}, false, true, false, true).indices;
}

}  // namespace kiln
