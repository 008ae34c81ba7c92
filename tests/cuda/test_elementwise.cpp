// GPU parity of the elementwise family: every unary, binary, comparison and where op runs on cuda
// and on the CPU on the same inputs, per dtype, through every kernel path (16-byte vectorised with
// an odd tail, contiguous but misaligned, strided, broadcast, zero-size), forward and backward.
// Results are held to parity.h's table, integer and bool ones exactly; gradients in f16 and bf16
// get gradient_tolerance, since CUDA's and glibc's float math may differ in the last bit and a
// backward's chain of 16-bit roundings carries that on.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_gpu_parity;
using kiln::testing::gradient_tolerance;
using kiln::testing::kExact;
using kiln::testing::Tolerance;
using kiln::testing::tolerance;
using testing::random_f64;

namespace {

const Device kCuda = Device::cuda(0);
constexpr DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
constexpr DType kIntTypes[] = {DType::i32, DType::i64, DType::u8};

// Random values in [low, high) of `dtype`, made on the CPU (so both devices see the same bits).
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double low, double high) {
  return random_f64(shape, seed, low, high).to(dtype);
}

// Integer values in [low, high) as `dtype`: ties for the comparisons, exact for integer dtypes.
Tensor random_integers(const Shape& shape, DType dtype, uint64_t seed, int64_t low, int64_t high) {
  Generator gen(seed);
  return randint(low, high, shape, DType::i64, Device::cpu(), &gen).to(dtype);
}

using View = std::function<Tensor(const Tensor&)>;
const View kSame = [](const Tensor& t) { return t; };

// A base shape and the view taken of it, on either device: views of a cuda tensor stay strided on
// the GPU, which moving a CPU view would not give (to() makes the copy contiguous).
struct Layout {
  std::string name;
  Shape base;
  View view;
};

std::vector<Layout> unary_layouts() {
  return {
      {"contiguous (vectorised, odd tail)", {37, 53}, kSame},
      {"transposed", {53, 37}, [](const Tensor& t) { return t.t(); }},
      {"sliced with step", {37, 106}, [](const Tensor& t) { return t.slice(1, 0, 106, 2); }},
      {"permuted 4-d",
       {3, 4, 5, 6},
       [](const Tensor& t) {
         return t.permute({2, 0, 3, 1});
       }},
      {"offset 1 (misaligned, no vector path)",
       {2049},
       [](const Tensor& t) { return t.slice(0, 1, 2049); }},
      {"expanded",
       {37, 1},
       [](const Tensor& t) {
         return t.expand({37, 53});
       }},
      {"zero-size", {0, 5}, kSame},
      {"0-dim", {}, kSame},
  };
}

// Layouts whose backward needs no reduction kernel (an expanded input sums its gradient).
bool needs_reduction(const Layout& layout) {
  return layout.name == "expanded";
}

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> f;
  double low = -2.0, high = 2.0;
};

std::vector<UnaryCase> float_unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }, -3.0, 3.0},
      {"log", [](const Tensor& x) { return log(x); }, 0.1, 3.0},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.1, 3.0},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.1, 3.0},
      {"square", [](const Tensor& x) { return square(x); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, 0.2, 2.0},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }, -4.0, 4.0},
      {"cos", [](const Tensor& x) { return cos(x); }, -4.0, 4.0},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -5.0, 5.0},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -3.0, 3.0},
      {"gelu", [](const Tensor& x) { return gelu(x); }, -4.0, 4.0},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, -4.0, 4.0},
      {"silu", [](const Tensor& x) { return silu(x); }, -4.0, 4.0},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }},
      {"clamp min only", [](const Tensor& x) { return clamp(x, -0.5, std::nullopt); }},
      {"clamp max only", [](const Tensor& x) { return clamp(x, std::nullopt, 0.7); }},
      {"pow 2.5", [](const Tensor& x) { return pow(x, 2.5); }, 0.1, 2.0},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }},
      {"pow 0", [](const Tensor& x) { return pow(x, 0.0); }},
      {"scalar add", [](const Tensor& x) { return add(x, 1.5); }},
      {"scalar rsub", [](const Tensor& x) { return rsub(2.0, x); }},
      {"scalar mul", [](const Tensor& x) { return mul(x, -3.0); }},
      {"scalar rdiv", [](const Tensor& x) { return rdiv(2.0, x); }, 0.2, 2.0},
  };
}

// Runs f on the CPU view and on the same view of the cuda copy of the base.
void check_unary(const UnaryCase& c, const Layout& layout, DType dtype, uint64_t seed) {
  INFO("op " << c.name << ", " << dtype_name(dtype) << ", " << layout.name);
  Tensor base = random_tensor(layout.base, dtype, seed, c.low, c.high);
  Tensor on_cpu = c.f(layout.view(base));
  Tensor on_gpu = c.f(layout.view(base.to(kCuda)));
  check_gpu_parity(on_gpu, on_cpu, tolerance(dtype));
}

struct BinaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> f;
  double low_a = -2.0, high_a = 2.0, low_b = -2.0, high_b = 2.0;
};

std::vector<BinaryCase> float_binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, 2.0); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, -2.0, 2.0, 0.5, 2.0},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.5, 2.0, -2.0, 2.0},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
  };
}

struct BinaryLayout {
  std::string name;
  Shape base_a, base_b;
  View view_a, view_b;
};

std::vector<BinaryLayout> binary_layouts() {
  return {
      {"same shape (vectorised, odd tail)", {37, 53}, {37, 53}, kSame, kSame},
      {"transposed and sliced with step",
       {53, 37},
       {37, 106},
       [](const Tensor& t) { return t.t(); },
       [](const Tensor& t) { return t.slice(1, 0, 106, 2); }},
      {"offset 1 (misaligned) and contiguous",
       {2049},
       {2048},
       [](const Tensor& t) { return t.slice(0, 1, 2049); },
       kSame},
      {"broadcast column and row", {37, 1}, {53}, kSame, kSame},
      {"broadcast 4-d", {2, 1, 4, 5}, {3, 1, 5}, kSame, kSame},
      {"both expanded",
       {37, 1},
       {1, 53},
       [](const Tensor& t) {
         return t.expand({37, 53});
       },
       [](const Tensor& t) {
         return t.expand({37, 53});
       }},
      {"0-dim and matrix", {}, {37, 53}, kSame, kSame},
      {"zero-size", {0, 53}, {53}, kSame, kSame},
  };
}

bool broadcasts(const BinaryLayout& layout) {
  return layout.base_a != layout.base_b || layout.name == "both expanded";
}

void check_binary(const BinaryCase& c, const BinaryLayout& layout, const Tensor& base_a,
                  const Tensor& base_b, Tolerance tol) {
  INFO("op " << c.name << ", " << dtype_name(base_a.dtype()) << ", " << layout.name);
  Tensor on_cpu = c.f(layout.view_a(base_a), layout.view_b(base_b));
  Tensor on_gpu = c.f(layout.view_a(base_a.to(kCuda)), layout.view_b(base_b.to(kCuda)));
  check_gpu_parity(on_gpu, on_cpu, tol);
}

// The gradient of sum(f(x) * w) on both devices, compared: leaves are contiguous, the view is
// taken inside, so view backwards run on the device too.
void check_unary_backward(const UnaryCase& c, const Layout& layout, DType dtype, uint64_t seed) {
  INFO("backward of " << c.name << ", " << dtype_name(dtype) << ", " << layout.name);
  Tensor base = random_tensor(layout.base, dtype, seed, c.low, c.high);
  Tensor x_cpu = base.clone().requires_grad_();
  Tensor x_gpu = base.to(kCuda).requires_grad_();
  Tensor y_cpu = c.f(layout.view(x_cpu));
  Tensor w = random_tensor(y_cpu.shape(), dtype, seed + 1, -1.0, 1.0);
  y_cpu.backward(w);
  c.f(layout.view(x_gpu)).backward(w.to(kCuda));
  REQUIRE(x_gpu.grad().defined() == x_cpu.grad().defined());
  if (!x_cpu.grad().defined()) return;
  check_gpu_parity(x_gpu.grad(), x_cpu.grad(), gradient_tolerance(dtype));
}

void check_binary_backward(const BinaryCase& c, const BinaryLayout& layout, DType dtype,
                           uint64_t seed) {
  INFO("backward of " << c.name << ", " << dtype_name(dtype) << ", " << layout.name);
  Tensor base_a = random_tensor(layout.base_a, dtype, seed, c.low_a, c.high_a);
  Tensor base_b = random_tensor(layout.base_b, dtype, seed + 1, c.low_b, c.high_b);
  Tensor a_cpu = base_a.clone().requires_grad_(), b_cpu = base_b.clone().requires_grad_();
  Tensor a_gpu = base_a.to(kCuda).requires_grad_(), b_gpu = base_b.to(kCuda).requires_grad_();
  Tensor y_cpu = c.f(layout.view_a(a_cpu), layout.view_b(b_cpu));
  Tensor w = random_tensor(y_cpu.shape(), dtype, seed + 2, -1.0, 1.0);
  y_cpu.backward(w);
  c.f(layout.view_a(a_gpu), layout.view_b(b_gpu)).backward(w.to(kCuda));
  REQUIRE(a_gpu.grad().defined() == a_cpu.grad().defined());
  REQUIRE(b_gpu.grad().defined() == b_cpu.grad().defined());
  if (!a_cpu.grad().defined() || !b_cpu.grad().defined()) return;
  check_gpu_parity(a_gpu.grad(), a_cpu.grad(), gradient_tolerance(dtype));
  check_gpu_parity(b_gpu.grad(), b_cpu.grad(), gradient_tolerance(dtype));
}

// gradcheck perturbs its f64 leaves on the host, so the leaves stay on the CPU and f moves them to
// the GPU: the forward and backward kernels under test still run on cuda (the copies are
// differentiable), and the numeric gradient comes from cuda forwards.
std::function<Tensor(const std::vector<Tensor>&)> on_cuda(
    std::function<Tensor(const std::vector<Tensor>&)> f) {
  return [f](const std::vector<Tensor>& inputs) {
    std::vector<Tensor> moved;
    for (const Tensor& t : inputs) moved.push_back(t.to(kCuda));
    Tensor out = f(moved);
    CHECK(out.device() == kCuda);
    return out.to(Device::cpu());
  };
}

}  // namespace

// ---- forward parity ----

TEST_CASE("cuda elementwise: floating unary ops match the cpu in every dtype and layout",
          "[heavy]") {
  uint64_t seed = 100;
  for (const UnaryCase& c : float_unary_cases())
    for (DType dtype : kFloatTypes)
      for (const Layout& layout : unary_layouts()) check_unary(c, layout, dtype, seed++);
}

// The light version of the [heavy] cases (which the sanitizer runs of scripts/gpu-check.sh skip):
// each op once per dtype on the vectorised path, forward and backward, and each layout once.
TEST_CASE("cuda elementwise: each op once per dtype, each layout once, forward and backward") {
  uint64_t seed = 50;
  const Layout plain = unary_layouts().front();
  const BinaryLayout same = binary_layouts().front();
  for (DType dtype : kFloatTypes) {
    for (const UnaryCase& c : float_unary_cases()) {
      check_unary(c, plain, dtype, seed++);
      check_unary_backward(c, plain, dtype, seed++);
    }
    for (const BinaryCase& c : float_binary_cases()) {
      const Tensor a = random_tensor(same.base_a, dtype, seed++, c.low_a, c.high_a);
      const Tensor b = random_tensor(same.base_b, dtype, seed++, c.low_b, c.high_b);
      check_binary(c, same, a, b, tolerance(dtype));
      check_binary_backward(c, same, dtype, seed++);
    }
    const UnaryCase first_unary = float_unary_cases().front();
    for (const Layout& layout : unary_layouts()) {
      check_unary(first_unary, layout, dtype, seed++);
      check_unary_backward(first_unary, layout, dtype, seed++);
    }
    const BinaryCase first_binary = float_binary_cases().front();
    for (const BinaryLayout& layout : binary_layouts()) {
      const Tensor a = random_tensor(layout.base_a, dtype, seed++, -2.0, 2.0);
      const Tensor b = random_tensor(layout.base_b, dtype, seed++, -2.0, 2.0);
      check_binary(first_binary, layout, a, b, tolerance(dtype));
      check_binary_backward(first_binary, layout, dtype, seed++);
    }
  }
}

TEST_CASE("cuda elementwise: integer unary ops match the cpu exactly") {
  std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }},
      {"pow 0", [](const Tensor& x) { return pow(x, 0.0); }},
      // Integer bounds only: a fractional or negative bound cast to u8 is undefined in C++.
      {"clamp", [](const Tensor& x) { return clamp(x, 1.0, 4.0); }},
      {"logical_not", [](const Tensor& x) { return logical_not(x); }},
      {"isnan", [](const Tensor& x) { return isnan(x); }},
      {"scalar add", [](const Tensor& x) { return add(x, 3.0); }},
      {"scalar mul", [](const Tensor& x) { return mul(x, 2.0); }},
      {"fractional result (exp promotes to f32)", [](const Tensor& x) { return exp(x); }},
  };
  uint64_t seed = 200;
  for (const UnaryCase& c : cases)
    for (DType dtype : kIntTypes)
      for (const Layout& layout : unary_layouts()) {
        INFO("op " << c.name << ", " << dtype_name(dtype) << ", " << layout.name);
        int64_t low = dtype == DType::u8 ? 0 : -6;
        Tensor base = random_integers(layout.base, dtype, seed++, low, 7);
        Tensor on_cpu = c.f(layout.view(base));
        Tensor on_gpu = c.f(layout.view(base.to(kCuda)));
        check_gpu_parity(on_gpu, on_cpu, tolerance(on_cpu.dtype()));
      }
}

TEST_CASE("cuda elementwise: bool unary ops match the cpu") {
  for (const Layout& layout : unary_layouts()) {
    INFO(layout.name);
    Tensor base = gt(random_f64(layout.base, 300), 0.0);
    Tensor gpu_base = base.to(kCuda);
    check_gpu_parity(logical_not(layout.view(gpu_base)), logical_not(layout.view(base)), kExact);
    check_gpu_parity(isnan(layout.view(gpu_base)), isnan(layout.view(base)), kExact);
    check_gpu_parity(abs(layout.view(gpu_base)), abs(layout.view(base)), kExact);
  }
}

TEST_CASE("cuda elementwise: logical_not and isnan write bool from floating inputs") {
  for (DType dtype : kFloatTypes) {
    INFO(dtype_name(dtype));
    Tensor x = random_integers({9, 7}, DType::i64, 301, -2, 3).to(dtype);
    x = where(eq(x, 2.0), full({}, NAN, dtype), x);
    Tensor xg = x.to(kCuda);
    check_gpu_parity(logical_not(xg), logical_not(x), kExact);
    check_gpu_parity(isnan(xg), isnan(x), kExact);
    check_gpu_parity(isnan(xg.t()), isnan(x.t()), kExact);
  }
}

TEST_CASE("cuda elementwise: NaN and infinities propagate as on the cpu") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : kFloatTypes) {
    INFO(dtype_name(dtype));
    Tensor x = tensor<double>({nan, -inf, inf, -1.0, -0.0, 0.0, 0.5, 2.5, nan}).to(dtype);
    Tensor y = tensor<double>({1.0, nan, -inf, inf, 0.0, -0.0, nan, 3.0, nan}).to(dtype);
    Tensor xg = x.to(kCuda), yg = y.to(kCuda);
    const Tolerance tol = tolerance(dtype);
    check_gpu_parity(relu(xg), relu(x), tol);
    check_gpu_parity(clamp(xg, -0.5, 0.7), clamp(x, -0.5, 0.7), tol);
    check_gpu_parity(sign(xg), sign(x), tol);
    check_gpu_parity(abs(xg), abs(x), tol);
    // The tolerance takes -0.0 for +0.0: abs(-0.0) must clear the sign bit, as torch.abs.
    CHECK_FALSE(std::signbit(abs(xg).tolist()[4]));
    check_gpu_parity(exp(xg), exp(x), tol);
    check_gpu_parity(log(xg), log(x), tol);
    check_gpu_parity(sqrt(xg), sqrt(x), tol);
    check_gpu_parity(sigmoid(xg), sigmoid(x), tol);
    check_gpu_parity(tanh(xg), tanh(x), tol);
    check_gpu_parity(maximum(xg, yg), maximum(x, y), tol);
    check_gpu_parity(minimum(xg, yg), minimum(x, y), tol);
    check_gpu_parity(div(xg, yg), div(x, y), tol);
    check_gpu_parity(isnan(xg), isnan(x), kExact);
    check_gpu_parity(eq(xg, yg), eq(x, y), kExact);
    check_gpu_parity(ne(xg, yg), ne(x, y), kExact);
    check_gpu_parity(lt(xg, yg), lt(x, y), kExact);
  }
}

TEST_CASE("cuda elementwise: floating binary ops match the cpu in every dtype and layout",
          "[heavy]") {
  uint64_t seed = 400;
  for (const BinaryCase& c : float_binary_cases())
    for (DType dtype : kFloatTypes)
      for (const BinaryLayout& layout : binary_layouts()) {
        Tensor a = random_tensor(layout.base_a, dtype, seed++, c.low_a, c.high_a);
        Tensor b = random_tensor(layout.base_b, dtype, seed++, c.low_b, c.high_b);
        check_binary(c, layout, a, b, tolerance(dtype));
      }
}

TEST_CASE("cuda elementwise: mixed dtypes promote as on the cpu") {
  Tensor a = random_tensor({37, 53}, DType::f16, 450, -2.0, 2.0);
  Tensor b = random_tensor({53}, DType::bf16, 451, -2.0, 2.0);
  Tensor c = random_integers({37, 1}, DType::i32, 452, -5, 5);
  Tensor d = random_tensor({37, 53}, DType::f64, 453, -2.0, 2.0);
  Tensor ag = a.to(kCuda), bg = b.to(kCuda), cg = c.to(kCuda), dg = d.to(kCuda);
  check_gpu_parity(add(ag, bg), add(a, b), tolerance(DType::f32));  // f16 + bf16 meet at f32
  check_gpu_parity(mul(ag, cg), mul(a, c), tolerance(DType::f16));
  check_gpu_parity(sub(cg, dg), sub(c, d), tolerance(DType::f64));
  check_gpu_parity(div(cg, cg.t().t()), div(c, c), tolerance(DType::f32));
  check_gpu_parity(lt(ag, dg), lt(a, d), kExact);
}

TEST_CASE("cuda elementwise: comparisons and logical ops match the cpu exactly, with ties") {
  std::vector<BinaryCase> cases = {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }},
      {"scalar ge", [](const Tensor& a, const Tensor&) { return ge(a, 1.0); }},
      {"scalar eq", [](const Tensor& a, const Tensor&) { return eq(a, 0.0); }},
  };
  std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16,
                               DType::i32, DType::i64, DType::u8,  DType::boolean};
  uint64_t seed = 500;
  for (const BinaryCase& c : cases)
    for (DType dtype : dtypes)
      for (const BinaryLayout& layout : binary_layouts()) {
        int64_t low = (dtype == DType::u8 || dtype == DType::boolean) ? 0 : -2;
        Tensor a = random_integers(layout.base_a, dtype, seed++, low, 3);
        Tensor b = random_integers(layout.base_b, dtype, seed++, low, 3);
        check_binary(c, layout, a, b, kExact);
      }
}

TEST_CASE("cuda elementwise: integer and bool arithmetic match the cpu exactly") {
  std::vector<BinaryCase> int_cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 3.0); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div (true division in f32)", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
  };
  uint64_t seed = 600;
  for (const BinaryCase& c : int_cases)
    for (DType dtype : kIntTypes)
      for (const BinaryLayout& layout : binary_layouts()) {
        int64_t low = dtype == DType::u8 ? 0 : -9;
        Tensor a = random_integers(layout.base_a, dtype, seed++, low, 10);
        // Exponents and divisors in [1, 4): pow stays small, div has no zero.
        Tensor b = random_integers(layout.base_b, dtype, seed++, 1, 4);
        check_binary(c, layout, a, b, tolerance(c.name.rfind("div", 0) == 0 ? DType::f32 : dtype));
      }
  std::vector<BinaryCase> bool_cases = {
      {"add (or)", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"mul (and)", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
  };
  for (const BinaryCase& c : bool_cases)
    for (const BinaryLayout& layout : binary_layouts()) {
      Tensor a = random_integers(layout.base_a, DType::boolean, seed++, 0, 2);
      Tensor b = random_integers(layout.base_b, DType::boolean, seed++, 0, 2);
      check_binary(c, layout, a, b, kExact);
    }
}

TEST_CASE("cuda elementwise: where matches the cpu in every dtype, with broadcasting") {
  std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16,
                               DType::i32, DType::i64, DType::u8,  DType::boolean};
  uint64_t seed = 700;
  for (DType dtype : dtypes) {
    INFO(dtype_name(dtype));
    auto values = [&](const Shape& s) { return random_integers(s, dtype, seed++, 0, 100); };
    auto condition = [&](const Shape& s) {
      return random_integers(s, DType::boolean, seed++, 0, 2);
    };
    // same shapes (vectorised path), broadcast condition, broadcast values, strided, zero-size
    Tensor c1 = condition({37, 53}), a1 = values({37, 53}), b1 = values({37, 53});
    check_gpu_parity(where(c1.to(kCuda), a1.to(kCuda), b1.to(kCuda)), where(c1, a1, b1), kExact);
    Tensor c2 = condition({37, 1}), a2 = values({53}), b2 = values({37, 53});
    check_gpu_parity(where(c2.to(kCuda), a2.to(kCuda), b2.to(kCuda)), where(c2, a2, b2), kExact);
    Tensor c3 = condition({53, 37}), a3 = values({}), b3 = values({37, 106});
    check_gpu_parity(where(c3.to(kCuda).t(), a3.to(kCuda), b3.to(kCuda).slice(1, 0, 106, 2)),
                     where(c3.t(), a3, b3.slice(1, 0, 106, 2)), kExact);
    Tensor c4 = condition({2049}), a4 = values({2049}), b4 = values({2048});
    check_gpu_parity(
        where(c4.to(kCuda).slice(0, 1, 2049), a4.to(kCuda).slice(0, 1, 2049), b4.to(kCuda)),
        where(c4.slice(0, 1, 2049), a4.slice(0, 1, 2049), b4), kExact);
    Tensor c5 = condition({0, 4}), a5 = values({4}), b5 = values({0, 4});
    check_gpu_parity(where(c5.to(kCuda), a5.to(kCuda), b5.to(kCuda)), where(c5, a5, b5), kExact);
  }
}

TEST_CASE("cuda elementwise: masked_fill and in-place ops on cuda match the cpu") {
  for (DType dtype : kFloatTypes) {
    INFO(dtype_name(dtype));
    const Tolerance tol = tolerance(dtype);
    Tensor x = random_tensor({37, 53}, dtype, 800, -2.0, 2.0);
    Tensor y = random_tensor({53}, dtype, 801, -2.0, 2.0);
    Tensor mask = gt(random_f64({37, 1}, 802), 0.0);
    check_gpu_parity(masked_fill(x.to(kCuda), mask.to(kCuda), -7.0), masked_fill(x, mask, -7.0),
                     tol);

    Tensor xc = x.clone(), xg = x.to(kCuda);
    xc.add_(y, 0.5).mul_(y).relu_().clamp_(-0.25, 1.5).sub_(0.125);
    xg.add_(y.to(kCuda), 0.5).mul_(y.to(kCuda)).relu_().clamp_(-0.25, 1.5).sub_(0.125);
    check_gpu_parity(xg, xc, tol);

    // In place through a strided view: only the viewed elements change.
    Tensor zc = x.clone(), zg = x.to(kCuda);
    zc.slice(1, 0, 53, 3).mul_(2.0).neg_();
    zg.slice(1, 0, 53, 3).mul_(2.0).neg_();
    check_gpu_parity(zg, zc, tol);
  }
}

TEST_CASE("cuda elementwise: large tensors take the vector path with an odd tail") {
  // 2^20 + 7 elements: not a multiple of any vector width, so the tail loop runs too.
  const int64_t n = (int64_t{1} << 20) + 7;
  std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::u8};
  for (DType dtype : dtypes) {
    INFO(dtype_name(dtype));
    const Tolerance tol = tolerance(dtype);
    Tensor a = random_integers({n}, DType::i64, 900, 0, 200).to(dtype);
    Tensor b = random_integers({n}, DType::i64, 901, 0, 50).to(dtype);
    Tensor ag = a.to(kCuda), bg = b.to(kCuda);
    check_gpu_parity(add(ag, bg), add(a, b), tol);
    check_gpu_parity(maximum(ag, bg), maximum(a, b), tol);
    check_gpu_parity(gt(ag, bg), gt(a, b), kExact);
    check_gpu_parity(where(gt(ag, bg), ag, bg), where(gt(a, b), a, b), tol);
    check_gpu_parity(square(ag), square(a), tol);
    if (is_floating(dtype)) {
      Tensor x = random_tensor({n}, dtype, 902, -3.0, 3.0);
      check_gpu_parity(exp(x.to(kCuda)), exp(x), tol);
      check_gpu_parity(sigmoid(x.to(kCuda)), sigmoid(x), tol);
    }
    // Misaligned (offset 1) over the same size: the scalar contiguous kernel.
    check_gpu_parity(add(ag.slice(0, 1, n), bg.slice(0, 0, n - 1)),
                     add(a.slice(0, 1, n), b.slice(0, 0, n - 1)), tol);
  }
}

TEST_CASE("cuda elementwise: operands on different devices are an error naming the op") {
  Tensor a = ones({3}, DType::f32, kCuda), b = ones({3});
  CHECK_THROWS_AS(add(a, b), DeviceError);
  CHECK_THROWS_WITH(mul(b, a), Catch::Contains("mul"));
  CHECK_THROWS_AS(where(gt(b, 0.0), a, a), DeviceError);
}

// ---- backward parity ----

TEST_CASE("cuda elementwise: unary backward matches the cpu", "[heavy]") {
  uint64_t seed = 1000;
  for (const UnaryCase& c : float_unary_cases())
    for (DType dtype : kFloatTypes)
      for (const Layout& layout : unary_layouts())
        if (!needs_reduction(layout)) check_unary_backward(c, layout, dtype, seed++);
}

TEST_CASE("cuda elementwise: binary backward matches the cpu (same shapes)", "[heavy]") {
  uint64_t seed = 1100;
  for (const BinaryCase& c : float_binary_cases())
    for (DType dtype : kFloatTypes)
      for (const BinaryLayout& layout : binary_layouts())
        if (!broadcasts(layout)) check_binary_backward(c, layout, dtype, seed += 3);
}

// Broadcast operands sum their gradient (sum_to): this needs the cuda reduction kernels too.
TEST_CASE("cuda elementwise: backward through broadcasting matches the cpu", "[heavy]") {
  uint64_t seed = 1200;
  for (DType dtype : kFloatTypes) {
    for (const BinaryCase& c : float_binary_cases())
      for (const BinaryLayout& layout : binary_layouts())
        if (broadcasts(layout)) check_binary_backward(c, layout, dtype, seed += 3);
    for (const UnaryCase& c : float_unary_cases())
      for (const Layout& layout : unary_layouts())
        if (needs_reduction(layout)) check_unary_backward(c, layout, dtype, seed++);
  }
}

TEST_CASE("cuda elementwise: where backward matches the cpu") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    Tensor c = gt(random_f64({37, 53}, 1300), 0.0);
    Tensor a = random_tensor({37, 53}, dtype, 1301, -1.0, 1.0);
    Tensor b = random_tensor({37, 53}, dtype, 1302, -1.0, 1.0);
    Tensor w = random_tensor({37, 53}, dtype, 1303, -1.0, 1.0);
    Tensor ac = a.clone().requires_grad_(), bc = b.clone().requires_grad_();
    Tensor ag = a.to(kCuda).requires_grad_(), bg = b.to(kCuda).requires_grad_();
    where(c, ac, bc).backward(w);
    where(c.to(kCuda), ag, bg).backward(w.to(kCuda));
    check_gpu_parity(ag.grad(), ac.grad(), tolerance(dtype));
    check_gpu_parity(bg.grad(), bc.grad(), tolerance(dtype));
  }
}

TEST_CASE("cuda elementwise: f64 gradcheck of unary ops on cuda", "[heavy]") {
  for (const UnaryCase& c : float_unary_cases()) {
    INFO(c.name);
    Tensor x = random_f64({3, 5}, 1400, c.low, c.high);
    auto f = c.f;
    CHECK_GRADCHECK(on_cuda([f](const std::vector<Tensor>& in) { return f(in[0]); }), {x});
    CHECK_GRADCHECK(on_cuda([f](const std::vector<Tensor>& in) { return f(in[0].t()); }),
                    {random_f64({5, 3}, 1401, c.low, c.high)});
  }
}

TEST_CASE("cuda elementwise: f64 gradcheck of binary ops and where on cuda", "[heavy]") {
  for (const BinaryCase& c : float_binary_cases()) {
    INFO(c.name);
    auto f = c.f;
    Tensor a = random_f64({3, 5}, 1500, c.low_a, c.high_a);
    Tensor b = random_f64({3, 5}, 1501, c.low_b, c.high_b);
    CHECK_GRADCHECK(on_cuda([f](const std::vector<Tensor>& in) { return f(in[0], in[1]); }),
                    {a, b});
    // Broadcasting: needs the cuda reductions for the summed gradient.
    Tensor col = random_f64({3, 1}, 1502, c.low_b, c.high_b);
    CHECK_GRADCHECK(on_cuda([f](const std::vector<Tensor>& in) { return f(in[0], in[1]); }),
                    {a, col});
  }
  Tensor cond = gt(random_f64({3, 5}, 1503), 0.0);
  CHECK_GRADCHECK(on_cuda([](const std::vector<Tensor>& in) { return where(in[0], in[1], in[2]); }),
                  {cond, random_f64({3, 5}, 1504), random_f64({3, 5}, 1505)});
}
