// Samplers: which examples of a dataset one epoch visits, and in which order. The DataLoader's own
// order (shuffle, seed) covers one process; DistributedSampler gives each rank of a data-parallel
// job its own share, as torch.utils.data.distributed.DistributedSampler:
//
//   auto sampler = std::make_shared<DistributedSampler>(dist::get_world_size(), dist::get_rank(),
//                                                        DistributedSamplerOptions{.seed = 1});
//   DataLoader loader(dataset, transform, {.batch_size = 64, .sampler = sampler});
//   loader.set_epoch(epoch);   // every rank shuffles alike, differently each epoch
//
// Every rank shuffles the whole dataset with the same (seed, epoch) and takes every
// num_replicas-th example from its rank on, so the shares are disjoint and together cover the
// dataset. Unless drop_last, the order is first padded with its own head to a multiple of
// num_replicas, so every rank gets the same number of examples (and so the same number of
// batches: a rank with fewer would leave the others waiting in an all-reduce).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The example indices of epoch `epoch` over a dataset of `dataset_size` examples.
  virtual std::vector<int64_t> indices(int64_t dataset_size, int64_t epoch) const = 0;
  // How many indices() returns.
  virtual int64_t length(int64_t dataset_size) const = 0;
};

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  // Drop the tail that does not divide evenly, instead of padding with repeated examples.
  bool drop_last = false;
};

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int num_replicas, int rank, DistributedSamplerOptions options = {});
  std::vector<int64_t> indices(int64_t dataset_size, int64_t epoch) const override;
  int64_t length(int64_t dataset_size) const override;

 private:
  int num_replicas_, rank_;
  DistributedSamplerOptions options_;
};

}  // namespace kiln::data
