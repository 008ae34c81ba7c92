#include "kiln/nn/data_parallel.h"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/core/autocast.h"
#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include "kiln/core/shape.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/index.h"

namespace kiln::nn {

// The replicas' tensors, in one order: [replica][k], replica 0 being the wrapped module.
struct DataParallelReplicas {
  std::vector<Device> devices;
  std::vector<std::shared_ptr<Module>> roots;
  std::vector<std::vector<std::shared_ptr<Module>>> modules;  // named_modules() order
  std::vector<std::vector<Tensor>> params, buffers;
  std::vector<std::string> param_names, buffer_names;
  std::vector<bool> batch_norm_buffer;  // buffer k is a BatchNorm's running statistic

  void add(const std::shared_ptr<Module>& root) {
    roots.push_back(root);
    modules.emplace_back();
    for (auto& [name, m] : root->named_modules()) modules.back().push_back(m);
    params.emplace_back();
    for (auto& [name, p] : root->named_parameters()) params.back().push_back(p);
    buffers.emplace_back();
    for (auto& [name, b] : root->named_buffers()) buffers.back().push_back(b);
  }

  // PyTorch's replicate, into replicas that already exist: the module's training modes,
  // parameters (values, requires_grad, layout) and buffers into every other replica.
  void copy_from_module() {
    NoGradGuard no_grad;
    for (size_t k = 0; k < params[0].size(); ++k)
      check_on_first_device("parameter", param_names[k], params[0][k]);
    for (size_t k = 0; k < buffers[0].size(); ++k)
      check_on_first_device("buffer", buffer_names[k], buffers[0][k]);
    for (size_t r = 1; r < roots.size(); ++r) {
      // named_modules lists a parent before its children, so a submodule the user put in eval
      // mode inside a training model keeps its own mode.
      for (size_t k = 0; k < modules[r].size(); ++k)
        modules[r][k]->train(modules[0][k]->is_training());
      for (size_t k = 0; k < params[r].size(); ++k) {
        copy_into(params[r][k], params[0][k]);
        if (params[r][k].requires_grad() != params[0][k].requires_grad())
          params[r][k].requires_grad_(params[0][k].requires_grad());
      }
      for (size_t k = 0; k < buffers[r].size(); ++k) copy_into(buffers[r][k], buffers[0][k]);
    }
  }

  void check_on_first_device(const char* kind, const std::string& name, const Tensor& t) const {
    KILN_CHECK(t.device() == devices[0], DeviceError,
               "nn::DataParallel: {} '{}' of the module is on {}; the module must be on {} "
               "(device_ids[0]), where replica 0 runs: module->to(Device::cuda({})) first",
               kind, name, t.device().str(), devices[0].str(), devices[0].index);
  }

  // dst (a replica's) takes src's dtype and layout, so that every replica runs the kernels the
  // module runs, then src's values.
  static void copy_into(Tensor& dst, const Tensor& src) {
    if (dst.dtype() != src.dtype() || dst.strides() != src.strides())
      dst.set_data(empty_like_layout(src, src.dtype(), dst.device()));
    dst.copy_(src);
  }

  std::vector<std::vector<uint64_t>> versions() const {
    std::vector<std::vector<uint64_t>> out(roots.size());
    for (size_t r = 0; r < roots.size(); ++r) {
      for (const Tensor& p : params[r]) out[r].push_back(p.version());
      for (const Tensor& b : buffers[r]) out[r].push_back(b.version());
    }
    return out;
  }

  // What a replica's forward may change: BatchNorm's running statistics (kept from replica 0,
  // as PyTorch). Anything else would be lost with the replica, or differ between replicas.
  void check_unchanged(const std::vector<std::vector<uint64_t>>& before) const {
    const std::vector<std::vector<uint64_t>> after = versions();
    for (size_t r = 0; r < roots.size(); ++r) {
      for (size_t k = 0; k < params[r].size(); ++k)
        KILN_CHECK(after[r][k] == before[r][k], ValueError,
                   "nn::DataParallel: the forward of replica {} ({}) changed parameter '{}' in "
                   "place; a replica's forward may change BatchNorm's running statistics only",
                   r, devices[r].str(), param_names[k]);
      for (size_t k = 0; k < buffers[r].size(); ++k) {
        const size_t at = params[r].size() + k;
        KILN_CHECK(batch_norm_buffer[k] || after[r][at] == before[r][at], ValueError,
                   "nn::DataParallel: the forward of replica {} ({}) changed buffer '{}', which is "
                   "not a BatchNorm's running statistic; the other replicas' changes would be "
                   "lost (only replica 0's buffers are the module's), so DataParallel refuses "
                   "it: keep such state out of forward, or train with DistributedDataParallel",
                   r, devices[r].str(), buffer_names[k]);
      }
    }
  }

  // Once backward has run every node: each replica's gradients added into the module's .grad
  // (which already holds replica 0's), in device order, and the replicas' own dropped.
  void sum_gradients() {
    NoGradGuard no_grad;
    for (size_t k = 0; k < params[0].size(); ++k) {
      Tensor& target = params[0][k];
      for (size_t r = 1; r < roots.size(); ++r) {
        Tensor& p = params[r][k];
        const Tensor grad = p.grad();
        if (!grad.defined()) continue;
        Tensor moved = grad.to(target.device());
        Tensor have = target.grad();
        if (have.defined())
          have.add_(moved);
        else
          target.set_grad(moved);
        p.zero_grad();
      }
    }
  }
};

// One thread per replica but the first, for the DataParallel's life: what a thread caches (its
// cuBLAS and cuDNN handles, cuDNN's graph-API plans, kernels/cuda/handles.h) stays warm from one
// step to the next, where threads made by each forward would start cold every step.
class DataParallelThreads {
 public:
  explicit DataParallelThreads(size_t workers) {
    for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this, i] { loop(i + 1); });
  }
  ~DataParallelThreads() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  DataParallelThreads(const DataParallelThreads&) = delete;
  DataParallelThreads& operator=(const DataParallelThreads&) = delete;

  // task(r) for every replica r at once: r > 0 on thread r, 0 on the caller's. Returns when all
  // have; task must not throw (it keeps its errors for the caller).
  void run(const std::function<void(size_t)>& task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      pending_ = threads_.size();
      ++generation_;
    }
    start_.notify_all();
    task(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void loop(size_t replica) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const std::function<void(size_t)>* task = task_;
      lock.unlock();
      (*task)(replica);
      lock.lock();
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(size_t)>* task_ = nullptr;
  uint64_t generation_ = 0;
  size_t pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

namespace {

// Rethrows `error` as its own kiln error type, its message prefixed: a replica's error reaches
// the caller as what it was, saying which replica.
template <class First, class... Rest>
[[noreturn]] void rethrow_prefixed(const std::exception_ptr& error, const std::string& prefix) {
  try {
    std::rethrow_exception(error);
  } catch (const First& e) {
    throw First(prefix + e.what());
  } catch (...) {
    if constexpr (sizeof...(Rest) > 0) rethrow_prefixed<Rest...>(error, prefix);
    throw;
  }
}

[[noreturn]] void rethrow_from_replica(const std::exception_ptr& error, const std::string& prefix) {
  try {
    rethrow_prefixed<ShapeError, DTypeError, DeviceError, IndexError, ValueError, AutogradError,
                     NotImplementedError, OutOfMemoryError, GraphCaptureError, DistError, Error>(
        error, prefix);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(prefix + e.what());
  }
}

std::string describe_module_tensors(const NamedTensors& tensors) {
  std::string out;
  for (const auto& [name, t] : tensors) out += name + " " + describe(t) + "; ";
  return out;
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<Module> module, const ModuleFactory& make_replica,
                           DataParallelOptions options)
    : module_(std::move(module)),
      device_ids_(std::move(options.device_ids)),
      output_device_(Device::cpu()),
      replicas_(std::make_shared<DataParallelReplicas>()) {
  KILN_CHECK(module_ != nullptr, ValueError, "nn::DataParallel: expected a module, got null");
  register_module("module", module_);
  const int count = cuda::device_count();
  if (device_ids_.empty())
    for (int i = 0; i < count; ++i) device_ids_.push_back(i);
  if (device_ids_.empty()) {
    // No GPU: the module runs as it is, as PyTorch's DataParallel does.
    output_device_ = options.output_device.value_or(Device::cpu());
    return;
  }
  for (size_t i = 0; i < device_ids_.size(); ++i) {
    KILN_CHECK(device_ids_[i] >= 0 && device_ids_[i] < count, DeviceError,
               "nn::DataParallel: device_ids[{}] is {}, but {} GPU(s) are visible", i,
               device_ids_[i], count);
    for (size_t j = 0; j < i; ++j)
      KILN_CHECK(device_ids_[j] != device_ids_[i], ValueError,
                 "nn::DataParallel: device_ids lists GPU {} twice (at {} and {})", device_ids_[i],
                 j, i);
  }
  output_device_ = options.output_device.value_or(Device::cuda(device_ids_[0]));
  KILN_CHECK(output_device_.is_cpu() || output_device_.index < count, DeviceError,
             "nn::DataParallel: output_device is {}, but {} GPU(s) are visible",
             output_device_.str(), count);

  DataParallelReplicas& replicas = *replicas_;
  for (int id : device_ids_) replicas.devices.push_back(Device::cuda(id));
  for (auto& [name, p] : module_->named_parameters()) replicas.param_names.push_back(name);
  for (auto& [name, b] : module_->named_buffers()) replicas.buffer_names.push_back(name);
  std::set<std::string> batch_norm_names;
  for (auto& [prefix, m] : module_->named_modules())
    if (dynamic_cast<const BatchNorm*>(m.get()) != nullptr)
      for (auto& [name, b] : m->named_buffers(false))
        batch_norm_names.insert(prefix.empty() ? name : prefix + "." + name);
  for (const std::string& name : replicas.buffer_names)
    replicas.batch_norm_buffer.push_back(batch_norm_names.count(name) > 0);
  replicas.add(module_);
  for (size_t k = 0; k < replicas.params[0].size(); ++k)
    replicas.check_on_first_device("parameter", replicas.param_names[k], replicas.params[0][k]);
  for (size_t k = 0; k < replicas.buffers[0].size(); ++k)
    replicas.check_on_first_device("buffer", replicas.buffer_names[k], replicas.buffers[0][k]);

  if (device_ids_.size() > 1)
    KILN_CHECK(make_replica != nullptr, ValueError,
               "nn::DataParallel: {} GPUs need a factory that builds {} more module(s) like the "
               "wrapped {}, got none",
               device_ids_.size(), device_ids_.size() - 1, module_->name());
  const NamedTensors want_params = module_->named_parameters();
  const NamedTensors want_buffers = module_->named_buffers();
  for (size_t r = 1; r < device_ids_.size(); ++r) {
    std::shared_ptr<Module> replica = make_replica();
    KILN_CHECK(replica != nullptr && replica != module_, ValueError,
               "nn::DataParallel: the factory must build a new module for each replica, got {}",
               replica == nullptr ? "null" : "the wrapped module itself");
    NoGradGuard no_grad;
    replica->to(replicas.devices[r]);
    // The same names, shapes and dtypes, in the same order: the replica computes what the module
    // does.
    auto same = [](const NamedTensors& a, const NamedTensors& b) {
      if (a.size() != b.size()) return false;
      for (size_t k = 0; k < a.size(); ++k)
        if (a[k].first != b[k].first || a[k].second.shape() != b[k].second.shape() ||
            a[k].second.dtype() != b[k].second.dtype())
          return false;
      return true;
    };
    const NamedTensors got_params = replica->named_parameters();
    const NamedTensors got_buffers = replica->named_buffers();
    KILN_CHECK(same(got_params, want_params) && same(got_buffers, want_buffers), ValueError,
               "nn::DataParallel: the factory's module differs from the wrapped {}: expected "
               "{}got {}",
               module_->name(),
               describe_module_tensors(want_params) + describe_module_tensors(want_buffers),
               describe_module_tensors(got_params) + describe_module_tensors(got_buffers));
    replicas.add(replica);
  }
  threads_ = std::make_unique<DataParallelThreads>(device_ids_.size() - 1);
}

DataParallel::~DataParallel() = default;

std::string DataParallel::extra_repr() const {
  std::string ids;
  for (int id : device_ids_) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  return "device_ids=[" + ids + "], output_device=" + output_device_.str();
}

std::vector<int64_t> DataParallel::split_sizes(int64_t batch) const {
  const auto n = static_cast<int64_t>(device_ids_.size());
  KILN_CHECK(n > 0, ValueError, "nn::DataParallel: no GPU to split a batch over");
  KILN_CHECK(batch >= n, ValueError,
             "nn::DataParallel: a batch of {} cannot be split over {} GPUs (each replica needs at "
             "least one sample); use a batch of at least {}, or fewer device_ids",
             batch, n, n);
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < n; ++i) sizes.push_back(batch / n + (i < batch % n ? 1 : 0));
  return sizes;
}

Tensor DataParallel::forward(const Tensor& x) {
  if (device_ids_.empty()) return module_->forward(x);
  DataParallelReplicas& replicas = *replicas_;
  KILN_CHECK(x.defined() && x.dim() >= 1, ShapeError,
             "nn::DataParallel: expected a batch with a dim 0 to split, got {}", describe(x));
  const std::vector<int64_t> sizes = split_sizes(x.size(0));
  const size_t n = sizes.size();
  replicas.copy_from_module();

  // Scatter, on the caller's thread: each share's copy to its GPU is recorded here, not raced
  // on the graph of x from several threads.
  std::vector<Tensor> inputs;
  int64_t offset = 0;
  for (size_t r = 0; r < n; ++r) {
    inputs.push_back(x.narrow(0, offset, sizes[r]).to(replicas.devices[r]));
    offset += sizes[r];
  }

  // Each replica on the caller's current stream of its GPU, so that backward (which runs on the
  // caller's thread, on those streams) is ordered after its forward with no event to add.
  std::vector<cuda::Stream> streams;
  for (const Device& d : replicas.devices) streams.push_back(cuda::current_stream(d.index));
  const bool grad_enabled = GradMode::is_enabled();
  const bool amp = is_autocast_enabled();
  const DType amp_dtype = autocast_dtype();
  const std::vector<std::vector<uint64_t>> before = replicas.versions();
  std::vector<Tensor> outputs(n);
  std::vector<std::exception_ptr> errors(n);
  const std::function<void(size_t)> run = [&](size_t r) noexcept {
    try {
      cuda::StreamGuard stream(streams[r]);
      // A worker thread has its own grad mode and autocast state: it takes the caller's.
      GradMode::set_enabled(grad_enabled);
      std::optional<autocast> scope;
      if (amp && r != 0) scope.emplace(amp_dtype);
      outputs[r] = replicas.roots[r]->forward(inputs[r]);
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  threads_->run(run);
  for (size_t r = 0; r < n; ++r)
    if (errors[r])
      rethrow_from_replica(errors[r], "nn::DataParallel: replica " + std::to_string(r) + " on " +
                                          replicas.devices[r].str() + ": ");
  replicas.check_unchanged(before);

  // Gather on the output device.
  for (size_t r = 0; r < n; ++r)
    KILN_CHECK(outputs[r].defined() && outputs[r].dim() == outputs[0].dim(), ShapeError,
               "nn::DataParallel: replica {} returned {} where replica 0 returned {}; the "
               "outputs are joined along dim 0",
               r, describe(outputs[r]), describe(outputs[0]));
  std::vector<Tensor> moved;
  for (const Tensor& out : outputs) moved.push_back(out.to(output_device_));
  // A scalar per replica (a loss computed inside the module) becomes a vector, as PyTorch's.
  Tensor gathered = outputs[0].dim() == 0 ? stack(moved, 0) : cat(moved, 0);
  if (gathered.requires_grad()) {
    std::weak_ptr<DataParallelReplicas> weak = replicas_;
    gathered.register_hook([weak](const Tensor&) {
      queue_backward_callback([weak] {
        if (auto alive = weak.lock()) alive->sum_gradients();
      });
      return Tensor();
    });
  }
  return gathered;
}

}  // namespace kiln::nn
