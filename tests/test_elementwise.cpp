// Elementwise ops: forward against plain loops over std:: math (f32 and f64, broadcast, strided and
// empty inputs), integer and mixed dtypes, in-place forms, gradients, and the errors users see.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using testing::check_close;
using testing::random_f64;
using testing::tolerance;

namespace {

using UnaryFn = std::function<Tensor(const Tensor&)>;
using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;
using Ref1 = std::function<double(double)>;
using Ref2 = std::function<double(double, double)>;

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double low, double high) {
  return random_f64(shape, seed, low, high).to(dtype);
}

// Values in [-1, -0.1] and [0.1, 1]: away from the kinks of abs, relu, sign and 1/x.
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
  Tensor u = random_f64(shape, seed, -0.9, 0.9);
  return where(gt(u, 0.0), add(u, 0.1), sub(u, 0.1));
}

// The layouts every unary forward check runs through: contiguous, transposed, strided, broadcast,
// empty and 0-dim.
std::vector<Tensor> unary_inputs(DType dtype, double low, double high) {
  return {random_tensor({3, 4}, dtype, 1, low, high),
          random_tensor({4, 3}, dtype, 2, low, high).t(),
          random_tensor({3, 8}, dtype, 3, low, high).slice(1, 0, 8, 2),
          random_tensor({3, 1}, dtype, 4, low, high).expand({3, 4}),
          random_tensor({0, 3}, dtype, 5, low, high),
          random_tensor({}, dtype, 6, low, high)};
}

struct Operands {
  Tensor a, b;
};

std::vector<Operands> binary_inputs(DType dtype, double low_a, double high_a, double low_b,
                                    double high_b) {
  auto a = [&](const Shape& s, uint64_t seed) {
    return random_tensor(s, dtype, seed, low_a, high_a);
  };
  auto b = [&](const Shape& s, uint64_t seed) {
    return random_tensor(s, dtype, seed, low_b, high_b);
  };
  return {{a({3, 4}, 11), b({3, 4}, 12)},
          {a({3, 1}, 13), b({4}, 14)},
          {a({4, 3}, 15).t(), b({3, 8}, 16).slice(1, 1, 8, 2)},
          {a({3, 1}, 17).expand({3, 4}), b({1, 4}, 18).expand({3, 4})},
          {a({0, 4}, 19), b({4}, 20)},
          {a({}, 21), b({2, 3}, 22)}};
}

// Row-major index into a tensor of shape `in` for element `flat` of the broadcast shape `out`.
int64_t source_index(const Shape& out, const Shape& in, int64_t flat) {
  int64_t index = 0, stride = 1;
  for (size_t k = 0; k < out.size(); ++k) {
    size_t d = out.size() - 1 - k;
    int64_t i = flat % out[d];
    flat /= out[d];
    if (k < in.size()) {
      int64_t size = in[in.size() - 1 - k];
      if (size != 1) index += i * stride;
      stride *= size;
    }
  }
  return index;
}

Shape broadcast_reference(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1;
    int64_t db = k < b.size() ? b[b.size() - 1 - k] : 1;
    out[out.size() - 1 - k] = da == 1 ? db : da;
  }
  return out;
}

std::vector<double> binary_reference(const Tensor& a, const Tensor& b, const Ref2& f) {
  Shape out = broadcast_reference(a.shape(), b.shape());
  std::vector<double> va = a.tolist(), vb = b.tolist(), result;
  for (int64_t i = 0; i < shape_numel(out); ++i)
    result.push_back(f(va[source_index(out, a.shape(), i)], vb[source_index(out, b.shape(), i)]));
  return result;
}

void check_unary(const UnaryFn& op, const Ref1& ref, double low = -2.0, double high = 2.0) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Tensor& x : unary_inputs(dtype, low, high)) {
      Tensor y = op(x);
      CHECK(y.dtype() == dtype);
      CHECK(y.shape() == x.shape());
      std::vector<double> expected;
      for (double v : x.tolist()) expected.push_back(ref(v));
      check_close(y, expected, tolerance(dtype));
    }
  }
}

void check_binary(const BinaryFn& op, const Ref2& ref, double low_a = -2.0, double high_a = 2.0,
                  double low_b = -2.0, double high_b = 2.0) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Operands& in : binary_inputs(dtype, low_a, high_a, low_b, high_b)) {
      Tensor out = op(in.a, in.b);
      CHECK(out.dtype() == dtype);
      CHECK(out.shape() == broadcast_reference(in.a.shape(), in.b.shape()));
      check_close(out, binary_reference(in.a, in.b, ref), tolerance(dtype));
    }
  }
}

void check_comparison(const BinaryFn& op, const Ref2& ref) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    // Integer-valued inputs so that ties occur.
    Tensor a = randint(0, 3, {3, 1}, dtype), b = randint(0, 3, {4}, dtype);
    Tensor out = op(a, b);
    CHECK(out.dtype() == DType::boolean);
    CHECK(out.shape() == Shape{3, 4});
    CHECK(out.tolist() == binary_reference(a, b, ref));
    Tensor at = a.expand({3, 4}).t(), bt = randint(0, 3, {4, 3}, dtype);
    CHECK(op(at, bt).tolist() == binary_reference(at, bt, ref));
  }
}

using GradFn = std::function<Tensor(const std::vector<Tensor>&)>;

GradFn of_one(const UnaryFn& op) {
  return [op](const std::vector<Tensor>& in) { return op(in[0]); };
}

GradFn of_two(const BinaryFn& op) {
  return [op](const std::vector<Tensor>& in) { return op(in[0], in[1]); };
}

double sigmoid_ref(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}
double gelu_ref(double v) {
  return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
}
double gelu_tanh_ref(double v) {
  return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

}  // namespace

// ---- unary forward ----

TEST_CASE("elementwise: neg") {
  check_unary([](const Tensor& x) { return neg(x); }, [](double v) { return -v; });
}
TEST_CASE("elementwise: abs") {
  check_unary([](const Tensor& x) { return abs(x); }, [](double v) { return std::abs(v); });
}
TEST_CASE("elementwise: abs clears the sign of -0.0, as torch.abs") {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const std::vector<double> got = abs(tensor({-0.0, 0.0, -2.5, -inf}).to(dtype)).tolist();
    CHECK(got == std::vector<double>{0.0, 0.0, 2.5, inf});
    // == does not tell -0.0 from +0.0: 1 / abs(-0.0) must be +inf.
    CHECK_FALSE(std::signbit(got[0]));
    CHECK_FALSE(std::signbit(got[1]));
  }
}

TEST_CASE("elementwise: sign") {
  check_unary([](const Tensor& x) { return sign(x); },
              [](double v) { return double((0 < v) - (v < 0)); });
  CHECK(sign(tensor<float>({-3, 0, 2})).tolist() == std::vector<double>{-1, 0, 1});
}
TEST_CASE("elementwise: exp") {
  check_unary([](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); });
}
TEST_CASE("elementwise: log") {
  check_unary([](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 0.1,
              3.0);
  std::vector<double> edge = log(tensor<double>({0.0, -1.0})).tolist();
  CHECK(std::isinf(edge[0]));
  CHECK(std::isnan(edge[1]));
}
TEST_CASE("elementwise: sqrt") {
  check_unary([](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0.0,
              3.0);
}
TEST_CASE("elementwise: rsqrt") {
  check_unary([](const Tensor& x) { return rsqrt(x); }, [](double v) { return 1.0 / std::sqrt(v); },
              0.1, 3.0);
}
TEST_CASE("elementwise: square") {
  check_unary([](const Tensor& x) { return square(x); }, [](double v) { return v * v; });
}
TEST_CASE("elementwise: reciprocal") {
  check_unary([](const Tensor& x) { return reciprocal(x); }, [](double v) { return 1.0 / v; }, 0.2,
              2.0);
}
TEST_CASE("elementwise: erf") {
  check_unary([](const Tensor& x) { return erf(x); }, [](double v) { return std::erf(v); });
}
TEST_CASE("elementwise: sin") {
  check_unary([](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); });
}
TEST_CASE("elementwise: cos") {
  check_unary([](const Tensor& x) { return cos(x); }, [](double v) { return std::cos(v); });
}
TEST_CASE("elementwise: relu") {
  check_unary([](const Tensor& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0.0; });
}
TEST_CASE("elementwise: leaky_relu") {
  check_unary([](const Tensor& x) { return leaky_relu(x, 0.2); },
              [](double v) { return v > 0 ? v : 0.2 * v; });
  check_unary([](const Tensor& x) { return leaky_relu(x); },
              [](double v) { return v > 0 ? v : 0.01 * v; });
}
TEST_CASE("elementwise: sigmoid") {
  check_unary([](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, -6.0, 6.0);
  std::vector<double> extreme = sigmoid(tensor<float>({-100.f, 100.f})).tolist();
  CHECK(extreme[0] == Approx(0.0).margin(1e-30));
  CHECK(extreme[1] == 1.0);
}
TEST_CASE("elementwise: tanh") {
  check_unary([](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -4.0,
              4.0);
}
TEST_CASE("elementwise: gelu exact and tanh approximation") {
  check_unary([](const Tensor& x) { return gelu(x); }, gelu_ref, -4.0, 4.0);
  check_unary([](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref, -4.0, 4.0);
}
TEST_CASE("elementwise: silu") {
  check_unary([](const Tensor& x) { return silu(x); }, [](double v) { return v * sigmoid_ref(v); },
              -6.0, 6.0);
}
TEST_CASE("elementwise: clamp") {
  check_unary([](const Tensor& x) { return clamp(x, -0.5, 0.7); },
              [](double v) { return std::min(std::max(v, -0.5), 0.7); });
  check_unary([](const Tensor& x) { return clamp(x, 0.2, std::nullopt); },
              [](double v) { return std::max(v, 0.2); });
  check_unary([](const Tensor& x) { return clamp(x, std::nullopt, 0.2); },
              [](double v) { return std::min(v, 0.2); });
  CHECK(std::isnan(clamp(tensor<float>({NAN}), 0.0, 1.0).item<float>()));
}
TEST_CASE("elementwise: pow with a scalar exponent") {
  check_unary([](const Tensor& x) { return pow(x, 2.5); },
              [](double v) { return std::pow(v, 2.5); }, 0.1, 3.0);
  check_unary([](const Tensor& x) { return pow(x, 3.0); }, [](double v) { return v * v * v; });
  check_unary([](const Tensor& x) { return pow(x, -1.0); }, [](double v) { return 1.0 / v; }, 0.5,
              2.0);
  check_unary([](const Tensor& x) { return x.pow(0.0); }, [](double) { return 1.0; });
}

// ---- binary forward ----

TEST_CASE("elementwise: add with broadcasting, strides and alpha") {
  check_binary([](const Tensor& a, const Tensor& b) { return add(a, b); },
               [](double x, double y) { return x + y; });
  check_binary([](const Tensor& a, const Tensor& b) { return add(a, b, -2.5); },
               [](double x, double y) { return x - 2.5 * y; });
}
TEST_CASE("elementwise: sub") {
  check_binary([](const Tensor& a, const Tensor& b) { return sub(a, b); },
               [](double x, double y) { return x - y; });
  check_binary([](const Tensor& a, const Tensor& b) { return sub(a, b, 3.0); },
               [](double x, double y) { return x - 3.0 * y; });
}
TEST_CASE("elementwise: mul") {
  check_binary([](const Tensor& a, const Tensor& b) { return mul(a, b); },
               [](double x, double y) { return x * y; });
}
TEST_CASE("elementwise: div") {
  check_binary([](const Tensor& a, const Tensor& b) { return div(a, b); },
               [](double x, double y) { return x / y; }, -2.0, 2.0, 0.2, 2.0);
}
TEST_CASE("elementwise: pow of two tensors") {
  check_binary([](const Tensor& a, const Tensor& b) { return pow(a, b); },
               [](double x, double y) { return std::pow(x, y); }, 0.1, 3.0, -2.0, 2.0);
}
TEST_CASE("elementwise: maximum and minimum") {
  check_binary([](const Tensor& a, const Tensor& b) { return maximum(a, b); },
               [](double x, double y) { return std::max(x, y); });
  check_binary([](const Tensor& a, const Tensor& b) { return minimum(a, b); },
               [](double x, double y) { return std::min(x, y); });
}
TEST_CASE("elementwise: maximum and minimum propagate NaN") {
  Tensor a = tensor<float>({NAN, 1.f, 2.f}), b = tensor<float>({1.f, NAN, 3.f});
  std::vector<double> mx = maximum(a, b).tolist(), mn = minimum(a, b).tolist();
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 3);
  CHECK(std::isnan(mn[0]));
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == 2);
}

TEST_CASE("elementwise: ops with a scalar operand") {
  const double s = 1.75;
  check_unary([=](const Tensor& x) { return add(x, s); }, [=](double v) { return v + s; });
  check_unary([=](const Tensor& x) { return sub(x, s); }, [=](double v) { return v - s; });
  check_unary([=](const Tensor& x) { return rsub(s, x); }, [=](double v) { return s - v; });
  check_unary([=](const Tensor& x) { return mul(x, s); }, [=](double v) { return v * s; });
  check_unary([=](const Tensor& x) { return div(x, s); }, [=](double v) { return v / s; });
  check_unary([=](const Tensor& x) { return rdiv(s, x); }, [=](double v) { return s / v; }, 0.2,
              2.0);
}

// ---- comparisons and logic ----

TEST_CASE("elementwise: comparisons of tensors") {
  check_comparison([](const Tensor& a, const Tensor& b) { return eq(a, b); },
                   [](double x, double y) { return double(x == y); });
  check_comparison([](const Tensor& a, const Tensor& b) { return ne(a, b); },
                   [](double x, double y) { return double(x != y); });
  check_comparison([](const Tensor& a, const Tensor& b) { return lt(a, b); },
                   [](double x, double y) { return double(x < y); });
  check_comparison([](const Tensor& a, const Tensor& b) { return le(a, b); },
                   [](double x, double y) { return double(x <= y); });
  check_comparison([](const Tensor& a, const Tensor& b) { return gt(a, b); },
                   [](double x, double y) { return double(x > y); });
  check_comparison([](const Tensor& a, const Tensor& b) { return ge(a, b); },
                   [](double x, double y) { return double(x >= y); });
}

TEST_CASE("elementwise: comparisons with a scalar") {
  Tensor t = arange(5);
  CHECK(eq(t, 2.0).tolist() == std::vector<double>{0, 0, 1, 0, 0});
  CHECK(ne(t, 2.0).tolist() == std::vector<double>{1, 1, 0, 1, 1});
  CHECK(lt(t, 2.5).tolist() == std::vector<double>{1, 1, 1, 0, 0});
  CHECK(le(t, 2.0).tolist() == std::vector<double>{1, 1, 1, 0, 0});
  CHECK(gt(t, 2.5).tolist() == std::vector<double>{0, 0, 0, 1, 1});
  CHECK(ge(t, 3.0).tolist() == std::vector<double>{0, 0, 0, 1, 1});
  CHECK(gt(tensor<float>({0.1f, 0.2f}), 0.15).tolist() == std::vector<double>{0, 1});
  CHECK(lt(t, 2.5).dtype() == DType::boolean);
}

TEST_CASE("elementwise: logical ops and isnan") {
  Tensor a = tensor<float>({0, 1, 2, 0}), b = tensor<float>({0, 0, 3, -1});
  CHECK(logical_not(a).tolist() == std::vector<double>{1, 0, 0, 1});
  CHECK(logical_and(a, b).tolist() == std::vector<double>{0, 0, 1, 0});
  CHECK(logical_or(a, b).tolist() == std::vector<double>{0, 1, 1, 1});
  CHECK(logical_not(a).dtype() == DType::boolean);
  Tensor m = tensor({true, false});
  CHECK(logical_and(m.view({2, 1}), m).tolist() == std::vector<double>{1, 0, 0, 0});
  CHECK(isnan(tensor<double>({1.0, NAN, INFINITY})).tolist() == std::vector<double>{0, 1, 0});
  CHECK(isnan(arange(3)).tolist() == std::vector<double>{0, 0, 0});
}

// ---- integer and mixed dtypes ----

TEST_CASE("elementwise: integer add and mul keep the integer dtype") {
  for (DType dtype : {DType::i32, DType::i64, DType::u8}) {
    INFO(dtype_name(dtype));
    Tensor a = randint(0, 15, {3, 1}, dtype), b = randint(0, 15, {4}, dtype);
    Tensor sum_ab = add(a, b), prod = mul(a, b), diff = sub(b, a);
    CHECK(sum_ab.dtype() == dtype);
    CHECK(prod.dtype() == dtype);
    CHECK(sum_ab.tolist() == binary_reference(a, b, [](double x, double y) { return x + y; }));
    CHECK(prod.tolist() == binary_reference(a, b, [](double x, double y) { return x * y; }));
    if (dtype != DType::u8)
      CHECK(diff.tolist() == binary_reference(b, a, [](double x, double y) { return x - y; }));
  }
  // u8 wraps around as in PyTorch.
  CHECK(add(tensor<uint8_t>({200}), tensor<uint8_t>({100})).tolist() == std::vector<double>{44});
  CHECK(add(tensor({5}), tensor({2}), 3.0).tolist() == std::vector<double>{11});
}

TEST_CASE("elementwise: integer unary ops") {
  Tensor t = tensor({-3, 0, 4});
  CHECK(abs(t).dtype() == DType::i64);
  CHECK(abs(t).tolist() == std::vector<double>{3, 0, 4});
  CHECK(neg(t).tolist() == std::vector<double>{3, 0, -4});
  CHECK(relu(t).tolist() == std::vector<double>{0, 0, 4});
  CHECK(square(t).tolist() == std::vector<double>{9, 0, 16});
  CHECK(sign(t).tolist() == std::vector<double>{-1, 0, 1});
  CHECK(clamp(t, -1.0, 2.0).tolist() == std::vector<double>{-1, 0, 2});
  CHECK(pow(t, 2.0).tolist() == std::vector<double>{9, 0, 16});
  Tensor root = sqrt(tensor({4, 9}));
  CHECK(root.dtype() == DType::f32);
  CHECK(root.tolist() == std::vector<double>{2, 3});
  CHECK(exp(tensor({0})).dtype() == DType::f32);
  CHECK_THROWS_AS(pow(t, 0.5), ValueError);
  CHECK_THROWS_AS(pow(t, -1.0), ValueError);
}

TEST_CASE("elementwise: integer division is true division in f32") {
  Tensor q = div(tensor({1, 2, 3}), tensor({2, 2, 2}));
  CHECK(q.dtype() == DType::f32);
  CHECK(q.tolist() == std::vector<double>{0.5, 1, 1.5});
  CHECK(div(tensor({1, -3}), 2.0).tolist() == std::vector<double>{0.5, -1.5});
  CHECK(div(tensor({7}).to(DType::i32), tensor<uint8_t>({2})).dtype() == DType::f32);
  CHECK(rdiv(1.0, tensor({4})).tolist() == std::vector<double>{0.25});
}

TEST_CASE("elementwise: mixed dtypes promote") {
  Tensor f = tensor<float>({1.5f}), d = tensor<double>({0.25});
  CHECK(add(f, d).dtype() == DType::f64);
  CHECK(add(f, d).item<double>() == 1.75);
  Tensor i = tensor({2});
  CHECK(add(i, 0.5).dtype() == DType::f32);
  CHECK(add(i, 0.5).item<double>() == 2.5);
  CHECK(add(i, 3.0).dtype() == DType::i64);
  CHECK(mul(i, f).dtype() == DType::f32);
  CHECK(mul(i, f).item<double>() == 3.0);
  CHECK(add(tensor<uint8_t>({1}), tensor({1}).to(DType::i32)).dtype() == DType::i32);
  CHECK(add(tensor<uint8_t>({1}), 2.0).dtype() == DType::u8);
  CHECK(add(tensor({true}), tensor({true})).dtype() == DType::boolean);
  CHECK(add(tensor({true}), 1.0).dtype() == DType::i64);
  CHECK(add(tensor({true}), tensor({3})).tolist() == std::vector<double>{4});
  CHECK(add(f.to(DType::f16), f.to(DType::bf16)).dtype() == DType::f32);
  CHECK(add(i, f.to(DType::f16)).dtype() == DType::f16);
  CHECK(add(f.to(DType::f16), 2.5).dtype() == DType::f16);
}

TEST_CASE("elementwise: f16 and bf16 arithmetic computes through f32") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    Tensor a = random_tensor({5, 7}, dtype, 31, -4, 4), b = random_tensor({7}, dtype, 32, -4, 4);
    Tensor out = add(a, b);
    CHECK(out.dtype() == dtype);
    // The exact sum rounded once to the 16-bit type.
    std::vector<double> exact = binary_reference(a, b, [](double x, double y) { return x + y; });
    Tensor expected = tensor<double>(std::vector<double>(exact), {5, 7}).to(dtype);
    CHECK(equal(out, expected));
    Tensor prod = mul(a, b);
    std::vector<double> exact_prod =
        binary_reference(a, b, [](double x, double y) { return x * y; });
    CHECK(equal(prod, tensor<double>(std::vector<double>(exact_prod), {5, 7}).to(dtype)));
    CHECK(exp(a).dtype() == dtype);
    check_close(exp(a), exp(a.to(DType::f64)), tolerance(dtype));
  }
}

// Contiguous 16-bit operands go through blocks of floats and the vector conversions (several
// 512-element blocks and a tail here); a transposed view of the same values takes the element-wise
// loop, which converts each element on its own. Both give the same bits, NaN, infinities,
// subnormals and values that round to infinity included.
TEST_CASE("elementwise: f16 and bf16 in float blocks match the element-wise loop bit for bit") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const double big = dtype == DType::f16 ? 70000.0 : 1e38;
    const double tiny = dtype == DType::f16 ? 3e-6 : 3e-39;
    auto values = [&](uint64_t seed) {
      std::vector<double> v = random_f64({3 * 1501}, seed, -4, 4).tolist();
      const double inf = std::numeric_limits<double>::infinity();
      const double specials[] = {
          std::numeric_limits<double>::quiet_NaN(), inf, -inf, big, -big, tiny, -tiny, 0.0, -0.0};
      for (size_t i = 0; i < std::size(specials); ++i) v[i * 331 % v.size()] = specials[i];
      return tensor<double>(std::move(v), {3, 1501}).to(dtype);
    };
    const Tensor a = values(51), b = values(52);
    // The same values, laid out transposed: not contiguous.
    const Tensor at = a.t().contiguous().t(), bt = b.t().contiguous().t();
    REQUIRE_FALSE(at.is_contiguous());
    auto same_bits = [](const Tensor& blocked, const Tensor& elementwise) {
      REQUIRE(blocked.is_contiguous());
      const Tensor e = elementwise.contiguous();
      REQUIRE(e.dtype() == blocked.dtype());
      CHECK(std::memcmp(blocked.data_ptr(), e.data_ptr(),
                        blocked.numel() * blocked.element_size()) == 0);
    };
    same_bits(add(a, b), add(at, bt));
    same_bits(sub(a, b), sub(at, bt));
    same_bits(mul(a, b), mul(at, bt));
    same_bits(div(a, b), div(at, bt));
    same_bits(maximum(a, b), maximum(at, bt));
    same_bits(relu(a), relu(at));
    same_bits(neg(a), neg(at));
    same_bits(exp(a), exp(at));
    same_bits(sqrt(a), sqrt(at));
    same_bits(sigmoid(a), sigmoid(at));
  }
}

// ---- where and masked_fill ----

TEST_CASE("elementwise: where broadcasts all three operands") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor cond = gt(random_tensor({3, 1}, DType::f64, 41, -1, 1), 0.0);
    Tensor a = random_tensor({4}, dtype, 42, -1, 1);
    Tensor b = random_tensor({2, 1, 1}, dtype, 43, -1, 1);
    Tensor out = where(cond, a, b);
    CHECK(out.shape() == Shape{2, 3, 4});
    CHECK(out.dtype() == dtype);
    std::vector<double> c = cond.tolist(), va = a.tolist(), vb = b.tolist(), got = out.tolist();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j)
          CHECK(got[n * 12 + i * 4 + j] == (c[i] != 0 ? va[j] : vb[n]));
  }
  CHECK(where(tensor({true, false}), tensor({1, 2}), tensor<float>({5, 6})).dtype() == DType::f32);
  Tensor strided = arange(8).slice(0, 0, 8, 2);
  CHECK(where(gt(strided, 3.0), strided, zeros({4}, DType::i64)).tolist() ==
        std::vector<double>{0, 0, 4, 6});
}

TEST_CASE("elementwise: masked_fill") {
  Tensor x = arange(6).view({2, 3}).to(DType::f32);
  Tensor mask = tensor({true, false, true});
  CHECK(masked_fill(x, mask, -1).tolist() == std::vector<double>{-1, 1, -1, -1, 4, -1});
  CHECK(masked_fill(x.t(), gt(x.t(), 2.0), 9).tolist() == std::vector<double>{0, 9, 1, 9, 2, 9});
  CHECK(masked_fill(x, mask, -1).dtype() == DType::f32);
  CHECK(masked_fill(zeros({0, 3}), mask, 1).numel() == 0);
}

// ---- allclose, equal and operators ----

TEST_CASE("elementwise: allclose and equal") {
  Tensor a = tensor<double>({1.0, 2.0, NAN}), b = tensor<double>({1.0 + 1e-9, 2.0, NAN});
  CHECK_FALSE(allclose(a, b));
  CHECK(allclose(a, b, 1e-5, 1e-8, true));
  CHECK(allclose(a.slice(0, 0, 2), b.slice(0, 0, 2)));
  CHECK_FALSE(allclose(tensor<double>({1.0}), tensor<double>({1.1})));
  CHECK(allclose(tensor<double>({1.0}), tensor<double>({1.1}), 0.1));
  CHECK(allclose(tensor<double>({INFINITY}), tensor<double>({INFINITY})));
  CHECK_FALSE(allclose(tensor<double>({INFINITY}), tensor<double>({-INFINITY})));
  CHECK_FALSE(allclose(tensor<double>({1.0}), tensor<double>({INFINITY})));
  CHECK_THROWS_AS(allclose(zeros({2}), zeros({3})), ShapeError);
  CHECK_THROWS_WITH(allclose(zeros({2}), zeros({3})), Catch::Contains("allclose"));
  CHECK(equal(arange(4), arange(4).to(DType::f32)));
  CHECK_FALSE(equal(arange(4), arange(4).view({2, 2})));
  CHECK_FALSE(equal(arange(4), arange(1, 5, 1, DType::i64)));
  CHECK(equal(arange(6).view({2, 3}).t(), arange(6).view({2, 3}).t().contiguous()));
}

TEST_CASE("elementwise: operators match the named ops") {
  Tensor a = random_tensor({3, 4}, DType::f64, 51, 0.5, 2),
         b = random_tensor({4}, DType::f64, 52, 0.5, 2);
  CHECK(equal(a + b, add(a, b)));
  CHECK(equal(a - b, sub(a, b)));
  CHECK(equal(a * b, mul(a, b)));
  CHECK(equal(a / b, div(a, b)));
  CHECK(equal(-a, neg(a)));
  CHECK(equal(a + 2.0, add(a, 2.0)));
  CHECK(equal(a - 2.0, sub(a, 2.0)));
  CHECK(equal(a * 2.0, mul(a, 2.0)));
  CHECK(equal(a / 2.0, div(a, 2.0)));
  CHECK(equal(2.0 + a, add(a, 2.0)));
  CHECK(equal(2.0 - a, rsub(2.0, a)));
  CHECK(equal(2.0 * a, mul(a, 2.0)));
  CHECK(equal(2.0 / a, rdiv(2.0, a)));
  CHECK(equal(a < b, lt(a, b)));
  CHECK(equal(a <= b, le(a, b)));
  CHECK(equal(a > b, gt(a, b)));
  CHECK(equal(a >= b, ge(a, b)));
  CHECK(equal(a < 1.0, lt(a, 1.0)));
  CHECK(equal(a <= 1.0, le(a, 1.0)));
  CHECK(equal(a > 1.0, gt(a, 1.0)));
  CHECK(equal(a >= 1.0, ge(a, 1.0)));
}

TEST_CASE("elementwise: method forms") {
  Tensor x = random_tensor({2, 3}, DType::f64, 53, 0.5, 2);
  CHECK(equal(x.exp(), exp(x)));
  CHECK(equal(x.log(), log(x)));
  CHECK(equal(x.sqrt(), sqrt(x)));
  CHECK(equal(x.abs(), abs(x)));
  CHECK(equal(x.relu(), relu(x)));
  CHECK(equal(x.sigmoid(), sigmoid(x)));
  CHECK(equal(x.tanh(), tanh(x)));
  CHECK(equal(x.pow(2.0), pow(x, 2.0)));
}

// ---- in place ----

TEST_CASE("elementwise: in-place arithmetic with tensors, broadcasting and alpha") {
  Tensor t = arange(6).view({2, 3}).to(DType::f32);
  Tensor row = tensor<float>({1, 2, 3});
  t.add_(row);
  CHECK(t.tolist() == std::vector<double>{1, 3, 5, 4, 6, 8});
  t.add_(row, -2.0);
  CHECK(t.tolist() == std::vector<double>{-1, -1, -1, 2, 2, 2});
  t.mul_(row);
  CHECK(t.tolist() == std::vector<double>{-1, -2, -3, 2, 4, 6});
  t.div_(row);
  CHECK(t.tolist() == std::vector<double>{-1, -1, -1, 2, 2, 2});
  t.sub_(row);
  CHECK(t.tolist() == std::vector<double>{-2, -3, -4, 1, 0, -1});
  // A mixed-dtype operand takes the slow path and is converted back into self's dtype.
  t.add_(tensor<double>({0.5}));
  CHECK(t.tolist() == std::vector<double>{-1.5, -2.5, -3.5, 1.5, 0.5, -0.5});
  CHECK(t.dtype() == DType::f32);
}

TEST_CASE("elementwise: in-place arithmetic with scalars") {
  Tensor t = tensor<double>({1, 2, 4});
  t.add_(1.0);
  t.mul_(2.0);
  t.sub_(0.5);
  t.div_(4.0);
  CHECK(t.tolist() == std::vector<double>{0.875, 1.375, 2.375});
  Tensor i = tensor({1, 2, 3});
  i.mul_(3.0);
  CHECK(i.tolist() == std::vector<double>{3, 6, 9});
  CHECK(i.dtype() == DType::i64);
}

TEST_CASE("elementwise: in-place unary ops") {
  Tensor t = tensor<double>({-2, 0.25, 4});
  CHECK(tensor<double>({-2, 0.25, 4}).clamp_(-1, 1).tolist() == std::vector<double>{-1, 0.25, 1});
  CHECK(tensor<double>({-2, 0.25, 4}).relu_().tolist() == std::vector<double>{0, 0.25, 4});
  CHECK(tensor<double>({-2, 0.25, 4}).neg_().tolist() == std::vector<double>{2, -0.25, -4});
  CHECK(tensor<double>({0, 1}).exp_().tolist() == std::vector<double>{1, std::exp(1.0)});
  CHECK(tensor<double>({0.25, 4}).sqrt_().tolist() == std::vector<double>{0.5, 2});
  Tensor& same = t.relu_();
  CHECK(&same == &t);
}

TEST_CASE("elementwise: in-place ops write through views") {
  Tensor base = zeros({3, 4});
  base.t().add_(arange(4).view({4, 1}).to(DType::f32));
  CHECK(base.tolist() == std::vector<double>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
  base.slice(1, 0, 4, 2).mul_(10.0);
  CHECK(base.select(0, 2).tolist() == std::vector<double>{0, 1, 20, 3});
  base.select(0, 1).exp_();
  CHECK(base.select(0, 1).tolist()[0] == 1.0);
  CHECK(base.select(0, 0).tolist()[0] == 0.0);
}

TEST_CASE("elementwise: masked_fill_, fill_ and zero_") {
  Tensor t = arange(6).view({2, 3}).to(DType::f64);
  t.masked_fill_(tensor({false, true, false}), -7);
  CHECK(t.tolist() == std::vector<double>{0, -7, 2, 3, -7, 5});
  t.select(0, 1).fill_(2.5);
  CHECK(t.tolist() == std::vector<double>{0, -7, 2, 2.5, 2.5, 2.5});
  t.t().select(0, 0).zero_();
  CHECK(t.tolist() == std::vector<double>{0, -7, 2, 0, 2.5, 2.5});
  t.zero_();
  CHECK(t.tolist() == std::vector<double>(6, 0.0));
  Tensor i = zeros({2}, DType::i32);
  i.fill_(3.9);
  CHECK(i.tolist() == std::vector<double>{3, 3});
}

TEST_CASE("elementwise: copy_ broadcasts and converts") {
  Tensor dst = zeros({2, 3}, DType::f32);
  dst.copy_(tensor({1, 2, 3}));
  CHECK(dst.tolist() == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(dst.dtype() == DType::f32);
  Tensor ints = zeros({3}, DType::i32);
  ints.copy_(tensor<double>({1.9, -1.9, 0.0}));
  CHECK(ints.tolist() == std::vector<double>{1, -1, 0});
  Tensor flags = zeros({3}, DType::boolean);
  flags.copy_(tensor<float>({0.f, 0.1f, -3.f}));
  CHECK(flags.tolist() == std::vector<double>{0, 1, 1});
  Tensor into_view = zeros({3, 2});
  into_view.t().copy_(arange(6).view({2, 3}));
  CHECK(into_view.tolist() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_AS(dst.copy_(zeros({2})), ShapeError);
  CHECK_THROWS_WITH(dst.copy_(zeros({2})), Catch::Contains("copy_"));
  CHECK_THROWS_AS(zeros({3}).copy_(zeros({2, 3})), ShapeError);
}

TEST_CASE("elementwise: copy_ between overlapping views of one storage") {
  Tensor t = arange(5).to(DType::f32);
  t.slice(0, 1, 5).copy_(t.slice(0, 0, 4));
  CHECK(t.tolist() == std::vector<double>{0, 0, 1, 2, 3});
  Tensor u = arange(5).to(DType::f32);
  u.slice(0, 0, 4).add_(u.slice(0, 1, 5));
  CHECK(u.tolist() == std::vector<double>{1, 3, 5, 7, 4});
}

TEST_CASE("elementwise: every in-place op bumps the version counter once") {
  Tensor t = ones({2, 3}, DType::f64);
  Tensor other = ones({3}, DType::f64);
  Tensor mask = tensor({true, false, true});
  std::vector<std::function<void()>> ops = {
      [&] { t.add_(other); },   [&] { t.add_(1.0); },
      [&] { t.sub_(other); },   [&] { t.sub_(1.0); },
      [&] { t.mul_(other); },   [&] { t.mul_(2.0); },
      [&] { t.div_(other); },   [&] { t.div_(2.0); },
      [&] { t.clamp_(-1, 1); }, [&] { t.relu_(); },
      [&] { t.neg_(); },        [&] { t.exp_(); },
      [&] { t.sqrt_(); },       [&] { t.masked_fill_(mask, 1); },
      [&] { t.fill_(2); },      [&] { t.zero_(); },
      [&] { t.copy_(other); },  [&] { t.add_(tensor<float>({1.f})); }};
  for (size_t i = 0; i < ops.size(); ++i) {
    INFO("op " << i);
    uint64_t before = t.version();
    ops[i]();
    CHECK(t.version() == before + 1);
  }
  // Views share the counter with their base.
  uint64_t before = t.version();
  t.select(0, 0).mul_(2.0);
  CHECK(t.version() == before + 1);
  // Out-of-place ops leave it alone.
  Tensor y = add(t, 1.0);
  CHECK(t.version() == before + 1);
  CHECK(y.version() == 0);
}

TEST_CASE("elementwise: in-place errors") {
  Tensor i = tensor({1, 2, 3});
  CHECK_THROWS_AS(i.add_(tensor<float>({0.5f})), DTypeError);
  CHECK_THROWS_WITH(i.add_(tensor<float>({0.5f})), Catch::Contains("add_"));
  CHECK_THROWS_AS(i.div_(2.0), DTypeError);
  CHECK_THROWS_AS(i.exp_(), DTypeError);
  CHECK(i.tolist() == std::vector<double>{1, 2, 3});
  Tensor small = zeros({3});
  CHECK_THROWS_AS(small.add_(zeros({2, 3})), ShapeError);
  CHECK_THROWS_WITH(small.mul_(zeros({2, 3})), Catch::Contains("mul_"));
  CHECK_THROWS_AS(zeros({3}).masked_fill_(zeros({3}), 1), DTypeError);
  Tensor undefined;
  CHECK_THROWS_AS(undefined.add_(1.0), ValueError);
  CHECK_THROWS_AS(zeros({2}).add_(Tensor()), ValueError);
}

// ---- gradients ----

TEST_CASE("elementwise: gradcheck of add, sub, mul and div with broadcasting") {
  Tensor a = random_f64({3, 1}, 61), b = random_f64({4}, 62);
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return add(x, y); }), {a, b});
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return add(x, y, 0.3); }), {a, b});
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return sub(x, y); }), {a, b});
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return sub(x, y, 2.0); }), {a, b});
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return mul(x, y); }), {a, b});
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return div(x, y); }),
                  {a, away_from_zero({4}, 63)});
}

TEST_CASE("elementwise: gradcheck of binary ops on equal shapes") {
  Tensor a = random_f64({2, 3}, 64), b = random_f64({2, 3}, 65);
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return mul(x, y); }), {a, b});
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return div(x, y); }),
                  {a, away_from_zero({2, 3}, 66)});
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return x * x + y; }), {a, b});
}

TEST_CASE("elementwise: gradcheck of pow of two tensors") {
  Tensor base = random_f64({3, 1}, 67, 0.5, 2.0), exponent = random_f64({4}, 68, -2.0, 2.0);
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return pow(x, y); }),
                  {base, exponent});
}

TEST_CASE("elementwise: gradcheck of maximum and minimum away from ties") {
  Tensor a = random_f64({3, 1}, 69), b = random_f64({4}, 70);
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return maximum(x, y); }), {a, b});
  CHECK_GRADCHECK(of_two([](const Tensor& x, const Tensor& y) { return minimum(x, y); }), {a, b});
}

TEST_CASE("elementwise: maximum splits the gradient on ties") {
  Tensor a = tensor<double>({1.0, 2.0}).requires_grad_();
  Tensor b = tensor<double>({1.0, 3.0}).requires_grad_();
  sum(maximum(a, b)).backward();
  CHECK(a.grad().tolist() == std::vector<double>{0.5, 0});
  CHECK(b.grad().tolist() == std::vector<double>{0.5, 1});
}

TEST_CASE("elementwise: gradcheck of scalar-operand ops") {
  Tensor x = random_f64({2, 3}, 71);
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return add(t, 2.0); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return sub(t, 2.0); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return rsub(2.0, t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return mul(t, -3.0); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return div(t, 4.0); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return rdiv(2.0, t); }),
                  {away_from_zero({2, 3}, 72)});
  Tensor positive = random_f64({2, 3}, 73, 0.5, 2.0);
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return pow(t, 2.5); }), {positive});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return pow(t, -1.5); }), {positive});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return pow(t, 3.0); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return pow(t, 0.0); }), {x});
}

TEST_CASE("elementwise: gradcheck of smooth unary ops") {
  Tensor x = random_f64({2, 3}, 74, -2.0, 2.0);
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return neg(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return exp(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return square(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return erf(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return sin(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return cos(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return sigmoid(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return tanh(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return silu(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return gelu(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return gelu(t, "tanh"); }), {x});
}

TEST_CASE("elementwise: gradcheck of ops defined on positive inputs") {
  Tensor x = random_f64({2, 3}, 75, 0.2, 3.0);
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return log(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return sqrt(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return rsqrt(t); }), {x});
}

TEST_CASE("elementwise: gradcheck of ops with a kink, away from it") {
  Tensor x = away_from_zero({3, 4}, 76);
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return abs(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return sign(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return relu(t); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return leaky_relu(t, 0.1); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return reciprocal(t); }), {x});
}

TEST_CASE("elementwise: gradcheck of clamp, inputs on both sides of the bounds") {
  Tensor x = random_f64({3, 4}, 81);
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return clamp(t, -0.5, 0.5); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return clamp(t, -0.5, std::nullopt); }), {x});
  CHECK_GRADCHECK(of_one([](const Tensor& t) { return clamp(t, std::nullopt, 0.5); }), {x});
}

TEST_CASE("elementwise: gradcheck of where and masked_fill") {
  Tensor cond = gt(random_f64({3, 1}, 77), 0.0);
  Tensor a = random_f64({4}, 78), b = random_f64({3, 4}, 79);
  CHECK_GRADCHECK(of_two([cond](const Tensor& x, const Tensor& y) { return where(cond, x, y); }),
                  {a, b});
  Tensor mask = gt(random_f64({4}, 80), 0.0);
  CHECK_GRADCHECK(of_one([mask](const Tensor& t) { return masked_fill(t, mask, 3.0); }), {b});
}

TEST_CASE("elementwise: gradients flow back to a lower-precision input's dtype") {
  Tensor f = tensor<float>({1.f, 2.f}).requires_grad_();
  Tensor d = tensor<double>({3.0, 4.0}).requires_grad_();
  Tensor out = mul(f, d);
  CHECK(out.dtype() == DType::f64);
  sum(out).backward();
  CHECK(f.grad().dtype() == DType::f32);
  CHECK(f.grad().tolist() == std::vector<double>{3, 4});
  CHECK(d.grad().tolist() == std::vector<double>{1, 2});
}

TEST_CASE("elementwise: comparisons record no history") {
  Tensor x = tensor<float>({1.f, -1.f}).requires_grad_();
  CHECK_FALSE(gt(x, 0.0).requires_grad());
  CHECK_FALSE(isnan(x).requires_grad());
  CHECK_FALSE(logical_not(x).requires_grad());
}

// ---- errors ----

TEST_CASE("elementwise: shapes that cannot broadcast") {
  Tensor a = zeros({2, 3}), b = zeros({4});
  CHECK_THROWS_AS(add(a, b), ShapeError);
  CHECK_THROWS_WITH(
      add(a, b), Catch::Contains("add: shapes [2, 3] and [4] cannot broadcast (dim -1: 3 vs 4)"));
  CHECK_THROWS_WITH(mul(zeros({2, 3}), zeros({3, 3})),
                    Catch::Contains("mul") && Catch::Contains("dim -2: 2 vs 3"));
  CHECK_THROWS_AS(where(tensor({true, false}), zeros({3}), zeros({3})), ShapeError);
  CHECK_THROWS_WITH(where(tensor({true, false}), zeros({3}), zeros({3})), Catch::Contains("where"));
  CHECK_THROWS_AS(masked_fill(zeros({3}), tensor({true, false, true, false}), 1), ShapeError);
  CHECK_THROWS_AS(masked_fill(zeros({3}), zeros({2, 3}, DType::boolean), 1), ShapeError);
  CHECK_THROWS_WITH(masked_fill(zeros({3}), zeros({2, 3}, DType::boolean), 1),
                    Catch::Contains("masked_fill"));
  CHECK_THROWS_AS(eq(zeros({2}), zeros({3})), ShapeError);
}

TEST_CASE("elementwise: bool tensors reject sub, neg and pow") {
  Tensor m = tensor({true, false});
  CHECK_THROWS_AS(sub(m, m), DTypeError);
  CHECK_THROWS_WITH(sub(m, m), Catch::Contains("sub") && Catch::Contains("bool"));
  CHECK_THROWS_AS(neg(m), DTypeError);
  CHECK_THROWS_WITH(neg(m), Catch::Contains("neg") && Catch::Contains("logical_not"));
  CHECK_THROWS_AS(pow(m, 2.0), DTypeError);
  CHECK_THROWS_AS(pow(m, m), DTypeError);
  CHECK_THROWS_AS(-m, DTypeError);
}

TEST_CASE("elementwise: where and masked_fill need bool conditions") {
  CHECK_THROWS_AS(where(zeros({2}), zeros({2}), zeros({2})), DTypeError);
  CHECK_THROWS_WITH(where(zeros({2}), zeros({2}), zeros({2})),
                    Catch::Contains("where") && Catch::Contains("bool"));
  CHECK_THROWS_AS(masked_fill(zeros({2}), tensor({1, 0}), 1.0), DTypeError);
  CHECK_THROWS_WITH(masked_fill(zeros({2}), tensor({1, 0}), 1.0),
                    Catch::Contains("masked_fill") && Catch::Contains("bool"));
}

TEST_CASE("elementwise: undefined inputs throw ValueError naming the op") {
  Tensor u, x = zeros({2});
  CHECK_THROWS_AS(add(u, x), ValueError);
  CHECK_THROWS_WITH(add(u, x), Catch::Contains("add") && Catch::Contains("undefined"));
  CHECK_THROWS_WITH(mul(x, u), Catch::Contains("mul") && Catch::Contains("undefined"));
  CHECK_THROWS_AS(exp(u), ValueError);
  CHECK_THROWS_WITH(exp(u), Catch::Contains("exp"));
  CHECK_THROWS_WITH(neg(u), Catch::Contains("neg"));
  CHECK_THROWS_WITH(pow(u, 2.0), Catch::Contains("pow"));
  CHECK_THROWS_WITH(where(u, x, x), Catch::Contains("where") && Catch::Contains("condition"));
  CHECK_THROWS_WITH(where(tensor({true, false}), u, x), Catch::Contains("where"));
  CHECK_THROWS_WITH(masked_fill(u, tensor({true, false}), 1), Catch::Contains("masked_fill"));
  CHECK_THROWS_WITH(masked_fill(x, u, 1),
                    Catch::Contains("masked_fill") && Catch::Contains("mask"));
  CHECK_THROWS_AS(add(u, 1.0), ValueError);
  CHECK_THROWS_AS(logical_not(u), ValueError);
  CHECK_THROWS_AS(allclose(u, x), ValueError);
}

TEST_CASE("elementwise: bad arguments") {
  CHECK_THROWS_AS(gelu(zeros({2}), "fast"), ValueError);
  CHECK_THROWS_WITH(gelu(zeros({2}), "fast"), Catch::Contains("gelu") && Catch::Contains("fast"));
  CHECK_THROWS_AS(clamp(zeros({2}), std::nullopt, std::nullopt), ValueError);
  CHECK_THROWS_WITH(clamp(zeros({2}), std::nullopt, std::nullopt), Catch::Contains("clamp"));
  CHECK_THROWS_WITH(pow(tensor({2}), 0.5), Catch::Contains("pow"));
}
