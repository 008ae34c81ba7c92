// Autocast on the CPU: the policy op by op (tests/support/autocast_check.cpp, shared with the GPU
// test), a training step's dtypes and gradients, nested and disabled scopes, the weight-cast
// cache, backward outside the policy, and per-thread state.
#include <catch2/catch.hpp>
#include <stdexcept>
#include <thread>

#include "autocast_check.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;

TEST_CASE("autocast: each op class runs in the policy's dtype, f16 and bf16") {
  testing::check_autocast_policy(Device::cpu(), DType::f16);
  testing::check_autocast_policy(Device::cpu(), DType::bf16);
}

TEST_CASE("autocast: a training step keeps f32 weights and returns f32 gradients") {
  testing::check_autocast_training_step(Device::cpu(), DType::f16);
  testing::check_autocast_training_step(Device::cpu(), DType::bf16);
}

TEST_CASE("autocast: scopes nest, an inner disabled scope turns the policy off") {
  const Tensor a = randn({3, 3}), b = randn({3, 3});
  CHECK_FALSE(is_autocast_enabled());
  {
    autocast outer(DType::f16);
    CHECK(is_autocast_enabled());
    CHECK(matmul(a, b).dtype() == DType::f16);
    {
      autocast inner(DType::bf16);
      CHECK(autocast_dtype() == DType::bf16);
      CHECK(matmul(a, b).dtype() == DType::bf16);
      {
        autocast off(DType::bf16, false);
        CHECK_FALSE(is_autocast_enabled());
        CHECK(matmul(a, b).dtype() == DType::f32);
      }
      CHECK(matmul(a, b).dtype() == DType::bf16);
    }
    CHECK(autocast_dtype() == DType::f16);
    CHECK(matmul(a, b).dtype() == DType::f16);
  }
  CHECK_FALSE(is_autocast_enabled());
  CHECK(matmul(a, b).dtype() == DType::f32);
}

TEST_CASE("autocast: only f16 and bf16 are scope types") {
  CHECK_THROWS_AS(autocast(DType::f32), ValueError);
  CHECK_THROWS_WITH(autocast(DType::i64), Catch::Contains("autocast") && Catch::Contains("i64"));
  CHECK_FALSE(is_autocast_enabled());
  CHECK_THROWS_AS(autocast_policy("no_such_op"), std::logic_error);
}

TEST_CASE("autocast: a weight used twice in a scope is cast once") {
  Tensor w = randn({4, 4}).requires_grad_();
  const Tensor x = randn({2, 4});
  Tensor y;
  {
    autocast amp(DType::f16);
    const Tensor first = linear(x, w);
    CHECK(autocast_cache_size() == 1);
    y = linear(first, w);  // the first output is not a leaf: it is not cached
    CHECK(autocast_cache_size() == 1);
    CHECK(autocast_cache_find(w, DType::f16).defined());
    // An in-place change of the weight inside the scope makes its next use cast again.
    {
      NoGradGuard no_grad;
      w.mul_(2.0);
    }
    CHECK_FALSE(autocast_cache_find(w, DType::f16).defined());
    linear(x, w);
    CHECK(autocast_cache_find(w, DType::f16).defined());
  }
  CHECK(autocast_cache_size() == 0);
  // Both uses of the one cached copy send their gradient to the f32 weight.
  sum(y).backward();
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(w.grad().shape() == w.shape());
}

TEST_CASE("autocast: a cached weight serves several backward passes in one scope") {
  // Gradient accumulation inside one scope: the weight is unchanged between the passes, so both
  // forwards use the one cached cast, and both backwards run through its node.
  Tensor w = randn({3, 3}).requires_grad_();
  const Tensor x = randn({2, 3});
  autocast amp(DType::bf16);
  sum(matmul(x, w)).backward();
  const Tensor first = w.grad().clone();
  sum(matmul(x, w)).backward();
  CHECK(autocast_cache_size() == 1);
  testing::check_close(w.grad(), mul(first, 2.0), testing::tolerance(DType::f32));
}

TEST_CASE("autocast: tensors that are not weights are cast on every use") {
  const Tensor x = randn({4, 4});  // no grad: not a weight
  autocast amp(DType::bf16);
  matmul(x, x);
  CHECK(autocast_cache_size() == 0);
}

TEST_CASE("autocast: backward inside a scope runs in the forward's dtypes") {
  Tensor w = randn({3, 3}).requires_grad_();
  Tensor x = randn({2, 3}).requires_grad_();
  autocast amp(DType::f16);
  Tensor loss = sum(matmul(x, w));
  CHECK(loss.dtype() == DType::f32);
  loss.backward();
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(w.grad().dtype() == DType::f32);
  // The gradient of sum(x @ w) with respect to x is each row of ones times w^T, within f16's
  // rounding of w.
  testing::check_close(x.grad(), matmul(ones({2, 3}), w.detach().t()).to(DType::f16).to(DType::f32),
                       testing::tolerance(DType::f16));
}

TEST_CASE("autocast: backward formulas are not cast by the policy") {
  // erf is outside the table, so a 16-bit input keeps its dtype; its backward calls exp, which the
  // policy would widen to f32 if backward ran under it.
  Tensor x = randn({5}).to(DType::f16).requires_grad_();
  autocast amp(DType::f16);
  Tensor inner = erf(x);
  Tensor outer = erf(inner);
  CHECK(outer.dtype() == DType::f16);
  DType seen = DType::i64;
  inner.register_hook([&](const Tensor& g) {
    seen = g.dtype();
    return Tensor();
  });
  outer.backward(ones_like(outer));
  CHECK(seen == DType::f16);
  CHECK(x.grad().dtype() == DType::f16);
}

TEST_CASE("autocast: the scope belongs to its thread") {
  autocast amp(DType::f16);
  bool other_enabled = true;
  DType other_dtype = DType::f16;
  std::thread other([&] {
    other_enabled = is_autocast_enabled();
    other_dtype = matmul(randn({2, 2}), randn({2, 2})).dtype();
  });
  other.join();
  CHECK_FALSE(other_enabled);
  CHECK(other_dtype == DType::f32);
}
