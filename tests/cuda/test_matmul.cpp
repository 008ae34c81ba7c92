// GPU checks of matmul, mm, bmm and linear (cuBLAS) against the CPU (Eigen) on the same inputs.
// The executable exits 77 (ctest's skip code) when no GPU is visible.
//
// Tolerances: parity.h's table (inputs in [-1, 1), TF32 off, the default). Both devices accumulate
// 16-bit products in f32 and round once, so only the summation order differs and the results are
// at most one rounding step apart; that holds for K up to 256 here. With TF32 on, f32 is held to
// 1e-2 relative to sum |a||b|.
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "gradcheck.h"
#include "kiln/core/backends.h"
#include "kiln/core/cuda_simulated.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cuda/gemm.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::check_gpu_parity;
using kiln::testing::random_f64;
using kiln::testing::Tolerance;
using kiln::testing::tolerance;

namespace {

const Device kGpu = Device::cuda(0);

Tensor random(const Shape& shape, uint64_t seed, DType dtype) {
  return random_f64(shape, seed).to(dtype);
}

const std::vector<DType> kAllDtypes{DType::f32, DType::f64, DType::f16, DType::bf16};

// Restores the TF32 switch whatever the test does.
struct Tf32Guard {
  bool saved = backends::cuda_matmul_allow_tf32();
  ~Tf32Guard() { backends::set_cuda_matmul_allow_tf32(saved); }
};

}  // namespace

TEST_CASE("cuda matmul: TF32 is off by default") {
  CHECK_FALSE(backends::cuda_matmul_allow_tf32());
}

TEST_CASE("cuda matmul: mm matches the CPU in every dtype") {
  struct Case {
    int64_t m, k, n;
  };
  const std::vector<Case> cases{{1, 1, 1}, {7, 13, 5}, {64, 64, 64}, {33, 256, 17}, {128, 96, 200}};
  for (DType dtype : kAllDtypes) {
    for (const Case& c : cases) {
      INFO(dtype_name(dtype) << " m " << c.m << " k " << c.k << " n " << c.n);
      const Tensor a = random({c.m, c.k}, 1, dtype), b = random({c.k, c.n}, 2, dtype);
      check_gpu_parity(mm(a.to(kGpu), b.to(kGpu)), mm(a, b), tolerance(dtype));
    }
  }
}

TEST_CASE("cuda matmul: transposed and row-sliced operands reach cuBLAS without a copy") {
  for (DType dtype : kAllDtypes) {
    INFO(dtype_name(dtype));
    // Column-major views (a transpose) and row-major views with a leading dimension wider than
    // the matrix (a column range): both are gemm layouts, passed with a transpose flag or an ld.
    const Tensor at = random({9, 6}, 3, dtype), bt = random({11, 9}, 4, dtype);
    const Tensor wide = random({6, 20}, 5, dtype);
    const Tensor a_cpu = at.t(), b_cpu = bt.t();  // [6, 9] and [9, 11]
    const Tensor a_gpu = at.to(kGpu).t(), b_gpu = bt.to(kGpu).t();
    check_gpu_parity(mm(a_gpu, b_gpu), mm(a_cpu, b_cpu), tolerance(dtype));
    const Tensor slice_cpu = wide.narrow(1, 3, 9);  // [6, 9] with row stride 20
    const Tensor slice_gpu = wide.to(kGpu).narrow(1, 3, 9);
    check_gpu_parity(mm(slice_gpu, b_gpu), mm(slice_cpu, b_cpu), tolerance(dtype));
    check_gpu_parity(mm(b_gpu.t(), slice_gpu.t()), mm(b_cpu.t(), slice_cpu.t()), tolerance(dtype));
  }
}

TEST_CASE("cuda matmul: operands with no gemm layout are copied first") {
  // A step-2 column slice and an expanded (stride 0) matrix: as_gemm_operand makes them
  // contiguous on the GPU (this needs the GPU strided copy).
  const Tensor wide = random({8, 14}, 6, DType::f32), b = random({7, 5}, 7, DType::f32);
  const Tensor a_cpu = wide.slice(1, 0, 14, 2);
  const Tensor a_gpu = wide.to(kGpu).slice(1, 0, 14, 2);
  check_gpu_parity(mm(a_gpu, b.to(kGpu)), mm(a_cpu, b), tolerance(DType::f32));
  const Tensor row = random({1, 7}, 8, DType::f32);
  check_gpu_parity(mm(row.to(kGpu).expand({4, 7}), b.to(kGpu)), mm(row.expand({4, 7}), b),
                   tolerance(DType::f32));
}

TEST_CASE("cuda matmul: bmm matches the CPU, with transposed batches") {
  for (DType dtype : kAllDtypes) {
    INFO(dtype_name(dtype));
    const Tensor a = random({5, 6, 7}, 9, dtype), b = random({5, 7, 4}, 10, dtype);
    check_gpu_parity(bmm(a.to(kGpu), b.to(kGpu)), bmm(a, b), tolerance(dtype));
    const Tensor bt = random({5, 4, 7}, 11, dtype);
    check_gpu_parity(bmm(a.to(kGpu), bt.to(kGpu).transpose(1, 2)), bmm(a, bt.transpose(1, 2)),
                     tolerance(dtype));
    // Batch-major storage read batch-minor: the batch stride is the smallest one.
    const Tensor inner = random({6, 5, 7}, 12, dtype);
    check_gpu_parity(bmm(inner.to(kGpu).transpose(0, 1), b.to(kGpu)), bmm(inner.transpose(0, 1), b),
                     tolerance(dtype));
  }
}

TEST_CASE("cuda matmul: matmul broadcasts batch dims and promotes 1-D operands") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16}) {
    INFO(dtype_name(dtype));
    const Tolerance tol = tolerance(dtype);
    // [2, 1, 4, 3] x [3, 3, 5]: batch strides (s, 0) and (0, s') do not fold into one stride,
    // so the product runs as an outer loop over strided-batched calls.
    const Tensor a = random({2, 1, 4, 3}, 13, dtype), b = random({3, 3, 5}, 14, dtype);
    check_gpu_parity(matmul(a.to(kGpu), b.to(kGpu)), matmul(a, b), tol);
    // A stack times one matrix folds into one taller product.
    const Tensor stack = random({3, 4, 6}, 15, dtype), m = random({6, 2}, 16, dtype);
    check_gpu_parity(matmul(stack.to(kGpu), m.to(kGpu)), matmul(stack, m), tol);
    // A matrix times a stack: the matrix is expanded with batch stride 0.
    const Tensor lhs = random({4, 6}, 17, dtype), rhs = random({3, 6, 5}, 18, dtype);
    check_gpu_parity(matmul(lhs.to(kGpu), rhs.to(kGpu)), matmul(lhs, rhs), tol);
    const Tensor v = random({6}, 19, dtype);
    check_gpu_parity(matmul(v.to(kGpu), m.to(kGpu)), matmul(v, m), tol);
    check_gpu_parity(matmul(lhs.to(kGpu), v.to(kGpu)), matmul(lhs, v), tol);
    check_gpu_parity(matmul(v.to(kGpu), v.to(kGpu)), matmul(v, v), tol);
    check_gpu_parity(matmul(rhs.to(kGpu).transpose(1, 2), lhs.to(kGpu).t()),
                     matmul(rhs.transpose(1, 2), lhs.t()), tol);
  }
}

TEST_CASE("cuda matmul: zero-size dims give empty or zero results") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16}) {
    INFO(dtype_name(dtype));
    const Tolerance tol = tolerance(dtype);
    for (const auto& [m, k, n] :
         std::vector<std::array<int64_t, 3>>{{0, 4, 3}, {4, 3, 0}, {4, 0, 3}, {0, 0, 0}}) {
      INFO("m " << m << " k " << k << " n " << n);
      const Tensor a = random({m, k}, 20, dtype), b = random({k, n}, 21, dtype);
      check_gpu_parity(mm(a.to(kGpu), b.to(kGpu)), mm(a, b), tol);
    }
    // k = 0 must write zeros over uninitialised memory, in a batch too.
    const Tensor a = random({3, 4, 0}, 22, dtype), b = random({3, 0, 5}, 23, dtype);
    const Tensor out = bmm(a.to(kGpu), b.to(kGpu));
    check_gpu_parity(out, zeros({3, 4, 5}, dtype), tol);
    check_gpu_parity(
        bmm(random({0, 4, 2}, 24, dtype).to(kGpu), random({0, 2, 5}, 25, dtype).to(kGpu)),
        zeros({0, 4, 5}, dtype), tol);
    // linear with no input features is its bias.
    const Tensor x = random({6, 0}, 26, dtype), w = random({3, 0}, 27, dtype);
    const Tensor bias = random({3}, 28, dtype);
    check_gpu_parity(linear(x.to(kGpu), w.to(kGpu), bias.to(kGpu)), linear(x, w, bias), tol);
  }
}

TEST_CASE("cuda matmul: linear matches the CPU with and without bias") {
  for (DType dtype : kAllDtypes) {
    INFO(dtype_name(dtype));
    const Tolerance tol = tolerance(dtype);
    const Tensor x = random({2, 3, 10}, 29, dtype), w = random({7, 10}, 30, dtype);
    const Tensor bias = random({7}, 31, dtype);
    check_gpu_parity(linear(x.to(kGpu), w.to(kGpu), bias.to(kGpu)), linear(x, w, bias), tol);
    check_gpu_parity(linear(x.to(kGpu), w.to(kGpu)), linear(x, w), tol);
    const Tensor x2 = random({10, 5}, 32, dtype);  // a transposed input
    check_gpu_parity(linear(x2.to(kGpu).t(), w.to(kGpu), bias.to(kGpu)), linear(x2.t(), w, bias),
                     tol);
  }
}

TEST_CASE("cuda matmul: 16-bit products with K = 256 stay within one rounding step") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const Tensor a = random({16, 256}, 33, dtype), b = random({256, 24}, 34, dtype);
    check_gpu_parity(mm(a.to(kGpu), b.to(kGpu)), mm(a, b), tolerance(dtype));
    const Tensor w = random({24, 256}, 35, dtype), bias = random({24}, 36, dtype);
    check_gpu_parity(linear(a.to(kGpu), w.to(kGpu), bias.to(kGpu)), linear(a, w, bias),
                     tolerance(dtype));
  }
}

TEST_CASE("cuda matmul: products queued on two streams from one thread each get their own") {
  // Long k, few outputs: cuBLAS may split k and keep partial sums in its workspace, which each
  // stream of a handle has to itself (kernels/cuda/handles.cpp).
  const int64_t k = 1 << 16;
  const Tensor a = random({8, k}, 37, DType::f32), b = random({k, 8}, 38, DType::f32);
  const Tensor c = random({8, k}, 39, DType::f32), d = random({k, 8}, 40, DType::f32);
  const Tensor ag = a.to(kGpu), bg = b.to(kGpu), cg = c.to(kGpu), dg = d.to(kGpu);
  cuda::Stream side = cuda::Stream::create();
  side.wait_stream(cuda::current_stream());  // the copies above are done before side reads them
  Tensor first = mm(ag, bg), second;
  {
    cuda::StreamGuard on_side(side);
    second = mm(cg, dg);
  }
  cuda::current_stream().wait_stream(side);
  const Tolerance tol = testing::sum_tolerance(DType::f32, static_cast<double>(k));
  check_gpu_parity(first, mm(a, b), tol);
  check_gpu_parity(second, mm(c, d), tol);
}

TEST_CASE("cuda matmul: backward of mm, bmm and broadcast matmul matches the CPU") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tolerance tol = tolerance(dtype);
    struct Case {
      Shape a, b;
    };
    for (const Case& c : std::vector<Case>{{{5, 7}, {7, 3}},
                                           {{4, 5, 6}, {4, 6, 2}},
                                           {{2, 1, 3, 4}, {3, 4, 5}},
                                           {{3, 4, 6}, {6, 2}},
                                           {{6}, {6, 2}}}) {
      INFO("a " << shape_str(c.a) << " b " << shape_str(c.b));
      const Tensor a = random(c.a, 37, dtype), b = random(c.b, 38, dtype);
      Tensor ac = a.clone().requires_grad_(), bc = b.clone().requires_grad_();
      Tensor ag = a.to(kGpu).requires_grad_(), bg = b.to(kGpu).requires_grad_();
      const Tensor out_cpu = matmul(ac, bc);
      const Tensor out_gpu = matmul(ag, bg);
      check_gpu_parity(out_gpu, out_cpu, tol);
      const Tensor r = random(out_cpu.shape(), 39, dtype);
      out_cpu.backward(r);
      out_gpu.backward(r.to(kGpu));
      check_gpu_parity(ag.grad(), ac.grad(), tol);
      check_gpu_parity(bg.grad(), bc.grad(), tol);
    }
  }
}

TEST_CASE("cuda matmul: backward of linear matches the CPU") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16}) {
    INFO(dtype_name(dtype));
    const Tolerance tol = tolerance(dtype);
    const Tensor x = random({2, 3, 8}, 40, dtype), w = random({5, 8}, 41, dtype);
    const Tensor bias = random({5}, 42, dtype);
    Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_();
    Tensor bc = bias.clone().requires_grad_();
    Tensor xg = x.to(kGpu).requires_grad_(), wg = w.to(kGpu).requires_grad_();
    Tensor bg = bias.to(kGpu).requires_grad_();
    const Tensor out_cpu = linear(xc, wc, bc), out_gpu = linear(xg, wg, bg);
    const Tensor r = random(out_cpu.shape(), 43, dtype);
    out_cpu.backward(r);
    out_gpu.backward(r.to(kGpu));
    check_gpu_parity(xg.grad(), xc.grad(), tol);
    check_gpu_parity(wg.grad(), wc.grad(), tol);
    check_gpu_parity(bg.grad(), bc.grad(), tol);
  }
}

TEST_CASE("cuda matmul: gradcheck of matmul and linear on the GPU in f64", "[heavy]") {
  // gradcheck perturbs its leaves on the CPU; the functions move them to the GPU and back, so the
  // analytic gradients come from the GPU backward (through differentiable copies).
  auto on_gpu = [](const Tensor& t) { return t.defined() ? t.to(kGpu) : t; };
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& v) { return matmul(on_gpu(v[0]), on_gpu(v[1])).cpu(); },
      {random_f64({2, 1, 3, 4}, 44), random_f64({3, 4, 2}, 45)});
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& v) {
        return linear(on_gpu(v[0]), on_gpu(v[1]), on_gpu(v[2])).cpu();
      },
      {random_f64({3, 4}, 46), random_f64({2, 4}, 47), random_f64({2}, 48)});
}

TEST_CASE("cuda matmul: cuda::gemm matches cpu::gemm for every transpose, ld and accumulate") {
  // Raw buffers: a, b and c are kiln tensors used as padded row-major storage.
  const int64_t m = 5, n = 7, k = 6, pad = 3;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      for (bool accumulate : {false, true}) {
        INFO("trans_a " << trans_a << " trans_b " << trans_b << " accumulate " << accumulate);
        const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
        const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
        const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
        const Tensor a = random({a_rows, lda}, 49, DType::f32);
        const Tensor b = random({b_rows, ldb}, 50, DType::f32);
        const Tensor c = random({m, ldc}, 51, DType::f32);
        const Tensor ag = a.to(kGpu), bg = b.to(kGpu), cg = c.to(kGpu);
        cpu::gemm<float>(trans_a, trans_b, m, n, k, a.data<float>(), lda, b.data<float>(), ldb,
                         c.data<float>(), ldc, accumulate);
        cuda::gemm<float>(trans_a, trans_b, m, n, k, static_cast<const float*>(ag.data_ptr()), lda,
                          static_cast<const float*>(bg.data_ptr()), ldb,
                          static_cast<float*>(cg.data_ptr()), ldc, accumulate);
        // The padding columns of c are never written, so the whole buffers compare.
        check_gpu_parity(cg, c, tolerance(DType::f32));
      }
    }
  }
}

TEST_CASE("cuda matmul: TF32 on stays within TF32 accuracy") {
  Tf32Guard guard;
  backends::set_cuda_matmul_allow_tf32(true);
  const int64_t k = 256;
  const Tensor a = random({64, k}, 52, DType::f32), b = random({k, 48}, 53, DType::f32);
  const Tensor got = mm(a.to(kGpu), b.to(kGpu)).cpu();
  const Tensor want = mm(a.to(DType::f64), b.to(DType::f64));
  // TF32 keeps 10 mantissa bits of each input: each product is off by up to ~2^-10 relative, so
  // the relative part scales with sum |a||b| rather than with |want|.
  const Tensor scale = mm(abs(a.to(DType::f64)), abs(b.to(DType::f64)));
  check_close(got, want, Tolerance{1e-2, 1e-5}, scale);
  // The simulator's cuBLAS stand-in rounds as TF32 does where the GPU has TF32 tensor cores
  // (compute capability 8.0 and newer), and computes in f32 below (sim_gpu_test_matmul_sm75).
  if (cuda::is_simulated()) {
    backends::set_cuda_matmul_allow_tf32(false);
    const double diff = abs(sub(got, mm(a.to(kGpu), b.to(kGpu)).cpu())).max().item();
    if (cuda::get_device_properties(0).major >= 8)
      CHECK(diff > 0.0);
    else
      CHECK(diff == 0.0);
  }
}

TEST_CASE("cuda matmul: operands on different devices are a DeviceError") {
  const Tensor a = random({2, 3}, 54, DType::f32), b = random({3, 4}, 55, DType::f32);
  CHECK_THROWS_AS(mm(a.to(kGpu), b), DeviceError);
  CHECK_THROWS_AS(linear(a.to(kGpu), b.t(), Tensor()), DeviceError);
}
