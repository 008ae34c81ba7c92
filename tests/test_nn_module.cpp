// Module: registration and dotted names, train/eval, zero_grad, state_dict save/load (strict and
// not), to(dtype/device) keeping tensor identity, the printed tree, and Pipeline's schedule and
// results on CPU stages.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"
#include "kiln/optim/sgd.h"
#include "parity.h"

using namespace kiln;

namespace {

// A module with a parameter, a frozen parameter, two buffers (one integer) and a child, to check
// each kind of registration; the registration calls are public so tests can misuse them.
class Toy : public nn::Module {
 public:
  Toy() {
    w = register_parameter("w", testing::random_f64({2, 3}, 1).to(DType::f32));
    frozen = register_parameter("frozen", ones({3}), /*requires_grad=*/false);
    stat = register_buffer("stat", zeros({3}));
    count = register_buffer("count", zeros({}, DType::i64));
    child = register_module("child", std::make_shared<nn::Linear>(3, 2));
  }
  Tensor forward(const Tensor& x) override { return child->forward(add(linear(x, w), frozen)); }
  std::string name() const override { return "Toy"; }

  using Module::add_child;
  using Module::register_buffer;
  using Module::register_parameter;

  Tensor w, frozen, stat, count;
  std::shared_ptr<nn::Linear> child;
};

std::vector<std::string> names_of(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

std::shared_ptr<nn::Sequential> small_net() {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(3, 2)});
}

}  // namespace

TEST_CASE("nn module: parameters come in registration order, own before children's, dotted") {
  auto toy = std::make_shared<Toy>();
  CHECK(names_of(toy->named_parameters()) ==
        std::vector<std::string>{"w", "frozen", "child.weight", "child.bias"});
  CHECK(names_of(toy->named_parameters(/*recurse=*/false)) ==
        std::vector<std::string>{"w", "frozen"});
  CHECK(names_of(toy->named_buffers()) == std::vector<std::string>{"stat", "count"});

  auto outer =
      std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{toy, small_net()});
  CHECK(names_of(outer->named_parameters()) ==
        std::vector<std::string>{"0.w", "0.frozen", "0.child.weight", "0.child.bias", "1.0.weight",
                                 "1.0.bias", "1.1.weight", "1.1.bias", "1.3.weight", "1.3.bias"});
  CHECK(names_of(outer->named_buffers()) ==
        std::vector<std::string>{"0.stat", "0.count", "1.1.running_mean", "1.1.running_var",
                                 "1.1.num_batches_tracked"});
}

TEST_CASE("nn module: parameters() are the registered tensors themselves") {
  auto toy = std::make_shared<Toy>();
  std::vector<Tensor> params = toy->parameters();
  REQUIRE(params.size() == 4);
  CHECK(params[0].is_same(toy->w));
  CHECK(params[2].is_same(toy->child->weight));
  CHECK(params[3].is_same(toy->child->bias));
  CHECK(params[0].requires_grad());
  CHECK_FALSE(params[1].requires_grad());
  CHECK(toy->parameter_count() == 6 + 3 + 6 + 2);
  CHECK(toy->named_buffers()[1].second.is_same(toy->count));
}

TEST_CASE("nn module: named_children and named_modules walk the tree") {
  auto outer = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<Toy>(), small_net()});
  auto children = outer->named_children();
  REQUIRE(children.size() == 2);
  CHECK(children[0].first == "0");
  CHECK(children[1].second->name() == "Sequential");
  std::vector<std::string> names;
  for (auto& [n, m] : outer->named_modules()) names.push_back(n + ":" + m->name());
  CHECK(names == std::vector<std::string>{":Sequential", "0:Toy", "0.child:Linear", "1:Sequential",
                                          "1.0:Linear", "1.1:BatchNorm1d", "1.2:ReLU",
                                          "1.3:Linear"});
  CHECK(outer->named_modules()[0].second.get() == outer.get());
}

TEST_CASE("nn module: named_modules works on a module not owned by a shared_ptr") {
  nn::Linear layer(2, 2);
  auto modules = layer.named_modules();
  REQUIRE(modules.size() == 1);
  CHECK(modules[0].first.empty());
  CHECK(modules[0].second.get() == &layer);
}

TEST_CASE("nn module: a name registered twice is rejected, whatever its kind") {
  Toy toy;
  CHECK_THROWS_AS(toy.register_parameter("w", zeros({1})), ValueError);
  CHECK_THROWS_WITH(toy.register_parameter("w", zeros({1})),
                    Catch::Contains("'w'") && Catch::Contains("twice"));
  CHECK_THROWS_AS(toy.register_buffer("stat", zeros({1})), ValueError);
  CHECK_THROWS_WITH(toy.register_buffer("stat", zeros({1})), Catch::Contains("'stat'"));
  CHECK_THROWS_AS(toy.add_child("child", std::make_shared<nn::ReLU>()), ValueError);
  // A name is one attribute in PyTorch: a buffer, parameter or child may not reuse another's.
  CHECK_THROWS_AS(toy.register_buffer("w", zeros({1})), ValueError);
  CHECK_THROWS_AS(toy.register_parameter("stat", zeros({1})), ValueError);
  CHECK_THROWS_AS(toy.register_parameter("child", zeros({1})), ValueError);
  CHECK_THROWS_WITH(toy.add_child("w", std::make_shared<nn::ReLU>()), Catch::Contains("'w'"));
  CHECK(toy.named_parameters().size() == 4);
  CHECK(toy.named_buffers().size() == 2);
  CHECK(toy.named_children().size() == 1);
}

TEST_CASE("nn module: names with '.' or empty names are rejected") {
  Toy toy;
  CHECK_THROWS_AS(toy.register_parameter("a.b", zeros({1})), ValueError);
  CHECK_THROWS_WITH(toy.register_parameter("a.b", zeros({1})), Catch::Contains("'a.b'"));
  CHECK_THROWS_AS(toy.register_buffer("a.b", zeros({1})), ValueError);
  CHECK_THROWS_AS(toy.register_parameter("", zeros({1})), ValueError);
  CHECK_THROWS_AS(toy.add_child("a.b", std::make_shared<nn::ReLU>()), ValueError);
  CHECK_THROWS_WITH(toy.add_child("a.b", std::make_shared<nn::ReLU>()), Catch::Contains("'a.b'"));
  CHECK_THROWS_AS(toy.add_child("", std::make_shared<nn::ReLU>()), ValueError);
  CHECK_THROWS_AS(toy.add_child("null", nullptr), ValueError);
}

TEST_CASE("nn module: train() and eval() reach every submodule") {
  auto outer = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<Toy>(), small_net()});
  auto all_are = [&](bool training) {
    for (auto& [n, m] : outer->named_modules())
      if (m->is_training() != training) return false;
    return true;
  };
  CHECK(all_are(true));
  outer->eval();
  CHECK(all_are(false));
  outer->train();
  CHECK(all_are(true));
  outer->train(false);
  CHECK(all_are(false));
}

TEST_CASE("nn module: zero_grad drops every parameter's gradient") {
  auto net = small_net();
  net->forward(testing::random_f64({5, 4}, 2).to(DType::f32)).sum().backward();
  for (auto& [n, p] : net->named_parameters()) {
    INFO(n);
    CHECK(p.grad().defined());
  }
  net->zero_grad();
  for (auto& [n, p] : net->named_parameters()) {
    INFO(n);
    CHECK_FALSE(p.grad().defined());
  }
}

TEST_CASE("nn module: state_dict holds detached aliases of every parameter and buffer") {
  auto net = small_net();
  nn::StateDict state = net->state_dict();
  CHECK(state.size() == 6 + 3);
  REQUIRE(state.count("1.num_batches_tracked"));
  CHECK(state.at("1.num_batches_tracked").dtype() == DType::i64);
  CHECK_FALSE(state.at("0.weight").requires_grad());
  auto p = std::dynamic_pointer_cast<nn::Linear>((*net)[0])->weight;
  CHECK(state.at("0.weight").data_ptr() == p.data_ptr());
}

TEST_CASE("nn module: a state_dict loads into a fresh model and reproduces its values") {
  auto a = small_net();
  // Moves the running stats and num_batches_tracked away from their initial values.
  a->forward(testing::random_f64({6, 4}, 3).to(DType::f32));
  auto b = small_net();
  nn::LoadResult result = b->load_state_dict(a->state_dict());
  CHECK(result.missing_keys.empty());
  CHECK(result.unexpected_keys.empty());
  nn::StateDict sa = a->state_dict(), sb = b->state_dict();
  for (auto& [n, t] : sa) {
    INFO(n);
    CHECK(t.tolist() == sb.at(n).tolist());
    CHECK(t.dtype() == sb.at(n).dtype());
  }
  CHECK(sb.at("1.num_batches_tracked").item<int64_t>() == 1);
  // Loading copies: the two models do not share storage afterwards.
  CHECK(sa.at("0.weight").data_ptr() != sb.at("0.weight").data_ptr());
  Tensor x = testing::random_f64({3, 4}, 4).to(DType::f32);
  a->eval();
  b->eval();
  CHECK(a->forward(x).tolist() == b->forward(x).tolist());
}

TEST_CASE("nn module: strict loading names a missing key") {
  auto net = small_net();
  nn::StateDict state = net->state_dict();
  state.erase("1.running_var");
  CHECK_THROWS_AS(net->load_state_dict(state), ValueError);
  CHECK_THROWS_WITH(net->load_state_dict(state),
                    Catch::Contains("missing") && Catch::Contains("1.running_var"));
}

TEST_CASE("nn module: strict loading names an unexpected key and changes nothing") {
  auto net = small_net();
  nn::StateDict state = small_net()->state_dict();
  state["1.7.weight"] = zeros({2});
  std::vector<double> before = net->state_dict().at("0.weight").tolist();
  CHECK_THROWS_AS(net->load_state_dict(state), ValueError);
  CHECK_THROWS_WITH(net->load_state_dict(state),
                    Catch::Contains("unexpected") && Catch::Contains("1.7.weight"));
  CHECK(net->state_dict().at("0.weight").tolist() == before);
}

TEST_CASE("nn module: loading a wrongly shaped tensor names the key and both shapes") {
  auto net = small_net();
  nn::StateDict state = net->state_dict();
  state["0.weight"] = zeros({3, 5});
  CHECK_THROWS_AS(net->load_state_dict(state), ShapeError);
  CHECK_THROWS_WITH(net->load_state_dict(state), Catch::Contains("0.weight") &&
                                                     Catch::Contains("[3, 5]") &&
                                                     Catch::Contains("[3, 4]"));
  // A shape mismatch is an error even when not strict, as in PyTorch.
  CHECK_THROWS_AS(net->load_state_dict(state, /*strict=*/false), ShapeError);
}

TEST_CASE("nn module: non-strict loading returns missing and unexpected keys and loads the rest") {
  auto net = small_net();
  auto source = small_net();
  nn::StateDict state = source->state_dict();
  state.erase("3.bias");
  state["extra"] = zeros({1});
  std::vector<double> bias_before = net->state_dict().at("3.bias").tolist();
  nn::LoadResult result = net->load_state_dict(state, /*strict=*/false);
  CHECK(result.missing_keys == std::vector<std::string>{"3.bias"});
  CHECK(result.unexpected_keys == std::vector<std::string>{"extra"});
  CHECK(net->state_dict().at("0.weight").tolist() == source->state_dict().at("0.weight").tolist());
  CHECK(net->state_dict().at("3.bias").tolist() == bias_before);
}

TEST_CASE("nn module: loading converts the checkpoint's dtype to the model's") {
  auto net = small_net();
  nn::StateDict state = net->state_dict();
  state["0.bias"] = tensor({0.5, -0.25, 2.0});
  net->load_state_dict(state);
  auto first = std::dynamic_pointer_cast<nn::Linear>((*net)[0]);
  CHECK(first->bias.dtype() == DType::f32);
  CHECK(first->bias.tolist() == std::vector<double>{0.5, -0.25, 2.0});
  CHECK(first->bias.requires_grad());
}

TEST_CASE("nn module: to(f64) converts floating tensors in place and keeps their identity") {
  auto net = small_net();
  net->forward(testing::random_f64({4, 4}, 5).to(DType::f32)).sum().backward();
  std::vector<TensorImpl*> impls;
  for (const Tensor& p : net->parameters()) impls.push_back(p.impl());
  std::vector<double> w_before = net->parameters()[0].tolist();

  net->to(DType::f64);
  std::vector<Tensor> params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].impl() == impls[i]);
    CHECK(params[i].dtype() == DType::f64);
    CHECK(params[i].requires_grad());
    CHECK(params[i].is_leaf());
    REQUIRE(params[i].grad().defined());
    CHECK(params[i].grad().dtype() == DType::f64);
  }
  CHECK(params[0].tolist() == w_before);
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm>((*net)[1]);
  CHECK(bn->running_mean.dtype() == DType::f64);
  CHECK(bn->running_var.dtype() == DType::f64);
  CHECK(bn->num_batches_tracked.dtype() == DType::i64);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 1);
  // The module's own handles see the conversion as well.
  CHECK(std::dynamic_pointer_cast<nn::Linear>((*net)[0])->weight.dtype() == DType::f64);
}

TEST_CASE("nn module: an optimizer built before to(f64) still updates the parameters") {
  auto net = small_net();
  optim::SGD sgd(net->parameters(), optim::SGDOptions{.lr = 0.1});
  net->to(DType::f64);
  Tensor x = testing::random_f64({4, 4}, 6);
  net->forward(x).sum().backward();
  std::vector<Tensor> params = net->parameters();
  std::vector<double> w = params[0].tolist(), g = params[0].grad().tolist();
  sgd.step();
  std::vector<double> want;
  for (size_t i = 0; i < w.size(); ++i) want.push_back(w[i] - 0.1 * g[i]);
  kiln::testing::check_close(params[0], want, kiln::testing::tolerance(DType::f64));
  // And the model trains in f64 from then on: the next forward runs without a dtype error.
  CHECK(net->forward(x).dtype() == DType::f64);
}

TEST_CASE("nn module: to(cpu) keeps everything, and to an integer dtype is rejected") {
  auto net = small_net();
  Tensor w = net->parameters()[0];
  void* data = w.data_ptr();
  net->to(Device::cpu());
  CHECK(net->parameters()[0].impl() == w.impl());
  CHECK(net->parameters()[0].data_ptr() == data);
  CHECK_THROWS_AS(net->to(DType::i64), DTypeError);
  CHECK_THROWS_WITH(net->to(DType::i64),
                    Catch::Contains("Sequential.to") && Catch::Contains("i64"));
  CHECK(net->parameters()[0].dtype() == DType::f32);
}

TEST_CASE("nn module: str() prints the tree and the parameter count") {
  auto net = small_net();
  std::string s = net->str();
  CHECK(s ==
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=3, bias=True)\n"
        "  (1): BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
        "  (2): ReLU()\n"
        "  (3): Linear(in_features=3, out_features=2, bias=True)\n"
        ")\n"
        "29 parameters (29 trainable)");
  Toy toy;
  std::string t = toy.str();
  CHECK_THAT(t, Catch::StartsWith("Toy(\n  (child): Linear("));
  CHECK_THAT(t, Catch::EndsWith("17 parameters (14 trainable)"));
}

TEST_CASE("nn module: str() indents nested modules") {
  nn::Sequential outer(std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::ReLU>()})});
  CHECK(outer.str() ==
        "Sequential(\n"
        "  (0): Sequential(\n"
        "    (0): ReLU()\n"
        "  )\n"
        ")\n"
        "0 parameters (0 trainable)");
}

TEST_CASE("nn module: str() puts a parent's own arguments on a line of their own") {
  class Block : public nn::Module {
   public:
    Block() { register_module("act", std::make_shared<nn::ReLU>()); }
    std::string name() const override { return "Block"; }
    std::string extra_repr() const override { return "width=4"; }
  };
  CHECK(Block().str() ==
        "Block(\n"
        "  width=4\n"
        "  (act): ReLU()\n"
        ")\n"
        "0 parameters (0 trainable)");
}

TEST_CASE("nn module: a module without a one-tensor forward says so") {
  nn::ModuleList list(std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::ReLU>()});
  CHECK_THROWS_AS(list.forward(zeros({1})), NotImplementedError);
  CHECK_THROWS_WITH(list.forward(zeros({1})), Catch::Contains("ModuleList"));
}

namespace {
// A user's module that does not override name(), as a PyTorch user writes one.
struct TwoLayerNet : nn::Module {
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(4, 2));
  Tensor forward(const Tensor& x) override { return fc->forward(x); }
};
}  // namespace

TEST_CASE("nn module: name() defaults to the class's own name, as PyTorch prints a module") {
  TwoLayerNet net;
  CHECK(net.name() == "TwoLayerNet");
  CHECK_THAT(net.str(), Catch::StartsWith("TwoLayerNet(\n  (fc): Linear("));
  CHECK(nn::Linear(2, 3).name() == "Linear");
}

// ---- Pipeline (nn/pipeline.h) ----

namespace {

// A convolution stage and a classifier stage, or the same layers unsplit, with the same weights.
std::vector<std::shared_ptr<nn::Module>> pipeline_halves() {
  manual_seed(17);
  auto features = std::make_shared<nn::Sequential>();
  features->push_back(std::make_shared<nn::Conv2d>(1, 4, 3))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::MaxPool2d>(2));
  auto classifier = std::make_shared<nn::Sequential>();
  classifier->push_back(std::make_shared<nn::Flatten>())
      .push_back(std::make_shared<nn::Linear>(36, 16))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Linear>(16, 10));
  return {features, classifier};
}

std::shared_ptr<nn::Sequential> unsplit() {
  const auto halves = pipeline_halves();
  return std::make_shared<nn::Sequential>(halves);
}

// Loss, then every parameter's gradient, after one forward and backward of `model`.
std::vector<Tensor> loss_and_gradients(nn::Module& model, const Tensor& x, const Tensor& y,
                                       Device output_device) {
  model.zero_grad();
  Tensor loss = cross_entropy(model.forward(x), y.to(output_device));
  loss.backward();
  std::vector<Tensor> out = {loss.detach().cpu()};
  for (const Tensor& p : model.parameters()) out.push_back(p.grad().cpu());
  return out;
}

// Records which micro-batch each call saw (the first value of its input).
class Tap : public nn::Module {
 public:
  Tap(std::vector<std::pair<int, double>>& log, int stage) : log_(log), stage_(stage) {}
  Tensor forward(const Tensor& x) override {
    log_.emplace_back(stage_, x.flatten()[0].item<double>());
    return x;
  }

 private:
  std::vector<std::pair<int, double>>& log_;
  int stage_;
};

}  // namespace

TEST_CASE("pipeline: CPU stages give the unsplit model's loss and gradients") {
  Generator gen(4);
  const Tensor x = randn({8, 1, 8, 8}, DType::f32, Device::cpu(), &gen);
  const Tensor y = randint(0, 10, {8}, DType::i64, Device::cpu(), &gen);
  auto whole = unsplit();
  const std::vector<Tensor> want = loss_and_gradients(*whole, x, y, Device::cpu());

  nn::Pipeline one(pipeline_halves(), {Device::cpu(), Device::cpu()});
  const std::vector<Tensor> got_one = loss_and_gradients(one, x, y, one.output_device());
  nn::Pipeline three(pipeline_halves(), {Device::cpu(), Device::cpu()}, {.chunks = 3});
  const std::vector<Tensor> got_three = loss_and_gradients(three, x, y, three.output_device());
  nn::Pipeline recomputed(pipeline_halves(), {Device::cpu(), Device::cpu()},
                          {.chunks = 3, .checkpoint = nn::PipelineCheckpoint::except_last});
  const std::vector<Tensor> got_recomputed =
      loss_and_gradients(recomputed, x, y, recomputed.output_device());

  REQUIRE(got_one.size() == want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    INFO("loss (0) or gradient " << k);
    // One micro-batch: the same ops on the same values.
    CHECK(equal(got_one[k], want[k]));
    // Three: each gradient is a sum over micro-batches, added in another order.
    CHECK(allclose(got_three[k], want[k], 1e-5, 1e-6));
    // Checkpointed micro-batches recompute exactly what they dropped.
    CHECK(equal(got_recomputed[k], got_three[k]));
  }
  CHECK(one.str().find("chunks=1, devices=[cpu, cpu]") != std::string::npos);
  CHECK(one.named_parameters()[0].first == "0.0.weight");
}

TEST_CASE("pipeline: micro-batches run on GPipe's clock") {
  std::vector<std::pair<int, double>> log;
  nn::Pipeline pipe(
      {std::make_shared<Tap>(log, 0), std::make_shared<Tap>(log, 1), std::make_shared<Tap>(log, 2)},
      {Device::cpu(), Device::cpu(), Device::cpu()}, {.chunks = 3});
  // Micro-batch i starts with the value 2i.
  const Tensor out = pipe.forward(arange(0.0, 6.0).reshape({6, 1}));
  // Tick k runs stage j on micro-batch k - j.
  const std::vector<std::pair<int, double>> want = {{0, 0}, {0, 2}, {1, 0}, {0, 4}, {1, 2},
                                                    {2, 0}, {1, 4}, {2, 2}, {2, 4}};
  CHECK(log == want);
  CHECK(equal(out, arange(0.0, 6.0).reshape({6, 1})));
  // A batch smaller than chunks makes fewer micro-batches, as chunk().
  log.clear();
  pipe.forward(ones({2, 1}));
  CHECK(log.size() == 6);
}

TEST_CASE("pipeline: trains as the unsplit model, and rejects what it cannot run") {
  auto whole = unsplit();
  nn::Pipeline pipe(pipeline_halves(), {Device::cpu(), Device::cpu()}, {.chunks = 2});
  optim::SGD sgd_whole(whole->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD sgd_pipe(pipe.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    Generator gen(40 + static_cast<uint64_t>(step));
    const Tensor x = randn({6, 1, 8, 8}, DType::f32, Device::cpu(), &gen);
    const Tensor y = randint(0, 10, {6}, DType::i64, Device::cpu(), &gen);
    loss_and_gradients(*whole, x, y, Device::cpu());
    loss_and_gradients(pipe, x, y, pipe.output_device());
    sgd_whole.step();
    sgd_pipe.step();
  }
  const std::vector<Tensor> want = whole->parameters(), got = pipe.parameters();
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) CHECK(allclose(got[k], want[k], 1e-5, 1e-6));

  CHECK_THROWS_WITH(nn::Pipeline(pipeline_halves(), {Device::cpu()}),
                    Catch::Contains("2 stages but 1 devices"));
  CHECK_THROWS_WITH(nn::Pipeline(pipeline_halves(), {Device::cpu(), Device::cpu()}, {.chunks = 0}),
                    Catch::Contains("chunks (micro-batches) must be at least 1"));
  CHECK_THROWS_WITH(nn::Pipeline({}, {}), Catch::Contains("at least one stage"));
  CHECK_THROWS_WITH(pipe.forward(zeros({0, 1, 8, 8})),
                    Catch::Contains("Pipeline: expected a batch with at least one example"));
}
