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
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_gpu_parity;
using kiln::testing::composed_tolerance;
using kiln::testing::kExact;
using kiln::testing::random_f64;
using kiln::testing::sum_tolerance;
using kiln::testing::Tolerance;
using kiln::testing::tolerance;

namespace {

const Device kGpu = Device::cuda(0);

const DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

Tensor rnd(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0, double high = 1.0) {
  return random_f64(shape, seed, low, high).to(dtype);
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
                            Tolerance tol, uint64_t seed) {
  Tensor xc = x.detach().clone();
  xc.requires_grad_();
  Tensor xg = x.detach().to(kGpu);
  xg.requires_grad_();
  Tensor yc = f(xc), yg = f(xg);
  check_gpu_parity(yg, yc, tol);
  Tensor gy = rnd(yc.shape(), yc.dtype(), seed);
  yc.backward(gy);
  yg.backward(gy.to(kGpu));
  REQUIRE(xg.grad().defined());
  check_gpu_parity(xg.grad(), xc.grad(), tol);
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
        const double count = static_cast<double>(reduced_count(x, dims));
        check_gpu_parity(sum(x.to(kGpu), dims, keepdim), sum(x, dims, keepdim),
                         sum_tolerance(dtype, count));
        check_gpu_parity(mean(x.to(kGpu), dims, keepdim), mean(x, dims, keepdim), tolerance(dtype));
      }
    }
  }
}

TEST_CASE("cuda reduce: positive sums agree to the dtype's relative tolerance") {
  // No cancellation: the relative error is bounded by the dtype's precision alone.
  for (DType dtype : kFloatTypes) {
    const Tolerance relative{tolerance(dtype).rtol, 0.0};
    Tensor x = rnd({7, 300, 9}, dtype, 2, 0.5, 1.5);
    for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 2}, {2}}) {
      INFO(dtype_name(dtype) << " dims " << shape_str(dims));
      check_gpu_parity(sum(x.to(kGpu), dims), sum(x, dims), relative);
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
      check_gpu_parity(got, sum(x, dims), kExact);
    }
  }
}

TEST_CASE("cuda reduce: strided views (transposed, sliced, expanded) of GPU tensors") {
  // The views are taken on the GPU, so the kernels see the strides (no copy beforehand).
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor base = rnd({6, 8, 10}, dtype, 5);
    Tensor gbase = base.to(kGpu);
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
        check_gpu_parity(sum(xg, dims), sum(xc, dims), sum_tolerance(dtype, count));
        check_gpu_parity(max(xg), max(xc), kExact);
        check_gpu_parity(argmax(xg), argmax(xc), kExact);
        if (dims.size() == 1) {
          ValuesIndices g = max(xg, dims[0]), c = max(xc, dims[0]);
          check_gpu_parity(g.values, c.values, kExact);
          check_gpu_parity(g.indices, c.indices, kExact);
        }
      }
    }
  }
}

TEST_CASE("cuda reduce: zero-size inputs and scalars") {
  Tensor empty_rows = zeros({0, 3}, DType::f32);
  Tensor g = empty_rows.to(kGpu);
  check_gpu_parity(sum(g), sum(empty_rows), kExact);              // 0
  check_gpu_parity(sum(g, {0}), sum(empty_rows, {0}), kExact);    // [0, 0, 0]
  check_gpu_parity(sum(g, {1}), sum(empty_rows, {1}), kExact);    // shape [0]
  check_gpu_parity(mean(g, {0}), mean(empty_rows, {0}), kExact);  // nan, as the CPU
  CHECK(sum(g).item<double>() == 0.0);
  CHECK(std::isnan(mean(g).item<double>()));
  CHECK(max(g, 1).values.numel() == 0);  // no outputs: nothing to reduce, no error
  CHECK_THROWS_AS(max(g), ValueError);
  CHECK_THROWS_AS(amax(g, {0}), ValueError);
  CHECK_THROWS_AS(argmax(g, 0), ValueError);
  CHECK_THROWS_WITH(max(g, 0), Catch::Contains("max"));

  Tensor s = scalar_tensor(2.5, DType::f64);
  check_gpu_parity(sum(s.to(kGpu)), sum(s), kExact);
  check_gpu_parity(mean(s.to(kGpu), {0}, true), mean(s, {0}, true), kExact);
  check_gpu_parity(max(s.to(kGpu)), max(s), kExact);
  check_gpu_parity(argmax(s.to(kGpu)), argmax(s), kExact);
  check_gpu_parity(cumsum(s.to(kGpu), 0), cumsum(s, 0), kExact);
}

TEST_CASE("cuda reduce: long rows split over blocks, and many short rows") {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    // Terms in [0, 1): no cancellation, so the dtype's rtol alone (as the positive sums above).
    const Tolerance positive{tolerance(dtype).rtol, 0.0};
    INFO(dtype_name(dtype));
    Tensor wide = rnd({2, 1 << 20}, dtype, 6, 0.0, 1.0);  // split row path
    check_gpu_parity(sum(wide.to(kGpu), {-1}), sum(wide, {-1}), positive);
    check_gpu_parity(sum(wide.to(kGpu)), sum(wide), positive);
    check_gpu_parity(mean(wide.to(kGpu), {1}), mean(wide, {1}), positive);
    Tensor tall = rnd({1 << 16, 3}, dtype, 7, 0.0, 1.0);  // split column path
    check_gpu_parity(sum(tall.to(kGpu), {0}), sum(tall, {0}), positive);
    Tensor many = rnd({100003, 7}, dtype, 8);  // many short rows
    check_gpu_parity(sum(many.to(kGpu), {1}), sum(many, {1}), sum_tolerance(dtype, 7));
    Tensor bn = rnd({16, 5, 3000}, dtype, 9, 0.0, 1.0);  // batch-norm statistics pattern
    check_gpu_parity(sum(bn.to(kGpu), {0, 2}), sum(bn, {0, 2}), positive);
    check_gpu_parity(mean(bn.to(kGpu), {0, 2}, true), mean(bn, {0, 2}, true), positive);
  }
  Tensor ints = randint(-5, 6, {3, 300001}, DType::i32);
  check_gpu_parity(sum(ints.to(kGpu), {1}), sum(ints, {1}), kExact);
  check_gpu_parity(sum(ints.to(kGpu)), sum(ints), kExact);
}

TEST_CASE("cuda reduce: sum and mean backward match the CPU") {
  for (DType dtype : kFloatTypes) {
    for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 2}, {-1}}) {
      INFO(dtype_name(dtype) << " dims " << shape_str(dims));
      Tensor x = rnd({4, 5, 6}, dtype, 10);
      check_forward_backward([&](const Tensor& t) { return sum(t, dims, true); }, x,
                             sum_tolerance(dtype, static_cast<double>(reduced_count(x, dims))), 11);
      check_forward_backward([&](const Tensor& t) { return mean(t, dims); }, x, tolerance(dtype),
                             12);
    }
  }
}

TEST_CASE("cuda reduce: var, std_dev and norm match the CPU, forward and backward") {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tolerance tol = composed_tolerance(dtype);  // several composed kernels, each rounding
    for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 2}}) {
      INFO(dtype_name(dtype) << " dims " << shape_str(dims));
      Tensor x = rnd({4, 5, 6}, dtype, 13);
      check_forward_backward([&](const Tensor& t) { return var(t, dims); }, x, tol, 14);
      check_forward_backward([&](const Tensor& t) { return std_dev(t, dims, 0, true); }, x, tol,
                             15);
      for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
        INFO("p " << p);
        check_forward_backward([&](const Tensor& t) { return norm(t, p, dims); }, x, tol, 16);
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
        check_gpu_parity(gmax.values, cmax.values, kExact);
        check_gpu_parity(gmax.indices, cmax.indices, kExact);
        ValuesIndices gmin = min(xg, dim, keepdim), cmin = min(x, dim, keepdim);
        check_gpu_parity(gmin.values, cmin.values, kExact);
        check_gpu_parity(gmin.indices, cmin.indices, kExact);
        check_gpu_parity(argmax(xg, dim, keepdim), argmax(x, dim, keepdim), kExact);
        check_gpu_parity(argmin(xg, dim, keepdim), argmin(x, dim, keepdim), kExact);
      }
    }
    for (const Dims& dims : std::vector<Dims>{{}, {0, 2}, {1}, {-1, 0}}) {
      INFO(dtype_name(dtype) << " dims " << shape_str(dims));
      check_gpu_parity(amax(xg, dims, true), amax(x, dims, true), kExact);
      check_gpu_parity(amin(xg, dims), amin(x, dims), kExact);
    }
    check_gpu_parity(max(xg), max(x), kExact);
    check_gpu_parity(min(xg), min(x), kExact);
    check_gpu_parity(argmax(xg), argmax(x), kExact);
    // The flattened index is row-major in the logical order, whatever the strides.
    check_gpu_parity(argmax(xg.transpose(0, 2)), argmax(x.transpose(0, 2)), kExact);
  }
}

TEST_CASE("cuda reduce: ties in long rows split over blocks keep the first index") {
  Tensor x = randint(0, 3, {3, 1 << 20}, DType::i64).to(DType::f32);
  Tensor xg = x.to(kGpu);
  ValuesIndices g = max(xg, 1), c = max(x, 1);
  check_gpu_parity(g.values, c.values, kExact);
  check_gpu_parity(g.indices, c.indices, kExact);
  check_gpu_parity(argmin(xg, 1), argmin(x, 1), kExact);
  check_gpu_parity(argmax(xg), argmax(x), kExact);
  Tensor tall = randint(0, 3, {1 << 17, 5}, DType::i64).to(DType::f64);  // column path, split
  check_gpu_parity(argmax(tall.to(kGpu), 0), argmax(tall, 0), kExact);
  check_gpu_parity(amin(tall.to(kGpu), {0}), amin(tall, {0}), kExact);
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
    check_gpu_parity(g.values, c.values, kExact);
    check_gpu_parity(g.indices, c.indices, kExact);
    ValuesIndices gm = min(xg, 1), cm = min(x, 1);
    check_gpu_parity(gm.values, cm.values, kExact);
    check_gpu_parity(gm.indices, cm.indices, kExact);
    check_gpu_parity(argmax(xg), argmax(x), kExact);
    check_gpu_parity(amax(xg, {0}), amax(x, {0}), kExact);
    CHECK(std::isnan(max(xg).item<double>()));
    // Sums propagate NaN as well. Rows of 50 terms up to 10 in size: the bound of 500 unit terms.
    check_gpu_parity(sum(xg, {1}), sum(x, {1}), sum_tolerance(dtype, 50 * 10));
  }
}

TEST_CASE("cuda reduce: max, min and amax backward match the CPU") {
  for (DType dtype : kFloatTypes) {
    INFO(dtype_name(dtype));
    const Tolerance tol = tolerance(dtype);
    Tensor x = randint(0, 5, {4, 6, 3}, DType::i64).to(dtype);  // ties share amax's gradient
    check_forward_backward([](const Tensor& t) { return max(t, 1).values; }, x, tol, 17);
    check_forward_backward([](const Tensor& t) { return min(t, -1, true).values; }, x, tol, 18);
    check_forward_backward([](const Tensor& t) { return amax(t, {0, 2}); }, x, tol, 19);
    check_forward_backward([](const Tensor& t) { return max(t); }, x, tol, 20);
  }
}

TEST_CASE("cuda reduce: cumsum matches the CPU per dtype and dim, forward and backward") {
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : std::vector<Shape>{{5, 7, 3}, {3, 1000}, {1000, 3}, {1, 1, 70}}) {
      for (int64_t dim : {0, 1, -1}) {
        INFO(dtype_name(dtype) << " shape " << shape_str(shape) << " dim " << dim);
        Tensor x = rnd(shape, dtype, 21);
        const double n = static_cast<double>(x.size(dim));
        check_forward_backward([&](const Tensor& t) { return cumsum(t, dim); }, x,
                               sum_tolerance(dtype, n), 22);
      }
    }
  }
  for (DType dtype : {DType::i32, DType::i64, DType::u8, DType::boolean}) {
    Tensor x = randint(0, 2, {4, 100}, DType::i64).to(dtype);
    for (int64_t dim : {0, 1}) {
      INFO(dtype_name(dtype) << " dim " << dim);
      Tensor got = cumsum(x.to(kGpu), dim);
      CHECK(got.dtype() == DType::i64);
      check_gpu_parity(got, cumsum(x, dim), kExact);
    }
  }
}

TEST_CASE("cuda reduce: cumsum of strided and zero-size GPU tensors") {
  Tensor base = rnd({40, 50}, DType::f64, 23);
  Tensor gbase = base.to(kGpu);
  for (int64_t dim : {0, 1}) {
    INFO("dim " << dim);
    check_gpu_parity(cumsum(gbase.t(), dim), cumsum(base.t(), dim), sum_tolerance(DType::f64, 50));
    check_gpu_parity(cumsum(gbase.slice(1, 3, 50, 4), dim), cumsum(base.slice(1, 3, 50, 4), dim),
                     sum_tolerance(DType::f64, 50));
  }
  Tensor e = zeros({0, 4}, DType::f32);
  check_gpu_parity(cumsum(e.to(kGpu), 1), cumsum(e, 1), kExact);
  check_gpu_parity(cumsum(e.to(kGpu), 0), cumsum(e, 0), kExact);
}

TEST_CASE("cuda reduce: sum_to (broadcast backward) matches the CPU") {
  Tensor x = rnd({4, 3, 5}, DType::f32, 24);
  for (const Shape& shape : std::vector<Shape>{{3, 5}, {3, 1}, {1, 1, 5}, {5}, {4, 1, 1}}) {
    INFO("to " << shape_str(shape));
    check_gpu_parity(sum_to(x.to(kGpu), shape), sum_to(x, shape), sum_tolerance(DType::f32, 60));
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
