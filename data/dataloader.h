// DataLoader: batches of a Dataset, optionally shuffled and transformed, loaded by worker threads
// ahead of the training loop and delivered in order.
//
//   DataLoader loader(dataset, compose({to_float(), random_crop(28, 4)}), {.batch_size = 128,
//                     .shuffle = true, .seed = 1, .num_workers = 4});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.set_epoch(epoch);
//     for (Batch& batch : loader) train_step(batch[0], batch[1]);
//   }
//
// Everything random is a function of (seed, epoch, sample index): the order is a Philox-seeded
// Fisher–Yates shuffle of (seed, epoch), and the transform of sample i gets an Rng seeded by
// (seed, epoch, i). So the batches do not depend on num_workers or on thread timing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/sampler.h"
#include "kiln/data/transforms.h"

namespace kiln::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;    // drop a last batch smaller than batch_size
  int num_workers = 0;       // 0: load in the thread that calls next()
  int prefetch_batches = 2;  // per worker: how far workers may run ahead of next()
  // Batches in page-locked memory, so `batch[k].to(cuda, /*non_blocking=*/true)` copies without
  // waiting. Only where a GPU is visible: elsewhere (as PyTorch does) batches stay pageable.
  bool pin_memory = false;
  // Which examples each epoch visits, in which order (data/sampler.h: DistributedSampler gives
  // each rank its share). Null: all of them, shuffled or not as above; shuffle must then be false.
  std::shared_ptr<const Sampler> sampler = nullptr;
};

// Field k of every example stacked along a new leading dim; field 0 after the transform.
using Batch = std::vector<Tensor>;

// The sample order of one epoch: 0..size-1, or a Fisher–Yates shuffle seeded by (seed, epoch).
std::vector<int64_t> epoch_order(int64_t size, bool shuffle, uint64_t seed, int64_t epoch);

// Stacks field k of every example into one contiguous tensor [examples.size(), ...]; the fields
// must agree in count, shape and dtype across examples.
// pinned: allocate the batch in page-locked memory (needs CUDA: see Tensor::pin_memory).
Batch collate(const std::vector<Example>& examples, bool pinned = false);

// What DataLoader::next() returns: the next batch, or the end of the epoch. Read like a
// std::optional (`while (auto batch = loader.next())`, `*batch`, `batch->at(0)`), except that
// reading the batch at the end of an epoch throws an IndexError that says so, instead of reading
// an empty optional.
class NextBatch {
 public:
  NextBatch(Batch batch) : batch_(std::move(batch)) {}  // NOLINT: a batch converts implicitly
  static NextBatch end_of_epoch(int64_t epoch, int64_t num_batches);

  bool has_value() const { return batch_.has_value(); }
  explicit operator bool() const { return has_value(); }
  Batch& value();
  const Batch& value() const;
  Batch& operator*() { return value(); }
  const Batch& operator*() const { return value(); }
  Batch* operator->() { return &value(); }
  const Batch* operator->() const { return &value(); }

 private:
  NextBatch() = default;
  std::optional<Batch> batch_;
  int64_t epoch_ = 0;  // at the end: which epoch ended, and after how many batches
  int64_t num_batches_ = 0;
};

class DataLoader {
 public:
  // transform applies to field 0 of each example; an empty one leaves it unchanged. Both the
  // dataset's get() and the transform are called from several threads at once.
  DataLoader(std::shared_ptr<const Dataset> dataset, Transform transform,
             DataLoaderOptions options = {});
  ~DataLoader();  // stops and joins the workers of an epoch in progress
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_batches() const;
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  // The epoch the next start_epoch() runs. Each start_epoch() then moves it on by one, so a loop
  // that never calls set_epoch still sees a new order every epoch. Stops an epoch in progress.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return next_epoch_; }

  // Begins epoch epoch(), first stopping and joining the workers of one in progress.
  void start_epoch();
  // The next batch of the current epoch (starting one if none was started), or the end of the
  // epoch once it is over: from then on every call returns the end (reading its batch throws)
  // until set_epoch() or start_epoch() begins the next epoch. An exception thrown while loading a
  // batch (by the dataset or the transform, in any worker) is rethrown here, in order, and ends
  // the epoch.
  NextBatch next();

  // Range-for over one epoch: begin() calls start_epoch().
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Iterator() = default;  // the end
    explicit Iterator(DataLoader* loader) : loader_(loader), batch_(loader->next()) {}
    Batch& operator*() { return batch_.value(); }
    Batch* operator->() { return &batch_.value(); }
    Iterator& operator++() {
      batch_ = loader_->next();
      return *this;
    }
    // Only "has this reached the end" is meaningful for an input iterator.
    bool operator==(const Iterator& other) const {
      return batch_.has_value() == other.batch_.has_value();
    }

   private:
    DataLoader* loader_ = nullptr;
    NextBatch batch_ = NextBatch::end_of_epoch(0, 0);
  };
  Iterator begin();
  Iterator end() { return Iterator(); }

 private:
  struct Epoch;

  Batch load_batch(const Epoch& epoch, int64_t batch) const;
  void stop_epoch();

  std::shared_ptr<const Dataset> dataset_;
  Transform transform_;
  DataLoaderOptions options_;
  int64_t next_epoch_ = 0;
  std::unique_ptr<Epoch> epoch_;  // null before the first epoch and after stop_epoch()
};

}  // namespace kiln::data
