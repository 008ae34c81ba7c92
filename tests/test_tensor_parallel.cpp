// Megatron's tensor-parallel MLP (dist/tensor_parallel.h) on 2 and 4 ranks as threads over Gloo,
// held against the unsplit MLP trained in one process. Run by test_ddp.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist_ranks.h"
#include "kiln/dist/tensor_parallel.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::dist::ProcessGroup;
using kiln::testing::run_ranks;

namespace {

constexpr int64_t kBatch = 16, kIn = 6, kHidden = 8, kOut = 3;
constexpr int kSteps = 4;
constexpr uint64_t kSeed = 41;

Tensor inputs(int step) {
  Generator gen(static_cast<uint64_t>(300 + step));
  return randn({kBatch, kIn}, DType::f64, Device::cpu(), &gen);
}

Tensor targets(int step) {
  Generator gen(static_cast<uint64_t>(400 + step));
  return randint(0, kOut, {kBatch}, DType::i64, Device::cpu(), &gen);
}

struct Trained {
  std::vector<double> losses;
  std::vector<Tensor> params;  // fc1.weight, fc1.bias, fc2.weight, fc2.bias
};

Trained train_mlp(nn::Module& mlp) {
  Trained out;
  optim::SGD opt(mlp.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(mlp.forward(inputs(step)), targets(step));
    loss.backward();
    opt.step();
    out.losses.push_back(loss.item());
  }
  for (const Tensor& p : mlp.parameters()) out.params.push_back(p.detach().clone());
  return out;
}

// A group that counts the all-reduces it passes on to the real one.
class CountingGroup : public ProcessGroup {
 public:
  explicit CountingGroup(ProcessGroup& inner)
      : ProcessGroup(inner.rank(), inner.size(), inner.timeout()), inner_(inner) {}
  std::string backend() const override { return inner_.backend(); }
  std::shared_ptr<dist::Work> all_reduce_async(const Tensor& t, dist::ReduceOp op) override {
    ++all_reduces;
    return inner_.all_reduce_async(t, op);
  }
  std::shared_ptr<dist::Work> broadcast_async(const Tensor& t, int root) override {
    return inner_.broadcast_async(t, root);
  }
  std::shared_ptr<dist::Work> all_gather_async(const std::vector<Tensor>& outputs,
                                               const Tensor& input) override {
    ++all_gathers;
    return inner_.all_gather_async(outputs, input);
  }
  std::shared_ptr<dist::Work> reduce_scatter_async(const Tensor& output,
                                                   const std::vector<Tensor>& inputs,
                                                   dist::ReduceOp op) override {
    return inner_.reduce_scatter_async(output, inputs, op);
  }
  std::shared_ptr<dist::Work> barrier_async() override { return inner_.barrier_async(); }
  std::shared_ptr<dist::Work> send_async(const Tensor& t, int to, uint32_t tag) override {
    return inner_.send_async(t, to, tag);
  }
  std::shared_ptr<dist::Work> recv_async(const Tensor& t, int from, uint32_t tag) override {
    return inner_.recv_async(t, from, tag);
  }
  int all_reduces = 0, all_gathers = 0;

 private:
  ProcessGroup& inner_;
};

}  // namespace

TEST_CASE("tensor parallel: the MLP block runs one all-reduce forward and one backward") {
  struct Counts {
    int forward = 0, backward = 0, gathers = 0;
  };
  auto got = run_ranks<Counts>(2, "tensor_parallel_counts", [&](ProcessGroup& g) {
    auto group = std::make_shared<CountingGroup>(g);
    dist::ColumnParallelLinear fc1(kIn, kHidden, group);
    dist::RowParallelLinear fc2(kHidden, kOut, group);
    Counts counts;
    // The block's input as a layer before it would give it: one that needs its gradient (without
    // one, the backward all-reduce has nothing to do and is skipped).
    Tensor x = inputs(0).to(DType::f32);
    x.requires_grad_();
    Tensor loss = cross_entropy(fc2.forward(relu(fc1.forward(x))), targets(0));
    counts.forward = group->all_reduces;
    loss.backward();
    counts.backward = group->all_reduces - counts.forward;
    counts.gathers = group->all_gathers;
    return counts;
  });
  for (const Counts& c : got) {
    CHECK(c.forward == 1);
    CHECK(c.backward == 1);
    CHECK(c.gathers == 0);
  }
}

TEST_CASE("tensor parallel: a split MLP trains as the unsplit one") {
  manual_seed(kSeed);
  nn::Sequential whole(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(kIn, kHidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(kHidden, kOut)});
  whole.to(DType::f64);
  const Trained want = train_mlp(whole);

  // The ranks are threads sharing one random generator: each builds its layers from the same
  // seed, one at a time.
  std::mutex building;
  for (int n : {2, 4}) {
    for (bool gathered : {false, true}) {
      INFO(n << " ranks, " << (gathered ? "output gathered between the layers" : "Megatron's MLP"));
      auto got = run_ranks<Trained>(n, "tensor_parallel", [&](ProcessGroup& g) {
        std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
        std::shared_ptr<nn::Sequential> mlp;
        {
          std::lock_guard<std::mutex> lock(building);
          manual_seed(kSeed);
          mlp = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
              std::make_shared<dist::ColumnParallelLinear>(
                  kIn, kHidden, group,
                  dist::ColumnParallelLinearOptions{.gather_output = gathered}),
              std::make_shared<nn::ReLU>(),
              std::make_shared<dist::RowParallelLinear>(
                  kHidden, kOut, group,
                  dist::RowParallelLinearOptions{.input_is_parallel = !gathered})});
        }
        mlp->to(DType::f64);
        return train_mlp(*mlp);
      });
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        for (int step = 0; step < kSteps; ++step)
          CHECK(got[r].losses[step] == Approx(want.losses[step]).epsilon(1e-12));
        // The whole bias of the second layer, on every rank.
        CHECK(allclose(got[r].params[3], want.params[3], 1e-12, 1e-12));
      }
      // The ranks' parts, joined, are the unsplit layers' weights: rows of the first, columns
      // of the second.
      std::vector<Tensor> rows, bias, columns;
      for (int r = 0; r < n; ++r) {
        rows.push_back(got[r].params[0]);
        bias.push_back(got[r].params[1]);
        columns.push_back(got[r].params[2]);
      }
      CHECK(allclose(cat(rows, 0), want.params[0], 1e-12, 1e-12));
      CHECK(allclose(cat(bias, 0), want.params[1], 1e-12, 1e-12));
      CHECK(allclose(cat(columns, 1), want.params[2], 1e-12, 1e-12));
    }
  }
}

TEST_CASE("tensor parallel: features that do not divide by the ranks are refused") {
  auto got = run_ranks<std::string>(2, "tensor_parallel_shapes", [&](ProcessGroup& g) {
    std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
    try {
      dist::ColumnParallelLinear layer(4, 5, group);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
  CHECK_THAT(got[0], Catch::Contains("out_features (5) must divide by the group's 2 ranks"));
}
