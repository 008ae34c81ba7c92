// The attention lab's CPU reference, in double: each head's scores, their softmax (the row's max
// subtracted first), the output, the log-sum-exp, and the backward's gradients, from the inputs
// as the floats they hold (T: float, Half or BFloat16). What version 0 is checked against by the
// GPU test, and what the runner's CPU smoke path runs.
//
//   S = Q K^T * scale (masked: -inf)    P = softmax_rows(S)    O = P V    lse = log sum exp(S)
//   dV = P^T dO    dP = dO V^T    delta = rowsum(P * dP) = rowsum(dO * O)
//   dS = P * (dP - delta)    dQ = dS K * scale    dK = dS^T Q * scale
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/kernels/cuda/lab/attention/tiling.h"

namespace kiln::lab::attention {

namespace detail {

// P [L][S] in double for head `h`: row l's softmax over the keys it attends, 0 elsewhere; lse[l].
template <class T>
void probabilities(const T* q, const T* k, int64_t l_len, int64_t s_len, int64_t d, double scale,
                   bool causal, std::vector<double>& p, std::vector<double>& lse) {
  p.assign(static_cast<size_t>(l_len * s_len), 0.0);
  lse.assign(static_cast<size_t>(l_len), 0.0);
  for (int64_t l = 0; l < l_len; ++l) {
    double* row = p.data() + l * s_len;
    const int64_t keys = keys_for(causal, l, s_len);
    double max = -INFINITY;
    for (int64_t s = 0; s < keys; ++s) {
      double dot = 0.0;
      for (int64_t i = 0; i < d; ++i)
        dot += static_cast<double>(static_cast<float>(q[l * d + i])) *
               static_cast<double>(static_cast<float>(k[s * d + i]));
      row[s] = dot * scale;
      max = std::fmax(max, row[s]);
    }
    double sum = 0.0;
    for (int64_t s = 0; s < keys; ++s) sum += std::exp(row[s] - max);
    for (int64_t s = 0; s < keys; ++s) row[s] = std::exp(row[s] - max) / sum;
    lse[static_cast<size_t>(l)] = max + std::log(sum);
  }
}

}  // namespace detail

// o [bh][L][D], lse [bh][L].
template <class T>
void forward_reference(const T* q, const T* k, const T* v, float* o, float* lse,
                       int64_t batch_heads, int64_t l_len, int64_t s_len, int64_t d, double scale,
                       bool causal) {
  std::vector<double> p, head_lse;
  for (int64_t h = 0; h < batch_heads; ++h) {
    const T* hq = q + h * l_len * d;
    const T* hk = k + h * s_len * d;
    const T* hv = v + h * s_len * d;
    detail::probabilities(hq, hk, l_len, s_len, d, scale, causal, p, head_lse);
    for (int64_t l = 0; l < l_len; ++l) {
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0.0;
        for (int64_t s = 0; s < s_len; ++s)
          acc += p[static_cast<size_t>(l * s_len + s)] *
                 static_cast<double>(static_cast<float>(hv[s * d + i]));
        o[(h * l_len + l) * d + i] = static_cast<float>(acc);
      }
      lse[h * l_len + l] = static_cast<float>(head_lse[static_cast<size_t>(l)]);
    }
  }
}

// dq [bh][L][D], dk and dv [bh][S][D], from the inputs and dout alone (P recomputed in double).
inline void backward_reference(const float* q, const float* k, const float* v, const float* dout,
                               float* dq, float* dk, float* dv, int64_t batch_heads, int64_t l_len,
                               int64_t s_len, int64_t d, double scale, bool causal) {
  std::vector<double> p, lse, ds(static_cast<size_t>(l_len * s_len));
  for (int64_t h = 0; h < batch_heads; ++h) {
    const float* hq = q + h * l_len * d;
    const float* hk = k + h * s_len * d;
    const float* hv = v + h * s_len * d;
    const float* hdo = dout + h * l_len * d;
    detail::probabilities(hq, hk, l_len, s_len, d, scale, causal, p, lse);
    // dS = P * (dP - delta), dP = dO V^T, delta = rowsum(P * dP).
    for (int64_t l = 0; l < l_len; ++l) {
      double delta = 0.0;
      for (int64_t s = 0; s < s_len; ++s) {
        double dp = 0.0;
        for (int64_t i = 0; i < d; ++i)
          dp += static_cast<double>(hdo[l * d + i]) * static_cast<double>(hv[s * d + i]);
        ds[static_cast<size_t>(l * s_len + s)] = dp;
        delta += p[static_cast<size_t>(l * s_len + s)] * dp;
      }
      for (int64_t s = 0; s < s_len; ++s) {
        const size_t at = static_cast<size_t>(l * s_len + s);
        ds[at] = p[at] * (ds[at] - delta);
      }
    }
    for (int64_t l = 0; l < l_len; ++l)
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0.0;
        for (int64_t s = 0; s < s_len; ++s)
          acc += ds[static_cast<size_t>(l * s_len + s)] * static_cast<double>(hk[s * d + i]);
        dq[(h * l_len + l) * d + i] = static_cast<float>(acc * scale);
      }
    for (int64_t s = 0; s < s_len; ++s)
      for (int64_t i = 0; i < d; ++i) {
        double acc_k = 0.0, acc_v = 0.0;
        for (int64_t l = 0; l < l_len; ++l) {
          const size_t at = static_cast<size_t>(l * s_len + s);
          acc_k += ds[at] * static_cast<double>(hq[l * d + i]);
          acc_v += p[at] * static_cast<double>(hdo[l * d + i]);
        }
        dk[(h * s_len + s) * d + i] = static_cast<float>(acc_k * scale);
        dv[(h * s_len + s) * d + i] = static_cast<float>(acc_v);
      }
  }
}

}  // namespace kiln::lab::attention
