// Pipeline: a model cut into stages on different devices, fed with micro-batches on GPipe's
// schedule (Huang et al., 2019), as torchgpipe's GPipe and torch.distributed.pipeline.sync.Pipe:
//
//   nn::Pipeline pipe({features, classifier}, {Device::cuda(0), Device::cuda(1)}, {.chunks = 4});
//   Tensor logits = pipe.forward(images);  // on cuda:1, the last stage's device
//   cross_entropy(logits, labels.to(pipe.output_device())).backward();
//   optimizer.step();
//
// The constructor moves stage i to devices[i]. forward() splits the batch along dim 0 into
// `chunks` micro-batches (as chunk(): fewer when the batch is smaller) and runs them in clock
// ticks: at tick k, stage j runs micro-batch k - j, which to() has first moved onto stage j's
// device. On GPUs the host only queues the work, so stage j computes micro-batch i while stage
// j + 1 computes micro-batch i - 1; stages on the CPU run one after the other. The micro-batches'
// outputs come back joined along dim 0 on the last stage's device. A backward through them runs
// every micro-batch's backward (all the forwards, then all the backwards), and each parameter's
// gradient accumulates over the micro-batches, so one optimizer step sees the whole batch's.
//
// The result is the model's on one device: bit for bit with one micro-batch and the same kernels;
// with several, the gradients are sums over micro-batches, in another order. As in GPipe, a
// BatchNorm sees each micro-batch alone (its statistics, and one running-statistics update per
// micro-batch), so with batch norm several micro-batches compute something else than one.
// Moving the whole Pipeline with to(device) undoes its placement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// Which micro-batches run their stages under checkpoint() (ops/autograd/checkpoint.h), keeping only
// each stage's input until backward recomputes the rest: torchgpipe's choices.
enum class PipelineCheckpoint {
  never,
  except_last,  // all but the last micro-batch, whose backward comes first (torchgpipe's default)
  always,
};

struct PipelineOptions {
  int64_t chunks = 1;  // micro-batches per batch
  PipelineCheckpoint checkpoint = PipelineCheckpoint::never;
};

class Pipeline : public Module {
 public:
  // Stage i runs on devices[i]; the stages are registered as "0", "1", ... as in a Sequential.
  Pipeline(std::vector<std::shared_ptr<Module>> stages, std::vector<Device> devices,
           PipelineOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Pipeline"; }
  std::string extra_repr() const override;  // "chunks=4, devices=[cuda:0, cuda:1]"

  size_t size() const { return stages_.size(); }
  std::shared_ptr<Module> operator[](size_t i) const;
  const std::vector<Device>& devices() const { return devices_; }
  Device output_device() const { return devices_.back(); }
  const PipelineOptions& options() const { return options_; }

 private:
  std::vector<std::shared_ptr<Module>> stages_;
  std::vector<Device> devices_;
  PipelineOptions options_;
};

}  // namespace kiln::nn
