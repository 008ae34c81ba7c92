// conv_transpose2d, the adjoint of conv2d: its forward is conv2d's input gradient, its input
// gradient is conv2d and its weight gradient is conv2d's weight gradient with the roles of input
// and output swapped; and conv1d, conv2d over a height of one.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/core/shape.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

struct ConvTranspose2dBackward : Node {
  SavedTensor x, weight;
  Pair stride, padding, dilation;
  int64_t groups = 1;
  std::string name() const override { return "ConvTranspose2dBackward"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor tx = x.unpack(*this), tw = weight.unpack(*this);
    const Tensor gc = g.to(tw.dtype());
    Tensor gx, gw;
    if (next_edges[0].valid()) gx = conv2d(gc, tw, Tensor(), stride, padding, dilation, groups);
    if (next_edges[1].valid())
      gw = conv2d_backward_weight(tx, gc, tw.shape(), stride, padding, dilation, groups);
    return {gx, gw};
  }
  void release_saved() override { x.reset(), weight.reset(); }
};

}  // namespace

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride,
                        Pair padding, Pair output_padding, int64_t groups, Pair dilation) {
  if (AutocastArgs cast{"conv_transpose2d", {&x, &weight, &bias}})
    return conv_transpose2d(cast[0], cast[1], cast[2], stride, padding, output_padding, groups,
                            dilation);
  const char* op = "conv_transpose2d";
  profiler::OpScope profile(op, {&x, &weight, &bias});
  require_same_floating(op, x, weight, "input", "weight");
  KILN_CHECK(x.dim() == 4 && weight.dim() == 4, ShapeError,
             "{}: expected input [N, C, H, W] and weight [C, O/groups, kH, kW], got {} and {}", op,
             describe(x), describe(weight));
  KILN_CHECK(groups > 0 && weight.size(0) == x.size(1) && x.size(1) % groups == 0, ShapeError,
             "{}: expected weight [{}, O/groups, kH, kW] for an input of {} channels in {} "
             "groups, got {}",
             op, x.size(1), x.size(1), groups, describe(weight));
  Shape out_shape{x.size(0), weight.size(1) * groups, 0, 0};
  for (int k = 0; k < 2; ++k) {
    KILN_CHECK(stride[k] > 0 && dilation[k] > 0 && padding[k] >= 0 && output_padding[k] >= 0 &&
                   output_padding[k] < std::max(stride[k], dilation[k]),
               ValueError,
               "{}: expected positive stride and dilation, non-negative padding, and an "
               "output_padding below the stride or the dilation, got stride {}, padding {}, "
               "output_padding {}, dilation {} in dim {}",
               op, stride[k], padding[k], output_padding[k], dilation[k], 2 + k);
    out_shape[2 + k] = (x.size(2 + k) - 1) * stride[k] - 2 * padding[k] +
                       dilation[k] * (weight.size(2 + k) - 1) + output_padding[k] + 1;
  }
  KILN_CHECK(out_shape[2] > 0 && out_shape[3] > 0, ShapeError,
             "{}: the output of {} with weight {} would be {}: nothing left", op, describe(x),
             describe(weight), shape_str(out_shape));
  Tensor out = conv2d_backward_input(x.detach(), weight.detach(), out_shape, stride, padding,
                                     dilation, groups);
  if (should_record({&x, &weight})) {
    auto node = std::make_shared<ConvTranspose2dBackward>();
    node->x = SavedTensor(x);
    node->weight = SavedTensor(weight);
    node->stride = stride;
    node->padding = padding;
    node->dilation = dilation;
    node->groups = groups;
    record(out, node, {&x, &weight});
  }
  if (bias.defined()) {
    require_same_floating(op, x, bias, "input", "bias");
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == out_shape[1], ShapeError,
               "{}: expected bias of shape [{}], got {}", op, out_shape[1], describe(bias));
    out = add(out, bias.view({1, out_shape[1], 1, 1}));
  }
  return out;
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  KILN_CHECK(x.defined() && weight.defined() && x.dim() == 3 && weight.dim() == 3, ShapeError,
             "conv1d: expected input [N, C, L] and weight [O, C/groups, k], got {} and {}",
             describe(x), describe(weight));
  return conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {1, dilation},
                groups)
      .squeeze(2);
}

}  // namespace kiln
