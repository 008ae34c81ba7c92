#include "kiln/data/sampler.h"

#include <cstdint>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/data/dataloader.h"

namespace kiln::data {

DistributedSampler::DistributedSampler(int num_replicas, int rank,
                                       DistributedSamplerOptions options)
    : num_replicas_(num_replicas), rank_(rank), options_(options) {
  KILN_CHECK(num_replicas >= 1, ValueError,
             "DistributedSampler: num_replicas must be at least 1, got {}", num_replicas);
  KILN_CHECK(rank >= 0 && rank < num_replicas, ValueError,
             "DistributedSampler: rank {} is not in [0, {})", rank, num_replicas);
}

int64_t DistributedSampler::length(int64_t dataset_size) const {
  return options_.drop_last ? dataset_size / num_replicas_
                            : (dataset_size + num_replicas_ - 1) / num_replicas_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t dataset_size, int64_t epoch) const {
  std::vector<int64_t> order = epoch_order(dataset_size, options_.shuffle, options_.seed, epoch);
  const int64_t total = length(dataset_size) * num_replicas_;
  // Pad with the order's own head (repeated as often as needed for a tiny dataset), or cut.
  for (int64_t i = dataset_size; i < total; ++i) order.push_back(order[i % dataset_size]);
  order.resize(total);
  std::vector<int64_t> mine;
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(order[i]);
  return mine;
}

}  // namespace kiln::data
