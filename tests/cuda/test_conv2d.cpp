// GPU checks of conv2d and its gradient ops (cuDNN) against the CPU (im2col + GEMM) on the same
// inputs, over a table of geometries. The executable exits 77 (ctest's skip code) when no GPU is
// visible.
//
// Tolerances: parity.h's table (inputs in [-1, 1), TF32 off, the default), five times looser in
// f16 (conv_tolerance).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/core/backends.h"
#include "kiln/core/cuda_simulated.h"
#include "kiln/kernels/conv2d.h"
#include "kiln/kiln.h"
#include "kiln/ops/conv.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::check_gpu_parity;
using kiln::testing::kExact;
using kiln::testing::random_f64;
using kiln::testing::Tolerance;
using kiln::testing::tolerance;

namespace {

const Device kGpu = Device::cuda(0);

// The table's tolerance, except in f16: cuDNN's f16 algorithms (Winograd, FFT) may round
// transformed operands to f16 before their f32 sums, so five times the table's value there (the
// parity harness's cudnn_f16 allowance in op_table.cpp).
Tolerance conv_tolerance(DType dtype) {
  return dtype == DType::f16 ? tolerance(dtype).times(5.0) : tolerance(dtype);
}

Tensor random(const Shape& shape, uint64_t seed, DType dtype) {
  return random_f64(shape, seed).to(dtype);
}

struct Geometry {
  Shape x, w;
  Pair stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

std::string describe_geometry(const Geometry& g) {
  return "x " + shape_str(g.x) + " w " + shape_str(g.w) + " stride [" +
         std::to_string(g.stride[0]) + ", " + std::to_string(g.stride[1]) + "] padding [" +
         std::to_string(g.padding[0]) + ", " + std::to_string(g.padding[1]) + "] dilation [" +
         std::to_string(g.dilation[0]) + ", " + std::to_string(g.dilation[1]) + "] groups " +
         std::to_string(g.groups);
}

// Stride 1 and 2, padding 0 and 1 (and uneven), dilation 2, groups 2 and depthwise, 1x1, 3x3,
// 5x5 and non-square kernels, non-square images.
const std::vector<Geometry> kGeometries{
    {{2, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {{2, 3, 9, 7}, {5, 3, 3, 3}, {2, 2}, {0, 0}, {1, 1}, 1},
    {{1, 4, 10, 10}, {6, 4, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
    {{2, 4, 9, 9}, {3, 4, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1},
    {{2, 2, 11, 9}, {3, 2, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},
    {{2, 4, 12, 10}, {4, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},
    {{1, 3, 13, 11}, {2, 3, 3, 3}, {2, 1}, {1, 2}, {2, 2}, 1},
    {{2, 6, 7, 7}, {6, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 6},
    {{2, 3, 6, 9}, {4, 3, 3, 2}, {1, 2}, {0, 1}, {1, 1}, 1},
    {{3, 8, 16, 16}, {16, 4, 3, 3}, {2, 2}, {1, 1}, {2, 2}, 2},
};

// The GPU results of one geometry: conv2d with bias, and both gradient ops for a fixed grad_out.
struct Results {
  Tensor out, grad_x, grad_w;
};

// In f32 accuracy unless tf32 (the GPU's default for f32 convolutions) is asked for; every 4-D
// operand laid out as `format` says.
Results run(const Geometry& g, DType dtype, Device device, bool tf32 = false,
            MemoryFormat format = MemoryFormat::contiguous) {
  const backends::Tf32Scope scope(tf32);
  const Tensor x = random(g.x, 1, dtype).to(device).to(format);
  const Tensor w = random(g.w, 2, dtype).to(device).to(format);
  const Tensor b = random({g.w[0]}, 3, dtype).to(device);
  Results r;
  r.out = conv2d(x, w, b, g.stride, g.padding, g.dilation, g.groups);
  const Tensor grad_out = random(r.out.shape(), 4, dtype).to(device).to(format);
  r.grad_x = conv2d_backward_input(grad_out, w, g.x, g.stride, g.padding, g.dilation, g.groups);
  r.grad_w = conv2d_backward_weight(grad_out, x, g.w, g.stride, g.padding, g.dilation, g.groups);
  return r;
}

void check_against_cpu(DType dtype) {
  for (const Geometry& g : kGeometries) {
    INFO(dtype_name(dtype) << " " << describe_geometry(g));
    const Results want = run(g, dtype, Device::cpu()), got = run(g, dtype, kGpu);
    check_gpu_parity(got.out, want.out, conv_tolerance(dtype));
    check_gpu_parity(got.grad_x, want.grad_x, conv_tolerance(dtype));
    check_gpu_parity(got.grad_w, want.grad_w, conv_tolerance(dtype));
  }
}

// Restores every switch whatever the test does.
struct BackendsGuard {
  bool benchmark = backends::cudnn_benchmark();
  bool deterministic = backends::cudnn_deterministic();
  bool tf32 = backends::cudnn_allow_tf32();
  backends::CudnnApi api = backends::cudnn_api();
  ~BackendsGuard() {
    backends::set_cudnn_api(api);
    backends::set_cudnn_benchmark(benchmark);
    backends::set_cudnn_deterministic(deterministic);
    backends::set_cudnn_allow_tf32(tf32);
  }
};

}  // namespace

TEST_CASE("cuda conv2d: the cuDNN switches are PyTorch's defaults, but for the API") {
  // The legacy API, which ran on a GPU, until the graph API has (core/backends.h).
  if (std::getenv("KILN_CUDNN_API") == nullptr)
    CHECK(backends::cudnn_api() == backends::CudnnApi::v7);
  CHECK_FALSE(backends::cudnn_benchmark());
  CHECK_FALSE(backends::cudnn_deterministic());
  CHECK(backends::cudnn_allow_tf32());
  CHECK_FALSE(backends::cuda_matmul_allow_tf32());
}

TEST_CASE("cuda conv2d: forward and both gradients match the CPU in f32", "[heavy]") {
  check_against_cpu(DType::f32);
}

TEST_CASE("cuda conv2d: forward and both gradients match the CPU in f64", "[heavy]") {
  check_against_cpu(DType::f64);
}

TEST_CASE("cuda conv2d: forward and both gradients match the CPU in f16", "[heavy]") {
  check_against_cpu(DType::f16);
}

TEST_CASE("cuda conv2d: forward and both gradients match the CPU in bf16", "[heavy]") {
  check_against_cpu(DType::bf16);
}

// The light version of the four table cases above, for the sanitizer runs (scripts/gpu-check.sh
// skips [heavy]): every dtype through a plain and a strided, dilated geometry.
TEST_CASE("cuda conv2d: two geometries per dtype, forward and both gradients") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (const Geometry& g : {kGeometries[0], kGeometries[6]}) {
      INFO(dtype_name(dtype) << " " << describe_geometry(g));
      const Results want = run(g, dtype, Device::cpu()), got = run(g, dtype, kGpu);
      check_gpu_parity(got.out, want.out, conv_tolerance(dtype));
      check_gpu_parity(got.grad_x, want.grad_x, conv_tolerance(dtype));
      check_gpu_parity(got.grad_w, want.grad_w, conv_tolerance(dtype));
    }
}

TEST_CASE("cuda conv2d: backward through autograd matches the CPU, bias included") {
  const backends::Tf32Scope f32(false);
  for (DType dtype : {DType::f32, DType::f64}) {
    const Geometry& g = kGeometries[5];  // groups 2, padding 1
    INFO(dtype_name(dtype) << " " << describe_geometry(g));
    const Tensor x = random(g.x, 5, dtype), w = random(g.w, 6, dtype);
    const Tensor b = random({g.w[0]}, 7, dtype);
    Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_();
    Tensor bc = b.clone().requires_grad_();
    Tensor xg = x.to(kGpu).requires_grad_(), wg = w.to(kGpu).requires_grad_();
    Tensor bg = b.to(kGpu).requires_grad_();
    const Tensor out_cpu = conv2d(xc, wc, bc, g.stride, g.padding, g.dilation, g.groups);
    const Tensor out_gpu = conv2d(xg, wg, bg, g.stride, g.padding, g.dilation, g.groups);
    check_gpu_parity(out_gpu, out_cpu, tolerance(dtype));
    const Tensor r = random(out_cpu.shape(), 8, dtype);
    out_cpu.backward(r);
    out_gpu.backward(r.to(kGpu));
    check_gpu_parity(xg.grad(), xc.grad(), tolerance(dtype));
    check_gpu_parity(wg.grad(), wc.grad(), tolerance(dtype));
    check_gpu_parity(bg.grad(), bc.grad(), tolerance(dtype));
  }
}

TEST_CASE("cuda conv2d: non-contiguous inputs are made contiguous first") {
  const backends::Tf32Scope f32(false);
  const Tensor x = random({2, 3, 8, 8}, 9, DType::f32), w = random({4, 3, 3, 3}, 10, DType::f32);
  const Tensor x_cpu = x.transpose(2, 3), x_gpu = x.to(kGpu).transpose(2, 3);
  check_gpu_parity(conv2d(x_gpu, w.to(kGpu), Tensor(), {1, 1}, {1, 1}),
                   conv2d(x_cpu, w, Tensor(), {1, 1}, {1, 1}), tolerance(DType::f32));
}

TEST_CASE("cuda conv2d: benchmark mode gives the heuristics' results", "[heavy]") {
  BackendsGuard guard;
  for (DType dtype : {DType::f32, DType::f64, DType::f16}) {
    for (const Geometry& g : kGeometries) {
      INFO(dtype_name(dtype) << " " << describe_geometry(g));
      backends::set_cudnn_benchmark(false);
      const Results heuristic = run(g, dtype, kGpu);
      backends::set_cudnn_benchmark(true);
      const Results measured = run(g, dtype, kGpu);
      const Results again = run(g, dtype, kGpu);  // from the cache this time
      // Different algorithms sum in different orders: close, not identical.
      check_close(measured.out, heuristic.out, conv_tolerance(dtype));
      check_close(measured.grad_x, heuristic.grad_x, conv_tolerance(dtype));
      check_close(measured.grad_w, heuristic.grad_w, conv_tolerance(dtype));
      check_close(again.out, heuristic.out, conv_tolerance(dtype));
    }
  }
}

TEST_CASE("cuda conv2d: deterministic mode repeats bit for bit", "[heavy]") {
  BackendsGuard guard;
  backends::set_cudnn_deterministic(true);
  for (bool benchmark : {false, true}) {
    backends::set_cudnn_benchmark(benchmark);
    for (DType dtype : {DType::f32, DType::f16}) {
      for (const Geometry& g : kGeometries) {
        INFO("benchmark " << benchmark << " " << dtype_name(dtype) << " " << describe_geometry(g));
        const Results first = run(g, dtype, kGpu), second = run(g, dtype, kGpu);
        // Bit for bit: the same algorithms, summing in the same order.
        check_close(second.out, first.out, kExact);
        check_close(second.grad_x, first.grad_x, kExact);
        check_close(second.grad_w, first.grad_w, kExact);
        check_gpu_parity(first.out, run(g, dtype, Device::cpu()).out, conv_tolerance(dtype));
      }
    }
  }
}

// Without deterministic mode cuDNN may pick algorithms whose backward sums change order run to
// run; the simulator's stand-in always varies them then (docs/simulator.md, "Strictness"), so a
// byte-exact comparison that did not ask for determinism fails there as it may on a GPU.
TEST_CASE("cuda conv2d: a byte-exact repeat without deterministic mode fails on the simulator") {
  if (!cuda::is_simulated()) {
    WARN("SKIPPED: whether cuDNN's backward sums vary depends on the algorithms it picks");
    return;
  }
  BackendsGuard guard;
  const bool varies = cuda::simulator_varies_library_sums();
  const Geometry& g = kGeometries[0];
  const auto differs = [](const Tensor& a, const Tensor& b) {
    return abs(sub(a, b)).max().item() > 0.0;
  };
  backends::set_cudnn_deterministic(false);
  cuda::set_simulator_varies_library_sums(true);
  const Results first = run(g, DType::f32, kGpu), second = run(g, DType::f32, kGpu);
  CHECK_FALSE(differs(second.out, first.out));  // the forward pass is deterministic
  CHECK(differs(second.grad_x, first.grad_x));  // the planted byte-exact check fails
  CHECK(differs(second.grad_w, first.grad_w));
  check_close(second.grad_w, first.grad_w, conv_tolerance(DType::f32));  // but only in rounding
  backends::set_cudnn_deterministic(true);                               // asked for: bit for bit
  Results a = run(g, DType::f32, kGpu), b = run(g, DType::f32, kGpu);
  CHECK_FALSE(differs(b.grad_x, a.grad_x));
  CHECK_FALSE(differs(b.grad_w, a.grad_w));
  backends::set_cudnn_deterministic(false);
  cuda::set_simulator_varies_library_sums(false);  // KILN_SIM_VARIED_SUMS=0: the check passes
  a = run(g, DType::f32, kGpu);
  b = run(g, DType::f32, kGpu);
  CHECK_FALSE(differs(b.grad_x, a.grad_x));
  CHECK_FALSE(differs(b.grad_w, a.grad_w));
  cuda::set_simulator_varies_library_sums(varies);
}

// A full GPU: a workspace cuDNN's chosen algorithm needs cannot be allocated. The graph API hands
// the call to the legacy API, counted as a fallback with the reason; the legacy API runs another
// algorithm; the results are right either way. backends::fail_cudnn_workspaces makes the next
// allocations fail on a GPU and on the simulator, whose stand-in asks for a workspace as kiln's
// cuDNN paths do.
TEST_CASE("cuda conv2d: a workspace that cannot be allocated falls back visibly") {
  BackendsGuard guard;
  backends::set_cudnn_deterministic(true);
  const Geometry& g = kGeometries.back();
  const Results want = run(g, DType::f32, Device::cpu());
  for (backends::CudnnApi api : {backends::CudnnApi::v7, backends::CudnnApi::v9}) {
    INFO(backends::cudnn_api_name(api));
    backends::set_cudnn_api(api);
    const backends::CudnnApiCounts before = backends::cudnn_api_counts();
    constexpr int kFailing = 3;
    backends::fail_cudnn_workspaces(kFailing);
    const Results got = run(g, DType::f32, kGpu);
    const int failed = kFailing - backends::failing_cudnn_workspaces();
    backends::fail_cudnn_workspaces(0);
    const backends::CudnnApiCounts after = backends::cudnn_api_counts();
    INFO("workspaces failed " << failed << ", last fallback: " << after.last_fallback_reason);
    // The stand-in asks for one in every pass; on a GPU, a pass whose algorithms need none asks
    // for none.
    if (cuda::is_simulated()) CHECK(failed == kFailing);
    if (api == backends::CudnnApi::v9 && failed > 0) {
      CHECK(after.v9_fallbacks > before.v9_fallbacks);
      CHECK_THAT(after.last_fallback_reason,
                 Catch::Matchers::Contains("workspace") && Catch::Matchers::Contains("legacy API"));
    } else {
      CHECK(after.v9_fallbacks == before.v9_fallbacks);
    }
    check_gpu_parity(got.out, want.out, conv_tolerance(DType::f32));
    check_gpu_parity(got.grad_x, want.grad_x, conv_tolerance(DType::f32));
    check_gpu_parity(got.grad_w, want.grad_w, conv_tolerance(DType::f32));
  }
  CHECK_THROWS_AS(backends::fail_cudnn_workspaces(-1), ValueError);
}

TEST_CASE("cuda conv2d: TF32 on stays within TF32 accuracy") {
  const Geometry& g = kGeometries.back();
  const Results got = run(g, DType::f32, kGpu, true), want = run(g, DType::f64, Device::cpu());
  // TF32 keeps 10 mantissa bits of each operand, so a sum of k terms of size <= 1 may be off by
  // k * 2^-10: k = 36 (forward), 72 (input gradient) and 147 (weight gradient) here.
  check_close(got.out, want.out, Tolerance{0.0, 36.0 / 1024});
  check_close(got.grad_x, want.grad_x, Tolerance{0.0, 72.0 / 1024});
  check_close(got.grad_w, want.grad_w, Tolerance{0.0, 147.0 / 1024});
  // The simulator rounds as TF32 does (kernels/cuda/simulator/conv2d.cpp); cuDNN on a GPU may
  // pick an algorithm without tensor cores for a problem this small, so only there is the
  // difference from f32 certain. TF32 tensor cores came with compute capability 8.0: below it
  // (sim_gpu_test_conv2d_sm75) cuDNN computes f32 in f32 whatever the switch says, as the
  // simulator does there.
  // Deterministic sums, so that only TF32 can make a difference.
  if (cuda::is_simulated()) {
    BackendsGuard guard;
    backends::set_cudnn_deterministic(true);
    const Results tf32 = run(g, DType::f32, kGpu, true), f32 = run(g, DType::f32, kGpu, false);
    const double out_diff = abs(sub(tf32.out, f32.out)).max().item();
    const double grad_w_diff = abs(sub(tf32.grad_w, f32.grad_w)).max().item();
    if (cuda::get_device_properties(0).major >= 8) {
      CHECK(out_diff > 0.0);
      CHECK(grad_w_diff > 0.0);
    } else {
      CHECK(out_diff == 0.0);
      CHECK(grad_w_diff == 0.0);
    }
  }
}

// cuDNN has bf16 kernels from compute capability 8.0 on. Below it (a T4 or an RTX 20, and the
// simulator at 7.5: sim_gpu_test_conv2d_sm75) the op computes bf16 in f32, the result rounded
// back, so that it runs there; the table itself, called as the op would without that route,
// refuses bf16 naming the GPU: on the simulator its cuDNN stand-in refuses what cuDNN refuses.
TEST_CASE("cuda conv2d: bf16 runs on every GPU, in f32 below compute capability 8.0") {
  BackendsGuard guard;
  const Geometry& g = kGeometries[0];
  const Results want = run(g, DType::bf16, Device::cpu()), got = run(g, DType::bf16, kGpu);
  check_gpu_parity(got.out, want.out, conv_tolerance(DType::bf16));
  check_gpu_parity(got.grad_x, want.grad_x, conv_tolerance(DType::bf16));
  check_gpu_parity(got.grad_w, want.grad_w, conv_tolerance(DType::bf16));

  const cuda::DeviceProperties gpu = cuda::get_device_properties(0);
  const Conv2dKernels& table = *Conv2dKernels::cuda;
  REQUIRE(table.takes_bf16 != nullptr);
  CHECK(table.takes_bf16(0) == (gpu.major >= 8));
  const Tensor x = random(g.x, 1, DType::bf16).to(kGpu);
  const Tensor w = random(g.w, 2, DType::bf16).to(kGpu);
  Conv2dGeometry geometry;
  geometry.batch = g.x[0], geometry.in_channels = g.x[1], geometry.in_h = g.x[2];
  geometry.in_w = g.x[3], geometry.out_channels = g.w[0], geometry.kernel_h = g.w[2];
  geometry.kernel_w = g.w[3], geometry.pad_h = g.padding[0], geometry.pad_w = g.padding[1];
  geometry.out_h = g.x[2] + 2 * g.padding[0] - g.w[2] + 1;
  geometry.out_w = g.x[3] + 2 * g.padding[1] - g.w[3] + 1;
  const Tensor out = empty({g.x[0], g.w[0], geometry.out_h, geometry.out_w}, DType::bf16, kGpu);
  const auto direct = [&] { table.forward(x, w, Tensor(), out, geometry); };
  if (gpu.major >= 8) {
    direct();
    check_gpu_parity(out, conv2d(x, w, Tensor(), g.stride, g.padding).cpu(), kExact);
    return;
  }
  // The route: the f32 convolution of the same numbers, rounded to bf16, bit for bit.
  backends::set_cudnn_allow_tf32(false);
  const Tensor in_f32 = conv2d(x.to(DType::f32), w.to(DType::f32), Tensor(), g.stride, g.padding);
  check_gpu_parity(conv2d(x, w, Tensor(), g.stride, g.padding), in_f32.to(DType::bf16).cpu(),
                   kExact);
  // The planted bug: without the route the call is refused, with cuDNN's reason and the GPU.
  CHECK_THROWS_WITH(
      direct(),
      Catch::Matchers::Contains("cuDNN has no bf16 kernels below compute capability 8.0") &&
          Catch::Matchers::Contains("cuda:0 (" + gpu.name + ") is " + std::to_string(gpu.major) +
                                    "." + std::to_string(gpu.minor)));
}

TEST_CASE("cuda conv2d: zero-size batch, channels and outputs") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tolerance tol = tolerance(dtype);
    // Empty batch: empty output and input gradient, a zero weight gradient.
    const Geometry empty_batch{{0, 3, 6, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1};
    const Results want = run(empty_batch, dtype, Device::cpu());
    const Results got = run(empty_batch, dtype, kGpu);
    check_gpu_parity(got.out, want.out, tol);
    check_gpu_parity(got.grad_x, want.grad_x, tol);
    check_gpu_parity(got.grad_w, want.grad_w, tol);
    // No input channels: the output is the bias alone.
    const Geometry no_channels{{2, 0, 5, 5}, {3, 0, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1};
    const Results want_nc = run(no_channels, dtype, Device::cpu());
    const Results got_nc = run(no_channels, dtype, kGpu);
    check_gpu_parity(got_nc.out, want_nc.out, tol);
    check_gpu_parity(got_nc.grad_x, want_nc.grad_x, tol);
    check_gpu_parity(got_nc.grad_w, want_nc.grad_w, tol);
    // No output channels: empty output, a zero input gradient.
    const Geometry no_outputs{{2, 3, 5, 5}, {0, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1};
    const Results want_no = run(no_outputs, dtype, Device::cpu());
    const Results got_no = run(no_outputs, dtype, kGpu);
    check_gpu_parity(got_no.out, want_no.out, tol);
    check_gpu_parity(got_no.grad_x, want_no.grad_x, tol);
    check_gpu_parity(got_no.grad_w, want_no.grad_w, tol);
  }
}

TEST_CASE("cuda conv2d: an image of zero height with padding is a ShapeError, not a cuDNN call") {
  Tensor x = zeros({1, 3, 0, 4}, DType::f32, kGpu), w = ones({8, 3, 1, 1}, DType::f32, kGpu);
  CHECK_THROWS_WITH(conv2d(x, w, Tensor(), {1, 1}, {1, 0}),
                    Catch::Contains("conv2d: only an empty batch or zero channels"));
}

TEST_CASE("cuda conv2d: gradcheck on the GPU in f64", "[heavy]") {
  // gradcheck perturbs its leaves on the CPU; the function moves them to the GPU and back, so the
  // analytic gradients come from the GPU backward (through differentiable copies).
  for (const Geometry& g : {kGeometries[5], kGeometries[6]}) {
    INFO(describe_geometry(g));
    CHECK_GRADCHECK(
        [&](const std::vector<Tensor>& v) {
          return conv2d(v[0].to(kGpu), v[1].to(kGpu), v[2].to(kGpu), g.stride, g.padding,
                        g.dilation, g.groups)
              .cpu();
        },
        {random_f64(g.x, 11), random_f64(g.w, 12), random_f64({g.w[0]}, 13)});
  }
}

TEST_CASE("cuda conv2d: operands on different devices are a DeviceError") {
  const Tensor x = random({1, 2, 5, 5}, 14, DType::f32), w = random({3, 2, 3, 3}, 15, DType::f32);
  CHECK_THROWS_AS(conv2d(x.to(kGpu), w), DeviceError);
  CHECK_THROWS_AS(conv2d(x.to(kGpu), w.to(kGpu), random({3}, 16, DType::f32)), DeviceError);
}

TEST_CASE("cuda conv2d: channels-last runs cuDNN's NHWC path and keeps the layout") {
  const backends::Tf32Scope f32(false);
  for (DType dtype : {DType::f32, DType::f16}) {
    INFO(dtype_name(dtype));
    const Geometry& g = kGeometries[0];
    const Tensor x = random(g.x, 17, dtype), w = random(g.w, 18, dtype);
    Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_();
    Tensor xg = x.to(kGpu).to(MemoryFormat::channels_last).requires_grad_();
    Tensor wg = w.to(kGpu).to(MemoryFormat::channels_last).requires_grad_();
    const Tensor want = conv2d(xc, wc, Tensor(), g.stride, g.padding);
    const Tensor got = conv2d(xg, wg, Tensor(), g.stride, g.padding);
    CHECK(got.suggest_memory_format() == MemoryFormat::channels_last);
    check_gpu_parity(got, want, conv_tolerance(dtype));
    const Tensor r = random(want.shape(), 19, dtype);
    want.backward(r);
    got.backward(r.to(kGpu).to(MemoryFormat::channels_last));
    CHECK(xg.grad().suggest_memory_format() == MemoryFormat::channels_last);
    CHECK(wg.grad().suggest_memory_format() == MemoryFormat::channels_last);
    check_gpu_parity(xg.grad(), xc.grad(), conv_tolerance(dtype));
    check_gpu_parity(wg.grad(), wc.grad(), conv_tolerance(dtype));
  }
}

TEST_CASE("cuda conv2d: a ResNet-20 trained in channels-last matches NCHW on the GPU") {
  const backends::Tf32Scope f32(false);
  auto train = [](MemoryFormat format) {
    manual_seed(5);
    auto net = nn::resnet20();
    net->to(kGpu).to(format);
    optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    for (int step = 0; step < 2; ++step) {
      const Tensor x = random({4, 3, 8, 8}, 20 + step, DType::f32).to(kGpu).to(format);
      const Tensor y = arange(4).to(kGpu);
      opt.zero_grad();
      cross_entropy(net->forward(x), y).backward();
      opt.step();
    }
    return net;
  };
  auto nchw = train(MemoryFormat::contiguous), nhwc = train(MemoryFormat::channels_last);
  const auto want = nchw->named_parameters(), got = nhwc->named_parameters();
  REQUIRE(want.size() == got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    INFO(want[k].first);
    if (got[k].second.dim() == 4)
      CHECK(got[k].second.suggest_memory_format() == MemoryFormat::channels_last);
    // cuDNN may choose other algorithms for NHWC: f32 sums in another order.
    check_close(got[k].second.cpu(), want[k].second.cpu(), tolerance(DType::f32).times(10.0));
  }
}

// Both cuDNN APIs, each layout, f32 with TF32 off and on, f16 and bf16, against the CPU; the
// counts prove which API ran each pass (v9 must not have fallen back to v7). The simulator runs
// neither API (its conv2d is a CPU stand-in, kernels/cuda/simulator/conv2d.cpp), so only a GPU
// runs this.
TEST_CASE("cuda conv2d: the v7 and v9 cuDNN APIs match the CPU in NCHW and NHWC") {
  if (cuda::is_simulated()) {
    WARN("SKIPPED: the simulator runs neither cuDNN API; a GPU runs this case");
    return;
  }
  BackendsGuard guard;
  struct Setting {
    DType dtype;
    bool tf32;
  };
  const Setting settings[] = {
      {DType::f32, false}, {DType::f32, true}, {DType::f16, false}, {DType::bf16, false}};
  for (backends::CudnnApi api : {backends::CudnnApi::v7, backends::CudnnApi::v9}) {
    backends::set_cudnn_api(api);
    for (MemoryFormat format : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      for (const Setting& s : settings) {
        for (const Geometry& g : {kGeometries[0], kGeometries[5], kGeometries[6]}) {
          INFO(backends::cudnn_api_name(api)
               << " " << memory_format_name(format) << " " << dtype_name(s.dtype) << " tf32 "
               << s.tf32 << " " << describe_geometry(g));
          const backends::CudnnApiCounts before = backends::cudnn_api_counts();
          const Results got = run(g, s.dtype, kGpu, s.tf32, format);
          const backends::CudnnApiCounts after = backends::cudnn_api_counts();
          INFO("last fallback: " << after.last_fallback_reason);
          CHECK(after.v9_fallbacks == before.v9_fallbacks);
          const bool v9 = api == backends::CudnnApi::v9;
          CHECK(after.v9_runs - before.v9_runs == (v9 ? 3 : 0));
          CHECK(after.v7_runs - before.v7_runs == (v9 ? 0 : 3));
          CHECK(got.out.suggest_memory_format() == (format == MemoryFormat::channels_last
                                                        ? MemoryFormat::channels_last
                                                        : MemoryFormat::contiguous));
          const Results want = run(g, s.dtype, Device::cpu());
          // TF32 keeps 10 mantissa bits of each operand: a sum of k products of size <= 1 may be
          // off by k * 2^-10, k the longest of the three passes' sums.
          const int64_t groups = g.groups;
          const int64_t k =
              std::max({g.x[1] / groups * g.w[2] * g.w[3], g.w[0] / groups * g.w[2] * g.w[3],
                        got.out.shape()[0] * got.out.shape()[2] * got.out.shape()[3]});
          const Tolerance tol =
              s.tf32 ? Tolerance{0.0, static_cast<double>(k) / 1024} : conv_tolerance(s.dtype);
          check_gpu_parity(got.out, want.out, tol);
          check_gpu_parity(got.grad_x, want.grad_x, tol);
          check_gpu_parity(got.grad_w, want.grad_w, tol);
        }
      }
    }
  }
}
