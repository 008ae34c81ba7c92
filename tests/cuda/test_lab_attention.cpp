// The kernel lab's attention family on the GPU (kernels/cuda/lab/attention/): forward, version 0
// (the kernels of kiln's composed op) against the CPU reference (double) and every other version
// against version 0, in f32 and bf16/f16 on the tensor cores; backward, both versions against the
// reference's gradients; with and without the causal mask,
// on lengths that are no multiple of any tile (1, 7, 33, 129), L != S both ways, and head
// dimensions that are not multiples of 32. Each version's outputs and its workspace are filled
// with NaN before every run, so an element or a running state it leaves unwritten fails. Small
// problems: in CI this runs on the CUDA simulator, where the whole file takes seconds.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kernels/cuda/lab/attention/reference.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"
#include "kiln/kiln.h"
#include "lab_checks.h"

using namespace kiln;
using kiln::testing::host_floats;
using kiln::testing::require_close;

namespace {

const Device kGpu = Device::cuda(0);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Problem {
  int64_t batch_heads, l, s, d;
  bool causal;
};

std::string describe(const Problem& s) {
  return "bh " + std::to_string(s.batch_heads) + ", L " + std::to_string(s.l) + ", S " +
         std::to_string(s.s) + ", D " + std::to_string(s.d) + (s.causal ? ", causal" : "");
}

double scale_of(const Problem& s) {
  return 1.0 / std::sqrt(static_cast<double>(s.d));
}

// The forward of every version of `versions` on one problem; `o_tol` and `lse_tol` are the
// tolerances against version 0 (atol and rtol alike), version 0's against the reference fixed.
void check_forward(const std::vector<lab::AttentionVersion>& versions, const Problem& s,
                   DType dtype, double o_tol, double lse_tol) {
  INFO(describe(s) << ", " << dtype_name(dtype));
  // Scores of a few units (|q|, |k| up to 3): the online rescaling happens often.
  const Tensor q = uniform({s.batch_heads, s.l, s.d}, -3, 3, dtype, kGpu);
  const Tensor k = uniform({s.batch_heads, s.s, s.d}, -3, 3, dtype, kGpu);
  const Tensor v = uniform({s.batch_heads, s.s, s.d}, -1, 1, dtype, kGpu);
  Tensor o = empty({s.batch_heads, s.l, s.d}, DType::f32, kGpu);
  Tensor lse = empty({s.batch_heads, s.l}, DType::f32, kGpu);
  Tensor workspace =
      empty({static_cast<int64_t>(lab::attention_workspace_bytes(s.batch_heads, s.l, s.s))},
            DType::u8, kGpu);
  lab::AttentionArgs args;
  args.q = q.data_ptr();
  args.k = k.data_ptr();
  args.v = v.data_ptr();
  args.o = o.data<float>();
  args.lse = lse.data<float>();
  args.batch_heads = s.batch_heads;
  args.l = s.l;
  args.s = s.s;
  args.d = s.d;
  args.scale = static_cast<float>(scale_of(s));
  args.causal = s.causal;
  args.dtype = dtype;
  args.workspace = workspace.data_ptr();
  // The reference on the inputs as the floats they hold.
  const std::vector<float> hq = host_floats(q), hk = host_floats(k), hv = host_floats(v);
  std::vector<float> want_o(static_cast<size_t>(s.batch_heads * s.l * s.d)),
      want_lse(static_cast<size_t>(s.batch_heads * s.l));
  lab::attention::forward_reference(hq.data(), hk.data(), hv.data(), want_o.data(), want_lse.data(),
                                    s.batch_heads, s.l, s.s, s.d, scale_of(s), s.causal);
  std::vector<float> v0_o, v0_lse;
  for (const lab::AttentionVersion& version : versions) {
    o.fill_(kNaN);
    lse.fill_(kNaN);
    workspace.fill_(0xFF);
    version.run(args);
    if (v0_o.empty()) {
      v0_o = host_floats(o);
      v0_lse = host_floats(lse);
      require_close(v0_o, want_o, 1e-5, 1e-5, "v0 O against the CPU reference");
      require_close(v0_lse, want_lse, 1e-5, 1e-5, "v0 lse against the CPU reference");
    } else {
      require_close(host_floats(o), v0_o, o_tol, o_tol, std::string(version.name) + " O");
      require_close(host_floats(lse), v0_lse, lse_tol, lse_tol, std::string(version.name) + " lse");
    }
  }
}

}  // namespace

TEST_CASE("lab attention: every f32 version matches the kernels of kiln's composed op") {
  // Lengths of 1, 7, 33 and 129 (no multiple of v3's 16 and 32 or of a warp), L < S and L > S
  // (with the mask, the queries past S see every key), head dimensions below, at and past 32.
  const Problem shapes[] = {{1, 1, 1, 8, false},   {1, 1, 1, 8, true},      {2, 7, 7, 16, true},
                            {1, 7, 33, 32, false}, {1, 7, 33, 32, true},    {2, 33, 7, 64, true},
                            {1, 33, 7, 40, false}, {1, 129, 129, 32, true}, {1, 40, 70, 100, false},
                            {1, 20, 50, 128, true}};
  for (const Problem& s : shapes) {
    const double tol = 2e-6 * std::sqrt(static_cast<double>(s.s * s.d)) + 1e-6;
    check_forward(lab::attention_forward_versions(), s, DType::f32, tol, tol);
  }
}

TEST_CASE("lab attention: the tensor-core version matches v0 in f32, bf16 and f16") {
  // Every head dimension v4 takes; 64-row query tiles and 32-key tiles with ragged edges.
  const Problem shapes[] = {{1, 1, 1, 16, false},    {2, 7, 7, 32, true},
                            {1, 129, 129, 64, true}, {1, 65, 33, 64, false},
                            {1, 70, 129, 128, true}, {1, 33, 100, 16, false},
                            {1, 129, 7, 32, true}};
  for (DType dtype : {DType::bf16, DType::f16}) {
    // v4 rounds P to the inputs' 16 bits before P V (FlashAttention-2 does): O is as close as
    // that rounding allows, lse (from f32 scores of exact products) as close as f32 sums.
    const double o_tol = dtype == DType::bf16 ? 8e-3 : 1e-3;
    for (const Problem& s : shapes)
      check_forward(lab::attention_tc_versions(), s, dtype, o_tol, 2e-5);
  }
}

TEST_CASE("lab attention: the backward versions match the reference gradients") {
  const Problem shapes[] = {{1, 1, 1, 8, false},    {2, 7, 7, 16, true},  {1, 7, 33, 32, true},
                            {1, 33, 7, 40, false},  {1, 33, 7, 40, true}, {1, 129, 129, 32, true},
                            {1, 20, 50, 100, false}};
  for (const Problem& s : shapes) {
    INFO(describe(s));
    const Tensor q = uniform({s.batch_heads, s.l, s.d}, -3, 3, DType::f32, kGpu);
    const Tensor k = uniform({s.batch_heads, s.s, s.d}, -3, 3, DType::f32, kGpu);
    const Tensor v = uniform({s.batch_heads, s.s, s.d}, -1, 1, DType::f32, kGpu);
    const Tensor dout = uniform({s.batch_heads, s.l, s.d}, -1, 1, DType::f32, kGpu);
    const std::vector<float> hq = host_floats(q), hk = host_floats(k), hv = host_floats(v),
                             hdo = host_floats(dout);
    // The forward's O and lse from the reference, as a forward would have saved them.
    std::vector<float> ho(static_cast<size_t>(s.batch_heads * s.l * s.d)),
        hlse(static_cast<size_t>(s.batch_heads * s.l));
    lab::attention::forward_reference(hq.data(), hk.data(), hv.data(), ho.data(), hlse.data(),
                                      s.batch_heads, s.l, s.s, s.d, scale_of(s), s.causal);
    const Tensor o = tensor(ho, {s.batch_heads, s.l, s.d}).to(kGpu);
    const Tensor lse = tensor(hlse, {s.batch_heads, s.l}).to(kGpu);
    std::vector<float> want_dq(hq.size()), want_dk(hk.size()), want_dv(hv.size());
    lab::attention::backward_reference(hq.data(), hk.data(), hv.data(), hdo.data(), want_dq.data(),
                                       want_dk.data(), want_dv.data(), s.batch_heads, s.l, s.s, s.d,
                                       scale_of(s), s.causal);
    Tensor dq = empty({s.batch_heads, s.l, s.d}, DType::f32, kGpu);
    Tensor dk = empty({s.batch_heads, s.s, s.d}, DType::f32, kGpu);
    Tensor dv = empty({s.batch_heads, s.s, s.d}, DType::f32, kGpu);
    Tensor workspace =
        empty({static_cast<int64_t>(lab::attention_workspace_bytes(s.batch_heads, s.l, s.s))},
              DType::u8, kGpu);
    lab::AttentionBackwardArgs args;
    args.q = q.data<float>();
    args.k = k.data<float>();
    args.v = v.data<float>();
    args.o = o.data<float>();
    args.lse = lse.data<float>();
    args.dout = dout.data<float>();
    args.dq = dq.data<float>();
    args.dk = dk.data<float>();
    args.dv = dv.data<float>();
    args.batch_heads = s.batch_heads;
    args.l = s.l;
    args.s = s.s;
    args.d = s.d;
    args.scale = static_cast<float>(scale_of(s));
    args.causal = s.causal;
    args.workspace = workspace.data_ptr();
    // Sums of up to max(L, S) terms of a few units each, in f32.
    const double tol = 1e-5 * std::sqrt(static_cast<double>(std::max(s.l, s.s) * s.d)) + 1e-5;
    for (const lab::AttentionBackwardVersion& version : lab::attention_backward_versions()) {
      dq.fill_(kNaN);
      dk.fill_(kNaN);
      dv.fill_(kNaN);
      workspace.fill_(0xFF);
      version.run(args);
      const std::string name = version.name;
      require_close(host_floats(dq), want_dq, tol, tol, name + " dQ");
      require_close(host_floats(dk), want_dk, tol, tol, name + " dK");
      require_close(host_floats(dv), want_dv, tol, tol, name + " dV");
    }
  }
}

TEST_CASE("lab attention: a problem a version cannot take is refused") {
  const Tensor x = zeros({1, 4, 48}, DType::bf16, kGpu), f = zeros({1, 4, 48}, DType::f32, kGpu);
  const Tensor o = empty({1, 4, 48}, DType::f32, kGpu), lse = empty({1, 4}, DType::f32, kGpu);
  lab::AttentionArgs args;
  args.q = args.k = args.v = x.data_ptr();
  args.o = o.data<float>();
  args.lse = lse.data<float>();
  args.batch_heads = 1;
  args.l = args.s = 4;
  args.d = 48;
  args.dtype = DType::bf16;
  CHECK_THROWS_AS(lab::attention::v1_naive(args), DTypeError);    // f32 only
  CHECK_THROWS_AS(lab::attention::v4_mma_fa2(args), ShapeError);  // D of 48
  args.q = args.k = args.v = f.data_ptr();
  args.dtype = DType::f32;
  CHECK_THROWS_AS(lab::attention::v4_mma_fa2(args), DTypeError);  // bf16, f16 only
  args.d = 129;
  CHECK_THROWS_AS(lab::attention::v2_fused_row(args), ShapeError);  // past kMaxHeadDim
  args.d = 48;
  args.s = 0;
  CHECK_THROWS_WITH(lab::attention::v3_tiled_fa1(args), Catch::Contains("no key"));
  // Masks and dropout: v3, v4 and the backwards but v0 take them; p must be below 1.
  args.s = 4;
  args.mask.data = o.data<float>();
  CHECK_THROWS_WITH(lab::attention::v2_fused_row(args),
                    Catch::Contains("v2_fused_row") && Catch::Contains("no mask tensor"));
  args.mask = {};
  args.dropout.p = 0.5;
  CHECK_THROWS_AS(lab::attention::v1_naive(args), NotImplementedError);
  args.dropout.p = 1.0;
  CHECK_THROWS_WITH(lab::attention::v3_tiled_fa1(args), Catch::Contains("[0, 1)"));
}
