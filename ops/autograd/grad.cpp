#include "kiln/ops/autograd/grad.h"

#include <vector>

#include "kiln/core/error.h"
#include "kiln/ops/autograd/record.h"

namespace kiln::autograd {

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, GradOptions options) {
  KILN_CHECK(!outputs.empty(), ValueError, "autograd::grad: no outputs to differentiate");
  KILN_CHECK(!inputs.empty(), ValueError, "autograd::grad: no inputs to differentiate by");
  KILN_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), ValueError,
             "autograd::grad: {} grad_outputs for {} outputs; pass one per output (or none)",
             grad_outputs.size(), outputs.size());
  GraphOptions run{.retain_graph = options.retain_graph.value_or(options.create_graph),
                   .create_graph = options.create_graph,
                   .inputs = &inputs,
                   .allow_unused = options.allow_unused,
                   .op = "autograd::grad"};
  return run_graph(outputs, grad_outputs, run);
}

}  // namespace kiln::autograd
