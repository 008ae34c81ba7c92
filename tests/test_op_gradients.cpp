// Every differentiable op of the parity table (tests/support/op_table.cpp) has its gradient
// checked against central differences in f64 on the CPU, from the table's own inputs: the parity
// harness compares a backward with the same backward on another device or dtype, this checks that
// the backward is the forward's derivative. An entry the differences cannot judge is listed below
// with the reason, and the list may name only entries of the table that are differentiable.
// The second case differentiates each entry's gradient again (create_graph) and checks it the
// same way; the entries whose backward is a kernel of its own, which refuse a second backward,
// are listed there, exactly.
#include <catch2/catch.hpp>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "op_table.h"

using namespace kiln;
using kiln::testing::OpEntry;
using kiln::testing::OpInput;

namespace {

// Entries whose gradient central differences cannot check, and why.
const std::map<std::string, std::string>& not_checked() {
  // The table gives these tied inputs on purpose, to pin the tie rule down across devices; at a
  // tie a maximum has no derivative. Their gradients away from ties are checked by
  // test_reduce_minmax's and test_pooling's gradchecks.
  const std::string tied =
      "the table's inputs are tied on purpose, where a maximum or minimum has no derivative";
  static const std::map<std::string, std::string> reasons = {
      {"max dim 1", tied},
      {"min dim -1 keepdim", tied},
      {"max", tied},
      {"min", tied},
      {"amax dims 0 2", tied},
      {"amin dim 1 keepdim", tied},
      {"max_pool2d_with_indices", tied + " (overlapping windows share their maxima)"},
      // Sorting tied values: a perturbation reorders the ties. "topk 3 of a transposed input"
      // (untied) is checked here; tests/test_sort.cpp checks these against PyTorch's gradients.
      {"sort dim 1", "the table's inputs are tied on purpose, and a tie has no derivative"},
      {"sort descending dim -1",
       "the table's inputs are tied on purpose, and a tie has no derivative"},
      {"topk 2 dim 0 smallest",
       "the table's inputs are tied on purpose, and a tie has no derivative"},
      // As PyTorch's: the forward reads the padding row, but it gets no gradient by definition
      // (test_gather_scatter checks both, and gradchecks embedding without padding_idx).
      {"embedding with padding_idx",
       "padding_idx's row gets no gradient though the forward reads it"},
  };
  return reasons;
}

// The outputs at `which`, flattened into one f64 vector.
Tensor joined(const std::vector<Tensor>& outputs, const std::vector<size_t>& which) {
  std::vector<Tensor> parts;
  for (size_t i : which) parts.push_back(outputs[i].reshape({-1}).to(DType::f64));
  return cat(parts);
}

}  // namespace

TEST_CASE("op table: every differentiable op's gradient matches central differences") {
  const std::vector<OpEntry>& table = kiln::testing::op_table();
  std::set<std::string> differentiable;
  for (size_t index = 0; index < table.size(); ++index) {
    const OpEntry& op = table[index];
    if (!op.differentiable) continue;
    differentiable.insert(op.name);
    if (not_checked().count(op.name)) continue;
    const std::vector<OpInput> made = op.inputs(kiln::testing::op_seed(index));
    // The differentiable floating inputs are varied; the others (indices, masks, running
    // statistics) are held as they are, floating ones in f64.
    std::vector<Tensor> varied;
    std::vector<size_t> varied_at;
    for (size_t i = 0; i < made.size(); ++i) {
      if (made[i].differentiable && is_floating(made[i].value.dtype())) {
        varied.push_back(made[i].value);
        varied_at.push_back(i);
      }
    }
    DYNAMIC_SECTION(op.name) {
      REQUIRE_FALSE(varied.empty());
      auto outputs_of = [&](const std::vector<Tensor>& leaves) {
        std::vector<Tensor> inputs;
        for (const OpInput& in : made)
          inputs.push_back(is_floating(in.value.dtype()) ? in.value.to(DType::f64).clone()
                                                         : in.value);
        for (size_t k = 0; k < leaves.size(); ++k) inputs[varied_at[k]] = leaves[k];
        return op.run(inputs);
      };
      // Which outputs carry a gradient (not indices, nor updated running statistics), from one
      // run that records: gradcheck's own runs of the differences record nothing.
      std::vector<Tensor> leaves;
      for (const Tensor& t : varied) leaves.push_back(t.to(DType::f64).clone().requires_grad_());
      const std::vector<Tensor> recorded = outputs_of(leaves);
      std::vector<size_t> which;
      for (size_t i = 0; i < recorded.size(); ++i)
        if (recorded[i].defined() && recorded[i].requires_grad()) which.push_back(i);
      REQUIRE_FALSE(which.empty());
      CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return joined(outputs_of(in), which); },
                      varied);
    }
  }
  for (const auto& [name, reason] : not_checked()) {
    INFO(name << ": " << reason);
    CHECK(differentiable.count(name) == 1);
  }
}

TEST_CASE("op table: every op's second derivative matches central differences") {
  const std::vector<OpEntry>& table = kiln::testing::op_table();
  std::set<std::string> refused;
  int checked = 0;
  for (size_t index = 0; index < table.size(); ++index) {
    const OpEntry& op = table[index];
    if (!op.differentiable || not_checked().count(op.name)) continue;
    const std::vector<OpInput> made = op.inputs(kiln::testing::op_seed(index));
    std::vector<Tensor> varied;
    std::vector<size_t> varied_at;
    for (size_t i = 0; i < made.size(); ++i) {
      if (made[i].differentiable && is_floating(made[i].value.dtype())) {
        varied.push_back(made[i].value.to(DType::f64).clone());
        varied_at.push_back(i);
      }
    }
    auto outputs_of = [&](const std::vector<Tensor>& leaves) {
      std::vector<Tensor> inputs;
      for (const OpInput& in : made)
        inputs.push_back(is_floating(in.value.dtype()) ? in.value.to(DType::f64).clone()
                                                       : in.value);
      for (size_t k = 0; k < leaves.size(); ++k) inputs[varied_at[k]] = leaves[k];
      return op.run(inputs);
    };
    // Fixed weights for the outputs that carry a gradient, from one recorded run.
    std::vector<Tensor> probe;
    for (const Tensor& t : varied) probe.push_back(t.clone().requires_grad_());
    const std::vector<Tensor> recorded = outputs_of(probe);
    std::vector<std::pair<size_t, Tensor>> weighted;
    for (size_t i = 0; i < recorded.size(); ++i)
      if (recorded[i].defined() && recorded[i].requires_grad())
        weighted.push_back({i, kiln::testing::random_f64(recorded[i].shape(), 77 + i)});
    // The first gradients as a function of the inputs: recorded (create_graph) when gradcheck
    // differentiates it, plain when it evaluates it at the perturbed points. The zero multiple of
    // the inputs keeps the result differentiable where the gradient is constant.
    auto first_gradients = [&](const std::vector<Tensor>& in) {
      const bool outer = GradMode::is_enabled();
      EnableGradGuard enable;
      std::vector<Tensor> leaves;
      for (const Tensor& t : in) leaves.push_back(outer ? t : t.detach().requires_grad_());
      const std::vector<Tensor> outputs = outputs_of(leaves);
      Tensor scalar = zeros({}, DType::f64);
      for (const auto& [i, w] : weighted) scalar = scalar + (outputs[i].to(DType::f64) * w).sum();
      const std::vector<Tensor> grads =
          autograd::grad({scalar}, leaves, {}, {.create_graph = outer, .allow_unused = true});
      std::vector<Tensor> parts;
      for (size_t k = 0; k < leaves.size(); ++k) {
        parts.push_back(grads[k].defined() ? grads[k].reshape({-1})
                                           : zeros({leaves[k].numel()}, DType::f64));
        parts.push_back(leaves[k].reshape({-1}) * 0.0);
      }
      return cat(parts);
    };
    INFO(op.name);
    try {
      CHECK_GRADCHECK(first_gradients, varied);
      ++checked;
    } catch (const AutogradError& e) {
      INFO(e.what());
      CHECK_THAT(e.what(), Catch::Contains("not differentiable"));
      refused.insert(op.name);
    }
  }
  INFO(checked << " entries differentiated twice");
  // Every entry differentiates twice: batch norm's and cumprod's backward kernels compose
  // differentiable ops when recorded.
  CHECK(refused.empty());
}
