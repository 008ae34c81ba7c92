// Channels-last (NHWC) tensors on the CPU: the layout and how it is read back, what keeps it
// (copies, elementwise ops, conv2d, pooling, gradients, optimizers, modules), that values never
// depend on it, and a ResNet-20 trained in channels-last against the same in NCHW. The GPU's side
// (cuDNN's NHWC path, the pooling kernels' strides) is in tests/cuda/test_conv2d.cpp and the
// parity table's channels-last entries.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/nn/resnet.h"
#include "parity.h"

using namespace kiln;
using testing::check_close;
using testing::kExact;
using testing::random_f64;

namespace {

constexpr MemoryFormat kNchw = MemoryFormat::contiguous;
constexpr MemoryFormat kNhwc = MemoryFormat::channels_last;

Tensor random_f32(const Shape& shape, uint64_t seed) {
  return random_f64(shape, seed).to(DType::f32);
}

}  // namespace

TEST_CASE("memory format: channels-last strides, and the format read back from them") {
  const Tensor t = empty({2, 3, 4, 5}, DType::f32, Device::cpu(), kNhwc);
  CHECK(t.strides() == Shape{60, 1, 15, 3});
  CHECK(t.is_contiguous(kNhwc));
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.suggest_memory_format() == kNhwc);
  const Tensor plain = empty({2, 3, 4, 5});
  CHECK(plain.is_contiguous(kNchw));
  CHECK_FALSE(plain.is_contiguous(kNhwc));
  CHECK(plain.suggest_memory_format() == kNchw);
  // A permuted NCHW tensor seen as NHWC is channels-last, as PyTorch's usual way to get one.
  CHECK(plain.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}).suggest_memory_format() ==
        kNhwc);
  // Not 4-D, or strided otherwise: contiguous is what it suggests.
  CHECK(empty({2, 3}).suggest_memory_format() == kNchw);
  CHECK(plain.transpose(2, 3).suggest_memory_format() == kNchw);
}

TEST_CASE("memory format: a single-channel image carries the format in C's stride") {
  const Tensor x = tensor(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 1, 2, 2});
  // Dense in both orders, so contiguous(channels_last) is x itself, as PyTorch's ...
  CHECK(x.is_contiguous(kNhwc));
  CHECK(x.contiguous(kNhwc).is_same(x));
  CHECK(x.suggest_memory_format() == kNchw);
  // ... while to(channels_last) copies it to the strides that make later ops keep the format.
  const Tensor y = x.to(kNhwc);
  CHECK_FALSE(y.is_same(x));
  CHECK(y.stride(1) == 1);
  CHECK(y.suggest_memory_format() == kNhwc);
  CHECK(y.tolist() == x.tolist());
  CHECK(y.to(kNhwc).is_same(y));
}

TEST_CASE("memory format: conversions keep the values, and copies keep the format") {
  const Tensor x = random_f32({2, 3, 4, 5}, 1);
  const Tensor y = x.to(kNhwc);
  CHECK(y.suggest_memory_format() == kNhwc);
  CHECK(y.tolist() == x.tolist());
  CHECK(y.contiguous().is_contiguous());
  CHECK(y.contiguous().tolist() == x.tolist());
  CHECK(y.to(kNchw).suggest_memory_format() == kNchw);
  CHECK(y.contiguous(MemoryFormat::preserve).is_same(y));
  CHECK(y.to(MemoryFormat::preserve).is_same(y));
  for (const Tensor& copy : {y.clone(), y.to(DType::f64), y.to(DType::bf16), empty_like(y),
                             zeros_like(y), ones_like(y), full_like(y, 2.0)})
    CHECK(copy.suggest_memory_format() == kNhwc);
  CHECK(y.clone().tolist() == x.tolist());
  CHECK(y.to(DType::f64).tolist() == x.to(DType::f64).tolist());
  CHECK(y.clone(kNchw).is_contiguous());
  CHECK(sum(zeros_like(y)).item() == 0.0);
  CHECK(sum(ones_like(y)).item() == static_cast<double>(y.numel()));
  // reshape and flatten read the logical order, whatever the layout.
  CHECK(y.reshape({2, 60}).tolist() == x.reshape({2, 60}).tolist());
  CHECK(y.flatten(1).tolist() == x.flatten(1).tolist());
}

TEST_CASE("memory format: channels_last is refused where it has no meaning, naming the op") {
  const Tensor x = random_f32({2, 3, 4}, 2);
  CHECK_THROWS_WITH(x.contiguous(kNhwc), Catch::Contains("clone") && Catch::Contains("4-D"));
  CHECK_THROWS_WITH(x.to(kNhwc), Catch::Contains("4-D"));
  CHECK_THROWS_WITH(empty({2, 3}, DType::f32, Device::cpu(), kNhwc),
                    Catch::Contains("empty") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(empty({2, 3, 4, 5}, DType::f32, Device::cpu(), MemoryFormat::preserve),
                    Catch::Contains("preserve"));
}

TEST_CASE("memory format: elementwise results follow their first full-shape operand") {
  const Tensor a = random_f32({2, 3, 4, 5}, 3), b = random_f32({2, 3, 4, 5}, 4);
  const Tensor an = a.to(kNhwc), bn = b.to(kNhwc);
  const Tensor bias = random_f32({1, 3, 1, 1}, 5);
  CHECK(add(an, bn).suggest_memory_format() == kNhwc);
  CHECK(add(an, b).suggest_memory_format() == kNhwc);
  CHECK(add(a, bn).suggest_memory_format() == kNchw);
  CHECK(add(bias, an).suggest_memory_format() == kNhwc);  // the broadcast one does not decide
  CHECK(relu(an).suggest_memory_format() == kNhwc);
  CHECK(mul(an, 2.0).suggest_memory_format() == kNhwc);
  CHECK(where(gt(an, 0.0), an, bn).suggest_memory_format() == kNhwc);
  check_close(add(an, bn), add(a, b), kExact);
  check_close(add(an, b), add(a, b), kExact);
  check_close(add(bias, an), add(bias, a), kExact);
  check_close(relu(an), relu(a), kExact);
  check_close(sigmoid(an), sigmoid(a), kExact);
  check_close(where(gt(an, 0.0), an, b), where(gt(a, 0.0), a, b), kExact);
  // In place: self keeps its layout, its values as out of place.
  Tensor c = an.clone();
  c.add_(b, 0.5);
  CHECK(c.suggest_memory_format() == kNhwc);
  check_close(c, add(a, b, 0.5), kExact);
  // Gradients flow back in the same values.
  Tensor x1 = a.clone().requires_grad_(), x2 = an.clone().requires_grad_();
  sum(mul(relu(x1), b)).backward();
  sum(mul(relu(x2), b)).backward();
  check_close(x2.grad(), x1.grad(), kExact);
  CHECK(x2.grad().suggest_memory_format() == kNhwc);  // .grad takes its leaf's layout
}

TEST_CASE("memory format: conv2d in channels-last gives NCHW's values, and keeps the format") {
  const Tensor x = random_f32({2, 3, 7, 6}, 6), w = random_f32({4, 3, 3, 3}, 7);
  const Tensor b = random_f32({4}, 8);
  for (bool x_last : {false, true}) {
    for (bool w_last : {false, true}) {
      INFO("input " << (x_last ? "NHWC" : "NCHW") << ", weight " << (w_last ? "NHWC" : "NCHW"));
      Tensor xa = x.clone().requires_grad_(), wa = w.clone().requires_grad_();
      Tensor xb = (x_last ? x.to(kNhwc) : x.clone()).requires_grad_();
      Tensor wb = (w_last ? w.to(kNhwc) : w.clone()).requires_grad_();
      const Tensor want = conv2d(xa, wa, b, {1, 1}, {1, 1});
      const Tensor got = conv2d(xb, wb, b, {1, 1}, {1, 1});
      // Either operand in channels-last makes the result channels-last (cuDNN's rule in PyTorch).
      CHECK(got.suggest_memory_format() == (x_last || w_last ? kNhwc : kNchw));
      check_close(got, want, kExact);
      const Tensor g = random_f32(want.shape(), 9);
      want.backward(g);
      got.backward(g);
      check_close(xb.grad(), xa.grad(), kExact);
      check_close(wb.grad(), wa.grad(), kExact);
      CHECK(xb.grad().suggest_memory_format() == (x_last ? kNhwc : kNchw));
      CHECK(wb.grad().suggest_memory_format() == (w_last ? kNhwc : kNchw));
    }
  }
}

TEST_CASE("memory format: pooling keeps the input's format and NCHW's values") {
  const Tensor x = random_f32({2, 3, 9, 8}, 10);
  using Pool = Tensor (*)(const Tensor&);
  const std::vector<Pool> pools{[](const Tensor& t) {
                                  return max_pool2d(t, {3, 3}, {2, 2}, {1, 1});
                                },
                                [](const Tensor& t) {
                                  return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1});
                                },
                                [](const Tensor& t) {
                                  return adaptive_avg_pool2d(t, {1, 1});
                                },
                                [](const Tensor& t) {
                                  return adaptive_avg_pool2d(t, {4, 3});
                                }};
  for (size_t k = 0; k < pools.size(); ++k) {
    INFO("pool " << k);
    Tensor xa = x.clone().requires_grad_(), xb = x.to(kNhwc).requires_grad_();
    const Tensor want = pools[k](xa), got = pools[k](xb);
    CHECK(got.suggest_memory_format() == kNhwc);
    check_close(got, want, kExact);
    const Tensor g = random_f32(want.shape(), 11);
    want.backward(g);
    got.backward(g.to(kNhwc));
    check_close(xb.grad(), xa.grad(), kExact);
    CHECK(xb.grad().suggest_memory_format() == kNhwc);
  }
  const MaxPool2dResult r = max_pool2d_with_indices(x.to(kNhwc), {3, 3}, {2, 2}, {1, 1});
  check_close(r.indices, max_pool2d_with_indices(x, {3, 3}, {2, 2}, {1, 1}).indices, kExact);
}

TEST_CASE("memory format: Module::to(channels_last) lays out the 4-D parameters only") {
  auto net = nn::resnet20();
  const nn::StateDict before = net->state_dict();
  net->to(kNhwc);
  for (const auto& [name, t] : net->named_parameters()) {
    INFO(name);
    CHECK(t.suggest_memory_format() == (t.dim() == 4 ? kNhwc : kNchw));
  }
  // The same values under the same names, so checkpoints are layout-free.
  for (const auto& [name, t] : net->state_dict()) {
    INFO(name);
    check_close(t, before.at(name), kExact);
  }
  net->to(kNchw);
  for (const Tensor& p : net->parameters()) CHECK(p.is_contiguous());
}

TEST_CASE("memory format: a ResNet-20 trained in channels-last matches the NCHW run") {
  auto train = [](MemoryFormat format) {
    manual_seed(5);
    auto net = nn::resnet20();
    net->to(format);
    optim::SGD opt(net->parameters(),
                   {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
    for (int step = 0; step < 3; ++step) {
      const Tensor x = random_f32({4, 3, 8, 8}, 20 + step).to(format);
      const Tensor y = randint(0, 10, {4}, DType::i64, Device::cpu());
      opt.zero_grad();
      const Tensor out = net->forward(x);
      cross_entropy(out, y).backward();
      opt.step();
    }
    return net;
  };
  auto nchw = train(kNchw), nhwc = train(kNhwc);
  const auto want = nchw->named_parameters(), got = nhwc->named_parameters();
  REQUIRE(want.size() == got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    INFO(want[k].first);
    if (got[k].second.dim() == 4) CHECK(got[k].second.suggest_memory_format() == kNhwc);
    // On the CPU the kernels compute in NCHW either way: the same bits.
    check_close(got[k].second, want[k].second, kExact);
  }
}
