// kiln-bench lab's host-side path: what can be checked of the lab without a GPU. For each family,
// the tiling of every version (kernels/cuda/lab/<family>/tiling.h) for the problem asked for, and
// the family's CPU reference (reference.h) against an independent property on a small, ragged
// problem: the GEMM against associativity, the sums against a closed form, softmax's rows against
// 1 and its shift invariance, layer norm's statistics and its backward against finite
// differences, attention's output against what a mask and constant values force and its
// backward against finite differences.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/core/half.h"
#include "kiln/kernels/cuda/lab/attention/reference.h"
#include "kiln/kernels/cuda/lab/attention/tiling.h"
#include "kiln/kernels/cuda/lab/gemm/reference.h"
#include "kiln/kernels/cuda/lab/gemm/tiling.h"
#include "kiln/kernels/cuda/lab/gemm_tc/tiling.h"
#include "kiln/kernels/cuda/lab/layernorm/reference.h"
#include "kiln/kernels/cuda/lab/layernorm/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/reference.h"
#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/softmax/reference.h"
#include "kiln/kernels/cuda/lab/softmax/tiling.h"
#include "lab.h"

namespace kiln::bench {

namespace {

class Checks {
 public:
  void expect(bool ok, const std::string& what) {
    std::printf("  %-72s %s\n", what.c_str(), ok ? "ok" : "FAILED");
    ++count_;
    failed_ += ok ? 0 : 1;
  }
  int count() const { return count_; }
  int failed() const { return failed_; }

 private:
  int count_ = 0;
  int failed_ = 0;
};

// Deterministic values in [low, high).
std::vector<float> values(int64_t count, uint64_t seed, float low, float high) {
  std::vector<float> v(static_cast<size_t>(count));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = low + (high - low) * static_cast<float>(state >> 40) / static_cast<float>(1 << 24);
  }
  return v;
}

std::string shape(int64_t rows, int64_t cols) {
  return std::to_string(rows) + " x " + std::to_string(cols);
}

void gemm_checks(const LabOptions& o, Checks& checks) {
  namespace g = lab::gemm;
  const g::Tiling tilings[] = {g::kV1Naive,         g::kV2Coalesced,      g::kV3SharedTiling,
                               g::kV4Blocktiling1d, g::kV5Blocktiling2d,  g::kV6Vectorized,
                               g::kV7Warptiling,    g::kV8DoubleBuffering};
  bool valid = true, covers = g::fits(g::v1_grid(o.m, o.n));  // v1 puts rows on x
  for (const g::Tiling& t : tilings) {
    valid = valid && g::valid(t);
    if (&t != &tilings[0]) covers = covers && g::fits(g::grid(t, o.m, o.n));
  }
  checks.expect(valid, "gemm: the 8 versions' tilings satisfy their constraints");
  checks.expect(covers, "gemm: every grid launches for m " + std::to_string(o.m) + ", n " +
                            std::to_string(o.n));
  // (A . B) . x against A . (B . x), in double, on a ragged problem.
  const int64_t m = 37, n = 29, k = 41;
  const std::vector<float> a = values(m * k, 1, -1, 1), b = values(k * n, 2, -1, 1),
                           x = values(n, 3, -1, 1);
  std::vector<float> c(static_cast<size_t>(m * n));
  g::gemm_reference(a.data(), b.data(), c.data(), m, n, k);
  double worst = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    double left = 0.0, right = 0.0;
    for (int64_t j = 0; j < n; ++j) left += static_cast<double>(c[i * n + j]) * x[j];
    for (int64_t p = 0; p < k; ++p) {
      double bx = 0.0;
      for (int64_t j = 0; j < n; ++j) bx += static_cast<double>(b[p * n + j]) * x[j];
      right += a[i * k + p] * bx;
    }
    worst = std::max(worst, std::abs(left - right));
  }
  checks.expect(worst < 1e-4, "gemm: the CPU reference, (A B) x = A (B x) on 37 x 29 x 41");
}

void gemm_tc_checks(const LabOptions& o, Checks& checks) {
  namespace t = lab::gemm_tc;
  checks.expect(t::valid(t::kV1MmaLdmatrix) && t::valid(t::kV2CpAsyncPipeline),
                "gemm_tc: v1's and v2's tilings satisfy their constraints");
  checks.expect(t::supported(o.n, o.k) && t::fits(t::grid(t::kV2CpAsyncPipeline, o.m, o.n)),
                "gemm_tc: n " + std::to_string(o.n) + " and k " + std::to_string(o.k) +
                    " are whole 16-byte rows, the grid launches");
  // bf16 inputs: the reference takes them as the floats they hold.
  const int64_t m = 19, n = 24, k = 40;
  std::vector<BFloat16> a, b;
  for (float v : values(m * k, 4, -1, 1)) a.emplace_back(v);
  for (float v : values(k * n, 5, -1, 1)) b.emplace_back(v);
  std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
  std::vector<float> c(static_cast<size_t>(m * n)), cf(static_cast<size_t>(m * n));
  lab::gemm::gemm_reference(a.data(), b.data(), c.data(), m, n, k);
  lab::gemm::gemm_reference(af.data(), bf.data(), cf.data(), m, n, k);
  checks.expect(c == cf, "gemm_tc: the reference on bf16 inputs is the f32 one on their values");
}

void reduction_checks(const LabOptions& o, Checks& checks) {
  namespace r = lab::reduction;
  bool chains = true;
  for (const auto& passes :
       {r::chunked_passes(o.cols, r::kChunkV1), r::chunked_passes(o.cols, r::kChunkV3),
        r::grid_stride_passes(o.rows, o.cols)})
    chains = chains && passes.back().splits == 1 && passes.front().cols == o.cols;
  checks.expect(
      chains, "reduction: every version's passes end in one value a row, " + shape(o.rows, o.cols));
  const r::WorkspaceLayout layout = r::workspace_layout(o.rows, o.cols);
  checks.expect(layout.first_offset % 256 == 0 && layout.second_offset % 256 == 0,
                "reduction: workspace of " + std::to_string(layout.bytes) +
                    " bytes, its buffers 256-byte aligned");
  // x[r, c] = (r + c) % 5 - 2: each run of 5 adds to 0, so a row's sum is that of its tail.
  const int64_t rows = 3, cols = 1003;
  std::vector<float> x(static_cast<size_t>(rows * cols)), out(rows);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; ++c) x[i * cols + c] = static_cast<float>((i + c) % 5 - 2);
  r::row_sums_reference(x.data(), out.data(), rows, cols);
  bool exact = true;
  for (int64_t i = 0; i < rows; ++i) {
    int64_t tail = 0;
    for (int64_t c = cols - cols % 5; c < cols; ++c) tail += (i + c) % 5 - 2;
    exact = exact && out[i] == static_cast<float>(tail);
  }
  checks.expect(exact, "reduction: the CPU reference against the closed form, 3 x 1003");
}

void softmax_checks(const LabOptions& o, Checks& checks) {
  namespace s = lab::softmax;
  const bool cached = s::v4_cached(o.cols);
  checks.expect(!cached || int64_t{s::v4_threads(o.cols)} * s::kElementsPerThread >= o.cols,
                "softmax: v4 " + std::string(cached ? "holds" : "streams") + " a row of " +
                    std::to_string(o.cols) +
                    (cached ? " in " + std::to_string(s::v4_threads(o.cols)) + " threads" : ""));
  const int64_t rows = 5, cols = 333;
  std::vector<float> x = values(rows * cols, 6, -8, 8), y(x.size()), shifted(x.size()),
                     y_shifted(x.size());
  for (size_t i = 0; i < x.size(); ++i) shifted[i] = x[i] + 3.0f;
  s::softmax_reference(x.data(), y.data(), rows, cols);
  s::softmax_reference(shifted.data(), y_shifted.data(), rows, cols);
  double worst_sum = 0.0, worst_shift = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      sum += y[i * cols + c];
      worst_shift = std::max(
          worst_shift, std::abs(static_cast<double>(y[i * cols + c]) - y_shifted[i * cols + c]) /
                           y[i * cols + c]);
    }
    worst_sum = std::max(worst_sum, std::abs(sum - 1.0));
  }
  checks.expect(worst_sum < 1e-6 && worst_shift < 1e-5,
                "softmax: the CPU reference's rows add to 1 and ignore a shift, 5 x 333");
}

void layernorm_checks(const LabOptions& o, Checks& checks) {
  namespace l = lab::layernorm;
  checks.expect(
      !l::v3_cached(o.cols) || int64_t{l::v3_threads(o.cols)} * l::kElementsPerThread >= o.cols,
      "layernorm: v3's threads hold a row of " + std::to_string(o.cols));
  checks.expect(
      l::backward_workspace_bytes(o.rows, o.cols) >=
          static_cast<size_t>(2 * l::v2_backward_blocks(o.rows) * o.cols) * 4,
      "layernorm: the backward's workspace holds v2's and v3's partials, " + shape(o.rows, o.cols));
  // Forward with weight 1 and bias 0: each row comes out with mean 0 and variance
  // var / (var + eps).
  const int64_t rows = 4, cols = 67;
  const float eps = 1e-5f;
  std::vector<float> x = values(rows * cols, 7, -2, 3), w(cols, 1.0f), b(cols, 0.0f), y(x.size()),
                     mean(rows), rstd(rows);
  l::forward_reference(x.data(), w.data(), b.data(), eps, y.data(), mean.data(), rstd.data(), rows,
                       cols);
  double worst = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    double mu = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c) mu += y[i * cols + c];
    mu /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (y[i * cols + c] - mu) * (y[i * cols + c] - mu);
    var /= cols;
    const double expected_var = 1.0 - eps * rstd[i] * rstd[i];
    worst = std::max({worst, std::abs(mu), std::abs(var - expected_var)});
  }
  checks.expect(worst < 1e-5, "layernorm: the forward reference normalises each row, 4 x 67");

  // Backward against central differences of L = sum(y * dy), in x, weight and bias.
  w = values(cols, 8, 0.5f, 1.5f);
  b = values(cols, 9, -0.5f, 0.5f);
  const std::vector<float> dy = values(rows * cols, 10, -1, 1);
  const auto loss = [&](const std::vector<float>& xs, const std::vector<float>& ws,
                        const std::vector<float>& bs) {
    std::vector<float> ys(xs.size()), ms(rows), rs(rows);
    l::forward_reference(xs.data(), ws.data(), bs.data(), eps, ys.data(), ms.data(), rs.data(),
                         rows, cols);
    double total = 0.0;
    for (size_t i = 0; i < ys.size(); ++i) total += static_cast<double>(ys[i]) * dy[i];
    return total;
  };
  l::forward_reference(x.data(), w.data(), b.data(), eps, y.data(), mean.data(), rstd.data(), rows,
                       cols);
  std::vector<float> dx(x.size()), dw(cols), db(cols);
  l::backward_reference(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                        dw.data(), db.data(), rows, cols);
  const float h = 1e-2f;
  double worst_grad = 0.0;
  const auto probe = [&](std::vector<float>& param, size_t at, float analytic) {
    const float saved = param[at];
    param[at] = saved + h;
    const double up = loss(x, w, b);
    param[at] = saved - h;
    const double down = loss(x, w, b);
    param[at] = saved;
    worst_grad = std::max(worst_grad, std::abs((up - down) / (2 * h) - analytic) /
                                          std::max(1.0, std::abs(static_cast<double>(analytic))));
  };
  for (size_t at : {size_t{0}, size_t{70}, size_t{200}}) probe(x, at, dx[at]);
  for (size_t at : {size_t{0}, size_t{33}, size_t{66}}) {
    probe(w, at, dw[at]);
    probe(b, at, db[at]);
  }
  checks.expect(worst_grad < 2e-3,
                "layernorm: the backward reference against central differences, 4 x 67");
}

void attention_checks(const LabOptions& o, Checks& checks) {
  namespace a = lab::attention;
  checks.expect(a::v3_shared_bytes() <= 48 * 1024 && a::v4_conflict_free(16) &&
                    a::v4_conflict_free(32) && a::v4_conflict_free(64) &&
                    a::v4_conflict_free(128) && a::v4_shared_bytes(128) <= 48 * 1024,
                "attention: v3's and v4's tiles fit 48 KiB, v4's ldmatrix rows conflict-free");
  checks.expect(a::workspace_bytes(o.batch_heads, o.queries, o.keys) >=
                    static_cast<size_t>(o.batch_heads * o.queries * o.keys) * 4,
                "attention: the workspace holds v1's " + std::to_string(o.queries) + " x " +
                    std::to_string(o.keys) + " matrix for " + std::to_string(o.batch_heads) +
                    " heads");
  checks.expect(
      o.head_dim <= a::kMaxHeadDim,
      "attention: a head dimension of " + std::to_string(o.head_dim) +
          (a::v4_head_dim_supported(o.head_dim) ? ", v4 takes it too" : ", v4 does not take it"));
  // Values whose rows are all c_d give O = c_d whatever the weights; with the mask, query 0
  // sees key 0 alone, so O_0 = v_0 and lse_0 = its one score.
  const int64_t bh = 2, l = 5, s = 7, d = 3;
  const double scale = 0.7;
  std::vector<float> q = values(bh * l * d, 11, -2, 2), k = values(bh * s * d, 12, -2, 2),
                     v = values(bh * s * d, 13, -1, 1), out(q.size()), lse(bh * l);
  std::vector<float> flat(v.size());
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(i % d) - 1.0f;
  a::forward_reference(q.data(), k.data(), flat.data(), out.data(), lse.data(), bh, l, s, d, scale,
                       false);
  double worst = 0.0;
  for (size_t i = 0; i < out.size(); ++i)
    worst = std::max(worst, std::abs(out[i] - (static_cast<double>(i % d) - 1.0)));
  a::forward_reference(q.data(), k.data(), v.data(), out.data(), lse.data(), bh, l, s, d, scale,
                       true);
  for (int64_t h = 0; h < bh; ++h) {
    double score = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(out[h * l * d + i]) - v[h * s * d + i]));
      score += static_cast<double>(q[h * l * d + i]) * k[h * s * d + i];
    }
    worst = std::max(worst, std::abs(lse[h * l] - score * scale));
  }
  checks.expect(worst < 1e-5,
                "attention: the reference's O for constant values and the masked first query");

  // Backward against central differences of sum(O * dO), in q, k and v, with the mask.
  const std::vector<float> dout = values(bh * l * d, 14, -1, 1);
  const auto loss = [&](const std::vector<float>& qs, const std::vector<float>& ks,
                        const std::vector<float>& vs) {
    std::vector<float> os(qs.size()), ls(bh * l);
    a::forward_reference(qs.data(), ks.data(), vs.data(), os.data(), ls.data(), bh, l, s, d, scale,
                         true);
    double total = 0.0;
    for (size_t i = 0; i < os.size(); ++i) total += static_cast<double>(os[i]) * dout[i];
    return total;
  };
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  a::backward_reference(q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(), dv.data(),
                        bh, l, s, d, scale, true);
  const float h = 1e-2f;
  double worst_grad = 0.0;
  const auto probe = [&](std::vector<float>& param, size_t at, float analytic) {
    const float saved = param[at];
    param[at] = saved + h;
    const double up = loss(q, k, v);
    param[at] = saved - h;
    const double down = loss(q, k, v);
    param[at] = saved;
    worst_grad = std::max(worst_grad, std::abs((up - down) / (2 * h) - analytic) /
                                          std::max(1.0, std::abs(static_cast<double>(analytic))));
  };
  for (size_t at : {size_t{0}, size_t{7}, size_t{20}, size_t{29}}) probe(q, at, dq[at]);
  for (size_t at : {size_t{0}, size_t{8}, size_t{30}, size_t{41}}) {
    probe(k, at, dk[at]);
    probe(v, at, dv[at]);
  }
  checks.expect(worst_grad < 2e-3,
                "attention: the backward reference against central differences, causal");
}

}  // namespace

int run_lab_smoke(const LabOptions& options) {
  const std::vector<std::string> families =
      options.family == "all" ? lab_families() : std::vector<std::string>{options.family};
  Checks checks;
  for (const std::string& family : families) {
    LabOptions o = options;
    if (options.family == "all") o.rows = o.cols = 0;
    fill_family_defaults(family, o);
    std::printf("%s: host-side checks\n", family.c_str());
    if (family == "gemm") gemm_checks(o, checks);
    if (family == "gemm_tc") gemm_tc_checks(o, checks);
    if (family == "reduction") reduction_checks(o, checks);
    if (family == "softmax") softmax_checks(o, checks);
    if (family == "layernorm") layernorm_checks(o, checks);
    if (family == "attention") attention_checks(o, checks);
  }
  std::printf(
      "kiln-bench lab (smoke): %d checks, %d failed; nothing was timed: the kernels "
      "need a GPU.\n",
      checks.count(), checks.failed());
  return checks.failed() == 0 ? 0 : 1;
}

}  // namespace kiln::bench
