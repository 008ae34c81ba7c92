#include "kiln/nn/module.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/ops/checks.h"

namespace kiln::nn {

Tensor Module::forward(const Tensor&) {
  throw NotImplementedError(fmt::format("{}: this module has no one-tensor forward", name()));
}

struct ModuleHooks {
  uint64_t next_id = 0;
  std::map<uint64_t, ForwardPreHookMany> pre;
  std::map<uint64_t, ForwardHookMany> post;
};

void HookHandle::remove() {
  if (std::shared_ptr<ModuleHooks> hooks = hooks_.lock()) {
    hooks->pre.erase(id_);
    hooks->post.erase(id_);
  }
  hooks_.reset();
}

Tensor Module::forward_many(const std::vector<Tensor>& inputs) {
  KILN_CHECK(inputs.size() == 1, NotImplementedError,
             "{}: this module's forward takes one tensor, got {}", name(), inputs.size());
  return forward(inputs[0]);
}

void Module::expect_inputs(const std::vector<Tensor>& inputs, size_t count) const {
  KILN_CHECK(inputs.size() == count, ValueError, "{}: expected {} input tensors, got {}", name(),
             count, inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(inputs[i].defined(), ValueError, "{}: input {} is an undefined tensor", name(), i);
}

namespace {

// The hooks around `run`: pre-hooks may replace the inputs, hooks the output. Copies of the
// tables, since a hook may remove itself, or register another, while they run.
template <class Run>
Tensor hooked(Module& module, const ModuleHooks& hooks, std::vector<Tensor> inputs, Run run) {
  const std::map<uint64_t, ForwardPreHookMany> pre = hooks.pre;
  const std::map<uint64_t, ForwardHookMany> post = hooks.post;
  for (const auto& [id, hook] : pre) {
    std::vector<Tensor> replaced = hook(module, inputs);
    if (!replaced.empty()) inputs = std::move(replaced);
  }
  Tensor output = run(inputs);
  for (const auto& [id, hook] : post) {
    Tensor replaced = hook(module, inputs, output);
    if (replaced.defined()) output = replaced;
  }
  return output;
}

}  // namespace

Tensor Module::operator()(const Tensor& x) {
  if (!hooks_ || (hooks_->pre.empty() && hooks_->post.empty())) return forward(x);
  return hooked(*this, *hooks_, {x}, [&](const std::vector<Tensor>& in) {
    return in.size() == 1 ? forward(in[0]) : forward_many(in);
  });
}

Tensor Module::operator()(const std::vector<Tensor>& inputs) {
  if (!hooks_ || (hooks_->pre.empty() && hooks_->post.empty())) return forward_many(inputs);
  return hooked(*this, *hooks_, inputs,
                [&](const std::vector<Tensor>& in) { return forward_many(in); });
}

HookHandle Module::register_forward_pre_hook(ForwardPreHookMany hook) {
  KILN_CHECK(hook != nullptr, ValueError, "{}: register_forward_pre_hook: the hook is empty",
             name());
  if (!hooks_) hooks_ = std::make_shared<ModuleHooks>();
  const uint64_t id = hooks_->next_id++;
  hooks_->pre.emplace(id, std::move(hook));
  return HookHandle(hooks_, id);
}

HookHandle Module::register_forward_hook(ForwardHookMany hook) {
  KILN_CHECK(hook != nullptr, ValueError, "{}: register_forward_hook: the hook is empty", name());
  if (!hooks_) hooks_ = std::make_shared<ModuleHooks>();
  const uint64_t id = hooks_->next_id++;
  hooks_->post.emplace(id, std::move(hook));
  return HookHandle(hooks_, id);
}

HookHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  KILN_CHECK(hook != nullptr, ValueError, "{}: register_forward_pre_hook: the hook is empty",
             name());
  return register_forward_pre_hook(ForwardPreHookMany(
      [hook = std::move(hook)](Module& m, const std::vector<Tensor>& in) -> std::vector<Tensor> {
        if (in.size() != 1) return {};
        Tensor replaced = hook(m, in[0]);
        if (!replaced.defined()) return {};
        return {replaced};
      }));
}

HookHandle Module::register_forward_hook(ForwardHook hook) {
  KILN_CHECK(hook != nullptr, ValueError, "{}: register_forward_hook: the hook is empty", name());
  return register_forward_hook(ForwardHookMany(
      [hook = std::move(hook)](Module& m, const std::vector<Tensor>& in, const Tensor& out) {
        return in.size() == 1 ? hook(m, in[0], out) : Tensor();
      }));
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, child] : children_) child->apply(fn);
  fn(*this);
  return *this;
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  KILN_CHECK(module != nullptr, ValueError, "{}: replace_module: the new module '{}' is null",
             this->name(), name);
  for (auto& [n, child] : children_) {
    if (n != name) continue;
    child = std::move(module);
    return;
  }
  std::string known;
  for (const auto& [n, child] : children_) {
    if (!known.empty()) known += ", ";
    known += n;
  }
  throw ValueError(fmt::format("{}: replace_module: no submodule named '{}' (it has: {})",
                               this->name(), name, known.empty() ? "none" : known));
}

// Parameters, buffers and submodules share one namespace (they are all attributes in PyTorch), and
// a '.' would make dotted state_dict keys ambiguous.
void Module::check_new_name(const char* kind, const std::string& name) const {
  KILN_CHECK(name.find('.') == std::string::npos && !name.empty(), ValueError,
             "{}: {} name '{}' must be non-empty and contain no '.'", this->name(), kind, name);
  bool taken = false;
  for (auto& [n, t] : parameters_) taken = taken || n == name;
  for (auto& [n, t] : buffers_) taken = taken || n == name;
  for (auto& [n, m] : children_) taken = taken || n == name;
  KILN_CHECK(!taken, ValueError, "{}: {} '{}' registered twice (the name is already taken)",
             this->name(), kind, name);
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name("parameter", name);
  if (tensor.defined() && requires_grad) tensor.requires_grad_();
  parameters_.emplace_back(name, tensor);
  return parameters_.back().second;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name("buffer", name);
  buffers_.emplace_back(name, tensor);
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  KILN_CHECK(module != nullptr, ValueError, "{}: submodule '{}' is null", this->name(), name);
  check_new_name("submodule", name);
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers,
                     NamedTensors& out) const {
  for (const auto& [n, t] : buffers ? buffers_ : parameters_)
    if (t.defined()) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", true, buffers, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", recurse, false, out);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", recurse, true, out);
  return out;
}

std::string Module::name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string full = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // "kiln::nn::Conv2d" -> "Conv2d"; "(anonymous namespace)::Net" -> "Net".
  const size_t colons = full.rfind("::");
  return colons == std::string::npos ? full : full.substr(colons + 2);
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  // A module not owned by a shared_ptr (one on the stack, or a ResNet inside its own constructor)
  // lists itself through a non-owning pointer rather than throwing std::bad_weak_ptr.
  std::shared_ptr<Module> self = weak_from_this().lock();
  if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>(), this);
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out = {{"", self}};
  for (auto& [n, child] : children_)
    for (auto& [sub, m] : child->named_modules())
      out.emplace_back(sub.empty() ? n : n + "." + sub, m);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t total = 0;
  for (const Tensor& p : parameters()) total += p.numel();
  return total;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, child] : children_) child->train(on);
}

namespace {
void convert_in_place(Tensor& t, const std::function<Tensor(const Tensor&)>& convert) {
  NoGradGuard no_grad;
  Tensor converted = convert(t.detach());
  t.set_data(converted);
  Tensor grad = t.grad();
  if (grad.defined()) t.set_grad(convert(grad));
}
}  // namespace

Module& Module::to(Device device) {
  for (auto& [n, t] : named_parameters())
    convert_in_place(t, [&](const Tensor& x) { return x.to(device); });
  for (auto& [n, t] : named_buffers())
    convert_in_place(t, [&](const Tensor& x) { return x.to(device); });
  return *this;
}

Module& Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), DTypeError,
             "{}.to: modules convert to floating dtypes only, got {}", name(), dtype_name(dtype));
  auto convert = [&](const Tensor& x) { return is_floating(x.dtype()) ? x.to(dtype) : x; };
  for (auto& [n, t] : named_parameters()) convert_in_place(t, convert);
  for (auto& [n, t] : named_buffers()) convert_in_place(t, convert);
  return *this;
}

Module& Module::to(MemoryFormat format) {
  auto convert = [&](const Tensor& x) {
    return x.dim() == 4 && is_floating(x.dtype()) ? x.to(format) : x;
  };
  for (auto& [n, t] : named_parameters()) convert_in_place(t, convert);
  for (auto& [n, t] : named_buffers()) convert_in_place(t, convert);
  return *this;
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.zero_grad();
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [n, t] : named_parameters()) out[n] = t.detach();
  for (auto& [n, t] : named_buffers()) out[n] = t.detach();
  return out;
}

namespace {

constexpr const char* kWrapperPrefix = "module.";

bool all_prefixed(const std::vector<std::string>& keys) {
  if (keys.empty()) return false;
  for (const std::string& k : keys)
    if (k.rfind(kWrapperPrefix, 0) != 0) return false;
  return true;
}

bool none_prefixed(const std::vector<std::string>& keys) {
  for (const std::string& k : keys)
    if (k.rfind(kWrapperPrefix, 0) == 0) return false;
  return true;
}

// The state under the module's naming when the two differ only by DistributedDataParallel's
// "module." prefix (a checkpoint of a wrapped model into a bare one, or the other way round).
StateDict with_module_prefix_matched(const StateDict& state, const std::vector<std::string>& mine) {
  std::vector<std::string> theirs;
  for (const auto& [k, t] : state) theirs.push_back(k);
  const size_t n = std::string(kWrapperPrefix).size();
  StateDict out;
  if (all_prefixed(theirs) && none_prefixed(mine)) {
    for (const auto& [k, t] : state) out.emplace(k.substr(n), t);
    return out;
  }
  if (none_prefixed(theirs) && all_prefixed(mine)) {
    for (const auto& [k, t] : state) out.emplace(kWrapperPrefix + k, t);
    return out;
  }
  return state;
}

bool is_num_batches_tracked(const std::string& name, const Tensor& t) {
  constexpr std::string_view kName = "num_batches_tracked";
  return (name == kName || name.ends_with("." + std::string(kName))) && t.dtype() == DType::i64 &&
         t.dim() == 0;
}

}  // namespace

LoadResult Module::load_state_dict(const StateDict& given, bool strict) {
  LoadResult result;
  NamedTensors mine = named_parameters();
  NamedTensors buffers = named_buffers();
  mine.insert(mine.end(), buffers.begin(), buffers.end());
  std::vector<std::string> my_keys;
  for (const auto& [n, t] : mine) my_keys.push_back(n);
  const StateDict state = with_module_prefix_matched(given, my_keys);
  std::set<std::string> known;
  std::vector<std::string> mismatched;
  std::vector<Tensor> batch_counters;
  for (auto& [n, t] : mine) {
    known.insert(n);
    auto it = state.find(n);
    if (it == state.end()) {
      // BatchNorm's step counter came in PyTorch 0.4.1; PyTorch's BatchNorm fills it in with 0
      // when a state dict lacks it, so such files load strictly.
      if (is_num_batches_tracked(n, t))
        batch_counters.push_back(t);
      else
        result.missing_keys.push_back(n);
      continue;
    }
    if (it->second.shape() != t.shape()) {
      mismatched.push_back(fmt::format("{}: checkpoint {} vs model {}", n,
                                       shape_str(it->second.shape()), shape_str(t.shape())));
    }
    if (it->second.dtype() != t.dtype())
      result.converted_keys.push_back(
          fmt::format("{} ({} -> {})", n, dtype_name(it->second.dtype()), dtype_name(t.dtype())));
  }
  for (auto& [n, t] : state)
    if (!known.count(n)) result.unexpected_keys.push_back(n);
  KILN_CHECK(mismatched.empty(), ShapeError, "{}.load_state_dict: shape mismatch for {}", name(),
             fmt::join(mismatched, "; "));
  if (strict) {
    KILN_CHECK(result.missing_keys.empty() && result.unexpected_keys.empty(), ValueError,
               "{}.load_state_dict: missing keys [{}], unexpected keys [{}] (pass strict=false to "
               "load what matches)",
               name(), fmt::join(result.missing_keys, ", "),
               fmt::join(result.unexpected_keys, ", "));
  }
  NoGradGuard no_grad;
  for (auto& [n, t] : mine) {
    auto it = state.find(n);
    if (it != state.end()) t.copy_(it->second.to(t.device()));
  }
  for (Tensor& t : batch_counters) t.zero_();
  return result;
}

void Module::str_into(std::string& out, int indent) const {
  if (children_.empty()) {
    out += name() + "(" + extra_repr() + ")";
    return;
  }
  // With children, PyTorch puts the module's own arguments on a line of their own.
  out += name() + "(\n";
  if (!extra_repr().empty()) out += std::string(indent + 2, ' ') + extra_repr() + "\n";
  for (auto& [n, child] : children_) {
    out += std::string(indent + 2, ' ') + "(" + n + "): ";
    child->str_into(out, indent + 2);
    out += "\n";
  }
  out += std::string(indent, ' ') + ")";
}

std::string Module::str() const {
  std::string out;
  str_into(out, 0);
  int64_t trainable = 0;
  for (const Tensor& p : parameters())
    if (p.requires_grad()) trainable += p.numel();
  out += fmt::format("\n{} parameters ({} trainable)", parameter_count(), trainable);
  return out;
}

}  // namespace kiln::nn
