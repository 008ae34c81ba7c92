#include "kiln/nn/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/ops/autograd/checkpoint.h"
#include "kiln/ops/index.h"

namespace kiln::nn {

Pipeline::Pipeline(std::vector<std::shared_ptr<Module>> stages, std::vector<Device> devices,
                   PipelineOptions options)
    : devices_(std::move(devices)), options_(options) {
  KILN_CHECK(!stages.empty(), ValueError, "Pipeline: expected at least one stage, got none");
  KILN_CHECK(stages.size() == devices_.size(), ValueError,
             "Pipeline: {} stages but {} devices; give one device per stage", stages.size(),
             devices_.size());
  KILN_CHECK(options_.chunks >= 1, ValueError,
             "Pipeline: chunks (micro-batches) must be at least 1, got {}", options_.chunks);
  for (size_t i = 0; i < stages.size(); ++i) {
    KILN_CHECK(stages[i] != nullptr, ValueError, "Pipeline: stage {} is null", i);
    stages[i]->to(devices_[i]);
    add_child(std::to_string(i), stages[i]);
  }
  stages_ = std::move(stages);
}

std::shared_ptr<Module> Pipeline::operator[](size_t i) const {
  KILN_CHECK(i < stages_.size(), IndexError, "Pipeline: index {} out of range for {} stages", i,
             stages_.size());
  return stages_[i];
}

std::string Pipeline::extra_repr() const {
  std::vector<std::string> names;
  for (const Device& d : devices_) names.push_back(d.str());
  return fmt::format("chunks={}, devices=[{}]", options_.chunks, fmt::join(names, ", "));
}

Tensor Pipeline::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() >= 1 && x.size(0) >= 1, ShapeError,
             "Pipeline: expected a batch with at least one example along dim 0, got {}",
             describe(x));
  std::vector<Tensor> micro = chunk(x, options_.chunks, 0);
  const auto m = static_cast<int64_t>(micro.size());
  const auto n = static_cast<int64_t>(stages_.size());
  for (int64_t tick = 0; tick < m + n - 1; ++tick) {
    for (int64_t j = std::max<int64_t>(0, tick - m + 1); j <= std::min(tick, n - 1); ++j) {
      const int64_t i = tick - j;
      Module& stage = *stages_[static_cast<size_t>(j)];
      // Pinned memory reaches a GPU without making the host wait; any other copy is ordered on
      // the devices' streams (core/cuda.h).
      const Tensor in = micro[static_cast<size_t>(i)].to(devices_[static_cast<size_t>(j)], true);
      const bool keep_activations =
          options_.checkpoint == PipelineCheckpoint::never ||
          (options_.checkpoint == PipelineCheckpoint::except_last && i == m - 1);
      micro[static_cast<size_t>(i)] =
          keep_activations ? stage.forward(in)
                           : checkpoint([stage = stages_[static_cast<size_t>(j)]](
                                            const Tensor& input) { return stage->forward(input); },
                                        in);
    }
  }
  return m == 1 ? micro[0] : cat(micro, 0);
}

}  // namespace kiln::nn
