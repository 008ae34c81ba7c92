// GPU parity of the reductions (sum, mean, var, std_dev, norm, max/min/amax/argmax, cumsum,
// sum_to): each runs on the CPU and on cuda:0 from the same inputs, forward and backward, and the
// results must agree within a tolerance that scales with the dtype. Sums are compared against
// rtol * (number of summed elements), the size of sum |x| for |x| <= 1: the GPU adds in a
// different order (and in f32 where the CPU uses double), so only that bound is guaranteed.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::dtype_tolerance;
using kiln::testing::random_f64;

namespace {

const Device kGpu = Device::cuda(0);

const DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

Tensor rnd(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0, double high = 1.0) {
  return random_f64(shape, seed, low, high).to(dtype);
}

// got (on the GPU) against want (on the CPU): same shape and dtype, every element within
// atol + rtol |want|, NaN where want is NaN, the same infinity where want is infinite.
void check_parity(const Tensor& got, const Tensor& want, double rtol, double atol = 0.0) {
  REQUIRE(got.defined());
  REQUIRE(want.defined());
  CHECK(got.device() == kGpu);
  INFO("got " << shape_str(got.shape()) << " " << dtype_name(got.dtype()) << ", want "
              << shape_str(want.shape()) << " " << dtype_name(want.dtype()));
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<double> g = got.cpu().tolist(), w = want.tolist();
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i]))
      ok = std::isnan(g[i]);
    else if (std::isinf(w[i]))
      ok = g[i] == w[i];
    else
      ok = std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
    if (!ok && bad++ == 0)
      first = "element " + std::to_string(i) + ": gpu " + std::to_string(g[i]) + " vs cpu " +
              std::to_string(w[i]);
  }
  INFO(bad << " mismatches; first " << first);
  CHECK(bad == 0);
}

int64_t reduced_count(const Tensor& x, const Dims& dims) {
  if (dims.empty()) return x.numel();
  int64_t count = 1;
  for (int64_t d : dims) count *= x.size(d);
  return count;
}

// f applied to x on the CPU and on the GPU, then backward from one random output gradient:
// outputs and input gradients compared.
void check_forward_backward(const std::function<Tensor(const Tensor&)>& f, const Tensor& x,
                            double rtol, double atol, uint64_t seed) {
  Tensor xc = x.detach().clone();
  xc.requires_grad_();
  Tensor xg = x.detach().to(kGpu);
  xg.requires_grad_();
  Tensor yc = f(xc), yg = f(xg);
  check_parity(yg, yc, rtol, atol);
  Tensor gy = rnd(yc.shape(), yc.dtype(), seed);
  yc.backward(gy);
  yg.backward(gy.to(kGpu));
  REQUIRE(xg.grad().defined());
  check_parity(xg.grad(), xc.grad(), rtol, atol);
}

// The op as gradcheck sees it: inputs on the CPU, moved to the GPU (a differentiable copy), the op
// on the GPU, the result moved back. Forward and backward kernels both run on the GPU.
std::function<Tensor(const std::vector<Tensor>&)> on_gpu(std::function<Tensor(const Tensor&)> f) {
  return [f](const std::vector<Tensor>& in) { return f(in[0].to(kGpu)).cpu(); };
}

const std::vector<Dims> kDimSets = {{}, {1}, {-1}, {0, 2}, {1, 3}, {0, 2, 3}, {0}, {-3, -1}};

}  // namespace

TEST_CASE("cuda reduce: sum and mean match the CPU per dtype, dims and keepdim") {
  for (DType dtype : kFloatTypes) {
    Tensor x = rnd({3, 4, 5, 6}, dtype, 1);
    for (const Dims& dims : kDimSets) {
      for (bool keepdim : {false, true}) {
        INFO(dtype_name(dtype) << " dims " << shape_str(dims) << " keepdim " << keepdim);
        const double tol = dtype_tolerance(dtype);
        const double count = static_cast<double>(reduced_count(x, dims));
        check_parity(sum(x.to(kGpu), dims, keepdim), sum(x, dims, keepdim), tol, tol * count);
        check_parity(mean(x.to(kGpu), dims, keepdim), mean(x, dims, keepdim), tol, tol);
      }
    }
  }
}

TEST_CASE("cuda reduce: positive sums agree to the dtype's relative tolerance") {
  // No cancellation: the relative error is bounded by the dtype's precision alone.
  for (DType dtype : kFloatTypes) {
    Tensor x = rnd({7, 300, 9}, dtype, 2, 0.5, 1.5);
    for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 2}, {2}}) {
      INFO(dtype_name(dtype) << " dims " << shape_str(dims));
      check_parity(sum(x.to(kGpu), dims), sum(x, dims), dtype_tolerance(dtype));
    }
  }
}

TEST_CASE("cuda reduce: integer and bool sums widen to i64 and are exact") {
  for (DType dtype : {DType::i32, DType::i64, DType::u8, DType::boolean}) {
    Tensor x = randint(0, dtype == DType::boolean ? 2 : 100, {5, 33, 7}, DType::i64).to(dtype);
    for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 2}, {0}, {-1}}) {
      INFO(dtype_name(dtype) << " dims " << shape_str(dims));
      Tensor got = sum(x.to(kGpu), dims);
      CHECK(got.dtype() == DType::i64);
      CHECK(equal(got.cpu(), sum(x, dims)));
    }
  }
}

TEST_CASE("cuda reduce: strided views (transposed, sliced, expanded) of GPU tensors") {
  // The views are taken on the GPU, so the kernels see the strides (no copy beforehand).
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor base = rnd({6, 8, 10}, dtype, 5);
    Tensor gbase = base.to(kGpu);
    const double tol = dtype_tolerance(dtype);
    struct View {
      std::function<Tensor(const Tensor&)> make;
      const char* name;
    };
    std::vector<View> views = {
        {[](const Tensor& t) { return t.transpose(0, 2); }, "transpose(0, 2)"},
        {[](const Tensor& t) { return t.slice(1, 1, 8, 3); }, "slice(1, 1, 8, 3)"},
        {[](const Tensor& t) {
           return t.permute({1, 2, 0}).slice(2, 0, 6, 2);
         },
         "permute+slice"},
        {[](const Tensor& t) {
           return t.select(1, 3).unsqueeze(1).expand({6, 5, 10});
         },
         "expand"}};
    for (const View& v : views) {
      for (const Dims& dims : std::vector<Dims>{{}, {0}, {1}, {-1}, {0, 2}, {1, 2}}) {
        INFO(dtype_name(dtype) << " " << v.name << " dims " << shape_str(dims));
        Tensor xc = v.make(base), xg = v.make(gbase);
        REQUIRE_FALSE(xg.is_contiguous());
        const double count = static_cast<double>(reduced_count(xc, dims));
        check_parity(sum(xg, dims), sum(xc, dims), tol, tol * count);
        check_parity(max(xg), max(xc), 0.0);
        check_parity(argmax(xg), argmax(xc), 0.0);
        if (dims.size() == 1) {
          ValuesIndices g = max(xg, dims[0]), c = max(xc, dims[0]);
          check_parity(g.values, c.values, 0.0);
          check_parity(g.indices, c.indices, 0.0);
        }
      }
    }
  }
}

TEST_CASE("cuda reduce: zero-size inputs and scalars") {
  Tensor empty_rows = zeros({0, 3}, DType::f32);
  Tensor g = empty_rows.to(kGpu);
  check_parity(sum(g), sum(empty_rows), 0.0);              // 0
  check_parity(sum(g, {0}), sum(empty_rows, {0}), 0.0);    // [0, 0, 0]
  check_parity(sum(g, {1}), sum(empty_rows, {1}), 0.0);    // shape [0]
  check_parity(mean(g, {0}), mean(empty_rows, {0}), 0.0);  // nan, as the CPU
  CHECK(sum(g).item<double>() == 0.0);
  CHECK(std::isnan(mean(g).item<double>()));
  CHECK(max(g, 1).values.numel() == 0);  // no outputs: nothing to reduce, no error
  CHECK_THROWS_AS(max(g), ValueError);
  CHECK_THROWS_AS(amax(g, {0}), ValueError);
  CHECK_THROWS_AS(argmax(g, 0), ValueError);
  CHECK_THROWS_WITH(max(g, 0), Catch::Contains("max"));

  Tensor s = scalar_tensor(2.5, DType::f64);
  check_parity(sum(s.to(kGpu)), sum(s), 0.0);
  check_parity(mean(s.to(kGpu), {0}, true), mean(s, {0}, true), 0.0);
  check_parity(max(s.to(kGpu)), max(s), 0.0);
  check_parity(argmax(s.to(kGpu)), argmax(s), 0.0);
  check_parity(cumsum(s.to(kGpu), 0), cumsum(s, 0), 0.0);
}

TEST_CASE("cuda reduce: long rows split over blocks, and many short rows") {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    const double tol = dtype_tolerance(dtype);
    INFO(dtype_name(dtype));
    Tensor wide = rnd({2, 1 << 20}, dtype, 6, 0.0, 1.0);  // split row path
    check_parity(sum(wide.to(kGpu), {-1}), sum(wide, {-1}), tol);
    check_parity(sum(wide.to(kGpu)), sum(wide), tol);
    check_parity(mean(wide.to(kGpu), {1}), mean(wide, {1}), tol);
    Tensor tall = rnd({1 << 16, 3}, dtype, 7, 0.0, 1.0);  // split column path
    check_parity(sum(tall.to(kGpu), {0}), sum(tall, {0}), tol);
    Tensor many = rnd({100003, 7}, dtype, 8);  // many short rows
    check_parity(sum(many.to(kGpu), {1}), sum(many, {1}), tol, tol * 7);
    Tensor bn = rnd({16, 5, 3000}, dtype, 9, 0.0, 1.0);  // batch-norm statistics pattern
    check_parity(sum(bn.to(kGpu), {0, 2}), sum(bn, {0, 2}), tol);
    check_parity(mean(bn.to(kGpu), {0, 2}, true), mean(bn, {0, 2}, true), tol);
  }
  Tensor ints = randint(-5, 6, {3, 300001}, DType::i32);
  CHECK(equal(sum(ints.to(kGpu), {1}).cpu(), sum(ints, {1})));
  CHECK(equal(sum(ints.to(kGpu)).cpu(), sum(ints)));
}

TEST_CASE("cuda reduce: sum and mean backward match the CPU") {
  for (DType dtype : kFloatTypes) {
    for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 2}, {-1}}) {
      INFO(dtype_name(dtype) << " dims " << shape_str(dims));
      const double tol = dtype_tolerance(dtype);
      Tensor x = rnd({4, 5, 6}, dtype, 10);
      check_forward_backward([&](const Tensor& t) { return sum(t, dims, true); }, x, tol,
                             tol * static_cast<double>(reduced_count(x, dims)), 11);
      check_forward_backward([&](const Tensor& t) { return mean(t, dims); }, x, tol, tol, 12);
    }
  }
}

TEST_CASE("cuda reduce: var, std_dev and norm match the CPU, forward and backward") {
  for (DType dtype : {DType::f32, DType::f64}) {
    const double tol = dtype_tolerance(dtype) * 10;  // several composed kernels, each rounding
    for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 2}}) {
      INFO(dtype_name(dtype) << " dims " << shape_str(dims));
      Tensor x = rnd({4, 5, 6}, dtype, 13);
      check_forward_backward([&](const Tensor& t) { return var(t, dims); }, x, tol, tol, 14);
      check_forward_backward([&](const Tensor& t) { return std_dev(t, dims, 0, true); }, x, tol,
                             tol, 15);
      for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
        INFO("p " << p);
        check_forward_backward([&](const Tensor& t) { return norm(t, p, dims); }, x, tol, tol, 16);
      }
    }
  }
}

TEST_CASE("cuda reduce: max and min with indices match the CPU, ties take the first") {
  // Few distinct values, so most rows hold ties: the index must be each row's first extreme.
  for (DType dtype :
       {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    Tensor x = randint(0, 4, {6, 7, 9}, DType::i64).to(dtype);
    Tensor xg = x.to(kGpu);
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      for (bool keepdim : {false, true}) {
        INFO(dtype_name(dtype) << " dim " << dim << " keepdim " << keepdim);
        ValuesIndices gmax = max(xg, dim, keepdim), cmax = max(x, dim, keepdim);
        check_parity(gmax.values, cmax.values, 0.0);
        check_parity(gmax.indices, cmax.indices, 0.0);
        ValuesIndices gmin = min(xg, dim, keepdim), cmin = min(x, dim, keepdim);
        check_parity(gmin.values, cmin.values, 0.0);
        check_parity(gmin.indices, cmin.indices, 0.0);
        check_parity(argmax(xg, dim, keepdim), argmax(x, dim, keepdim), 0.0);
        check_parity(argmin(xg, dim, keepdim), argmin(x, dim, keepdim), 0.0);
      }
    }
    for (const Dims& dims : std::vector<Dims>{{}, {0, 2}, {1}, {-1, 0}}) {
      INFO(dtype_name(dtype) << " dims " << shape_str(dims));
      check_parity(amax(xg, dims, true), amax(x, dims, true), 0.0);
      check_parity(amin(xg, dims), amin(x, dims), 0.0);
    }
    check_parity(max(xg), max(x), 0.0);
    check_parity(min(xg), min(x), 0.0);
    check_parity(argmax(xg), argmax(x), 0.0);
    // The flattened index is row-major in the logical order, whatever the strides.
    check_parity(argmax(xg.transpose(0, 2)), argmax(x.transpose(0, 2)), 0.0);
  }
}

TEST_CASE("cuda reduce: ties in long rows split over blocks keep the first index") {
  Tensor x = randint(0, 3, {3, 1 << 20}, DType::i64).to(DType::f32);
  Tensor xg = x.to(kGpu);
  ValuesIndices g = max(xg, 1), c = max(x, 1);
  check_parity(g.values, c.values, 0.0);
  check_parity(g.indices, c.indices, 0.0);
  check_parity(argmin(xg, 1), argmin(x, 1), 0.0);
  check_parity(argmax(xg), argmax(x), 0.0);
  Tensor tall = randint(0, 3, {1 << 17, 5}, DType::i64).to(DType::f64);  // column path, split
  check_parity(argmax(tall.to(kGpu), 0), argmax(tall, 0), 0.0);
  check_parity(amin(tall.to(kGpu), {0}), amin(tall, {0}), 0.0);
}

TEST_CASE("cuda reduce: NaN is both the max and the min, at its first position") {
  for (DType dtype : kFloatTypes) {
    INFO(dtype_name(dtype));
    std::vector<double> v(4 * 50, 0.0);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7) % 11);
    v[1 * 50 + 17] = NAN;
    v[1 * 50 + 30] = NAN;  // a second NaN: the first keeps the index
    v[3 * 50 + 0] = NAN;
    v[2 * 50 + 49] = INFINITY;
    Tensor x = tensor(v, {4, 50}).to(dtype);
    Tensor xg = x.to(kGpu);
    ValuesIndices g = max(xg, 1), c = max(x, 1);
    check_parity(g.values, c.values, 0.0);
    check_parity(g.indices, c.indices, 0.0);
    ValuesIndices gm = min(xg, 1), cm = min(x, 1);
    check_parity(gm.values, cm.values, 0.0);
    check_parity(gm.indices, cm.indices, 0.0);
    check_parity(argmax(xg), argmax(x), 0.0);
    check_parity(amax(xg, {0}), amax(x, {0}), 0.0);
    CHECK(std::isnan(max(xg).item<double>()));
    // Sums propagate NaN as well.
    check_parity(sum(xg, {1}), sum(x, {1}), dtype_tolerance(dtype),
                 dtype_tolerance(dtype) * 50 * 10);
  }
}

TEST_CASE("cuda reduce: max, min and amax backward match the CPU") {
  for (DType dtype : kFloatTypes) {
    INFO(dtype_name(dtype));
    const double tol = dtype_tolerance(dtype);
    Tensor x = randint(0, 5, {4, 6, 3}, DType::i64).to(dtype);  // ties share amax's gradient
    check_forward_backward([](const Tensor& t) { return max(t, 1).values; }, x, tol, tol, 17);
    check_forward_backward([](const Tensor& t) { return min(t, -1, true).values; }, x, tol, tol,
                           18);
    check_forward_backward([](const Tensor& t) { return amax(t, {0, 2}); }, x, tol, tol, 19);
    check_forward_backward([](const Tensor& t) { return max(t); }, x, tol, tol, 20);
  }
}

TEST_CASE("cuda reduce: cumsum matches the CPU per dtype and dim, forward and backward") {
  for (DType dtype : kFloatTypes) {
    const double tol = dtype_tolerance(dtype);
    for (const Shape& shape : std::vector<Shape>{{5, 7, 3}, {3, 1000}, {1000, 3}, {1, 1, 70}}) {
      for (int64_t dim : {0, 1, -1}) {
        INFO(dtype_name(dtype) << " shape " << shape_str(shape) << " dim " << dim);
        Tensor x = rnd(shape, dtype, 21);
        const double n = static_cast<double>(x.size(dim));
        check_forward_backward([&](const Tensor& t) { return cumsum(t, dim); }, x, tol, tol * n,
                               22);
      }
    }
  }
  for (DType dtype : {DType::i32, DType::i64, DType::u8, DType::boolean}) {
    Tensor x = randint(0, 2, {4, 100}, DType::i64).to(dtype);
    for (int64_t dim : {0, 1}) {
      INFO(dtype_name(dtype) << " dim " << dim);
      Tensor got = cumsum(x.to(kGpu), dim);
      CHECK(got.dtype() == DType::i64);
      CHECK(equal(got.cpu(), cumsum(x, dim)));
    }
  }
}

TEST_CASE("cuda reduce: cumsum of strided and zero-size GPU tensors") {
  Tensor base = rnd({40, 50}, DType::f64, 23);
  Tensor gbase = base.to(kGpu);
  for (int64_t dim : {0, 1}) {
    INFO("dim " << dim);
    check_parity(cumsum(gbase.t(), dim), cumsum(base.t(), dim), 1e-12, 1e-12 * 50);
    check_parity(cumsum(gbase.slice(1, 3, 50, 4), dim), cumsum(base.slice(1, 3, 50, 4), dim), 1e-12,
                 1e-12 * 50);
  }
  Tensor e = zeros({0, 4}, DType::f32);
  check_parity(cumsum(e.to(kGpu), 1), cumsum(e, 1), 0.0);
  check_parity(cumsum(e.to(kGpu), 0), cumsum(e, 0), 0.0);
}

TEST_CASE("cuda reduce: sum_to (broadcast backward) matches the CPU") {
  Tensor x = rnd({4, 3, 5}, DType::f32, 24);
  for (const Shape& shape : std::vector<Shape>{{3, 5}, {3, 1}, {1, 1, 5}, {5}, {4, 1, 1}}) {
    INFO("to " << shape_str(shape));
    check_parity(sum_to(x.to(kGpu), shape), sum_to(x, shape), 1e-5, 1e-5 * 60);
  }
}

TEST_CASE("cuda reduce: f64 gradcheck of the reductions on the GPU", "[heavy]") {
  Tensor x = random_f64({3, 4, 5}, 25);
  CHECK_GRADCHECK(on_gpu([](const Tensor& t) { return sum(t, {0, 2}); }), {x});
  CHECK_GRADCHECK(on_gpu([](const Tensor& t) { return mean(t, {-1}, true); }), {x});
  CHECK_GRADCHECK(on_gpu([](const Tensor& t) { return var(t, {1}); }), {x});
  CHECK_GRADCHECK(on_gpu([](const Tensor& t) { return std_dev(t, {0, 2}); }), {x});
  CHECK_GRADCHECK(on_gpu([](const Tensor& t) { return norm(t, 3.0, {2}); }), {x});
  CHECK_GRADCHECK(on_gpu([](const Tensor& t) { return max(t, 1).values; }), {x});
  CHECK_GRADCHECK(on_gpu([](const Tensor& t) { return amin(t, {0, 1}); }), {x});
  CHECK_GRADCHECK(on_gpu([](const Tensor& t) { return cumsum(t, 1); }), {x});
  CHECK_GRADCHECK(on_gpu([](const Tensor& t) { return cumsum(t.transpose(0, 2), 0); }), {x});
}
