// Module: the base of every layer and model. It owns named parameters, buffers and submodules in
// registration order, so names come out as PyTorch's ("layer1.0.conv1.weight").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using StateDict = std::map<std::string, Tensor>;

struct LoadResult {
  std::vector<std::string> missing_keys;     // in the module, not in the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, not in the module
  // Loaded but converted to the module's dtype, as PyTorch's copy does: "fc.weight (f64 -> f32)".
  std::vector<std::string> converted_keys;
};

class Module;
struct ModuleHooks;

// Forward hooks, as PyTorch's: a pre-hook sees a module's input before its forward and may return
// a replacement (Tensor() keeps it); a forward hook sees the input and the output after it and may
// return a replacement output. They run when the module is called, module(x), not when forward(x)
// is called directly.
using ForwardPreHook = std::function<Tensor(Module& module, const Tensor& input)>;
using ForwardHook =
    std::function<Tensor(Module& module, const Tensor& input, const Tensor& output)>;
// The same for a forward of several tensors (module({a, b})), as PyTorch's hooks see the args
// tuple: a pre-hook may return replacement inputs ({} keeps them). A one-tensor hook runs on
// one-tensor calls only; these run on every call, seeing {x} for module(x).
using ForwardPreHookMany =
    std::function<std::vector<Tensor>(Module& module, const std::vector<Tensor>& inputs)>;
using ForwardHookMany =
    std::function<Tensor(Module& module, const std::vector<Tensor>& inputs, const Tensor& output)>;

// What register_forward_hook and register_forward_pre_hook return, as PyTorch's RemovableHandle:
// remove() takes the hook off (once; later calls, or calls after the module is gone, do nothing).
class HookHandle {
 public:
  HookHandle() = default;
  void remove();

 private:
  friend class Module;
  HookHandle(std::weak_ptr<ModuleHooks> hooks, uint64_t id) : hooks_(std::move(hooks)), id_(id) {}
  std::weak_ptr<ModuleHooks> hooks_;
  uint64_t id_ = 0;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  virtual ~Module() = default;

  // The layer's computation; modules that take something other than one tensor leave it alone.
  virtual Tensor forward(const Tensor& x);
  // forward(x) with the module's hooks around it, as calling a module in PyTorch.
  Tensor operator()(const Tensor& x);
  // A forward of several tensors, as PyTorch's forward(*args) (a loss's input and target,
  // attention's query, key and value): a module that takes them overrides it. By default one
  // tensor goes to forward(x), and any other count is a NotImplementedError naming the module.
  virtual Tensor forward_many(const std::vector<Tensor>& inputs);
  // forward_many(inputs) with the hooks around it: module({input, target}).
  Tensor operator()(const std::vector<Tensor>& inputs);
  // Hooks run in the order registered.
  HookHandle register_forward_pre_hook(ForwardPreHook hook);
  HookHandle register_forward_hook(ForwardHook hook);
  HookHandle register_forward_pre_hook(ForwardPreHookMany hook);
  HookHandle register_forward_hook(ForwardHookMany hook);
  // Calls fn on every submodule, depth first, each after its own children, then on this module,
  // as PyTorch's module.apply(fn) (custom weight initialisation). Returns this module.
  Module& apply(const std::function<void(Module&)>& fn);
  // Puts `module` in place of the submodule registered as `name`, keeping its place in the
  // registration order (so in state_dict), as libtorch's replace_module; the old module's
  // parameters leave the tree. A pointer the parent keeps to the old module in a field of its own
  // is the parent's to update: forward uses what the parent's code names.
  template <class M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    replace_child(name, module);
    return module;
  }
  // The type name shown by str() and in errors: "Conv2d", "ResNet". By default the class's own
  // name without its namespaces, as PyTorch prints a module; override it to show another.
  virtual std::string name() const;
  // Constructor arguments shown by str(): "3, 64, kernel_size=(3, 3)".
  virtual std::string extra_repr() const { return ""; }

  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  int64_t parameter_count() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves or converts every parameter and buffer in place: a tensor keeps its identity (the
  // optimizer's references stay valid), as module.to() in PyTorch. to(dtype) converts only
  // floating tensors (integer buffers such as num_batches_tracked keep theirs).
  Module& to(Device device);
  Module& to(DType dtype);
  // Lays every 4-D floating parameter and buffer (convolution weights) out in `format`, as
  // module.to(memory_format=torch.channels_last); the others keep theirs.
  Module& to(MemoryFormat format);
  void zero_grad();

  // Parameters and buffers by their dotted names; the tensors are detached aliases.
  StateDict state_dict() const;
  // Copies values into the module's tensors, converting dtypes as PyTorch does (and listing those
  // in converted_keys). strict: any missing or unexpected key throws a ValueError listing them;
  // otherwise the keys are returned. A shape mismatch always throws.
  // Keys that differ from the module's only by DistributedDataParallel's "module." prefix (a
  // wrapped model's state into a bare one, or the other way round) are matched without it.
  LoadResult load_state_dict(const StateDict& state, bool strict = true);

  // The module tree, PyTorch style, with parameter counts.
  std::string str() const;

 protected:
  // Both return the registered tensor (a handle sharing its data), by value: a reference into the
  // module's list would dangle once the next registration grows it.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  // For forward_many: throws unless `inputs` holds `count` defined tensors, naming the module.
  void expect_inputs(const std::vector<Tensor>& inputs, size_t count) const;
  // Containers that keep their own list of children (Sequential, ModuleList, ModuleDict) update it
  // too.
  virtual void replace_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  void check_new_name(const char* kind, const std::string& name) const;
  void collect(const std::string& prefix, bool recurse, bool buffers, NamedTensors& out) const;
  void str_into(std::string& out, int indent) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::shared_ptr<ModuleHooks> hooks_;  // made by the first registered hook
  bool training_ = true;
};

}  // namespace kiln::nn
