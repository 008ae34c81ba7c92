// DistributedSampler: each rank's share of an epoch, and the DataLoader that follows it.
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/data/sampler.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;

namespace {

// Example i is the scalar i.
class Indexed : public Dataset {
 public:
  explicit Indexed(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override {
    check_index("Indexed", index, size_);
    return {full({}, static_cast<double>(index), DType::i64)};
  }

 private:
  int64_t size_;
};

}  // namespace

TEST_CASE("DistributedSampler: the ranks' shares are equal, disjoint, and cover the dataset") {
  for (int n : {1, 2, 3, 4}) {
    for (int64_t size : {0, 3, 10, 11, 12}) {
      for (bool drop_last : {false, true}) {
        INFO(n << " replicas, " << size << " examples, drop_last " << drop_last);
        const int64_t per_rank = drop_last ? size / n : (size + n - 1) / n;
        std::multiset<int64_t> all;
        for (int r = 0; r < n; ++r) {
          DistributedSampler sampler(n, r, {.shuffle = true, .seed = 5, .drop_last = drop_last});
          const std::vector<int64_t> mine = sampler.indices(size, 2);
          CHECK(static_cast<int64_t>(mine.size()) == per_rank);
          CHECK(sampler.length(size) == per_rank);
          all.insert(mine.begin(), mine.end());
        }
        const std::set<int64_t> distinct(all.begin(), all.end());
        for (int64_t i : distinct) CHECK((i >= 0 && i < size));
        if (drop_last) {
          CHECK(distinct.size() == all.size());  // no example twice
        } else {
          CHECK(static_cast<int64_t>(distinct.size()) == size);  // every example, padding repeats
          CHECK(static_cast<int64_t>(all.size()) == per_rank * n);
        }
      }
    }
  }
}

TEST_CASE("DistributedSampler: the order depends on the seed and the epoch, alike on every rank") {
  auto order = [](uint64_t seed, int64_t epoch) {
    std::vector<int64_t> merged;
    for (int r = 0; r < 2; ++r) {
      DistributedSampler sampler(2, r, {.seed = seed});
      const auto mine = sampler.indices(100, epoch);
      merged.insert(merged.end(), mine.begin(), mine.end());
    }
    return merged;
  };
  CHECK(order(1, 0) == order(1, 0));
  CHECK(order(1, 0) != order(1, 1));
  CHECK(order(1, 0) != order(2, 0));
  DistributedSampler plain(3, 1, {.shuffle = false});
  CHECK(plain.indices(7, 0) == std::vector<int64_t>{1, 4, 0});  // padded with the head: 0
}

TEST_CASE("DistributedSampler: a DataLoader visits the rank's share in batches") {
  auto dataset = std::make_shared<Indexed>(10);
  auto sampler = std::make_shared<DistributedSampler>(3, 2, DistributedSamplerOptions{.seed = 9});
  DataLoader loader(dataset, {}, {.batch_size = 2, .sampler = sampler});
  CHECK(loader.num_batches() == 2);  // 4 examples a rank
  loader.set_epoch(3);
  std::vector<int64_t> seen;
  for (Batch& batch : loader)
    for (double v : batch[0].tolist()) seen.push_back(static_cast<int64_t>(v));
  CHECK(seen == sampler->indices(10, 3));
  CHECK_THROWS_WITH(DataLoader(dataset, {}, {.shuffle = true, .sampler = sampler}),
                    Catch::Contains("shuffle and a sampler are exclusive"));
  CHECK_THROWS_WITH(DistributedSampler(2, 2), Catch::Contains("rank 2 is not in [0, 2)"));
}
