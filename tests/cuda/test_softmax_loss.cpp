// GPU parity of softmax, log_softmax and the losses (nll_loss, cross_entropy with weights,
// ignore_index and label smoothing, mse_loss): each runs on the CPU and on cuda:0 from the same
// inputs, forward and backward, within a tolerance that scales with the dtype: parity.h's table,
// or composed_tolerance for composed results (several kernels, each rounding to the dtype) and the
// backward of softmax (fused in f32 on the GPU, a chain of 16-bit ops on the CPU).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_gpu_parity;
using kiln::testing::composed_tolerance;
using kiln::testing::kExact;
using kiln::testing::random_f64;
using kiln::testing::Tolerance;
using kiln::testing::tolerance;

namespace {

const Device kGpu = Device::cuda(0);

const DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

Tensor rnd(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0, double high = 1.0) {
  return random_f64(shape, seed, low, high).to(dtype);
}

// f applied to x on the CPU and on the GPU (other inputs are captured by f and moved by it), then
// backward from one random output gradient: outputs and input gradients compared.
void check_forward_backward(const std::function<Tensor(const Tensor&, Device)>& f, const Tensor& x,
                            Tolerance tol, uint64_t seed) {
  Tensor xc = x.detach().clone();
  xc.requires_grad_();
  Tensor xg = x.detach().to(kGpu);
  xg.requires_grad_();
  Tensor yc = f(xc, Device::cpu()), yg = f(xg, kGpu);
  check_gpu_parity(yg, yc, tol);
  Tensor gy = rnd(yc.shape(), yc.dtype(), seed);
  yc.backward(gy);
  yg.backward(gy.to(kGpu));
  REQUIRE(xg.grad().defined());
  check_gpu_parity(xg.grad(), xc.grad(), tol);
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
      check_gpu_parity(softmax(x.to(kGpu), dim), softmax(x, dim), tolerance(dtype));
      check_gpu_parity(log_softmax(x.to(kGpu), dim), log_softmax(x, dim), tolerance(dtype));
    }
  }
}

TEST_CASE("cuda softmax: rows longer than a warp's share, and many short rows") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16}) {
    const Tolerance tol = tolerance(dtype);
    for (const Shape& shape : std::vector<Shape>{{3, 5000}, {2, 1025}, {20000, 10}, {7, 33}}) {
      INFO(dtype_name(dtype) << " shape " << shape_str(shape));
      Tensor x = rnd(shape, dtype, 2, -5.0, 5.0);
      check_gpu_parity(softmax(x.to(kGpu), 1), softmax(x, 1), tol);
      check_gpu_parity(log_softmax(x.to(kGpu), -1), log_softmax(x, -1), tol);
    }
    // Softmax over channels of an image batch: the strided (inner > 1) layout.
    Tensor img = rnd({3, 2000, 4, 5}, dtype, 3, -5.0, 5.0);
    check_gpu_parity(softmax(img.to(kGpu), 1), softmax(img, 1), tol);
    check_gpu_parity(log_softmax(img.to(kGpu), 1), log_softmax(img, 1), tol);
  }
}

TEST_CASE("cuda softmax: large logits, -inf and NaN entries as on the CPU") {
  std::vector<double> v = {1000.0, 999.0, -1000.0, 0.0,       -INFINITY, 1.0,
                           2.0,    NAN,   3.0,     -INFINITY, -INFINITY, -INFINITY};
  Tensor x = tensor(v, {3, 4});
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    Tensor xd = x.to(dtype);
    check_gpu_parity(softmax(xd.to(kGpu), 1), softmax(xd, 1), tolerance(dtype));
    check_gpu_parity(log_softmax(xd.to(kGpu), 1), log_softmax(xd, 1), tolerance(dtype));
  }
}

TEST_CASE("cuda softmax: non-contiguous GPU inputs, zero-size and 0-dim") {
  Tensor base = rnd({6, 9, 4}, DType::f32, 4);
  Tensor gbase = base.to(kGpu);
  for (int64_t dim : {0, 1, 2}) {
    INFO("dim " << dim);
    check_gpu_parity(softmax(gbase.transpose(0, 2), dim), softmax(base.transpose(0, 2), dim),
                     tolerance(DType::f32));
    check_gpu_parity(log_softmax(gbase.slice(1, 1, 9, 2), dim),
                     log_softmax(base.slice(1, 1, 9, 2), dim), tolerance(DType::f32));
  }
  Tensor e = zeros({0, 5}, DType::f32);
  check_gpu_parity(softmax(e.to(kGpu), 1), softmax(e, 1), kExact);
  check_gpu_parity(log_softmax(e.to(kGpu), 0), log_softmax(e, 0), kExact);
  Tensor s = scalar_tensor(0.7, DType::f64);
  check_gpu_parity(softmax(s.to(kGpu), 0), softmax(s, 0), kExact);
  check_gpu_parity(log_softmax(s.to(kGpu), -1), log_softmax(s, -1), Tolerance{0.0, 1e-15});
  CHECK_THROWS_AS(softmax(randint(0, 3, {4}, DType::i64).to(kGpu), 0), DTypeError);
}

TEST_CASE("cuda softmax: backward matches the CPU per dtype, rows and columns") {
  for (DType dtype : kFloatTypes) {
    const Tolerance tol = composed_tolerance(dtype);
    for (const Shape& shape : std::vector<Shape>{{4, 5, 6}, {3, 3000}}) {
      for (int64_t dim : {0, 1, -1}) {
        INFO(dtype_name(dtype) << " shape " << shape_str(shape) << " dim " << dim);
        Tensor x = rnd(shape, dtype, 5, -2.0, 2.0);
        check_forward_backward([&](const Tensor& t, Device) { return softmax(t, dim); }, x, tol, 6);
        check_forward_backward([&](const Tensor& t, Device) { return log_softmax(t, dim); }, x, tol,
                               7);
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
  check_gpu_parity(xg.grad(), xc.grad(), tolerance(DType::f64));
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
    const Tolerance tol = composed_tolerance(dtype);
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
              logp, tol, 13);
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
    check_gpu_parity(nll_loss(logp.to(kGpu), target.to(kGpu), Tensor(), 3, reduction),
                     nll_loss(logp, target, Tensor(), 3, reduction), tolerance(DType::f64));
    Tensor t32 = target.to(DType::i32);
    check_gpu_parity(nll_loss(logp.to(kGpu), t32.to(kGpu), Tensor(), 3, reduction),
                     nll_loss(logp, t32, Tensor(), 3, reduction), tolerance(DType::f64));
  }
}

TEST_CASE("cuda loss: cross_entropy with label smoothing, ignore_index and weights") {
  const int64_t ignore = 2;
  for (DType dtype : kFloatTypes) {
    const Tolerance tol = composed_tolerance(dtype);
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
                logits, tol, 19);
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
  check_gpu_parity(got, cross_entropy(logits, target), kExact);
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
    const Tolerance tol = composed_tolerance(dtype);
    Tensor target = rnd({6, 5}, dtype, 22);
    for (Reduction reduction : kReductions) {
      INFO(dtype_name(dtype) << " reduction " << static_cast<int>(reduction));
      check_forward_backward(
          [&](const Tensor& x, Device device) { return mse_loss(x, target.to(device), reduction); },
          rnd({6, 5}, dtype, 23), tol, 24);
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
