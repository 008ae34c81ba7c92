#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "gradcheck.h"
#include "kiln/kernels/cpu/matmul_onednn.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::non_contiguous;
using kiln::testing::random_f64;
using kiln::testing::tolerance;

namespace {

// NumPy matmul by plain loops, in f64: 1-D promotion, batch broadcasting, then a triple loop per
// matrix.
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  Shape as = a.shape(), bs = b.shape();
  if (a.dim() == 1) as.insert(as.begin(), 1);
  if (b.dim() == 1) bs.push_back(1);
  const int64_t n = as[as.size() - 2], k = as.back(), m = bs.back();
  Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(a_batch.size(), b_batch.size());
  a_batch.insert(a_batch.begin(), nb - a_batch.size(), 1);
  b_batch.insert(b_batch.begin(), nb - b_batch.size(), 1);
  Shape batch(nb);
  for (size_t d = 0; d < nb; ++d) batch[d] = std::max(a_batch[d], b_batch[d]);
  const std::vector<double> av = a.tolist(), bv = b.tolist();
  const int64_t count = shape_numel(batch);
  std::vector<double> values(count * n * m, 0.0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, ai = 0, bi = 0, a_scale = 1, b_scale = 1;
    for (int64_t d = static_cast<int64_t>(nb) - 1; d >= 0; --d) {
      const int64_t idx = rest % batch[d];
      rest /= batch[d];
      ai += (a_batch[d] == 1 ? 0 : idx) * a_scale;
      bi += (b_batch[d] == 1 ? 0 : idx) * b_scale;
      a_scale *= a_batch[d];
      b_scale *= b_batch[d];
    }
    for (int64_t r0 = 0; r0 < n; ++r0)
      for (int64_t c = 0; c < m; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < k; ++j) acc += av[(ai * n + r0) * k + j] * bv[(bi * k + j) * m + c];
        values[(i * n + r0) * m + c] = acc;
      }
  }
  Shape shape = batch;
  if (a.dim() > 1) shape.push_back(n);
  if (b.dim() > 1) shape.push_back(m);
  // reshape, not tensor(values, shape): an empty shape there means "one dim", here a scalar.
  return tensor(values).reshape(shape);
}

void check_matmul(const Tensor& a, const Tensor& b) {
  INFO("a " << shape_str(a.shape()) << " b " << shape_str(b.shape()));
  check_close(matmul(a, b), reference_matmul(a, b), tolerance(a.dtype()));
}

Tensor random(const Shape& shape, uint64_t seed, DType dtype) {
  return random_f64(shape, seed).to(dtype);
}

const DType kFloatTypes[] = {DType::f32, DType::f64};

}  // namespace

TEST_CASE("linalg: mm matches a triple loop") {
  for (DType t : kFloatTypes) {
    Tensor a = random({5, 7}, 1, t), b = random({7, 3}, 2, t);
    check_close(mm(a, b), reference_matmul(a, b), tolerance(t));
    check_matmul(a, b);
  }
}

TEST_CASE("linalg: mm large enough for Eigen's threads") {
  for (DType t : kFloatTypes) {
    Tensor a = random({70, 130}, 3, t), b = random({130, 90}, 4, t);
    check_matmul(a, b);
  }
}

TEST_CASE("linalg: mm with transposed and sliced operands") {
  for (DType t : kFloatTypes) {
    Tensor a = random({6, 4}, 5, t).t();                 // column-major [4, 6]
    Tensor b = random({6, 10}, 6, t).slice(1, 1, 9, 2);  // row stride 10, col stride 2
    Tensor c = random({8, 5}, 7, t).slice(0, 2, 8);      // row-major with an offset
    check_matmul(a, b);
    check_matmul(c.t(), non_contiguous(random({6, 3}, 8, t)));
    check_matmul(b.t(), a.t());
  }
}

TEST_CASE("linalg: matmul promotes 1-D operands") {
  for (DType t : kFloatTypes) {
    Tensor v = random({4}, 9, t), w = random({4}, 10, t);
    Tensor mat = random({3, 4}, 11, t), mat_t = random({4, 5}, 12, t);
    Tensor stack = random({2, 4, 5}, 13, t), stack_t = random({2, 3, 4}, 14, t);
    CHECK(matmul(v, w).dim() == 0);
    check_matmul(v, w);
    check_matmul(mat, v);
    check_matmul(v, mat_t);
    check_matmul(v, stack);
    check_matmul(stack_t, v);
    check_matmul(non_contiguous(v), w);
  }
}

TEST_CASE("linalg: matmul broadcasts batch dims") {
  for (DType t : kFloatTypes) {
    check_matmul(random({2, 1, 3, 4}, 15, t), random({5, 4, 2}, 16, t));
    check_matmul(random({3, 4}, 17, t), random({2, 4, 5}, 18, t));
    check_matmul(random({1, 3, 4}, 19, t), random({3, 4, 2}, 20, t));
    check_matmul(random({2, 3, 4}, 21, t), random({4, 5}, 22, t));
  }
}

TEST_CASE("linalg: matmul of a stack and a matrix on non-contiguous inputs") {
  for (DType t : kFloatTypes) {
    Tensor a = random({3, 2, 4}, 23, t).permute({1, 0, 2});  // [2, 3, 4], not foldable as a view
    Tensor b = random({5, 4}, 24, t).t();
    check_matmul(a, b);
  }
}

TEST_CASE("linalg: matmul with expanded operands") {
  for (DType t : kFloatTypes) {
    // Zero batch stride: every product reads the same matrix.
    check_matmul(random({3, 4}, 25, t).expand({6, 3, 4}), random({6, 4, 2}, 26, t));
    // Zero stride inside the matrix: a layout Eigen cannot map, copied first.
    check_matmul(random({3, 1}, 27, t).expand({3, 4}), random({4, 2}, 28, t));
  }
}

TEST_CASE("linalg: bmm matches per-batch products") {
  for (DType t : kFloatTypes) {
    Tensor a = random({4, 3, 5}, 29, t), b = random({4, 5, 2}, 30, t);
    check_close(bmm(a, b), reference_matmul(a, b), tolerance(t));
    Tensor at = random({4, 5, 3}, 31, t).transpose(1, 2);
    Tensor bt = random({5, 4, 2}, 32, t).permute({1, 0, 2});
    check_close(bmm(at, bt), reference_matmul(at, bt), tolerance(t));
  }
}

TEST_CASE("linalg: bmm splits a large batch across threads") {
  for (DType t : kFloatTypes) {
    Tensor a = random({16, 30, 40}, 33, t), b = random({16, 40, 35}, 34, t);
    check_close(bmm(a, b), reference_matmul(a, b), tolerance(t));
  }
}

TEST_CASE("linalg: zero-size operands") {
  CHECK(matmul(zeros({0, 3}), zeros({3, 4})).shape() == Shape{0, 4});
  CHECK(matmul(zeros({2, 3}), zeros({3, 0})).shape() == Shape{2, 0});
  Tensor empty_inner = matmul(ones({2, 0}, DType::f64), ones({0, 3}, DType::f64));
  CHECK(empty_inner.shape() == Shape{2, 3});
  CHECK(empty_inner.tolist() == std::vector<double>(6, 0.0));
  CHECK(bmm(zeros({0, 2, 3}), zeros({0, 3, 4})).shape() == Shape{0, 2, 4});
  CHECK(matmul(zeros({2, 0, 3}), zeros({3, 4})).shape() == Shape{2, 0, 4});
  Tensor bias = tensor({1.0, 2.0});
  Tensor with_bias = linear(zeros({3, 0}, DType::f64), zeros({2, 0}, DType::f64), bias);
  CHECK(with_bias.tolist() == std::vector<double>{1, 2, 1, 2, 1, 2});
}

TEST_CASE("linalg: 16-bit floats multiply in f32") {
  Tensor a = random({6, 5}, 35, DType::f32), b = random({5, 4}, 36, DType::f32);
  for (DType t : {DType::f16, DType::bf16}) {
    Tensor a16 = a.to(t), b16 = b.to(t);
    Tensor out = matmul(a16, b16);
    CHECK(out.dtype() == t);
    // The reference multiplies the same rounded inputs; only the output rounding differs.
    Tensor want = reference_matmul(a16.to(DType::f64), b16.to(DType::f64));
    check_close(out, want, tolerance(t));
  }
}

// bf16 products go to oneDNN's matmul where it has a kernel for this CPU, else through f32 copies;
// the two sum the same bf16 inputs in f32 in different orders, so they agree to bf16's rounding.
TEST_CASE("linalg: bf16 products through oneDNN equal the f32 copies' to bf16 rounding") {
  const Tensor w = random({29, 23}, 42, DType::f32).to(DType::bf16);
  const Tensor stack = random({3, 4, 17, 29}, 43, DType::f32).to(DType::bf16);
  const Tensor bias = random({23}, 44, DType::f32).to(DType::bf16);
  const Tensor wide = random({5, 29, 23}, 45, DType::f32).to(DType::bf16);
  struct Case {
    const char* what;
    std::function<Tensor()> run;
  };
  const std::vector<Case> cases{
      {"matrix x matrix", [&] { return matmul(stack.select(0, 1).select(0, 2), w); }},
      {"transposed operands", [&] { return matmul(w.t(), stack.select(0, 0).select(0, 1).t()); }},
      {"stack x matrix (broadcast batch)", [&] { return matmul(stack, w); }},
      {"batch x batch",
       [&] {
         return matmul(stack.select(0, 2).narrow(0, 0, 4),
                       wide.narrow(0, 0, 4).expand({4, 29, 23}));
       }},
      {"batch strides that do not fold", [&] { return matmul(stack.narrow(1, 1, 2), w); }},
      {"broadcast along one batch dim only",
       [&] {
         return matmul(stack.narrow(0, 0, 1).expand({2, 4, 17, 29}), wide.narrow(0, 0, 4));
       }},
      {"linear with bias (accumulates)", [&] { return linear(stack, w.t(), bias); }},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const Tensor fused = c.run();
    backends::set_onednn_enabled(false);
    const Tensor copies = c.run();
    backends::set_onednn_enabled(true);
    REQUIRE(fused.dtype() == DType::bf16);
    REQUIRE(fused.shape() == copies.shape());
    const Tensor a = fused.to(DType::f64), b = copies.to(DType::f64);
    // Adjacent bf16 values at most: 2^-7 of the magnitude, and a little room near zero.
    CHECK(all(le(abs(sub(a, b)), add(mul(abs(b), 1.0 / 128), 1e-3))).item() == 1.0);
  }
  // On a CPU with bf16 dot products oneDNN takes the product: the path above is the one tested.
  if (cpu_isa() >= CpuIsa::avx512_bf16 && backends::onednn_enabled()) {
    const Tensor out = empty({17, 23}, DType::bf16);
    CHECK(cpu::onednn_bf16_matmul(stack.select(0, 0).select(0, 0), w, out, false));
    CHECK(allclose(out.to(DType::f32),
                   matmul(stack.select(0, 0).select(0, 0).to(DType::f32), w.to(DType::f32)),
                   1.0 / 64, 1e-2));
  }
}

TEST_CASE("linalg: linear matches x Wᵀ + b") {
  for (DType t : kFloatTypes) {
    Tensor w = random({4, 3}, 37, t), bias = random({4}, 38, t);
    for (const Shape& xs : {Shape{3}, Shape{5, 3}, Shape{2, 5, 3}}) {
      Tensor x = random(xs, 39, t);
      Tensor want = reference_matmul(x, w.t());
      check_close(linear(x, w), want, tolerance(t));
      std::vector<double> with_bias = want.tolist();
      const std::vector<double> bv = bias.tolist();
      for (size_t i = 0; i < with_bias.size(); ++i) with_bias[i] += bv[i % 4];
      check_close(linear(x, w, bias), with_bias, tolerance(t));
    }
  }
}

TEST_CASE("linalg: linear on non-contiguous input and weight") {
  Tensor x = random({3, 2, 5}, 40, DType::f64).transpose(0, 1);
  Tensor w = random({5, 4}, 41, DType::f64).t();
  check_close(linear(x, w), reference_matmul(x, w.t()), tolerance(DType::f64));
}

TEST_CASE("linalg: gradcheck mm and bmm") {
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return mm(in[0], in[1]); },
                  {random_f64({3, 4}, 42), random_f64({4, 2}, 43)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return bmm(in[0], in[1].transpose(1, 2)); },
                  {random_f64({2, 3, 4}, 44), random_f64({2, 5, 4}, 45)});
}

TEST_CASE("linalg: gradcheck matmul with broadcast batch dims") {
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                  {random_f64({2, 1, 3, 4}, 46), random_f64({3, 4, 2}, 47)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                  {random_f64({3, 4}, 48), random_f64({2, 4, 2}, 49)});
}

TEST_CASE("linalg: gradcheck matmul of a stack and a matrix") {
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                  {random_f64({2, 3, 4}, 50), random_f64({4, 2}, 51)});
}

TEST_CASE("linalg: gradcheck matmul with 1-D operands") {
  auto f = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  CHECK_GRADCHECK(f, {random_f64({4}, 52), random_f64({4}, 53)});
  CHECK_GRADCHECK(f, {random_f64({3, 4}, 54), random_f64({4}, 55)});
  CHECK_GRADCHECK(f, {random_f64({4}, 56), random_f64({2, 4, 3}, 57)});
  CHECK_GRADCHECK(f, {random_f64({2, 3, 4}, 58), random_f64({4}, 59)});
}

TEST_CASE("linalg: gradcheck linear") {
  auto with_bias = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
  auto without = [](const std::vector<Tensor>& in) { return linear(in[0], in[1]); };
  CHECK_GRADCHECK(with_bias, {random_f64({5, 3}, 60), random_f64({4, 3}, 61), random_f64({4}, 62)});
  CHECK_GRADCHECK(with_bias,
                  {random_f64({2, 3, 3}, 63), random_f64({2, 3}, 64), random_f64({2}, 65)});
  CHECK_GRADCHECK(without, {random_f64({3}, 66), random_f64({4, 3}, 67)});
}

TEST_CASE("linalg: gradients of a matmul with only one operand requiring grad") {
  Tensor a = random_f64({3, 4}, 68).requires_grad_();
  Tensor b = random_f64({4, 2}, 69);
  sum(matmul(a, b)).backward();
  REQUIRE(a.grad().defined());
  // d sum(a b) / d a[i, j] = sum_c b[j, c]
  const std::vector<double> bv = b.tolist();
  std::vector<double> want;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) want.push_back(bv[j * 2] + bv[j * 2 + 1]);
  check_close(a.grad(), want, tolerance(DType::f64));
}

TEST_CASE("linalg: inner dims that differ are a ShapeError naming both shapes") {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  CHECK_THROWS_AS(matmul(a, b), ShapeError);
  CHECK_THROWS_WITH(
      matmul(a, b),
      Catch::Contains("matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 vs 4)"));
  CHECK_THROWS_WITH(mm(a, b), Catch::Contains("mm: shapes [2, 3] and [4, 5]"));
  CHECK_THROWS_AS(matmul(zeros({3}), zeros({4})), ShapeError);
}

TEST_CASE("linalg: batch dims that do not broadcast are a ShapeError") {
  CHECK_THROWS_AS(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), ShapeError);
  CHECK_THROWS_WITH(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), Catch::Contains("matmul"));
}

TEST_CASE("linalg: 0-dim operands are a ShapeError") {
  CHECK_THROWS_AS(matmul(scalar_tensor(2.0), zeros({3})), ShapeError);
  CHECK_THROWS_WITH(matmul(zeros({3}), scalar_tensor(2.0)), Catch::Contains("matmul"));
}

TEST_CASE("linalg: mm and bmm reject other ranks") {
  CHECK_THROWS_AS(mm(zeros({2, 3, 4}), zeros({4, 5})), ShapeError);
  CHECK_THROWS_WITH(mm(zeros({3}), zeros({3, 2})), Catch::Contains("mm: expected two 2-D"));
  CHECK_THROWS_AS(bmm(zeros({3, 4}), zeros({4, 5})), ShapeError);
  CHECK_THROWS_AS(bmm(zeros({2, 3, 4}), zeros({1, 4, 5})), ShapeError);
  CHECK_THROWS_WITH(bmm(zeros({2, 3, 4}), zeros({1, 4, 5})), Catch::Contains("bmm: batch sizes"));
}

TEST_CASE("linalg: dtypes must match and be floating") {
  CHECK_THROWS_AS(matmul(zeros({2, 3}), zeros({3, 2}, DType::f64)), DTypeError);
  CHECK_THROWS_WITH(matmul(zeros({2, 3}), zeros({3, 2}, DType::f64)), Catch::Contains("matmul"));
  CHECK_THROWS_AS(matmul(zeros({2, 3}, DType::i64), zeros({3, 2}, DType::i64)), DTypeError);
  CHECK_THROWS_AS(linear(zeros({2, 3}), zeros({4, 3}), zeros({4}, DType::f64)), DTypeError);
  CHECK_THROWS_WITH(linear(zeros({2, 3}, DType::i32), zeros({4, 3}, DType::i32)),
                    Catch::Contains("linear"));
}

TEST_CASE("linalg: linear checks feature, weight and bias shapes") {
  CHECK_THROWS_AS(linear(zeros({2, 5}), zeros({4, 3})), ShapeError);
  CHECK_THROWS_WITH(linear(zeros({2, 5}), zeros({4, 3})), Catch::Contains("linear: input [2, 5]"));
  CHECK_THROWS_AS(linear(zeros({2, 3}), zeros({3})), ShapeError);
  CHECK_THROWS_AS(linear(zeros({2, 3}), zeros({4, 3}), zeros({3})), ShapeError);
  CHECK_THROWS_WITH(linear(zeros({2, 3}), zeros({4, 3}), zeros({3})), Catch::Contains("bias"));
}

TEST_CASE("linalg: undefined operands are a ValueError") {
  CHECK_THROWS_AS(matmul(Tensor(), zeros({2})), ValueError);
  CHECK_THROWS_WITH(linear(zeros({2, 3}), Tensor()), Catch::Contains("linear"));
}

TEST_CASE("linalg: backward through zero-size products") {
  Tensor a = zeros({0, 3}, DType::f64).requires_grad_();
  Tensor b = ones({3, 4}, DType::f64).requires_grad_();
  sum(matmul(a, b)).backward();
  CHECK(a.grad().shape() == Shape{0, 3});
  CHECK(b.grad().tolist() == std::vector<double>(12, 0.0));
  Tensor x = ones({2, 0}, DType::f64).requires_grad_();
  Tensor w = ones({3, 0}, DType::f64).requires_grad_();
  sum(linear(x, w)).backward();
  CHECK(x.grad().shape() == Shape{2, 0});
  CHECK(w.grad().shape() == Shape{3, 0});
}
