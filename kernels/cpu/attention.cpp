// Fused attention on the CPU (kernels/attention.h). The forward parallelises over query rows, each
// row walking the keys in tiles of kTile scores; the backward runs twice over the pairs, once per
// query row for dq and once per key row for dk and dv, recomputing each probability from the
// row's logsumexp both times, so that no thread writes another's row and no L x S buffer exists.
#include "kiln/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/kernels/cpu/loops.h"

namespace kiln {

namespace {

constexpr int64_t kTile = 64;

template <class T>
T dot(const T* a, const T* b, int64_t n) {
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// The problem's sizes and the mask's strides ([B, L, S] view, 0 where it broadcasts).
struct Geometry {
  int64_t B, L, S, E, Ev;
  const void* mask = nullptr;
  int64_t mask_b = 0, mask_l = 0, mask_s = 0;
  bool causal = false;

  Geometry(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& m, bool is_causal)
      : B(q.size(0)), L(q.size(1)), S(k.size(1)), E(q.size(2)), Ev(v.size(2)), causal(is_causal) {
    if (m.defined()) {
      mask = m.data_ptr();
      mask_b = m.stride(0), mask_l = m.stride(1), mask_s = m.stride(2);
    }
  }
  // Keys query i sees: all, or 0..i under causal.
  int64_t keys_for(int64_t i) const { return causal ? std::min(S, i + 1) : S; }
};

// Row i of batch b: score j = scale * q_i . k_j + mask.
template <class T>
void scores(const Geometry& g, const T* q, const T* k, T scale, int64_t b, int64_t i, int64_t j0,
            int64_t count, T* out) {
  const T* qi = q + (b * g.L + i) * g.E;
  const T* kb = k + b * g.S * g.E;
  const T* m = g.mask ? static_cast<const T*>(g.mask) + b * g.mask_b + i * g.mask_l : nullptr;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t j = j0 + t;
    out[t] = scale * dot(qi, kb + j * g.E, g.E) + (m ? m[j * g.mask_s] : T(0));
  }
}

template <class T>
void forward_typed(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& mask,
                   bool causal, double scale_d, const Tensor& out_t, const Tensor& lse_t) {
  const Geometry g(q_t, k_t, v_t, mask, causal);
  const T* q = q_t.data<T>();
  const T* k = k_t.data<T>();
  const T* v = v_t.data<T>();
  T* out = out_t.data<T>();
  T* lse = lse_t.data<T>();
  const T scale = static_cast<T>(scale_d);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  cpu::parallel_for(g.B * g.L, g.S * (g.E + g.Ev), [&](int64_t begin, int64_t end) {
    std::vector<T> tile(kTile), acc(g.Ev);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / g.L, i = row % g.L;
      const int64_t keys = g.keys_for(i);
      const T* vb = v + b * g.S * g.Ev;
      std::fill(acc.begin(), acc.end(), T(0));
      T running_max = minus_inf, running_sum = 0;
      for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
        const int64_t count = std::min(kTile, keys - j0);
        scores(g, q, k, scale, b, i, j0, count, tile.data());
        T tile_max = minus_inf;
        for (int64_t t = 0; t < count; ++t) tile_max = std::max(tile_max, tile[t]);
        if (tile_max == minus_inf) continue;  // every score of the tile removed
        const T new_max = std::max(running_max, tile_max);
        const T correction = std::exp(running_max - new_max);
        running_sum *= correction;
        for (int64_t e = 0; e < g.Ev; ++e) acc[e] *= correction;
        running_max = new_max;
        for (int64_t t = 0; t < count; ++t) {
          const T p = std::exp(tile[t] - running_max);
          running_sum += p;
          const T* vj = vb + (j0 + t) * g.Ev;
          for (int64_t e = 0; e < g.Ev; ++e) acc[e] += p * vj[e];
        }
      }
      T* o = out + row * g.Ev;
      if (running_sum == T(0)) {  // no key left: softmax of nothing, NaN as the composition's
        std::fill(o, o + g.Ev, std::numeric_limits<T>::quiet_NaN());
        lse[row] = std::numeric_limits<T>::quiet_NaN();
        continue;
      }
      for (int64_t e = 0; e < g.Ev; ++e) o[e] = acc[e] / running_sum;
      lse[row] = running_max + std::log(running_sum);
    }
  });
}

template <class T>
void backward_typed(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& mask,
                    bool causal, double scale_d, const Tensor& out_t, const Tensor& lse_t,
                    const Tensor& dout_t, const Tensor& dq_t, const Tensor& dk_t,
                    const Tensor& dv_t) {
  const Geometry g(q_t, k_t, v_t, mask, causal);
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
  // delta_i = dout_i . out_i: the softmax backward's row term.
  std::vector<T> delta(g.B * g.L);
  for (int64_t row = 0; row < g.B * g.L; ++row)
    delta[row] = dot(dout + row * g.Ev, out + row * g.Ev, g.Ev);
  const int64_t cost = g.S * (g.E + g.Ev);
  // dq_i = scale * sum_j ds_ij k_j, ds_ij = p_ij (dout_i . v_j - delta_i).
  cpu::parallel_for(g.B * g.L, cost, [&](int64_t begin, int64_t end) {
    std::vector<T> tile(kTile);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / g.L, i = row % g.L;
      T* dqi = dq + row * g.E;
      std::fill(dqi, dqi + g.E, T(0));
      const T* doi = dout + row * g.Ev;
      for (int64_t j0 = 0; j0 < g.keys_for(i); j0 += kTile) {
        const int64_t count = std::min(kTile, g.keys_for(i) - j0);
        scores(g, q, k, scale, b, i, j0, count, tile.data());
        for (int64_t t = 0; t < count; ++t) {
          const int64_t j = j0 + t;
          const T p = std::exp(tile[t] - lse[row]);
          const T ds = p * (dot(doi, v + (b * g.S + j) * g.Ev, g.Ev) - delta[row]);
          const T* kj = k + (b * g.S + j) * g.E;
          for (int64_t e = 0; e < g.E; ++e) dqi[e] += scale * ds * kj[e];
        }
      }
    }
  });
  // dk_j = scale * sum_i ds_ij q_i and dv_j = sum_i p_ij dout_i, per key row.
  cpu::parallel_for(g.B * g.S, cost, [&](int64_t begin, int64_t end) {
    T score = 0;
    for (int64_t key = begin; key < end; ++key) {
      const int64_t b = key / g.S, j = key % g.S;
      T* dkj = dk + key * g.E;
      T* dvj = dv + key * g.Ev;
      std::fill(dkj, dkj + g.E, T(0));
      std::fill(dvj, dvj + g.Ev, T(0));
      const T* vj = v + key * g.Ev;
      for (int64_t i = g.causal ? j : 0; i < g.L; ++i) {
        const int64_t row = b * g.L + i;
        scores(g, q, k, scale, b, i, j, 1, &score);
        const T p = std::exp(score - lse[row]);
        if (p == T(0)) continue;
        const T* doi = dout + row * g.Ev;
        const T ds = p * (dot(doi, vj, g.Ev) - delta[row]);
        const T* qi = q + row * g.E;
        for (int64_t e = 0; e < g.E; ++e) dkj[e] += scale * ds * qi[e];
        for (int64_t e = 0; e < g.Ev; ++e) dvj[e] += p * doi[e];
      }
    }
  });
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       bool causal, double scale, const Tensor& out, const Tensor& lse) {
  if (q.dtype() == DType::f64)
    forward_typed<double>(q, k, v, mask, causal, scale, out, lse);
  else
    forward_typed<float>(q, k, v, mask, causal, scale, out, lse);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        bool causal, double scale, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  if (q.dtype() == DType::f64)
    backward_typed<double>(q, k, v, mask, causal, scale, out, lse, dout, dq, dk, dv);
  else
    backward_typed<float>(q, k, v, mask, causal, scale, out, lse, dout, dq, dk, dv);
}

}  // namespace

const AttentionKernels AttentionKernels::cpu{.forward = attention_forward,
                                             .backward = attention_backward};

}  // namespace kiln
