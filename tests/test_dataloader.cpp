#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/idx.h"
#include "kiln/data/synthetic.h"
#include "kiln/kiln.h"

using Catch::Contains;
using kiln::Shape;
using kiln::Tensor;
using kiln::data::Batch;
using kiln::data::DataLoader;
using kiln::data::DataLoaderOptions;
using kiln::data::Example;
using kiln::data::Rng;
using kiln::data::Transform;

namespace {

// Example i: {f32 [2, 3] filled with i, i64 label i}.
class IndexDataset : public kiln::data::Dataset {
 public:
  explicit IndexDataset(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override {
    kiln::data::check_index("IndexDataset", index, size_);
    return {kiln::full({2, 3}, static_cast<double>(index)),
            kiln::scalar_tensor(static_cast<double>(index), kiln::DType::i64)};
  }

 private:
  int64_t size_;
};

std::shared_ptr<const kiln::data::Dataset> index_dataset(int64_t size) {
  return std::make_shared<IndexDataset>(size);
}

// Adds a uniform draw to the image, so each sample's result shows which Rng it was given.
Transform add_noise() {
  return [](const Tensor& x, Rng& rng) { return x + rng.uniform(); };
}

std::vector<std::vector<double>> run_epoch(DataLoader& loader) {
  std::vector<std::vector<double>> out;
  for (Batch& batch : loader) {
    std::vector<double> flat = batch[0].tolist();
    const std::vector<double> labels = batch[1].tolist();
    flat.insert(flat.end(), labels.begin(), labels.end());
    out.push_back(flat);
  }
  return out;
}

std::vector<int64_t> labels_of_epoch(DataLoader& loader) {
  std::vector<int64_t> labels;
  while (auto batch = loader.next())
    for (double v : (*batch)[1].tolist()) labels.push_back(static_cast<int64_t>(v));
  return labels;
}

}  // namespace

TEST_CASE("dataloader: collates fields with a leading batch dim") {
  DataLoader loader(index_dataset(10), Transform(), {.batch_size = 4});
  CHECK(loader.num_batches() == 3);
  std::vector<Batch> batches;
  while (auto batch = loader.next()) batches.push_back(*batch);
  REQUIRE(batches.size() == 3);
  REQUIRE(batches[0].size() == 2);
  CHECK(batches[0][0].shape() == Shape{4, 2, 3});
  CHECK(batches[0][0].dtype() == kiln::DType::f32);
  CHECK(batches[0][1].shape() == Shape{4});
  CHECK(batches[0][1].dtype() == kiln::DType::i64);
  CHECK(batches[0][1].tolist() == std::vector<double>{0, 1, 2, 3});
  CHECK(batches[0][0].select(0, 2).tolist() == std::vector<double>(6, 2.0));
  // The last, partial batch.
  CHECK(batches[2][0].shape() == Shape{2, 2, 3});
  CHECK(batches[2][1].tolist() == std::vector<double>{8, 9});
  CHECK(!loader.next().has_value());
}

TEST_CASE("dataloader: drop_last drops the partial batch") {
  for (int workers : {0, 2}) {
    DataLoader loader(index_dataset(10), Transform(),
                      {.batch_size = 4, .drop_last = true, .num_workers = workers});
    CHECK(loader.num_batches() == 2);
    const auto labels = labels_of_epoch(loader);
    CHECK(labels == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  }
  DataLoader exact(index_dataset(8), Transform(), {.batch_size = 4, .drop_last = true});
  CHECK(exact.num_batches() == 2);
  DataLoader tiny(index_dataset(3), Transform(), {.batch_size = 4, .drop_last = true});
  CHECK(tiny.num_batches() == 0);
  CHECK(!tiny.next().has_value());
}

TEST_CASE("dataloader: same seed gives the same batches for 0, 1 and 3 workers") {
  std::vector<std::vector<std::vector<double>>> results;
  for (int workers : {0, 1, 3}) {
    DataLoader loader(index_dataset(23), add_noise(),
                      {.batch_size = 5, .shuffle = true, .seed = 42, .num_workers = workers});
    loader.set_epoch(3);
    results.push_back(run_epoch(loader));
  }
  REQUIRE(results[0].size() == 5);
  CHECK(results[1] == results[0]);
  CHECK(results[2] == results[0]);
}

TEST_CASE("dataloader: a sample's transform depends on seed, epoch and index only") {
  // index -> transformed value, for two batch sizes and worker counts.
  auto values = [](int64_t batch_size, int workers, uint64_t seed, int64_t epoch) {
    DataLoader loader(
        index_dataset(17), add_noise(),
        {.batch_size = batch_size, .shuffle = true, .seed = seed, .num_workers = workers});
    loader.set_epoch(epoch);
    std::map<int64_t, double> out;
    while (auto batch = loader.next()) {
      const std::vector<double> images = (*batch)[0].tolist(), labels = (*batch)[1].tolist();
      for (size_t i = 0; i < labels.size(); ++i)
        out[static_cast<int64_t>(labels[i])] = images[i * 6] - labels[i];
    }
    return out;
  };
  const auto reference = values(4, 0, 7, 1);
  CHECK(values(7, 2, 7, 1) == reference);
  CHECK(values(4, 0, 8, 1) != reference);
  CHECK(values(4, 0, 7, 2) != reference);
}

TEST_CASE("dataloader: every index exactly once per epoch, a new order each epoch") {
  DataLoader loader(index_dataset(101), Transform(),
                    {.batch_size = 8, .shuffle = true, .seed = 5, .num_workers = 3});
  std::vector<std::vector<int64_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    loader.start_epoch();
    orders.push_back(labels_of_epoch(loader));
    std::vector<int64_t> sorted = orders.back();
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> expected(101);
    std::iota(expected.begin(), expected.end(), int64_t{0});
    CHECK(sorted == expected);
  }
  CHECK(orders[0] != orders[1]);
  CHECK(orders[1] != orders[2]);
  CHECK(loader.epoch() == 3);
  // set_epoch replays an epoch exactly.
  loader.set_epoch(1);
  CHECK(labels_of_epoch(loader) == orders[1]);
}

TEST_CASE("dataloader: epoch_order is a seeded permutation") {
  const auto a = kiln::data::epoch_order(50, true, 1, 0);
  CHECK(a == kiln::data::epoch_order(50, true, 1, 0));
  CHECK(a != kiln::data::epoch_order(50, true, 1, 1));
  CHECK(a != kiln::data::epoch_order(50, true, 2, 0));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  CHECK(sorted == identity);
  CHECK(a != identity);
  CHECK(kiln::data::epoch_order(50, false, 1, 3) == identity);
  CHECK(kiln::data::epoch_order(0, true, 1, 3).empty());
}

TEST_CASE("dataloader: without shuffle the order is 0..n-1 for any worker count") {
  for (int workers : {0, 1, 4}) {
    DataLoader loader(index_dataset(30), Transform(),
                      {.batch_size = 3, .num_workers = workers, .prefetch_batches = 1});
    std::vector<int64_t> expected(30);
    std::iota(expected.begin(), expected.end(), int64_t{0});
    CHECK(labels_of_epoch(loader) == expected);
  }
}

TEST_CASE("dataloader: an exception in a worker is rethrown from next(), in order") {
  const Transform fail_on_13 = [](const Tensor& x, Rng&) {
    if (x.tolist()[0] == 13.0) throw kiln::ValueError("bad sample 13");
    return x;
  };
  for (int workers : {0, 1, 3}) {
    INFO("workers " << workers);
    DataLoader loader(index_dataset(40), fail_on_13, {.batch_size = 4, .num_workers = workers});
    std::vector<int64_t> seen;
    bool threw = false;
    try {
      while (auto batch = loader.next())
        for (double v : (*batch)[1].tolist()) seen.push_back(static_cast<int64_t>(v));
    } catch (const kiln::ValueError& e) {
      threw = true;
      CHECK(std::string(e.what()) == "bad sample 13");
    }
    CHECK(threw);
    // Batches 0..2 arrived before the failing batch 3.
    CHECK(seen.size() == 12);
    CHECK(!loader.next().has_value());
    // A new epoch runs again (and fails again at the same place).
    loader.start_epoch();
    CHECK(loader.next().has_value());
  }
}

TEST_CASE("dataloader: an exception from the dataset propagates too") {
  class Failing : public kiln::data::Dataset {
   public:
    int64_t size() const override { return 10; }
    Example get(int64_t index) const override {
      if (index == 7) throw kiln::IndexError("Failing::get: index 7");
      return {kiln::zeros({1})};
    }
  };
  DataLoader loader(std::make_shared<Failing>(), Transform(), {.batch_size = 2, .num_workers = 2});
  CHECK(loader.next().has_value());
  CHECK(loader.next().has_value());
  CHECK(loader.next().has_value());
  CHECK_THROWS_AS(loader.next(), kiln::IndexError);
}

TEST_CASE("dataloader: destroying or restarting mid-epoch stops the workers") {
  std::atomic<int64_t> loads{0};
  class Counting : public kiln::data::Dataset {
   public:
    explicit Counting(std::atomic<int64_t>& loads) : loads_(loads) {}
    int64_t size() const override { return 100000; }
    Example get(int64_t index) const override {
      ++loads_;
      return {kiln::full({4}, static_cast<double>(index))};
    }

   private:
    std::atomic<int64_t>& loads_;
  };
  auto dataset = std::make_shared<Counting>(loads);
  {
    DataLoader loader(dataset, Transform(),
                      {.batch_size = 10, .num_workers = 3, .prefetch_batches = 1});
    CHECK(loader.next().has_value());
    CHECK(loader.next().has_value());
    loader.start_epoch();  // abandons the first epoch
    CHECK((*loader.next())[0].tolist()[0] == 0.0);
  }  // destroyed with workers blocked on full queues
  // The bounded queues kept the workers from loading the whole dataset.
  CHECK(loads.load() < 1000);
}

TEST_CASE("dataloader: destroying before the first batch and after the last") {
  {
    DataLoader loader(index_dataset(50), Transform(), {.batch_size = 2, .num_workers = 4});
    loader.start_epoch();
  }
  DataLoader loader(index_dataset(6), Transform(), {.batch_size = 2, .num_workers = 4});
  CHECK(labels_of_epoch(loader).size() == 6);
  CHECK(!loader.next().has_value());
}

TEST_CASE("dataloader: the first next() starts an epoch and range-for starts a fresh one") {
  DataLoader loader(index_dataset(6), Transform(), {.batch_size = 4});
  CHECK(loader.next().has_value());
  int64_t batches = 0;
  for (Batch& batch : loader) {
    CHECK(batch.size() == 2);
    ++batches;
  }
  CHECK(batches == 2);
}

TEST_CASE("dataloader: pin_memory pins batches where a GPU is visible, and changes no value") {
  DataLoader plain(index_dataset(9), add_noise(), {.batch_size = 4, .shuffle = true});
  DataLoader pinned(index_dataset(9), add_noise(),
                    {.batch_size = 4, .shuffle = true, .num_workers = 2, .pin_memory = true});
  CHECK(run_epoch(plain) == run_epoch(pinned));
  for (kiln::data::Batch& batch : pinned) CHECK(batch[0].is_pinned() == kiln::cuda::is_available());
  for (kiln::data::Batch& batch : plain) CHECK_FALSE(batch[0].is_pinned());
}

TEST_CASE("dataloader: bad options") {
  CHECK_THROWS_AS(DataLoader(nullptr, Transform()), kiln::ValueError);
  CHECK_THROWS_AS(DataLoader(index_dataset(3), Transform(), {.batch_size = 0}), kiln::ValueError);
  CHECK_THROWS_WITH(DataLoader(index_dataset(3), Transform(), {.batch_size = 0}),
                    Contains("batch_size"));
  CHECK_THROWS_WITH(DataLoader(index_dataset(3), Transform(), {.num_workers = -1}),
                    Contains("num_workers"));
  CHECK_THROWS_WITH(DataLoader(index_dataset(3), Transform(), {.prefetch_batches = 0}),
                    Contains("prefetch_batches"));
}

TEST_CASE("dataloader: collate rejects examples that do not agree") {
  const Example a = {kiln::zeros({2, 3}), kiln::scalar_tensor(1, kiln::DType::i64)};
  const Example wrong_shape = {kiln::zeros({3, 2}), kiln::scalar_tensor(1, kiln::DType::i64)};
  const Example wrong_dtype = {kiln::zeros({2, 3}), kiln::scalar_tensor(1, kiln::DType::f32)};
  const Example one_field = {kiln::zeros({2, 3})};
  CHECK_THROWS_AS(kiln::data::collate({a, wrong_shape}), kiln::ShapeError);
  CHECK_THROWS_WITH(kiln::data::collate({a, wrong_shape}),
                    Contains("collate") && Contains("[3, 2]") && Contains("[2, 3]"));
  CHECK_THROWS_AS(kiln::data::collate({a, wrong_dtype}), kiln::DTypeError);
  CHECK_THROWS_AS(kiln::data::collate({a, one_field}), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::collate({}), kiln::ValueError);
  const Batch b = kiln::data::collate({a, a, a});
  CHECK(b[0].shape() == Shape{3, 2, 3});
  CHECK(b[1].shape() == Shape{3});
}

TEST_CASE("dataloader: collate copies non-contiguous fields") {
  const Tensor t = kiln::arange(6, kiln::DType::f32).reshape({2, 3}).t();
  const Batch b = kiln::data::collate({{t}, {t}});
  CHECK(b[0].shape() == Shape{2, 3, 2});
  CHECK(b[0].select(0, 1).tolist() == t.tolist());
}

TEST_CASE("dataloader: SyntheticDataset is a pure function of seed and index") {
  const kiln::data::SyntheticDataset a(20, {3, 5, 7}, 10, 99), b(20, {3, 5, 7}, 10, 99),
      c(20, {3, 5, 7}, 10, 100);
  CHECK(a.size() == 20);
  std::set<int64_t> labels;
  for (int64_t i = 0; i < 20; ++i) {
    const Example ea = a.get(i), eb = b.get(i);
    CHECK(ea[0].shape() == Shape{3, 5, 7});
    CHECK(ea[0].dtype() == kiln::DType::u8);
    CHECK(ea[1].dtype() == kiln::DType::i64);
    CHECK(ea[1].dim() == 0);
    CHECK(ea[0].tolist() == eb[0].tolist());
    CHECK(ea[1].item<int64_t>() == eb[1].item<int64_t>());
    const int64_t label = ea[1].item<int64_t>();
    CHECK(label >= 0);
    CHECK(label < 10);
    labels.insert(label);
  }
  CHECK(labels.size() > 3);
  CHECK(a.get(0)[0].tolist() != a.get(1)[0].tolist());
  CHECK(a.get(0)[0].tolist() != c.get(0)[0].tolist());
  // The first pixels are the little-endian bytes of the first Philox word of offset 0.
  const uint32_t word = kiln::philox_word(99, 0, 0);
  const std::vector<double> pixels = a.get(0)[0].tolist();
  for (int k = 0; k < 4; ++k) CHECK(pixels[static_cast<size_t>(k)] == ((word >> (8 * k)) & 0xFF));
  CHECK_THROWS_AS(a.get(20), kiln::IndexError);
  CHECK_THROWS_AS(kiln::data::SyntheticDataset(-1, {1}, 10, 0), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::SyntheticDataset(5, {1}, 0, 0), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::SyntheticDataset(5, {-1, 2}, 10, 0), kiln::ValueError);
}

TEST_CASE("dataloader: Fashion-MNIST test set through workers and transforms") {
  const char* env = std::getenv("KILN_FASHION_MNIST");
  const std::string root = env != nullptr ? env : "/usr/share/datasets/fashion-mnist";
  INFO("Fashion-MNIST is expected in " << root << " (set KILN_FASHION_MNIST to move it)");
  auto dataset =
      std::make_shared<kiln::data::MnistDataset>(kiln::data::MnistDataset::fashion(root, false));
  const Transform transform =
      kiln::data::compose({kiln::data::to_float(), kiln::data::normalize({0.2860}, {0.3530}),
                           kiln::data::random_crop(28, 4), kiln::data::random_horizontal_flip()});
  DataLoader loader(dataset, transform,
                    {.batch_size = 256, .shuffle = true, .seed = 1, .num_workers = 2});
  CHECK(loader.num_batches() == 40);
  int64_t seen = 0;
  for (Batch& batch : loader) {
    CHECK(batch[0].dtype() == kiln::DType::f32);
    CHECK(batch[0].size(1) == 1);
    CHECK(batch[0].size(2) == 28);
    CHECK(batch[0].size(3) == 28);
    CHECK(batch[1].dtype() == kiln::DType::i64);
    seen += batch[1].numel();
  }
  CHECK(seen == 10000);
}

TEST_CASE("dataloader: reading a batch past the end of an epoch is an error that says so") {
  for (int workers : {0, 2}) {
    DataLoader loader(index_dataset(10), Transform(), {.batch_size = 4, .num_workers = workers});
    for (int b = 0; b < 3; ++b) CHECK((*loader.next())[1].size(0) == (b < 2 ? 4 : 2));
    auto end = loader.next();
    CHECK(!end);
    CHECK_THROWS_WITH(*end,
                      Contains("epoch 0 is over (it had 3 batches)") && Contains("set_epoch"));
    CHECK_THROWS_AS(loader.next()->at(0), kiln::IndexError);
    // The end stays the end until the next epoch begins.
    CHECK(!loader.next().has_value());
    loader.set_epoch(1);
    CHECK((*loader.next())[1].tolist() == std::vector<double>{0, 1, 2, 3});
  }
}
