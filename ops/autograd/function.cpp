// The tape holds one node per output (core/autograd/node.h), so a function with several outputs
// records one small node per output, each feeding one FunctionBackward: each output's node places
// its gradient in its own stretch of one flat f64 vector, the engine sums the vectors at
// FunctionBackward, and FunctionBackward cuts them apart again and calls the backward once.
#include "kiln/ops/autograd/function.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"

namespace kiln::autograd {

void FunctionContext::save_for_backward(const std::vector<Tensor>& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.emplace_back(t);
}

std::vector<Tensor> FunctionContext::saved_tensors() const {
  KILN_CHECK(owner_ != nullptr, AutogradError,
             "FunctionContext::saved_tensors: only in backward (forward has them itself)");
  std::vector<Tensor> out;
  for (const SavedTensor& s : saved_) out.push_back(s.unpack(*owner_));
  return out;
}

bool FunctionContext::needs_input_grad(size_t i) const {
  return i < needs_input_grad_.size() && needs_input_grad_[i];
}

// One output's place in the flat vector of every output's gradient.
struct OutputSlot {
  Shape shape;
  DType dtype = DType::f32;
  int64_t offset = 0;
  bool recorded = false;
};

class FunctionBackward : public Node {
 public:
  FunctionBackward(std::shared_ptr<Function> function, FunctionContext context)
      : function_(std::move(function)), context_(std::move(context)) {}
  std::string name() const override { return function_->name() + "Backward"; }
  // The user's backward is ops like any other: recorded under create_graph.
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& packed) override {
    context_.owner_ = this;
    std::vector<Tensor> grads;
    for (const OutputSlot& slot : slots) {
      // An integer or bool output has no gradient (PyTorch's None).
      grads.push_back(slot.recorded ? packed.narrow(0, slot.offset, shape_numel(slot.shape))
                                          .view(slot.shape)
                                          .to(slot.dtype)
                                    : Tensor());
    }
    std::vector<Tensor> out = function_->backward(context_, grads);
    KILN_CHECK(out.size() == input_shapes.size(), AutogradError,
               "{}: backward returned {} gradients for {} inputs; return one per input "
               "(Tensor() where none)",
               name(), out.size(), input_shapes.size());
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i].defined() || !context_.needs_input_grad(i)) {
        out[i] = Tensor();
        continue;
      }
      KILN_CHECK(out[i].shape() == input_shapes[i], AutogradError,
                 "{}: backward returned a gradient of shape {} for input {} of shape {}", name(),
                 shape_str(out[i].shape()), i, shape_str(input_shapes[i]));
    }
    return out;
  }
  void release_saved() override {
    for (SavedTensor& s : context_.saved_) s.reset();
  }

  std::vector<OutputSlot> slots;
  std::vector<Shape> input_shapes;
  int64_t total = 0;

 private:
  std::shared_ptr<Function> function_;
  FunctionContext context_;
};

namespace {

// One output's node: its gradient, flattened into its stretch of the f64 vector.
class FunctionOutput : public Node {
 public:
  FunctionOutput(std::string function, int64_t offset, int64_t total)
      : function_(std::move(function)), offset_(offset), total_(total) {}
  std::string name() const override { return function_ + "Output"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& grad) override {
    const int64_t n = grad.numel();
    const Device device = grad.device();
    return {cat({zeros({offset_}, DType::f64, device), grad.reshape({-1}).to(DType::f64),
                 zeros({total_ - offset_ - n}, DType::f64, device)})};
  }

 private:
  std::string function_;
  int64_t offset_, total_;
};

}  // namespace

std::vector<Tensor> apply(const std::shared_ptr<Function>& function,
                          const std::vector<Tensor>& inputs) {
  KILN_CHECK(function != nullptr, ValueError, "autograd::apply: the function is null");
  const std::string name = function->name();
  FunctionContext context;
  bool recording = GradMode::is_enabled();
  bool any_requires = false;
  for (const Tensor& t : inputs) {
    const bool needs = t.defined() && t.requires_grad();
    context.needs_input_grad_.push_back(needs);
    any_requires = any_requires || needs;
  }
  recording = recording && any_requires;
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = function->forward(context, inputs);
  }
  if (!recording) return outputs;
  auto node = std::make_shared<FunctionBackward>(function, std::move(context));
  Device device = Device::cpu();
  bool have_device = false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    KILN_CHECK(out.defined(), ValueError, "{}: forward returned an undefined output {}", name, i);
    OutputSlot slot{out.shape(), out.dtype(), node->total, is_floating(out.dtype())};
    if (slot.recorded) {
      KILN_CHECK(!have_device || out.device() == device, DeviceError,
                 "{}: outputs on {} and {}; a function's outputs must share one device", name,
                 device.str(), out.device().str());
      device = out.device();
      have_device = true;
      node->total += out.numel();
    }
    node->slots.push_back(slot);
  }
  for (const Tensor& t : inputs) node->input_shapes.push_back(t.defined() ? t.shape() : Shape{});
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  for (size_t i = 0; i < outputs.size(); ++i) {
    const OutputSlot& slot = node->slots[i];
    if (!slot.recorded) continue;
    // An alias, so an output that is an input itself does not take the input's history.
    Tensor alias = outputs[i].detach();
    auto output_node = std::make_shared<FunctionOutput>(name, slot.offset, node->total);
    record(alias, output_node, {});
    output_node->next_edges.push_back({node});
    outputs[i] = alias;
  }
  return outputs;
}

}  // namespace kiln::autograd
