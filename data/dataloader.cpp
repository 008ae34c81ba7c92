#include "kiln/data/dataloader.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include "kiln/core/philox.h"
#include "kiln/core/profiler.h"

namespace kiln::data {
namespace {

// The Philox offsets that keep the shuffle and the transforms on separate streams.
constexpr uint64_t kShuffleStream = 1;
constexpr uint64_t kTransformStream = 2;

// A seed for one purpose in one epoch, mixed by Philox so that nearby (seed, epoch) pairs give
// unrelated streams.
uint64_t derive_seed(uint64_t seed, int64_t epoch, uint64_t purpose) {
  const PhiloxCounter words = philox_block(seed, purpose, static_cast<uint64_t>(epoch));
  return uint64_t{words.x[0]} | (uint64_t{words.x[1]} << 32);
}

}  // namespace

std::vector<int64_t> epoch_order(int64_t size, bool shuffle, uint64_t seed, int64_t epoch) {
  KILN_CHECK(size >= 0, ValueError, "epoch_order: size must be non-negative, got {}", size);
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  Rng rng(derive_seed(seed, epoch, kShuffleStream), 0);
  for (int64_t i = size - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.randint(0, i + 1))]);
  return order;
}

Batch collate(const std::vector<Example>& examples, bool pinned) {
  profiler::RecordFunction range("collate");
  KILN_CHECK(!examples.empty(), ValueError, "collate: expected at least one example, got none");
  const size_t fields = examples[0].size();
  const auto count = static_cast<int64_t>(examples.size());
  Batch batch;
  for (size_t f = 0; f < fields; ++f) {
    const Tensor& first = examples[0][f];
    KILN_CHECK(first.defined(), ValueError, "collate: field {} of example 0 is undefined", f);
    Shape shape = first.shape();
    shape.insert(shape.begin(), count);
    Tensor out = pinned ? empty_pinned(shape, first.dtype()) : empty(shape, first.dtype());
    const size_t nbytes = static_cast<size_t>(first.numel()) * first.element_size();
    auto* dst = static_cast<uint8_t*>(out.data_ptr());
    for (int64_t i = 0; i < count; ++i) {
      const Example& example = examples[static_cast<size_t>(i)];
      KILN_CHECK(example.size() == fields, ValueError,
                 "collate: example {} has {} fields but example 0 has {}", i, example.size(),
                 fields);
      const Tensor& t = example[f];
      KILN_CHECK(t.defined(), ValueError, "collate: field {} of example {} is undefined", f, i);
      KILN_CHECK(t.shape() == first.shape(), ShapeError,
                 "collate: field {} of example {} has shape {} but example 0's has {}", f, i,
                 shape_str(t.shape()), shape_str(first.shape()));
      KILN_CHECK(t.dtype() == first.dtype(), DTypeError,
                 "collate: field {} of example {} is {} but example 0's is {}", f, i,
                 dtype_name(t.dtype()), dtype_name(first.dtype()));
      const Tensor src = t.detach().cpu().contiguous();
      std::memcpy(dst + static_cast<size_t>(i) * nbytes, src.data_ptr(), nbytes);
    }
    batch.push_back(std::move(out));
  }
  return batch;
}

// One epoch in progress. Worker w loads batches w, w + N, w + 2N, ... into its own queue, so
// next() finds batch b at the front of queue b % N. Order comes for free; the price, as in
// PyTorch, is that one slow batch holds up delivery of those after it.
struct DataLoader::Epoch {
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };

  int64_t number = 0;
  std::vector<int64_t> order;
  uint64_t transform_seed = 0;
  int64_t num_batches = 0;
  int64_t next_batch = 0;
  bool finished = false;  // set when a load failed: later next() calls return nullopt

  std::mutex mutex;
  std::condition_variable ready;  // a queue got a batch
  std::condition_variable space;  // a queue lost one, or stop was set
  std::vector<std::deque<Slot>> queues;
  bool stop = false;
  std::vector<std::thread> threads;

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    space.notify_all();
    for (std::thread& t : threads)
      if (t.joinable()) t.join();
    threads.clear();
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, Transform transform,
                       DataLoaderOptions options)
    : dataset_(std::move(dataset)), transform_(std::move(transform)), options_(options) {
  KILN_CHECK(dataset_ != nullptr, ValueError, "DataLoader: the dataset is null");
  KILN_CHECK(options_.batch_size >= 1, ValueError,
             "DataLoader: batch_size must be at least 1, got {}", options_.batch_size);
  KILN_CHECK(options_.num_workers >= 0, ValueError,
             "DataLoader: num_workers must be non-negative, got {}", options_.num_workers);
  KILN_CHECK(!(options_.sampler && options_.shuffle), ValueError,
             "DataLoader: shuffle and a sampler are exclusive: the sampler decides the order (set "
             "its own shuffle option)");
  KILN_CHECK(options_.prefetch_batches >= 1, ValueError,
             "DataLoader: prefetch_batches must be at least 1, got {}", options_.prefetch_batches);
}

DataLoader::~DataLoader() {
  stop_epoch();
}

int64_t DataLoader::num_batches() const {
  const int64_t size =
      options_.sampler ? options_.sampler->length(dataset_->size()) : dataset_->size();
  return options_.drop_last ? size / options_.batch_size
                            : (size + options_.batch_size - 1) / options_.batch_size;
}

void DataLoader::set_epoch(int64_t epoch) {
  stop_epoch();
  next_epoch_ = epoch;
}

void DataLoader::stop_epoch() {
  if (epoch_) epoch_->stop_workers();
  epoch_.reset();
}

void DataLoader::start_epoch() {
  stop_epoch();
  auto epoch = std::make_unique<Epoch>();
  epoch->number = next_epoch_++;
  epoch->order = options_.sampler ? options_.sampler->indices(dataset_->size(), epoch->number)
                                  : epoch_order(dataset_->size(), options_.shuffle, options_.seed,
                                                epoch->number);
  epoch->transform_seed = derive_seed(options_.seed, epoch->number, kTransformStream);
  epoch->num_batches = num_batches();
  epoch_ = std::move(epoch);
  if (options_.num_workers == 0 || epoch_->num_batches == 0) return;

  Epoch* e = epoch_.get();
  const int workers = options_.num_workers;
  e->queues.resize(static_cast<size_t>(workers));
  auto work = [this, e, workers](int w) {
    std::deque<Epoch::Slot>& queue = e->queues[static_cast<size_t>(w)];
    for (int64_t b = w; b < e->num_batches; b += workers) {
      {
        std::unique_lock<std::mutex> lock(e->mutex);
        e->space.wait(lock, [&] {
          return e->stop || static_cast<int64_t>(queue.size()) < options_.prefetch_batches;
        });
        if (e->stop) return;
      }
      Epoch::Slot slot;
      try {
        slot.batch = load_batch(*e, b);
      } catch (...) {
        slot.error = std::current_exception();
      }
      const bool failed = slot.error != nullptr;
      {
        std::lock_guard<std::mutex> lock(e->mutex);
        if (e->stop) return;
        queue.push_back(std::move(slot));
      }
      e->ready.notify_one();
      // Batches after a failure would never be read: next() ends the epoch at the failure.
      if (failed) return;
    }
  };
  try {
    for (int w = 0; w < workers; ++w) e->threads.emplace_back(work, w);
  } catch (...) {
    stop_epoch();
    throw;
  }
}

NextBatch NextBatch::end_of_epoch(int64_t epoch, int64_t num_batches) {
  NextBatch end;
  end.epoch_ = epoch;
  end.num_batches_ = num_batches;
  return end;
}

Batch& NextBatch::value() {
  return const_cast<Batch&>(std::as_const(*this).value());
}

const Batch& NextBatch::value() const {
  if (!batch_)
    throw IndexError(fmt::format(
        "DataLoader::next(): epoch {} is over (it had {} batches), so there is no batch to read; "
        "check the result first (`while (auto batch = loader.next())`), and begin the next epoch "
        "with loader.set_epoch(e) or loader.start_epoch()",
        epoch_, num_batches_));
  return *batch_;
}

NextBatch DataLoader::next() {
  // The loop's side: how long it waits for (or, without workers, loads) each batch.
  profiler::RecordFunction range("DataLoader::next");
  if (!epoch_) start_epoch();
  Epoch& e = *epoch_;
  if (e.finished || e.next_batch >= e.num_batches) {
    e.stop_workers();
    return NextBatch::end_of_epoch(e.number, e.num_batches);
  }
  const int64_t b = e.next_batch++;
  if (options_.num_workers == 0) {
    try {
      return load_batch(e, b);
    } catch (...) {
      e.finished = true;
      throw;
    }
  }

  Epoch::Slot slot;
  {
    std::deque<Epoch::Slot>& queue = e.queues[static_cast<size_t>(b % options_.num_workers)];
    std::unique_lock<std::mutex> lock(e.mutex);
    // Cannot wait forever: worker b % N either pushes batch b or an error before it, and only
    // this thread sets stop.
    e.ready.wait(lock, [&] { return !queue.empty(); });
    slot = std::move(queue.front());
    queue.pop_front();
  }
  e.space.notify_all();
  if (slot.error) {
    e.finished = true;
    e.stop_workers();
    std::rethrow_exception(slot.error);
  }
  if (e.next_batch == e.num_batches) e.stop_workers();
  return std::move(slot.batch);
}

DataLoader::Iterator DataLoader::begin() {
  start_epoch();
  return Iterator(this);
}

namespace {

// Images of several sizes cannot be stacked into one batch: the usual cause of collate's
// ShapeError, said here with the examples' names (their files, for an ImageFolder) and the cure.
void check_stackable(const Dataset& dataset, const std::vector<Example>& examples,
                     const std::vector<int64_t>& indices, bool transformed) {
  const Tensor first = examples[0].empty() ? Tensor() : examples[0][0];
  if (!first.defined()) return;
  for (size_t i = 1; i < examples.size(); ++i) {
    if (examples[i].empty() || !examples[i][0].defined() || examples[i][0].shape() == first.shape())
      continue;
    throw ShapeError(fmt::format(
        "DataLoader: cannot stack {} ({}) with {} ({}) into one batch: the examples of a batch "
        "need one shape{}. Give the DataLoader a transform that makes every image one size, such "
        "as compose({{resize(S), center_crop(S)}}) or random_resized_crop(S)",
        dataset.describe(indices[i]), shape_str(examples[i][0].shape()),
        dataset.describe(indices[0]), shape_str(first.shape()),
        transformed ? " (these are after the transform)" : ""));
  }
}

}  // namespace

Batch DataLoader::load_batch(const Epoch& epoch, int64_t batch) const {
  // On the worker thread that loads it, with the dataset's reads and the transforms inside.
  profiler::RecordFunction range("DataLoader: fetch batch");
  const int64_t begin = batch * options_.batch_size;
  const int64_t end =
      std::min(begin + options_.batch_size, static_cast<int64_t>(epoch.order.size()));
  std::vector<Example> examples;
  examples.reserve(static_cast<size_t>(end - begin));
  for (int64_t i = begin; i < end; ++i) {
    const int64_t index = epoch.order[static_cast<size_t>(i)];
    Example example = dataset_->get(index);
    if (transform_ && !example.empty()) {
      Rng rng(epoch.transform_seed, static_cast<uint64_t>(index));
      example[0] = transform_(example[0], rng);
    }
    examples.push_back(std::move(example));
  }
  if (!examples.empty())
    check_stackable(*dataset_, examples,
                    std::vector<int64_t>(epoch.order.begin() + begin, epoch.order.begin() + end),
                    static_cast<bool>(transform_));
  return collate(examples, options_.pin_memory && cuda::is_available());
}

}  // namespace kiln::data
