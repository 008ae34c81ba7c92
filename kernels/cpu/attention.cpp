// Fused attention on the CPU (kernels/attention.h), FlashAttention's loop with the products as
// tile GEMMs (kernels/cpu/gemm.h). The forward takes blocks of kBlock query rows in parallel; each
// walks the keys in tiles of kBlock: scores = q kᵀ for the tile, the online softmax per row (the
// running maximum, the sum and the accumulated output rescaled when the maximum grows), then
// acc += p v. The backward runs twice over the tiles, once per query block for dq and once per key
// block for dk and dv, recomputing each probability from its row's logsumexp both times, so that
// no thread writes another's rows and nothing of size L x S exists. Dropout multiplies a tile's
// probabilities by its keep factors (0 or 1 / (1 - p), from the Philox stream by the weight's
// index in [B, L, S], kernels/attention.h) before p v in the forward, and again in both backward
// passes: dv = (p keep)ᵀ dout, dp = (dout vᵀ) keep.
#include "kiln/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/core/philox.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/loops.h"

namespace kiln {

namespace {

constexpr int64_t kBlock = 64;

// The problem's sizes and the mask's strides ([B, L, S] view, 0 where it broadcasts).
struct Geometry {
  int64_t B, L, S, E, Ev;
  const void* mask = nullptr;
  int64_t mask_b = 0, mask_l = 0, mask_s = 0;
  bool causal = false;
  AttentionDropout dropout;

  Geometry(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& m, bool is_causal,
           const AttentionDropout& drop)
      : B(q.size(0)),
        L(q.size(1)),
        S(k.size(1)),
        E(q.size(2)),
        Ev(v.size(2)),
        causal(is_causal),
        dropout(drop) {
    if (m.defined()) {
      mask = m.data_ptr();
      mask_b = m.stride(0), mask_l = m.stride(1), mask_s = m.stride(2);
    }
  }
  // The keys query rows [i0, i0 + rows) see: all, or up to the last row's under causal.
  int64_t key_end(int64_t i0, int64_t rows) const { return causal ? std::min(S, i0 + rows) : S; }
  // The first query row that sees key j0.
  int64_t query_begin(int64_t j0) const { return causal ? j0 : 0; }
};

// The tile's scores, scale * q kᵀ + mask (-inf where causal hides a key), [rows, cols] at s.
template <class T>
void tile_scores(const Geometry& g, const T* q, const T* k, T scale, int64_t b, int64_t i0,
                 int64_t rows, int64_t j0, int64_t cols, T* s) {
  cpu::gemm<T>(false, true, rows, cols, g.E, q + (b * g.L + i0) * g.E, g.E,
               k + (b * g.S + j0) * g.E, g.E, s, cols, false);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const T* mask = static_cast<const T*>(g.mask);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    T* row = s + r * cols;
    const T* m = mask ? mask + b * g.mask_b + i * g.mask_l + j0 * g.mask_s : nullptr;
    for (int64_t c = 0; c < cols; ++c) {
      row[c] *= scale;
      if (m) row[c] += m[c * g.mask_s];
      if (g.causal && j0 + c > i) row[c] = minus_inf;
    }
  }
}

// The tile's keep factors [rows, cols] at keep: 1 / (1 - p) rounded to T where weight (b, i0 + r,
// j0 + c) is kept, 0 where dropped; ops/dropout.cpp's rule for the contiguous [B, L, S] weights
// (kernels/dropout.h). A row's Philox blocks are drawn first, one per four indices, in a loop of
// their own; u >= p is then (word >> 8) >= ceil(p 2^24), exact (u is (word >> 8) 2^-24, and p 2^24
// and its ceiling are exact in double), an integer comparison.
template <class T>
void keep_factors(const Geometry& g, int64_t b, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                  T* keep) {
  const AttentionDropout& d = g.dropout;
  const T scale = static_cast<T>(1.0 / (1.0 - d.p));
  const auto threshold = static_cast<uint32_t>(std::ceil(d.p * 16777216.0));
  uint32_t words[kBlock + 8];  // the row's blocks: cols <= kBlock indices, from a block's start
  for (int64_t r = 0; r < rows; ++r) {
    const auto first = static_cast<uint64_t>((b * g.L + i0 + r) * g.S + j0);
    const uint64_t block0 = first / 4, blocks = (first % 4 + static_cast<uint64_t>(cols) + 3) / 4;
    for (uint64_t x = 0; x < blocks; ++x) {
      const PhiloxCounter w = philox_block(d.seed, d.offset, block0 + x);
      for (int e = 0; e < 4; ++e) words[4 * x + e] = w.x[e];
    }
    const uint32_t* at = words + first % 4;
    for (int64_t c = 0; c < cols; ++c)
      keep[r * cols + c] = (at[c] >> 8) >= threshold ? scale : T(0);
  }
}

template <class T>
void multiply(T* tile, const T* keep, int64_t n) {
  for (int64_t x = 0; x < n; ++x) tile[x] *= keep[x];
}

// The probabilities of a tile from its rows' logsumexp, in place: p = exp(score - lse).
template <class T>
void probabilities(T* s, int64_t rows, int64_t cols, const T* lse) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s[r * cols + c] = std::exp(s[r * cols + c] - lse[r]);
}

template <class T>
void forward_typed(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& mask,
                   bool causal, double scale_d, const AttentionDropout& dropout,
                   const Tensor& out_t, const Tensor& lse_t) {
  const Geometry g(q_t, k_t, v_t, mask, causal, dropout);
  const bool drops = dropout.p > 0.0;
  const T* q = q_t.data<T>();
  const T* k = k_t.data<T>();
  const T* v = v_t.data<T>();
  T* out = out_t.data<T>();
  T* lse = lse_t.data<T>();
  const T scale = static_cast<T>(scale_d);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const int64_t blocks = (g.L + kBlock - 1) / kBlock;
  cpu::parallel_for(g.B * blocks, kBlock * g.S * (g.E + g.Ev), [&](int64_t begin, int64_t end) {
    std::vector<T> s(kBlock * kBlock), acc(kBlock * g.Ev), run_max(kBlock), run_sum(kBlock);
    std::vector<T> keep(drops ? kBlock * kBlock : 0);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / blocks, i0 = (item % blocks) * kBlock;
      const int64_t rows = std::min(kBlock, g.L - i0);
      std::fill(acc.begin(), acc.end(), T(0));
      std::fill(run_max.begin(), run_max.end(), minus_inf);
      std::fill(run_sum.begin(), run_sum.end(), T(0));
      const int64_t key_end = g.key_end(i0, rows);
      for (int64_t j0 = 0; j0 < key_end; j0 += kBlock) {
        const int64_t cols = std::min(kBlock, key_end - j0);
        tile_scores(g, q, k, scale, b, i0, rows, j0, cols, s.data());
        for (int64_t r = 0; r < rows; ++r) {
          T* row = s.data() + r * cols;
          const T tile_max = *std::max_element(row, row + cols);
          const T new_max = std::max(run_max[r], tile_max);
          if (new_max == minus_inf) {  // nothing seen yet in this row: the tile adds nothing
            std::fill(row, row + cols, T(0));
            continue;
          }
          const T correction = std::exp(run_max[r] - new_max);
          run_max[r] = new_max;
          run_sum[r] *= correction;
          for (int64_t e = 0; e < g.Ev; ++e) acc[r * g.Ev + e] *= correction;
          T sum = 0;
          for (int64_t c = 0; c < cols; ++c) sum += row[c] = std::exp(row[c] - new_max);
          run_sum[r] += sum;
        }
        // The sum is the undropped softmax's; only what reaches v is dropped.
        if (drops) {
          keep_factors(g, b, i0, rows, j0, cols, keep.data());
          multiply(s.data(), keep.data(), rows * cols);
        }
        cpu::gemm<T>(false, false, rows, g.Ev, cols, s.data(), cols, v + (b * g.S + j0) * g.Ev,
                     g.Ev, acc.data(), g.Ev, true);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = b * g.L + i0 + r;
        T* o = out + row * g.Ev;
        if (run_sum[r] == T(0)) {  // no key left: softmax of nothing, NaN as the composition's
          std::fill(o, o + g.Ev, std::numeric_limits<T>::quiet_NaN());
          lse[row] = std::numeric_limits<T>::quiet_NaN();
          continue;
        }
        for (int64_t e = 0; e < g.Ev; ++e) o[e] = acc[r * g.Ev + e] / run_sum[r];
        lse[row] = run_max[r] + std::log(run_sum[r]);
      }
    }
  });
}

template <class T>
void backward_typed(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& mask,
                    bool causal, double scale_d, const AttentionDropout& dropout,
                    const Tensor& out_t, const Tensor& lse_t, const Tensor& dout_t,
                    const Tensor& dq_t, const Tensor& dk_t, const Tensor& dv_t) {
  const Geometry g(q_t, k_t, v_t, mask, causal, dropout);
  const bool drops = dropout.p > 0.0;
  const T* q = q_t.data<T>();
  const T* k = k_t.data<T>();
  const T* v = v_t.data<T>();
  const T* out = out_t.data<T>();
  const T* lse = lse_t.data<T>();
  const T* dout = dout_t.data<T>();
  T* dq = dq_t.data<T>();
  T* dk = dk_t.data<T>();
  T* dv = dv_t.data<T>();
  const T scale = static_cast<T>(scale_d);
  // delta_i = dout_i . out_i: the softmax backward's row term (out is the dropped output, so this
  // is sum_j p_ij dp_ij with dp the gradient of the undropped p).
  std::vector<T> delta(g.B * g.L);
  for (int64_t row = 0; row < g.B * g.L; ++row) {
    T sum = 0;
    for (int64_t e = 0; e < g.Ev; ++e) sum += dout[row * g.Ev + e] * out[row * g.Ev + e];
    delta[row] = sum;
  }
  // ds = p (dp - delta) for the tile [rows, cols] at s (which holds p), through dp = (dout vᵀ)
  // keep; with dropout s holds p keep after it, what dv takes.
  auto score_gradients = [&](int64_t b, int64_t i0, int64_t rows, int64_t j0, int64_t cols, T* s,
                             T* dp, T* keep) {
    tile_scores(g, q, k, scale, b, i0, rows, j0, cols, s);
    probabilities(s, rows, cols, lse + b * g.L + i0);
    cpu::gemm<T>(false, true, rows, cols, g.Ev, dout + (b * g.L + i0) * g.Ev, g.Ev,
                 v + (b * g.S + j0) * g.Ev, g.Ev, dp, cols, false);
    if (drops) {
      keep_factors(g, b, i0, rows, j0, cols, keep);
      multiply(dp, keep, rows * cols);
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        dp[r * cols + c] = s[r * cols + c] * (dp[r * cols + c] - delta[b * g.L + i0 + r]);
    if (drops) multiply(s, keep, rows * cols);
  };
  const int64_t cost = kBlock * g.S * (2 * g.E + 2 * g.Ev);
  // dq = scale * ds k, per query block.
  const int64_t q_blocks = (g.L + kBlock - 1) / kBlock;
  cpu::parallel_for(g.B * q_blocks, cost, [&](int64_t begin, int64_t end) {
    std::vector<T> s(kBlock * kBlock), ds(kBlock * kBlock), keep(drops ? kBlock * kBlock : 0);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / q_blocks, i0 = (item % q_blocks) * kBlock;
      const int64_t rows = std::min(kBlock, g.L - i0);
      T* dq_block = dq + (b * g.L + i0) * g.E;
      std::fill(dq_block, dq_block + rows * g.E, T(0));
      const int64_t key_end = g.key_end(i0, rows);
      for (int64_t j0 = 0; j0 < key_end; j0 += kBlock) {
        const int64_t cols = std::min(kBlock, key_end - j0);
        score_gradients(b, i0, rows, j0, cols, s.data(), ds.data(), keep.data());
        cpu::gemm<T>(false, false, rows, g.E, cols, ds.data(), cols, k + (b * g.S + j0) * g.E, g.E,
                     dq_block, g.E, true);
      }
      for (int64_t x = 0; x < rows * g.E; ++x) dq_block[x] *= scale;
    }
  });
  // dv = pᵀ dout and dk = scale * dsᵀ q, per key block.
  const int64_t k_blocks = (g.S + kBlock - 1) / kBlock;
  cpu::parallel_for(g.B * k_blocks, cost, [&](int64_t begin, int64_t end) {
    std::vector<T> s(kBlock * kBlock), ds(kBlock * kBlock), keep(drops ? kBlock * kBlock : 0);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / k_blocks, j0 = (item % k_blocks) * kBlock;
      const int64_t cols = std::min(kBlock, g.S - j0);
      T* dk_block = dk + (b * g.S + j0) * g.E;
      T* dv_block = dv + (b * g.S + j0) * g.Ev;
      std::fill(dk_block, dk_block + cols * g.E, T(0));
      std::fill(dv_block, dv_block + cols * g.Ev, T(0));
      for (int64_t i0 = g.query_begin(j0) / kBlock * kBlock; i0 < g.L; i0 += kBlock) {
        const int64_t rows = std::min(kBlock, g.L - i0);
        score_gradients(b, i0, rows, j0, cols, s.data(), ds.data(), keep.data());
        cpu::gemm<T>(true, false, cols, g.Ev, rows, s.data(), cols, dout + (b * g.L + i0) * g.Ev,
                     g.Ev, dv_block, g.Ev, true);
        cpu::gemm<T>(true, false, cols, g.E, rows, ds.data(), cols, q + (b * g.L + i0) * g.E, g.E,
                     dk_block, g.E, true);
      }
      for (int64_t x = 0; x < cols * g.E; ++x) dk_block[x] *= scale;
    }
  });
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       bool causal, double scale, const AttentionDropout& dropout,
                       const Tensor& out, const Tensor& lse) {
  if (q.dtype() == DType::f64)
    forward_typed<double>(q, k, v, mask, causal, scale, dropout, out, lse);
  else
    forward_typed<float>(q, k, v, mask, causal, scale, dropout, out, lse);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        bool causal, double scale, const AttentionDropout& dropout,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv) {
  if (q.dtype() == DType::f64)
    backward_typed<double>(q, k, v, mask, causal, scale, dropout, out, lse, dout, dq, dk, dv);
  else
    backward_typed<float>(q, k, v, mask, causal, scale, dropout, out, lse, dout, dq, dk, dv);
}

}  // namespace

const AttentionKernels AttentionKernels::cpu{.forward = attention_forward,
                                             .backward = attention_backward};

}  // namespace kiln
