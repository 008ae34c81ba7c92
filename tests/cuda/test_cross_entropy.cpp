// The fused GPU cross_entropy (kernels/cuda/cross_entropy.cu) against the CPU's composed
// log_softmax + nll_loss: forward and backward per dtype, label smoothing, ignore_index, class
// weights, every reduction, short and long rows, extra dims, empty batches, and a gradcheck.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cross_entropy_reference.h"
#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::check_gpu_parity;
using kiln::testing::composed_tolerance;
using kiln::testing::gradient_tolerance;
using kiln::testing::kExact;
using kiln::testing::random_f64;
using kiln::testing::relative_to_largest;

namespace {

const Device kGpu = Device::cuda(0);
const DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
const Reduction kReductions[] = {Reduction::none, Reduction::mean, Reduction::sum};
constexpr int64_t kIgnore = -100;

// Class targets in [0, classes) with every `ignore_every`-th one (from the second) ignored.
Tensor targets(const Shape& shape, int64_t classes, int64_t ignore_every, uint64_t seed) {
  Generator gen(seed);
  Tensor t = randint(0, classes, shape, DType::i64, Device::cpu(), &gen);
  std::vector<double> v = t.tolist();
  std::vector<int64_t> values(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    values[i] = ignore_every > 0 && i % ignore_every == 1 ? kIgnore : static_cast<int64_t>(v[i]);
  return tensor(values).reshape(shape);
}

struct Case {
  Shape shape;  // the logits'
  DType dtype;
  double smoothing;
  bool weighted;
  Reduction reduction;
};

bool all_finite(const Tensor& t) {
  for (double v : t.to(DType::f64).cpu().tolist())
    if (!std::isfinite(v)) return false;
  return true;
}

// Runs the case on the GPU and twice on the CPU: in the same dtype (the composed path) and in f64
// on the same (rounded) values. Each comparison is relative to the largest |want| as well as to
// each |want| (relative_to_largest): a loss's gradient subtracts terms of the size of the largest.
void check_case(const Case& c, uint64_t seed) {
  INFO(dtype_name(c.dtype) << " shape " << shape_str(c.shape) << " smoothing " << c.smoothing
                           << " weighted " << c.weighted << " reduction "
                           << static_cast<int>(c.reduction));
  const bool unbatched = c.shape.size() == 1;
  const int64_t classes = c.shape[unbatched ? 0 : 1];
  Shape target_shape = c.shape;
  target_shape.erase(target_shape.begin() + (unbatched ? 0 : 1));
  const Tensor logits = random_f64(c.shape, seed, -4.0, 4.0).to(c.dtype);
  const Tensor target = targets(target_shape, classes, 3, seed + 1);
  const Tensor weight =
      c.weighted ? random_f64({classes}, seed + 2, 0.5, 2.0).to(c.dtype) : Tensor();

  auto run = [&](DType dtype, Device device, Tensor& grad) {
    // A fresh leaf per run: .to() of a tensor already of that dtype and device returns the tensor
    // itself, so marking it would make `logits` a leaf shared by the runs (its gradient then
    // accumulates over them) or, once it requires grad, turn the next .to() into a non-leaf.
    Tensor x = logits.to(dtype).to(device).detach();
    x.requires_grad_();
    Tensor y = cross_entropy(x, target.to(device),
                             weight.defined() ? weight.to(dtype).to(device) : Tensor(), kIgnore,
                             c.reduction, c.smoothing);
    const Tensor gy = random_f64(y.shape(), seed + 3, 0.5, 1.5).to(c.dtype).to(dtype);
    y.backward(gy.to(device));
    grad = x.grad();
    return y;
  };
  Tensor grad_gpu, grad_cpu, grad_ref;
  const Tensor y_gpu = run(c.dtype, kGpu, grad_gpu);
  const Tensor y_cpu = run(c.dtype, Device::cpu(), grad_cpu);
  const Tensor y_ref = run(DType::f64, Device::cpu(), grad_ref);
  REQUIRE(y_gpu.dtype() == c.dtype);
  REQUIRE(grad_gpu.defined());
  REQUIRE(grad_gpu.dtype() == c.dtype);
  CHECK(y_gpu.device() == kGpu);
  CHECK(grad_gpu.device() == kGpu);
  // Against the CPU in the same dtype the CPU rounds log-probabilities (and, in 16-bit floats, each
  // op of the backward) to the dtype while the fused kernels keep f32: composed_tolerance.
  const double rtol = composed_tolerance(c.dtype).rtol;
  // The composed CPU path rounds each op's result to the dtype: in f16, label smoothing's sum of
  // log-probabilities over 5000 classes and 9 rows passes f16's largest value and is inf, where
  // the fused kernel accumulates in f32 (seen when the CUDA simulator first ran this case). The
  // f64 reference below judges the GPU's loss there.
  if (all_finite(y_cpu) || !all_finite(y_ref))
    check_gpu_parity(y_gpu, y_cpu, relative_to_largest(rtol, y_cpu));
  check_gpu_parity(grad_gpu, grad_cpu, relative_to_largest(rtol, grad_cpu));
  // The fused kernels round once, at the end: within about one unit of the dtype of f64 (the
  // table's value in f32 and f64, four times it in 16-bit floats: gradient_tolerance).
  const double ref_rtol = gradient_tolerance(c.dtype).rtol;
  check_close(y_gpu, y_ref, relative_to_largest(ref_rtol, y_ref));
  check_close(grad_gpu, grad_ref, relative_to_largest(ref_rtol, grad_ref));
}

}  // namespace

TEST_CASE("cuda cross_entropy: fused forward and backward match the CPU, C = 10") {
  uint64_t seed = 100;
  for (DType dtype : kFloatTypes)
    for (double smoothing : {0.0, 0.1})
      for (bool weighted : {false, true})
        for (Reduction reduction : kReductions)
          check_case({{37, 10}, dtype, smoothing, weighted, reduction}, seed += 10);
}

TEST_CASE("cuda cross_entropy: fused forward and backward match the CPU, C = 5000", "[heavy]") {
  uint64_t seed = 200;
  for (DType dtype : kFloatTypes)
    for (double smoothing : {0.0, 0.1})
      for (bool weighted : {false, true})
        for (Reduction reduction : kReductions)
          check_case({{9, 5000}, dtype, smoothing, weighted, reduction}, seed += 10);
}

TEST_CASE("cuda cross_entropy: rows across block sizes, many rows") {
  uint64_t seed = 300;
  for (int64_t classes : {1, 31, 33, 129, 1025, 50000})
    for (Reduction reduction : kReductions)
      check_case({{classes == 50000 ? 3 : 700, classes}, DType::f32, 0.1, true, reduction},
                 seed += 10);
  check_case({{70000, 3}, DType::f32, 0.1, false, Reduction::mean}, seed += 10);
}

TEST_CASE("cuda cross_entropy: extra dims and unbatched logits") {
  uint64_t seed = 400;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16})
    for (Reduction reduction : kReductions) {
      check_case({{3, 7, 4, 2}, dtype, 0.1, true, reduction}, seed += 10);
      check_case({{11}, dtype, 0.2, false, reduction}, seed += 10);
    }
}

TEST_CASE("cuda cross_entropy: label smoothing 1, the whole target spread over the classes") {
  uint64_t seed = 500;
  for (bool weighted : {false, true})
    for (Reduction reduction : kReductions)
      check_case({{8, 6}, DType::f64, 1.0, weighted, reduction}, seed += 10);
}

TEST_CASE("cuda cross_entropy: PyTorch's values, smoothing 0 to 1, weights, ignore_index") {
  kiln::testing::check_cross_entropy_against_torch(kGpu, DType::f64);
  kiln::testing::check_cross_entropy_against_torch(kGpu, DType::f32);
}

TEST_CASE("cuda cross_entropy: an empty batch") {
  for (DType dtype : kFloatTypes)
    for (Reduction reduction : kReductions) {
      INFO(dtype_name(dtype) << " reduction " << static_cast<int>(reduction));
      Tensor x = zeros({0, 10}, dtype, kGpu);
      x.requires_grad_();
      Tensor t = zeros({0}, DType::i64, kGpu);
      Tensor y = cross_entropy(x, t, Tensor(), kIgnore, reduction, 0.1);
      Tensor want = cross_entropy(zeros({0, 10}, dtype), zeros({0}, DType::i64), Tensor(), kIgnore,
                                  reduction, 0.1);
      REQUIRE(y.shape() == want.shape());
      if (reduction == Reduction::mean) CHECK(std::isnan(y.item<double>()));  // 0 / 0, as PyTorch
      if (reduction == Reduction::sum) CHECK(y.item<double>() == 0.0);
      sum(y).backward();
      REQUIRE(x.grad().defined());
      CHECK(x.grad().shape() == Shape{0, 10});
    }
}

TEST_CASE("cuda cross_entropy: every target ignored gives nan under mean and zero gradients") {
  Tensor logits = random_f64({4, 3}, 600).to(DType::f32);
  Tensor target = tensor(std::vector<int64_t>{kIgnore, kIgnore, kIgnore, kIgnore});
  Tensor x = logits.to(kGpu);
  x.requires_grad_();
  Tensor y = cross_entropy(x, target.to(kGpu), Tensor(), kIgnore, Reduction::mean, 0.1);
  CHECK(std::isnan(y.item<double>()));
  CHECK(std::isnan(
      cross_entropy(logits, target, Tensor(), kIgnore, Reduction::mean, 0.1).item<double>()));
  y.backward();
  check_gpu_parity(x.grad(), zeros({4, 3}, DType::f32), kExact);
}

TEST_CASE("cuda cross_entropy: the GPU records the fused backward node") {
  Tensor x = random_f64({4, 5}, 700).to(kGpu);
  x.requires_grad_();
  Tensor y = cross_entropy(x, tensor(std::vector<int64_t>{0, 1, 2, 3}).to(kGpu));
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "CrossEntropyBackward");
}

TEST_CASE("cuda cross_entropy: f64 gradcheck of the fused GPU path", "[heavy]") {
  Tensor logits = random_f64({6, 5}, 800, -2.0, 2.0);
  Tensor target = targets({6}, 5, 4, 801);
  Tensor weight = random_f64({5}, 802, 0.5, 2.0);
  Tensor tg = target.to(kGpu), wg = weight.to(kGpu);
  for (double smoothing : {0.0, 0.1})
    for (bool weighted : {false, true})
      for (Reduction reduction : kReductions) {
        INFO("smoothing " << smoothing << " weighted " << weighted << " reduction "
                          << static_cast<int>(reduction));
        CHECK_GRADCHECK(
            [&](const std::vector<Tensor>& in) {
              return cross_entropy(in[0].to(kGpu), tg, weighted ? wg : Tensor(), kIgnore, reduction,
                                   smoothing)
                  .cpu();
            },
            {logits});
      }
}
