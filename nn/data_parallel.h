// DataParallel, as PyTorch's nn.DataParallel: one process drives several GPUs. Each forward
// splits the batch along dim 0 over the GPUs, runs a replica of the module on each at once, and
// gathers the outputs on one device; backward sums the replicas' gradients into the module's own
// parameters, so an optimizer over module.parameters() steps as for one GPU.
//
//   auto model = nn::resnet20();
//   model->to(Device::cuda(0));
//   auto make_replica = [] { return nn::resnet20(); };
//   auto dp = std::make_shared<nn::DataParallel>(model, make_replica);  // every visible GPU
//   Tensor loss = cross_entropy(dp->forward(images), labels.to(dp->output_device()));
//   loss.backward();   // gradients of the whole batch in model's .grad
//   optimizer.step();  // an optimizer over dp->parameters() (= model's)
//
// C++ cannot deep-copy a module (its layers hold their tensors and submodules as typed members),
// so the caller passes a factory that builds one more module of the same architecture (as
// libtorch's DataParallel asks its modules to be Cloneable); it runs once per extra GPU, at
// construction, and what the replicas start with does not matter. Replica 0 is the module itself,
// on device_ids[0]. Every forward, before running the replicas, copies the module's parameters
// (values, requires_grad, memory layout) and buffers into the other replicas (PyTorch's replicate:
// parameters broadcast, buffers from the first device) and gives each submodule the module's
// training mode. So BatchNorm's running statistics are those replica 0 computed from its share of
// the batch, as in PyTorch; each replica normalises with its own share's statistics.
//
// The batch is split as evenly as it goes: with B samples over n GPUs the first B mod n get
// floor(B/n) + 1 (PyTorch's chunk() would give 10 over 4 as 3, 3, 3, 1; here 3, 3, 2, 2). Each
// replica runs on its own thread, on the caller's current stream of its GPU (as PyTorch's
// parallel_apply), with the caller's grad mode and autocast; the threads live as long as the
// DataParallel, so their per-thread caches (cuBLAS and cuDNN handles and plans) stay warm. The
// outputs are joined along dim 0 on output_device (scalars are stacked into a vector of n). When
// backward reaches that join, it queues a callback that, once every node has run, adds each
// replica's gradients into the module's .grad (replica 0's are already there), in device order, and
// drops the replicas' own. Gradient hooks on the module's parameters see replica 0's part only.
//
// Errors (each naming DataParallel): a batch smaller than the number of GPUs; a module not
// wholly on cuda:device_ids[0]; a factory whose module differs (names, shapes, dtypes); a
// replica's forward that changed a parameter in place or a buffer other than BatchNorm's (those
// changes would be lost with the replica, or differ between replicas); an error in a replica's
// forward, rethrown as its own type with the replica's device. Without a GPU (device_ids empty
// and none visible) DataParallel runs the module as it is, as PyTorch's does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct DataParallelOptions {
  // The GPUs the batch is split over, in order; empty: every visible GPU.
  std::vector<int> device_ids = {};
  // Where forward's output is gathered: cuda:device_ids[0] when unset; the CPU is allowed.
  std::optional<Device> output_device = std::nullopt;
};

// Builds a module of the same architecture as the one DataParallel wraps.
using ModuleFactory = std::function<std::shared_ptr<Module>()>;

struct DataParallelReplicas;
class DataParallelThreads;

class DataParallel : public Module {
 public:
  DataParallel(std::shared_ptr<Module> module, const ModuleFactory& make_replica,
               DataParallelOptions options = {});
  ~DataParallel() override;

  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "DataParallel"; }
  std::string extra_repr() const override;  // "device_ids=[0, 1], output_device=cuda:0"

  Module& module() { return *module_; }
  const std::vector<int>& device_ids() const { return device_ids_; }
  Device output_device() const { return output_device_; }
  // How a batch of `batch` samples is split over device_ids (ValueError below one per GPU).
  std::vector<int64_t> split_sizes(int64_t batch) const;

 private:
  std::shared_ptr<Module> module_;
  std::vector<int> device_ids_;
  Device output_device_;
  // Shared with the gradient callbacks, which hold it weakly.
  std::shared_ptr<DataParallelReplicas> replicas_;
  std::unique_ptr<DataParallelThreads> threads_;  // replica r > 0 runs on thread r
};

}  // namespace kiln::nn
