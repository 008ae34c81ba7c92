// GPU parity of softmax, log_softmax and the losses (nll_loss, cross_entropy with weights,
// ignore_index and label smoothing, mse_loss): each runs on the CPU and on cuda:0 from the same
// inputs, forward and backward, within a tolerance that scales with the dtype.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
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

// Composed results (several kernels, each rounding to the dtype) and the backward of softmax
// (fused in f32 on the GPU, a chain of 16-bit ops on the CPU) may differ by a few units in the
// last place of a 16-bit float: those comparisons allow 4 of the dtype's tolerance.
double composed_tol(DType dtype) {
  const double tol = dtype_tolerance(dtype);
  return dtype == DType::f16 || dtype == DType::bf16 ? 4 * tol : 10 * tol;
}

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

// f applied to x on the CPU and on the GPU (other inputs are captured by f and moved by it), then
// backward from one random output gradient: outputs and input gradients compared.
void check_forward_backward(const std::function<Tensor(const Tensor&, Device)>& f, const Tensor& x,
                            double rtol, double atol, uint64_t seed) {
  Tensor xc = x.detach().clone();
  xc.requires_grad_();
  Tensor xg = x.detach().to(kGpu);
  xg.requires_grad_();
  Tensor yc = f(xc, Device::cpu()), yg = f(xg, kGpu);
  check_parity(yg, yc, rtol, atol);
  Tensor gy = rnd(yc.shape(), yc.dtype(), seed);
  yc.backward(gy);
  yg.backward(gy.to(kGpu));
  REQUIRE(xg.grad().defined());
  check_parity(xg.grad(), xc.grad(), rtol, atol);
}

// The op as gradcheck sees it: the first input moved to the GPU (a differentiable copy), the op
// on the GPU, the result moved back; forward and backward kernels both run on the GPU.
std::function<Tensor(const std::vector<Tensor>&)> on_gpu(std::function<Tensor(const Tensor&)> f) {
  return [f](const std::vector<Tensor>& in) { return f(in[0].to(kGpu)).cpu(); };
}

// Class targets in [0, classes) with every `ignore_every`-th one set to ignore_index.
Tensor targets(const Shape& shape, int64_t classes, int64_t ignore_every, int64_t ignore_index,
               uint64_t seed) {
  Generator gen(seed);
  Tensor t = randint(0, classes, shape, DType::i64, Device::cpu(), &gen);
  std::vector<double> v = t.tolist();
  std::vector<int64_t> values(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    values[i] =
        ignore_every > 0 && i % ignore_every == 1 ? ignore_index : static_cast<int64_t>(v[i]);
  return tensor(values).reshape(shape);
}

const Reduction kReductions[] = {Reduction::none, Reduction::mean, Reduction::sum};

}  // namespace

TEST_CASE("cuda softmax: softmax and log_softmax match the CPU per dtype and dim") {
  for (DType dtype : kFloatTypes) {
    Tensor x = rnd({4, 5, 6}, dtype, 1, -3.0, 3.0);
    for (int64_t dim : {0, 1, 2, -1, -2}) {
      INFO(dtype_name(dtype) << " dim " << dim);
      const double tol = dtype_tolerance(dtype);
      check_parity(softmax(x.to(kGpu), dim), softmax(x, dim), tol, tol);
      check_parity(log_softmax(x.to(kGpu), dim), log_softmax(x, dim), tol, tol);
    }
  }
}

TEST_CASE("cuda softmax: rows longer than a warp's share, and many short rows") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16}) {
    const double tol = dtype_tolerance(dtype);
    for (const Shape& shape : std::vector<Shape>{{3, 5000}, {2, 1025}, {20000, 10}, {7, 33}}) {
      INFO(dtype_name(dtype) << " shape " << shape_str(shape));
      Tensor x = rnd(shape, dtype, 2, -5.0, 5.0);
      check_parity(softmax(x.to(kGpu), 1), softmax(x, 1), tol, tol);
      check_parity(log_softmax(x.to(kGpu), -1), log_softmax(x, -1), tol, tol);
    }
    // Softmax over channels of an image batch: the strided (inner > 1) layout.
    Tensor img = rnd({3, 2000, 4, 5}, dtype, 3, -5.0, 5.0);
    check_parity(softmax(img.to(kGpu), 1), softmax(img, 1), tol, tol);
    check_parity(log_softmax(img.to(kGpu), 1), log_softmax(img, 1), tol, tol);
  }
}

TEST_CASE("cuda softmax: large logits, -inf and NaN entries as on the CPU") {
  std::vector<double> v = {1000.0, 999.0, -1000.0, 0.0,       -INFINITY, 1.0,
                           2.0,    NAN,   3.0,     -INFINITY, -INFINITY, -INFINITY};
  Tensor x = tensor(v, {3, 4});
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    Tensor xd = x.to(dtype);
    check_parity(softmax(xd.to(kGpu), 1), softmax(xd, 1), dtype_tolerance(dtype),
                 dtype_tolerance(dtype));
    check_parity(log_softmax(xd.to(kGpu), 1), log_softmax(xd, 1), dtype_tolerance(dtype),
                 dtype_tolerance(dtype));
  }
}

TEST_CASE("cuda softmax: non-contiguous GPU inputs, zero-size and 0-dim") {
  Tensor base = rnd({6, 9, 4}, DType::f32, 4);
  Tensor gbase = base.to(kGpu);
  for (int64_t dim : {0, 1, 2}) {
    INFO("dim " << dim);
    check_parity(softmax(gbase.transpose(0, 2), dim), softmax(base.transpose(0, 2), dim), 1e-5,
                 1e-5);
    check_parity(log_softmax(gbase.slice(1, 1, 9, 2), dim),
                 log_softmax(base.slice(1, 1, 9, 2), dim), 1e-5, 1e-5);
  }
  Tensor e = zeros({0, 5}, DType::f32);
  check_parity(softmax(e.to(kGpu), 1), softmax(e, 1), 0.0);
  check_parity(log_softmax(e.to(kGpu), 0), log_softmax(e, 0), 0.0);
  Tensor s = scalar_tensor(0.7, DType::f64);
  check_parity(softmax(s.to(kGpu), 0), softmax(s, 0), 0.0);
  check_parity(log_softmax(s.to(kGpu), -1), log_softmax(s, -1), 0.0, 1e-15);
  CHECK_THROWS_AS(softmax(randint(0, 3, {4}, DType::i64).to(kGpu), 0), DTypeError);
}

TEST_CASE("cuda softmax: backward matches the CPU per dtype, rows and columns") {
  for (DType dtype : kFloatTypes) {
    const double tol = composed_tol(dtype);
    for (const Shape& shape : std::vector<Shape>{{4, 5, 6}, {3, 3000}}) {
      for (int64_t dim : {0, 1, -1}) {
        INFO(dtype_name(dtype) << " shape " << shape_str(shape) << " dim " << dim);
        Tensor x = rnd(shape, dtype, 5, -2.0, 2.0);
        check_forward_backward([&](const Tensor& t, Device) { return softmax(t, dim); }, x, tol,
                               tol, 6);
        check_forward_backward([&](const Tensor& t, Device) { return log_softmax(t, dim); }, x, tol,
                               tol, 7);
      }
    }
  }
}

TEST_CASE("cuda softmax: backward through a strided upstream gradient") {
  // sum's backward expands its gradient (stride 0): the fused kernel gets a made-contiguous copy.
  Tensor x = rnd({5, 7}, DType::f64, 8);
  Tensor xc = x.clone(), xg = x.to(kGpu);
  xc.requires_grad_();
  xg.requires_grad_();
  sum(log_softmax(xc, 1), {1}).backward(ones({5}, DType::f64));
  sum(log_softmax(xg, 1), {1}).backward(ones({5}, DType::f64, kGpu));
  check_parity(xg.grad(), xc.grad(), 1e-12, 1e-12);
}

TEST_CASE("cuda softmax: f64 gradcheck on the GPU", "[heavy]") {
  Tensor x = random_f64({3, 4, 5}, 9, -2.0, 2.0);
  for (int64_t dim : {0, 1, 2}) {
    INFO("dim " << dim);
    CHECK_GRADCHECK(on_gpu([dim](const Tensor& t) { return softmax(t, dim); }), {x});
    CHECK_GRADCHECK(on_gpu([dim](const Tensor& t) { return log_softmax(t, dim); }), {x});
  }
}

TEST_CASE("cuda loss: nll_loss matches the CPU: weights, ignore_index, reductions, dtypes") {
  const int64_t ignore = -100;
  for (DType dtype : kFloatTypes) {
    const double tol = composed_tol(dtype);
    for (const Shape& shape : std::vector<Shape>{{8, 5}, {5}, {4, 3, 2, 3}}) {
      const bool unbatched = shape.size() == 1;
      Shape target_shape = shape;
      target_shape.erase(target_shape.begin() + (unbatched ? 0 : 1));
      const int64_t classes = shape[unbatched ? 0 : 1];
      Tensor logp = log_softmax(rnd(shape, DType::f64, 10, -2.0, 2.0), unbatched ? 0 : 1).to(dtype);
      Tensor target = targets(target_shape, classes, 3, ignore, 11);
      Tensor weight = rnd({classes}, dtype, 12, 0.5, 2.0);
      for (bool weighted : {false, true}) {
        for (Reduction reduction : kReductions) {
          INFO(dtype_name(dtype) << " shape " << shape_str(shape) << " weighted " << weighted
                                 << " reduction " << static_cast<int>(reduction));
          Tensor w = weighted ? weight : Tensor();
          check_forward_backward(
              [&](const Tensor& lp, Device device) {
                return nll_loss(lp, target.to(device), weighted ? w.to(device) : Tensor(), ignore,
                                reduction);
              },
              logp, tol, tol, 13);
        }
      }
    }
  }
}

TEST_CASE("cuda loss: many targets (multi-block sums) and i32 targets") {
  Tensor logp = log_softmax(rnd({70000, 10}, DType::f64, 14, -2.0, 2.0), 1);
  Tensor target = targets({70000}, 10, 7, 3, 15);  // ignore_index 3 is also a valid class
  for (Reduction reduction : kReductions) {
    INFO("reduction " << static_cast<int>(reduction));
    check_parity(nll_loss(logp.to(kGpu), target.to(kGpu), Tensor(), 3, reduction),
                 nll_loss(logp, target, Tensor(), 3, reduction), 1e-12, 1e-12);
    Tensor t32 = target.to(DType::i32);
    check_parity(nll_loss(logp.to(kGpu), t32.to(kGpu), Tensor(), 3, reduction),
                 nll_loss(logp, t32, Tensor(), 3, reduction), 1e-12, 1e-12);
  }
}

TEST_CASE("cuda loss: cross_entropy with label smoothing, ignore_index and weights") {
  const int64_t ignore = 2;
  for (DType dtype : kFloatTypes) {
    const double tol = composed_tol(dtype);
    for (const Shape& shape : std::vector<Shape>{{16, 7}, {7}, {3, 7, 4, 2}}) {
      const bool unbatched = shape.size() == 1;
      Shape target_shape = shape;
      target_shape.erase(target_shape.begin() + (unbatched ? 0 : 1));
      Tensor logits = rnd(shape, dtype, 16, -3.0, 3.0);
      Tensor target = targets(target_shape, 7, 4, ignore, 17);
      Tensor weight = rnd({7}, dtype, 18, 0.5, 2.0);
      for (double smoothing : {0.0, 0.1, 1.0}) {
        for (bool weighted : {false, true}) {
          for (Reduction reduction : kReductions) {
            INFO(dtype_name(dtype)
                 << " shape " << shape_str(shape) << " smoothing " << smoothing << " weighted "
                 << weighted << " reduction " << static_cast<int>(reduction));
            check_forward_backward(
                [&](const Tensor& x, Device device) {
                  return cross_entropy(x, target.to(device),
                                       weighted ? weight.to(device) : Tensor(), ignore, reduction,
                                       smoothing);
                },
                logits, tol, tol, 19);
          }
        }
      }
    }
  }
}

TEST_CASE("cuda loss: a mean over only ignored targets is nan, as on the CPU") {
  Tensor logits = rnd({4, 3}, DType::f32, 20);
  Tensor target = tensor(std::vector<int64_t>{-100, -100, -100, -100}, {4});
  Tensor got = cross_entropy(logits.to(kGpu), target.to(kGpu));
  check_parity(got, cross_entropy(logits, target), 0.0);
  CHECK(std::isnan(got.item<double>()));
}

TEST_CASE("cuda loss: an out-of-range target throws IndexError naming it") {
  Tensor logits = rnd({4, 3}, DType::f32, 21).to(kGpu);
  Tensor target = tensor(std::vector<int64_t>{0, 2, 7, 1}, {4}).to(kGpu);
  CHECK_THROWS_AS(cross_entropy(logits, target), IndexError);
  CHECK_THROWS_WITH(cross_entropy(logits, target), Catch::Contains("target 7"));
  CHECK_THROWS_WITH(nll_loss(logits, target), Catch::Contains("flat position 2"));
  Tensor negative = tensor(std::vector<int64_t>{0, -1, 1, 1}, {4}).to(kGpu);
  CHECK_THROWS_WITH(nll_loss(logits, negative), Catch::Contains("target -1"));
}

TEST_CASE("cuda loss: mse_loss matches the CPU") {
  for (DType dtype : kFloatTypes) {
    const double tol = composed_tol(dtype);
    Tensor target = rnd({6, 5}, dtype, 22);
    for (Reduction reduction : kReductions) {
      INFO(dtype_name(dtype) << " reduction " << static_cast<int>(reduction));
      check_forward_backward(
          [&](const Tensor& x, Device device) { return mse_loss(x, target.to(device), reduction); },
          rnd({6, 5}, dtype, 23), tol, tol, 24);
    }
  }
}

TEST_CASE("cuda loss: f64 gradcheck of nll_loss and cross_entropy on the GPU", "[heavy]") {
  Tensor logits = random_f64({5, 4, 3}, 25, -2.0, 2.0);
  Tensor target = targets({5, 3}, 4, 4, -100, 26);
  Tensor weight = random_f64({4}, 27, 0.5, 2.0);
  Tensor tg = target.to(kGpu), wg = weight.to(kGpu);
  CHECK_GRADCHECK(on_gpu([&](const Tensor& x) { return nll_loss(log_softmax(x, 1), tg, wg); }),
                  {logits});
  for (double smoothing : {0.0, 0.2}) {
    for (Reduction reduction : kReductions) {
      INFO("smoothing " << smoothing << " reduction " << static_cast<int>(reduction));
      CHECK_GRADCHECK(on_gpu([&](const Tensor& x) {
                        return cross_entropy(x, tg, wg, -100, reduction, smoothing);
                      }),
                      {logits});
    }
  }
}
