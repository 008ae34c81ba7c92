// Tensor parallelism, as Megatron-LM's (Shoeybi et al., 2019): one linear layer's weight split
// over the ranks of a process group, each rank holding and computing its part.
//
//   auto fc1 = std::make_shared<dist::ColumnParallelLinear>(512, 2048);  // 2048 / p outputs here
//   auto fc2 = std::make_shared<dist::RowParallelLinear>(2048, 512);     // 2048 / p inputs here
//   Tensor y = fc2->forward(relu(fc1->forward(x)));  // x and y whole on every rank
//
// ColumnParallelLinear keeps rows rank*out/p ... of the [out, in] weight (and of the bias): its
// output is this rank's slice of the output features. RowParallelLinear keeps the matching
// columns of its weight, takes such a slice as input, and sums the ranks' partial products with
// one all-reduce before adding its (whole) bias. So an MLP block of the two runs one all-reduce in
// forward (RowParallelLinear's) and one in backward (ColumnParallelLinear's, of its input's
// gradient, which every rank's slice of the output contributes to): Megatron's f and g.
//
// Every rank must build the layers with its random generator in the same state: each builds the
// whole layer as nn::Linear would (the same initialisation, drawn alike on every rank) and keeps
// its part, so a split model starts from the weights of the unsplit one built from that state.
// Each rank's optimizer then steps its own parts; the input must be the same on every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/dist/process_group.h"
#include "kiln/nn/module.h"

namespace kiln::dist {

// Megatron's communication points, differentiable. Forward: x; backward: the gradient summed over
// the ranks (f, where a replicated input enters the split layers).
Tensor copy_to_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group);
// Forward: x summed over the ranks; backward: the gradient as it is (g, where partial results
// leave them).
Tensor reduce_from_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group);
// Forward: the ranks' x joined along the last dim, in rank order; backward: this rank's slice.
Tensor gather_from_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group);
// Forward: this rank's slice of x along the last dim; backward: the ranks' gradients joined.
Tensor scatter_to_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group);

struct ColumnParallelLinearOptions {
  bool bias = true;
  // Join the ranks' outputs (all-gather) so that every rank gets all out_features.
  bool gather_output = false;
};

class ColumnParallelLinear : public nn::Module {
 public:
  // group: the default group when null. out_features must divide by the group's size.
  ColumnParallelLinear(int64_t in_features, int64_t out_features,
                       std::shared_ptr<ProcessGroup> group = nullptr,
                       ColumnParallelLinearOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ColumnParallelLinear"; }
  std::string extra_repr() const override;
  Tensor weight, bias;  // [out / p, in], [out / p]

 private:
  std::shared_ptr<ProcessGroup> group_;
  int64_t in_features_, out_features_;
  ColumnParallelLinearOptions options_;
};

struct RowParallelLinearOptions {
  bool bias = true;
  // The input is this rank's slice of in_features already (a ColumnParallelLinear's output);
  // false: the whole input, which the layer slices.
  bool input_is_parallel = true;
};

class RowParallelLinear : public nn::Module {
 public:
  // group: the default group when null. in_features must divide by the group's size.
  RowParallelLinear(int64_t in_features, int64_t out_features,
                    std::shared_ptr<ProcessGroup> group = nullptr,
                    RowParallelLinearOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "RowParallelLinear"; }
  std::string extra_repr() const override;
  Tensor weight, bias;  // [out, in / p], [out] (the whole bias, added once after the sum)

 private:
  std::shared_ptr<ProcessGroup> group_;
  int64_t in_features_, out_features_;
  RowParallelLinearOptions options_;
};

}  // namespace kiln::dist
