// Autograd: leaves and grad_fn, backward and accumulation, grad mode, graph lifetime, in-place
// checks, hooks, gradients through views and conversions, saved-tensor hooks and activation
// checkpointing.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using testing::random_f64;

namespace {

Tensor leaf(std::vector<double> values) {
  return tensor<double>(values).requires_grad_();
}

std::string grad_fn_name(const Tensor& t) {
  return t.grad_fn() ? t.grad_fn()->name() : "none";
}

}  // namespace

// ---- leaves and grad_fn ----

TEST_CASE("autograd: requires_grad_ marks a leaf") {
  Tensor x = zeros({2});
  CHECK_FALSE(x.requires_grad());
  CHECK(x.is_leaf());
  x.requires_grad_();
  CHECK(x.requires_grad());
  CHECK(x.is_leaf());
  CHECK(x.grad_fn() == nullptr);
  CHECK_FALSE(x.grad().defined());
  x.requires_grad_(false);
  CHECK_FALSE(x.requires_grad());
}

TEST_CASE("autograd: requires_grad_ only on floating leaves") {
  CHECK_THROWS_AS(arange(3).requires_grad_(), AutogradError);
  CHECK_THROWS_WITH(arange(3).requires_grad_(),
                    Catch::Contains("requires_grad_") && Catch::Contains("i64"));
  CHECK_NOTHROW(arange(3).requires_grad_(false));
  Tensor y = mul(leaf({1, 2}), 2.0);
  CHECK_THROWS_AS(y.requires_grad_(), AutogradError);
  CHECK_THROWS_WITH(y.requires_grad_(), Catch::Contains("MulBackward"));
  CHECK(y.detach().requires_grad_().is_leaf());
}

TEST_CASE("autograd: ops record grad_fn nodes by name") {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor y = mul(x, 2.0);
  CHECK_FALSE(y.is_leaf());
  CHECK(y.requires_grad());
  CHECK(grad_fn_name(y) == "MulBackward");
  CHECK(grad_fn_name(add(x, x)) == "AddBackward");
  CHECK(grad_fn_name(sub(x, 1.0)) == "AddBackward");
  CHECK(grad_fn_name(div(x, 3.0)) == "DivBackward");
  CHECK(grad_fn_name(sum(x)) == "SumBackward");
  CHECK(grad_fn_name(mean(x)) == "MeanBackward");
  CHECK(grad_fn_name(x.view({2, 2})) == "ReshapeBackward");
  CHECK(grad_fn_name(x.view({2, 2}).t()) == "PermuteBackward");
  CHECK(grad_fn_name(x.slice(0, 1, 3)) == "SliceBackward");
  CHECK(grad_fn_name(x.select(0, 1)) == "SelectBackward");
  CHECK(grad_fn_name(x.view({4, 1}).expand({4, 3})) == "ExpandBackward");
  CHECK(grad_fn_name(x.clone()) == "CloneBackward");
  CHECK(grad_fn_name(x.to(DType::f32)) == "ToDTypeBackward");
  CHECK(grad_fn_name(where(gt(x, 2.0), x, x)) == "WhereBackward");
  CHECK(grad_fn_name(maximum(x, x)) == "MaximumBackward");
  // Ops on tensors that need no gradient record nothing.
  CHECK(mul(tensor<double>({1.0}), 2.0).grad_fn() == nullptr);
}

TEST_CASE("autograd: grad_fn edges point at the inputs' nodes") {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, 3.0);
  Tensor z = add(y, tensor<double>({1, 1}));
  REQUIRE(z.grad_fn()->next_edges.size() == 2);
  CHECK(z.grad_fn()->next_edges[0].node == y.grad_fn());
  CHECK_FALSE(z.grad_fn()->next_edges[1].valid());
  CHECK(y.grad_fn()->next_edges[0].node->name() == "AccumulateGrad");
}

// ---- backward ----

TEST_CASE("autograd: backward of a scalar seeds with one") {
  Tensor x = leaf({1, 2, 3});
  Tensor loss = sum(mul(x, x));
  loss.backward();
  CHECK(x.grad().tolist() == std::vector<double>{2, 4, 6});
  CHECK(x.grad().dtype() == DType::f64);
  CHECK(x.grad().is_leaf());
  CHECK_FALSE(x.grad().requires_grad());
}

TEST_CASE("autograd: backward with an explicit gradient") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = mul(x, 2.0);
  y.backward(tensor<double>({1, 10, 100}));
  CHECK(x.grad().tolist() == std::vector<double>{2, 20, 200});
}

TEST_CASE("autograd: non-scalar backward without a gradient throws") {
  Tensor y = mul(leaf({1, 2}), 2.0);
  CHECK_THROWS_AS(y.backward(), AutogradError);
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("backward") && Catch::Contains("[2]"));
  CHECK_THROWS_AS(y.backward(ones({3}, DType::f64)), ShapeError);
  CHECK_THROWS_AS(tensor<double>({1.0}).backward(), AutogradError);
  CHECK_THROWS_WITH(tensor<double>({1.0}).backward(), Catch::Contains("does not require grad"));
}

TEST_CASE("autograd: backward on a leaf itself") {
  Tensor x = leaf({1, 2});
  x.backward(tensor<double>({3, 4}));
  CHECK(x.grad().tolist() == std::vector<double>{3, 4});
}

TEST_CASE("autograd: gradients accumulate across backward calls") {
  Tensor x = leaf({1, -1});
  sum(mul(x, 3.0)).backward();
  Tensor first = x.grad();
  sum(mul(x, x)).backward();
  CHECK(x.grad().tolist() == std::vector<double>{5, 1});
  // The += happens in place: an earlier handle to .grad sees the sum.
  CHECK(first.tolist() == std::vector<double>{5, 1});
}

TEST_CASE("autograd: .grad takes a gradient nothing else holds, and copies a shared one") {
  // mul's backward makes w's gradient afresh: it becomes w.grad as it is, without a copy.
  Tensor w = leaf({1, 2});
  const void* handed = nullptr;
  w.register_hook([&](const Tensor& grad) {
    handed = grad.data_ptr();
    return Tensor();
  });
  const Tensor g = tensor<double>({1, 10});
  mul(w, tensor<double>({5, 6})).backward(g);
  CHECK(w.grad().data_ptr() == handed);
  CHECK(w.grad().tolist() == std::vector<double>{5, 60});
  // add's backward hands the same gradient to both inputs, and the caller still holds it: each
  // leaf gets storage of its own, so adding into one .grad changes neither the other nor g.
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  add(a, b).backward(g);
  CHECK(a.grad().storage() != b.grad().storage());
  CHECK(a.grad().storage() != g.storage());
  CHECK(b.grad().storage() != g.storage());
  a.grad().add_(100.0);
  CHECK(b.grad().tolist() == std::vector<double>{1, 10});
  CHECK(g.tolist() == std::vector<double>{1, 10});
}

TEST_CASE("autograd: zero_grad drops .grad") {
  Tensor x = leaf({1, 2});
  sum(x).backward();
  REQUIRE(x.grad().defined());
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  sum(mul(x, 2.0)).backward();
  CHECK(x.grad().tolist() == std::vector<double>{2, 2});
}

TEST_CASE("autograd: set_grad checks the shape") {
  Tensor x = leaf({1, 2});
  x.set_grad(tensor<double>({5, 6}));
  CHECK(x.grad().tolist() == std::vector<double>{5, 6});
  CHECK_THROWS_AS(x.set_grad(zeros({3}, DType::f64)), ShapeError);
  CHECK_THROWS_WITH(x.set_grad(zeros({3}, DType::f64)), Catch::Contains("set_grad"));
}

TEST_CASE("autograd: detach shares storage without history") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  CHECK(d.storage() == y.storage());
  CHECK(d.data_ptr() == y.data_ptr());
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(mul(d, 2.0).grad_fn() == nullptr);
  d.fill_(0);
  CHECK(y.tolist() == std::vector<double>{0, 0, 0});
}

TEST_CASE("autograd: fill_ on a tensor with history keeps requiring grad, with zero gradient") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = mul(x, 2.0);
  y.fill_(5.0);
  CHECK(y.requires_grad());
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "FillBackward");
  CHECK(y.tolist() == std::vector<double>{5, 5, 5});
  // The old values got overwritten, so the leaf's gradient through them is zero (here: none).
  sum(mul(y, x)).backward();
  CHECK(x.grad().tolist() == std::vector<double>{5, 5, 5});
  Tensor z = mul(leaf({1, 2}), 3.0);
  z.zero_();
  sum(z).backward();  // PyTorch runs this too; nothing upstream gets a gradient
}

// ---- grad mode ----

TEST_CASE("autograd: NoGradGuard records nothing and restores the mode") {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard no_grad;
    CHECK_FALSE(GradMode::is_enabled());
    Tensor y = mul(x, 2.0);
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(y.requires_grad());
    {
      EnableGradGuard enable;
      CHECK(mul(x, 2.0).requires_grad());
    }
    CHECK_FALSE(GradMode::is_enabled());
  }
  CHECK(GradMode::is_enabled());
  CHECK(mul(x, 2.0).requires_grad());
}

TEST_CASE("autograd: grad mode is thread-local") {
  Tensor x = leaf({1, 2});
  NoGradGuard no_grad;
  bool other_thread_records = false;
  std::thread worker([&] { other_thread_records = mul(x, 2.0).requires_grad(); });
  worker.join();
  CHECK(other_thread_records);
  CHECK_FALSE(mul(x, 2.0).requires_grad());
}

TEST_CASE("autograd: in-place updates of leaves are fine without grad") {
  Tensor x = leaf({1, 2});
  uint64_t before = x.version();
  {
    NoGradGuard no_grad;
    x.add_(tensor<double>({1, 1}), -0.5);
    x.mul_(2.0);
  }
  CHECK(x.tolist() == std::vector<double>{1, 3});
  CHECK(x.version() == before + 2);
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
}

// ---- graph lifetime ----

TEST_CASE("autograd: retain_graph allows a second backward") {
  Tensor x = leaf({1, 2});
  Tensor loss = sum(mul(x, x));
  loss.backward(Tensor(), true);
  loss.backward();
  CHECK(x.grad().tolist() == std::vector<double>{4, 8});
}

TEST_CASE("autograd: a second backward without retain_graph throws") {
  Tensor x = leaf({1, 2});
  Tensor loss = sum(mul(x, x));
  loss.backward();
  CHECK_THROWS_AS(loss.backward(), AutogradError);
  CHECK_THROWS_WITH(loss.backward(), Catch::Contains("second time"));
  // Graphs whose nodes save nothing are freed too.
  Tensor plain = sum(add(x, 1.0));
  plain.backward();
  CHECK_THROWS_WITH(plain.backward(), Catch::Contains("second time"));
}

TEST_CASE("autograd: a freed saved tensor is reported when reached through a live node") {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, x);
  sum(y).backward();
  // A new graph on top of the spent one still ends in y's freed MulBackward.
  CHECK_THROWS_WITH(sum(add(y, 1.0)).backward(), Catch::Contains("second time"));
}

// ---- in-place rules ----

TEST_CASE("autograd: modifying a saved tensor in place breaks backward") {
  Tensor x = leaf({1, 2});
  Tensor a = tensor<double>({3, 4});
  Tensor y = mul(x, a);
  a.add_(1.0);
  CHECK_THROWS_AS(sum(y).backward(), AutogradError);
  CHECK_THROWS_WITH(sum(y).backward(), Catch::Contains("modified by an in-place operation"));
}

TEST_CASE("autograd: modifying a saved output in place breaks backward") {
  Tensor x = leaf({0.5, 1});
  Tensor y = exp(x);  // saves its output
  Tensor z = mul(y, 2.0);
  y.add_(1.0);
  CHECK_THROWS_WITH(sum(z).backward(), Catch::Contains("modified by an in-place operation"));
}

TEST_CASE("autograd: in-place ops on a leaf that requires grad throw") {
  Tensor x = leaf({1, 2});
  CHECK_THROWS_AS(x.add_(1.0), AutogradError);
  CHECK_THROWS_WITH(x.mul_(tensor<double>({2, 2})),
                    Catch::Contains("mul_") && Catch::Contains("leaf"));
  CHECK_THROWS_AS(x.fill_(0), AutogradError);
  CHECK_THROWS_AS(x.zero_(), AutogradError);
  CHECK_THROWS_AS(x.copy_(tensor<double>({5, 6})), AutogradError);
  CHECK_THROWS_AS(x.relu_(), AutogradError);
  CHECK(x.tolist() == std::vector<double>{1, 2});
}

TEST_CASE("autograd: in-place op on a non-leaf keeps the gradient right") {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, 2.0);
  y.mul_(3.0);
  CHECK(y.tolist() == std::vector<double>{6, 12});
  CHECK_FALSE(y.is_leaf());
  sum(y).backward();
  CHECK(x.grad().tolist() == std::vector<double>{6, 6});
}

TEST_CASE("autograd: in-place ops chain on a non-leaf") {
  Tensor x = leaf({0.5, 2});
  Tensor y = add(x, 0.0);
  y.mul_(x);  // x^2
  y.add_(x);  // x^2 + x
  y.exp_();   // exp(x^2 + x)
  sum(y).backward();
  std::vector<double> g = x.grad().tolist();
  CHECK(g[0] == Approx(std::exp(0.75) * 2.0));
  CHECK(g[1] == Approx(std::exp(6.0) * 5.0));
}

TEST_CASE("autograd: in-place op with a grad-requiring operand on a plain tensor") {
  Tensor x = leaf({1, 2});
  Tensor acc = zeros({2}, DType::f64);
  acc.add_(x, 3.0);
  CHECK(acc.requires_grad());
  sum(acc).backward();
  CHECK(x.grad().tolist() == std::vector<double>{3, 3});
}

TEST_CASE("autograd: in-place op on a view of a grad-requiring tensor throws") {
  Tensor y = mul(leaf({1, 2, 3}), 2.0);
  CHECK_THROWS_AS(y.slice(0, 0, 2).mul_(2.0), AutogradError);
  CHECK_THROWS_WITH(y.select(0, 0).add_(1.0), Catch::Contains("add_") && Catch::Contains("view"));
}

TEST_CASE("autograd: copy_ into a plain tensor is differentiable") {
  Tensor x = leaf({1, 2, 3});
  Tensor dst = zeros({2, 3}, DType::f64);
  dst.copy_(x);
  CHECK(grad_fn_name(dst) == "CopyBackward");
  sum(mul(dst, 2.0)).backward();
  CHECK(x.grad().tolist() == std::vector<double>{4, 4, 4});
}

// ---- hooks ----

TEST_CASE("autograd: a leaf hook fires once per backward with the gradient") {
  Tensor x = leaf({1, 2});
  int calls = 0;
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    seen = g.tolist();
    return Tensor();
  });
  // x feeds the graph twice; the hook sees the summed gradient once.
  sum(mul(x, x)).backward();
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>{2, 4});
  sum(mul(x, 5.0)).backward();
  CHECK(calls == 2);
  CHECK(seen == std::vector<double>{5, 5});
}

TEST_CASE("autograd: a leaf hook can replace the gradient") {
  Tensor x = leaf({1, 2});
  x.register_hook([](const Tensor& g) { return mul(g, 10.0); });
  sum(mul(x, 2.0)).backward();
  CHECK(x.grad().tolist() == std::vector<double>{20, 20});
}

TEST_CASE("autograd: a non-leaf hook sees and can replace the gradient") {
  Tensor x = leaf({1, 2});
  Tensor h = mul(x, 3.0);
  int calls = 0;
  std::vector<double> seen;
  h.register_hook([&](const Tensor& g) {
    ++calls;
    seen = g.tolist();
    return mul(g, 0.5);
  });
  sum(mul(h, h)).backward();
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>{6, 12});  // 2h
  CHECK(x.grad().tolist() == std::vector<double>{9, 18});
}

TEST_CASE("autograd: hooks need a tensor that requires grad") {
  Tensor t = zeros({2});
  CHECK_THROWS_AS(t.register_hook([](const Tensor&) { return Tensor(); }), AutogradError);
  CHECK_THROWS_AS(t.register_post_accumulate_grad_hook([](Tensor&) {}), AutogradError);
  Tensor y = mul(leaf({1}), 2.0);
  CHECK_THROWS_AS(y.register_post_accumulate_grad_hook([](Tensor&) {}), AutogradError);
}

TEST_CASE("autograd: post-accumulate hooks run after .grad is updated") {
  Tensor x = leaf({1, 2});
  std::vector<std::vector<double>> seen;
  x.register_post_accumulate_grad_hook([&](Tensor& t) { seen.push_back(t.grad().tolist()); });
  sum(mul(x, 2.0)).backward();
  sum(mul(x, 3.0)).backward();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == std::vector<double>{2, 2});
  CHECK(seen[1] == std::vector<double>{5, 5});
}

TEST_CASE("autograd: retain_grad keeps a non-leaf's gradient") {
  Tensor x = leaf({1, 2});
  Tensor h = mul(x, 2.0);
  Tensor other = mul(x, 4.0);
  h.retain_grad();
  sum(mul(h, h)).backward(Tensor(), true);
  CHECK(h.grad().tolist() == std::vector<double>{4, 8});
  CHECK_FALSE(other.grad().defined());
  sum(mul(h, h)).backward();
  CHECK(h.grad().tolist() == std::vector<double>{8, 16});
  CHECK_THROWS_AS(zeros({1}).retain_grad(), AutogradError);
}

// ---- graph shapes ----

TEST_CASE("autograd: diamond graphs sum the gradients of every use") {
  Tensor x = leaf({1, 2});
  Tensor a = mul(x, x);
  Tensor b = mul(x, 3.0);
  sum(add(a, b)).backward();
  CHECK(x.grad().tolist() == std::vector<double>{5, 7});
  Tensor y = leaf({3});
  Tensor shared = exp(y);
  sum(add(mul(shared, 2.0), shared)).backward();
  CHECK(y.grad().item<double>() == Approx(3 * std::exp(3.0)));
}

TEST_CASE("autograd: only inputs that require grad get a gradient") {
  Tensor x = leaf({1, 2});
  Tensor c = tensor<double>({5, 6});
  sum(mul(x, c)).backward();
  CHECK(x.grad().tolist() == std::vector<double>{5, 6});
  CHECK_FALSE(c.grad().defined());
}

TEST_CASE("autograd: gradients flow through slice, select, expand, permute and view") {
  Tensor x = tensor<double>(std::vector<double>(12, 1.0), {3, 4}).requires_grad_();
  sum(x.slice(1, 1, 4, 2)).backward();
  CHECK(x.grad().tolist() == std::vector<double>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1});
  x.zero_grad();
  sum(mul(x.select(0, -1), 2.0)).backward();
  CHECK(x.grad().tolist() == std::vector<double>{0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2});
  x.zero_grad();
  Tensor w = tensor<double>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3});
  sum(mul(x.permute({1, 0}), w)).backward();
  CHECK(x.grad().tolist() == w.t().contiguous().tolist());
  x.zero_grad();
  sum(mul(x.view({2, 6}), tensor<double>({1, 2, 3, 4, 5, 6}))).backward();
  CHECK(x.grad().tolist() == std::vector<double>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
  Tensor col = leaf({1, 2, 3});
  sum(col.view({3, 1}).expand({2, 3, 4})).backward();
  CHECK(col.grad().tolist() == std::vector<double>{8, 8, 8});
}

TEST_CASE("autograd: gradcheck of view ops") {
  Tensor x = random_f64({3, 4}, 91);
  auto check = [&](std::function<Tensor(const Tensor&)> op) {
    CHECK_GRADCHECK([op](const std::vector<Tensor>& in) { return op(in[0]); }, {x});
  };
  check([](const Tensor& t) { return t.view({2, 6}); });
  check([](const Tensor& t) { return t.t().reshape({12}); });
  check([](const Tensor& t) { return t.permute({1, 0}); });
  check([](const Tensor& t) { return t.transpose(0, 1).contiguous(); });
  check([](const Tensor& t) { return t.slice(1, 0, 4, 3); });
  check([](const Tensor& t) { return t.slice(0, -2, 3); });
  check([](const Tensor& t) { return t.narrow(1, 1, 2); });
  check([](const Tensor& t) { return t.select(1, -2); });
  check([](const Tensor& t) { return t.unsqueeze(1).expand({3, 2, 4}); });
  check([](const Tensor& t) { return t.slice(0, 0, 1).squeeze(0); });
  check([](const Tensor& t) { return t.flatten(); });
  check([](const Tensor& t) { return t.clone(); });
  check([](const Tensor& t) { return mul(t.t().select(0, 1), t.select(1, 2)); });
}

TEST_CASE("autograd: gradient through to(dtype) comes back in the input's dtype") {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x.to(DType::f32), 3.0);
  CHECK(y.dtype() == DType::f32);
  sum(y).backward();
  CHECK(x.grad().dtype() == DType::f64);
  CHECK(x.grad().tolist() == std::vector<double>{3, 3});
  CHECK_THROWS_AS(x.to(DType::i64), AutogradError);
  CHECK_THROWS_WITH(x.to(DType::i64), Catch::Contains("to") && Catch::Contains("detach"));
  CHECK_NOTHROW(x.detach().to(DType::i64));
}

TEST_CASE("autograd: a long chain does not overflow the stack") {
  Tensor x = leaf({1});
  Tensor y = x;
  for (int i = 0; i < 10000; ++i) y = add(y, 1.0);
  y.backward();
  CHECK(x.grad().item<double>() == 1.0);
  CHECK(y.item<double>() == 10001.0);
}

TEST_CASE("autograd: to(cuda) throws DeviceError without a GPU") {
  if (!cuda::is_available()) {
    Tensor x = leaf({1, 2});
    CHECK_THROWS_AS(x.to(Device::cuda()), DeviceError);
    CHECK_THROWS_AS(x.cuda(), DeviceError);
    CHECK_THROWS_AS(x.to("cuda:0"), DeviceError);
    CHECK(x.cpu().is_same(x));
  }
}

TEST_CASE("autograd: callbacks queued from a hook run once the backward pass has finished") {
  Tensor w = ones({3});
  w.requires_grad_();
  std::vector<std::string> events;
  double grad_seen = 0;
  w.register_post_accumulate_grad_hook([&](Tensor&) {
    events.push_back("hook");
    queue_backward_callback([&] {
      grad_seen = w.grad().tolist()[0];
      events.push_back("callback");
      queue_backward_callback([&] { events.push_back("nested"); });
    });
  });
  sum(mul(w, 2.0)).backward();
  REQUIRE(events.size() == 3);
  CHECK(events[0] == "hook");
  CHECK(events[1] == "callback");
  CHECK(grad_seen == 2.0);       // the gradient was final when the callback ran
  CHECK(events[2] == "nested");  // queued by the callback itself
  CHECK_THROWS_WITH(queue_backward_callback([] {}), Catch::Contains("outside a backward pass"));
}

// ---- saved-tensor hooks and activation checkpointing (ops/autograd/checkpoint.h) ----

namespace {

// Keeps a copy of each saved tensor and counts packs and unpacks: what an offloading hook does.
class CopyingHooks : public SavedTensorHooks {
 public:
  struct Copy : PackedTensor {
    Tensor value;
    int* unpacks;
    Tensor unpack() override {
      ++*unpacks;
      return value;
    }
  };
  std::shared_ptr<PackedTensor> pack(const Tensor& tensor) override {
    ++packs;
    auto copy = std::make_shared<Copy>();
    copy->value = tensor.detach().clone();
    copy->unpacks = &unpacks;
    return copy;
  }
  int packs = 0, unpacks = 0;
};

}  // namespace

TEST_CASE("saved-tensor hooks: pack sees each saved tensor, backward unpacks what pack kept") {
  Tensor x = leaf({0.5, 1, 2});
  Tensor h = mul(exp(x), x);  // saves exp's output, then both factors
  h.sum().backward();
  const Tensor want = x.grad().clone();
  x.zero_grad();
  CopyingHooks hooks;
  Tensor out;
  {
    SavedTensorHooksGuard guard(hooks);
    CHECK(current_saved_tensor_hooks() == &hooks);
    out = mul(exp(x), x).sum();
  }
  CHECK(current_saved_tensor_hooks() == nullptr);
  CHECK(hooks.packs == 3);
  out.backward();
  CHECK(hooks.unpacks == 3);
  CHECK(equal(x.grad(), want));
}

namespace {

// Convolutions, batch norm, ReLU and optionally dropout, then a classifier: what a checkpointed
// segment of a CNN holds.
std::shared_ptr<nn::Sequential> small_cnn(bool with_dropout) {
  manual_seed(3);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(2, 4, 3, nn::Conv2dOptions{.padding = 1}))
      .push_back(std::make_shared<nn::BatchNorm2d>(4))
      .push_back(std::make_shared<nn::ReLU>());
  if (with_dropout) net->push_back(std::make_shared<nn::Dropout>(0.4));
  net->push_back(std::make_shared<nn::Conv2d>(4, 4, 3, nn::Conv2dOptions{.padding = 1}))
      .push_back(std::make_shared<nn::ReLU>());
  if (with_dropout) net->push_back(std::make_shared<nn::Dropout>(0.3));
  net->push_back(std::make_shared<nn::Flatten>()).push_back(std::make_shared<nn::Linear>(144, 5));
  return net;
}

// The gradients of the parameters and of x after one backward of sum(out^2), from a fresh start.
std::vector<Tensor> gradients_of(nn::Module& net, const Tensor& x, const Tensor& out) {
  mul(out, out).sum().backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : net.parameters()) grads.push_back(p.grad().clone());
  if (x.requires_grad()) grads.push_back(x.grad().clone());
  return grads;
}

void check_all_equal(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("gradient " << k);
    CHECK(equal(got[k], want[k]));
  }
}

}  // namespace

TEST_CASE(
    "checkpoint: gradients equal the plain run's bit for bit; the forward holds its output alone") {
  auto net = small_cnn(false);
  Generator gen(5);
  const Tensor data = randn({3, 2, 6, 6}, DType::f32, Device::cpu(), &gen);

  Tensor x = data.clone().requires_grad_();
  const int64_t before = memory_stats().current_bytes;
  Tensor out = net->forward(x);
  const int64_t plain_held = memory_stats().current_bytes - before;
  const std::vector<Tensor> want = gradients_of(*net, x, out);
  net->zero_grad();

  Tensor y = data.clone().requires_grad_();
  int calls = 0;
  const int64_t before_checkpoint = memory_stats().current_bytes;
  Tensor checkpointed = checkpoint(
      [&](const Tensor& in) {
        ++calls;
        return net->forward(in);
      },
      y);
  const int64_t checkpoint_held = memory_stats().current_bytes - before_checkpoint;
  CHECK(calls == 1);
  CHECK(equal(checkpointed, out));
  CHECK(checkpointed.grad_fn() != nullptr);
  // Between forward and backward only the output is held (the input is the caller's): the
  // activations of the 7 layers are not.
  CAPTURE(plain_held, checkpoint_held);
  CHECK(checkpoint_held ==
        checkpointed.numel() * static_cast<int64_t>(checkpointed.element_size()));
  CHECK(checkpoint_held * 4 < plain_held);
  check_all_equal(gradients_of(*net, y, checkpointed), want);
  CHECK(calls == 2);  // backward ran fn again
}

TEST_CASE("checkpoint: batch norm's running statistics move once a batch, as without it") {
  // Until 2026-11-28 (and in PyTorch) the recomputation updated them a second time.
  Generator gen(6);
  const Tensor data = randn({3, 2, 6, 6}, DType::f32, Device::cpu(), &gen);
  auto plain = small_cnn(false), checkpointed = small_cnn(false);
  for (int step = 0; step < 2; ++step) {
    Tensor reference = plain->forward(data);
    mul(reference, reference).sum().backward();
    Tensor out = checkpoint([&](const Tensor& in) { return checkpointed->forward(in); }, data);
    mul(out, out).sum().backward();
  }
  const auto want = plain->named_buffers(), got = checkpointed->named_buffers();
  REQUIRE(got.size() == 3);
  for (size_t k = 0; k < got.size(); ++k) {
    INFO(got[k].first);
    CHECK(equal(got[k].second, want[k].second));
  }
  CHECK(got[2].second.item<int64_t>() == 2);  // num_batches_tracked
  CHECK_FALSE(is_recomputing_checkpoint());
}

TEST_CASE("checkpoint: dropout inside draws the forward's masks again when recomputed") {
  auto net = small_cnn(true);
  Generator gen(6);
  const Tensor data = randn({4, 2, 6, 6}, DType::f32, Device::cpu(), &gen);

  manual_seed(21);
  Tensor x = data.clone().requires_grad_();
  const std::vector<Tensor> want = gradients_of(*net, x, net->forward(x));
  const GeneratorState after_plain = default_generator().state();
  net->zero_grad();

  manual_seed(21);
  Tensor y = data.clone().requires_grad_();
  Tensor out = checkpoint([&](const Tensor& in) { return net->forward(in); }, y);
  // Something else draws between the forward and the backward, as the next layers would.
  Tensor unrelated = randn({3});
  const GeneratorState before_backward = default_generator().state();
  check_all_equal(gradients_of(*net, y, out), want);
  // The recomputation borrowed the forward's random state and gave the generator back.
  CHECK(default_generator().state().offset == before_backward.offset);
  CHECK(before_backward.offset == after_plain.offset + 1);
}

TEST_CASE("checkpoint: the forward's autocast state holds in the recomputation") {
  auto net = small_cnn(false);
  Generator gen(7);
  const Tensor data = randn({2, 2, 6, 6}, DType::f32, Device::cpu(), &gen);
  Tensor x = data.clone().requires_grad_(), y = data.clone().requires_grad_();
  Tensor plain, checkpointed;
  {
    autocast amp(DType::bf16);
    plain = net->forward(x);
  }
  const std::vector<Tensor> want = gradients_of(*net, x, plain.to(DType::f32));
  net->zero_grad();
  {
    autocast amp(DType::bf16);
    checkpointed = checkpoint([&](const Tensor& in) { return net->forward(in); }, y);
  }
  CHECK(checkpointed.dtype() == DType::bf16);
  // The backward runs outside the scope; the recomputation still casts to bf16 (were it to run in
  // f32, the tensors it saves would differ in dtype from the forward's, an error).
  check_all_equal(gradients_of(*net, y, checkpointed.to(DType::f32)), want);
}

TEST_CASE("checkpoint: parameters get their gradients when no input requires grad") {
  // PyTorch's reentrant checkpoint warns here and leaves the parameters without gradients; this
  // one records the forward's own graph, so nothing is lost and there is nothing to warn about.
  auto net = small_cnn(false);
  Generator gen(8);
  const Tensor x = randn({2, 2, 6, 6}, DType::f32, Device::cpu(), &gen);
  const std::vector<Tensor> want = gradients_of(*net, x, net->forward(x));
  net->zero_grad();
  Tensor out = checkpoint([&](const Tensor& in) { return net->forward(in); }, x);
  CHECK(out.requires_grad());
  check_all_equal(gradients_of(*net, x, out), want);
}

TEST_CASE("checkpoint: several inputs, nested checkpoints and retain_graph") {
  Tensor a = leaf({1, 2, 3}), b = leaf({0.5, -1, 2});
  auto fn = [](const Tensor& p, const Tensor& q) {
    Tensor inner = checkpoint([](const Tensor& t) { return mul(exp(t), t); }, p);
    return mul(inner, q).sum();
  };
  Tensor plain = fn(a, b);
  plain.backward();
  const Tensor want_a = a.grad().clone(), want_b = b.grad().clone();
  a.zero_grad();
  b.zero_grad();
  Tensor out = checkpoint(fn, a, b);
  CHECK(equal(out, plain));
  out.backward({}, /*retain_graph=*/true);
  CHECK(equal(a.grad(), want_a));
  CHECK(equal(b.grad(), want_b));
  out.backward();  // the recomputed tensors were kept for the second pass
  CHECK(equal(a.grad(), mul(want_a, 2.0)));
  CHECK(equal(b.grad(), mul(want_b, 2.0)));
}

TEST_CASE("checkpoint: with grad mode off it only calls fn") {
  Tensor x = leaf({1, 2});
  int calls = 0;
  NoGradGuard no_grad;
  Tensor out = checkpoint(
      [&](const Tensor& in) {
        ++calls;
        return mul(in, 2.0);
      },
      x);
  CHECK(calls == 1);
  CHECK_FALSE(out.requires_grad());
}

TEST_CASE("checkpoint: an input changed in place, or a function that changes, is an error") {
  Tensor w = leaf({1, 2, 3});
  Tensor x = tensor<double>({4, 5, 6});
  Tensor out = checkpoint([&](const Tensor& in) { return mul(exp(in), w).sum(); }, x);
  x.add_(1.0);
  CHECK_THROWS_WITH(out.backward(), Catch::Contains("checkpoint: input 0") &&
                                        Catch::Contains("modified in place after"));

  int calls = 0;
  Tensor changing = checkpoint(
      [&](const Tensor& in) {
        // A second exp on the recomputation saves one more tensor than the forward did.
        Tensor h = mul(in, w);
        return (++calls == 1 ? h : exp(h)).exp().sum();
      },
      tensor<double>({1, 1, 1}));
  CHECK_THROWS_AS(changing.backward(), AutogradError);
  CHECK_THROWS_WITH(checkpoint([&](const Tensor& in) { return mul(in, w); }, Tensor()),
                    Catch::Contains("checkpoint: input 0 is an undefined tensor"));
}
