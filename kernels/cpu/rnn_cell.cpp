// The fused LSTM and GRU cells on the CPU (kernels/rnn_cell.h): rows of the batch split across
// threads (parallel_for), each row's H elements one contiguous loop reading its gates in place. The
// arithmetic is the composed cell's (nn/recurrent.cpp's former step: sigmoid as 1 / (1 + exp(-a)),
// std::tanh, the same products and sums in the same order), so f32 and f64 results equal the
// composition's but for the rounding of intermediates that the composition stores in 16 bits. The
// transcendental functions are libm's scalar ones, as the elementwise family's: the library is
// compiled for plain x86-64 and no vector exp exists in kernels/cpu/simd.h.
#include "kiln/kernels/rnn_cell.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

namespace {

template <class A>
A sigmoid_of(A v) {
  return A(1) / (A(1) + std::exp(-v));
}

template <class F>
void visit_cell_dtype(const char* op, DType dtype, F&& f) {
  KILN_CHECK(is_floating(dtype), DTypeError, "{}: expected a floating dtype, got {}", op,
             dtype_name(dtype));
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<acc_type_t<T>>) f(tag);
  });
}

// Rows of H elements, each costing a few transcendental functions (forward) per gate.
template <class F>
void for_rows(int64_t rows, int64_t hidden, F&& fn) {
  parallel_for(rows, hidden * 16, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) fn(n);
  });
}

template <class T>
T* optional_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// The forwards run a row in blocks of kBlock elements, phase by phase: the gate sums, then each
// activation as a loop of its own over the block, then the states. One loop per function keeps
// libm's branches predictable (interleaving the five calls per element ran the LSTM cell 1.6 times
// slower than the composition's loops, on Zen 5), and the arithmetic between them vectorises.
constexpr int64_t kBlock = 128;

void lstm_forward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
                  const Tensor& hy, const Tensor& cy, const Tensor& workspace) {
  const int64_t rows = cx.size(0), hidden = cx.size(1);
  visit_cell_dtype("fused_lstm_cell", cx.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_type_t<T>;
    const T* ig = input_gates.data<T>();
    const T* hg = hidden_gates.data<T>();
    const T* c = cx.data<T>();
    T* h_out = hy.data<T>();
    T* c_out = cy.data<T>();
    T* ws = optional_data<T>(workspace);
    for_rows(rows, hidden, [&](int64_t n) {
      A gate[4][kBlock], c_new[kBlock], tc[kBlock];
      for (int64_t j0 = 0; j0 < hidden; j0 += kBlock) {
        const int64_t m = std::min(kBlock, hidden - j0);
        for (int64_t q = 0; q < 4; ++q) {
          const T* a = ig + n * 4 * hidden + q * hidden + j0;
          const T* b = hg + n * 4 * hidden + q * hidden + j0;
          for (int64_t j = 0; j < m; ++j) gate[q][j] = static_cast<A>(a[j]) + static_cast<A>(b[j]);
        }
        for (int64_t q : {0, 1, 3})
          for (int64_t j = 0; j < m; ++j) gate[q][j] = sigmoid_of<A>(gate[q][j]);
        for (int64_t j = 0; j < m; ++j) gate[2][j] = std::tanh(gate[2][j]);
        const T* c_prev = c + n * hidden + j0;
        for (int64_t j = 0; j < m; ++j)
          c_new[j] = gate[1][j] * static_cast<A>(c_prev[j]) + gate[0][j] * gate[2][j];
        for (int64_t j = 0; j < m; ++j) tc[j] = std::tanh(c_new[j]);
        for (int64_t j = 0; j < m; ++j) {
          c_out[n * hidden + j0 + j] = convert<T>(c_new[j]);
          h_out[n * hidden + j0 + j] = convert<T>(gate[3][j] * tc[j]);
        }
        if (ws != nullptr) {
          T* w = ws + n * 5 * hidden + j0;
          for (int64_t q = 0; q < 4; ++q)
            for (int64_t j = 0; j < m; ++j) w[q * hidden + j] = convert<T>(gate[q][j]);
          for (int64_t j = 0; j < m; ++j) w[4 * hidden + j] = convert<T>(tc[j]);
        }
      }
    });
  });
}

void lstm_backward(const Tensor& workspace, const Tensor& cx, const Tensor& grad_hy,
                   const Tensor& grad_cy, const Tensor& grad_gates, const Tensor& grad_cx) {
  const int64_t rows = cx.size(0), hidden = cx.size(1);
  visit_cell_dtype("fused_lstm_cell backward", cx.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_type_t<T>;
    const T* ws = workspace.data<T>();
    const T* c = cx.data<T>();
    const T* gh = grad_hy.data<T>();
    const T* gc = grad_cy.data<T>();
    T* gg = grad_gates.data<T>();
    T* gcx = grad_cx.data<T>();
    for_rows(rows, hidden, [&](int64_t n) {
      const T* w = ws + n * 5 * hidden;
      T* d = gg + n * 4 * hidden;
      for (int64_t j = 0; j < hidden; ++j) {
        const int64_t k = n * hidden + j;
        const A i = static_cast<A>(w[j]), f = static_cast<A>(w[hidden + j]);
        const A g = static_cast<A>(w[2 * hidden + j]), o = static_cast<A>(w[3 * hidden + j]);
        const A tc = static_cast<A>(w[4 * hidden + j]);
        const A c_prev = static_cast<A>(c[k]);
        const A dh = static_cast<A>(gh[k]);
        const A dc = static_cast<A>(gc[k]) + dh * o * (A(1) - tc * tc);
        d[j] = convert<T>(dc * g * i * (A(1) - i));
        d[hidden + j] = convert<T>(dc * c_prev * f * (A(1) - f));
        d[2 * hidden + j] = convert<T>(dc * i * (A(1) - g * g));
        d[3 * hidden + j] = convert<T>(dh * tc * o * (A(1) - o));
        gcx[k] = convert<T>(dc * f);
      }
    });
  });
}

void gru_forward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                 const Tensor& hy, const Tensor& workspace) {
  const int64_t rows = hx.size(0), hidden = hx.size(1);
  visit_cell_dtype("fused_gru_cell", hx.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_type_t<T>;
    const T* ig = input_gates.data<T>();
    const T* hg = hidden_gates.data<T>();
    const T* h = hx.data<T>();
    T* out = hy.data<T>();
    T* ws = optional_data<T>(workspace);
    for_rows(rows, hidden, [&](int64_t n) {
      A gate[3][kBlock];
      for (int64_t j0 = 0; j0 < hidden; j0 += kBlock) {
        const int64_t m = std::min(kBlock, hidden - j0);
        const T* a = ig + n * 3 * hidden + j0;
        const T* b = hg + n * 3 * hidden + j0;
        for (int64_t q = 0; q < 2; ++q)
          for (int64_t j = 0; j < m; ++j)
            gate[q][j] = static_cast<A>(a[q * hidden + j]) + static_cast<A>(b[q * hidden + j]);
        for (int64_t q = 0; q < 2; ++q)
          for (int64_t j = 0; j < m; ++j) gate[q][j] = sigmoid_of<A>(gate[q][j]);
        for (int64_t j = 0; j < m; ++j)
          gate[2][j] =
              static_cast<A>(a[2 * hidden + j]) + gate[0][j] * static_cast<A>(b[2 * hidden + j]);
        for (int64_t j = 0; j < m; ++j) gate[2][j] = std::tanh(gate[2][j]);
        const T* h_prev = h + n * hidden + j0;
        for (int64_t j = 0; j < m; ++j)
          out[n * hidden + j0 + j] =
              convert<T>((A(1) - gate[1][j]) * gate[2][j] + gate[1][j] * static_cast<A>(h_prev[j]));
        if (ws != nullptr) {
          T* w = ws + n * 3 * hidden + j0;
          for (int64_t q = 0; q < 3; ++q)
            for (int64_t j = 0; j < m; ++j) w[q * hidden + j] = convert<T>(gate[q][j]);
        }
      }
    });
  });
}

void gru_backward(const Tensor& workspace, const Tensor& hidden_gates, const Tensor& hx,
                  const Tensor& grad_hy, const Tensor& grad_input_gates,
                  const Tensor& grad_hidden_gates, const Tensor& grad_hx) {
  const int64_t rows = hx.size(0), hidden = hx.size(1);
  visit_cell_dtype("fused_gru_cell backward", hx.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_type_t<T>;
    const T* ws = workspace.data<T>();
    const T* hg = hidden_gates.data<T>();
    const T* h = hx.data<T>();
    const T* gh = grad_hy.data<T>();
    T* gi = grad_input_gates.data<T>();
    T* gr = grad_hidden_gates.data<T>();
    T* ghx = grad_hx.data<T>();
    for_rows(rows, hidden, [&](int64_t n) {
      const T* w = ws + n * 3 * hidden;
      const T* b = hg + n * 3 * hidden;
      T* di = gi + n * 3 * hidden;
      T* dr = gr + n * 3 * hidden;
      for (int64_t j = 0; j < hidden; ++j) {
        const int64_t k = n * hidden + j;
        const A r = static_cast<A>(w[j]), z = static_cast<A>(w[hidden + j]);
        const A cand = static_cast<A>(w[2 * hidden + j]);
        const A hn = static_cast<A>(b[2 * hidden + j]);
        const A dh = static_cast<A>(gh[k]);
        const A dn = dh * (A(1) - z) * (A(1) - cand * cand);  // of n's pre-activation
        const A dr_pre = dn * hn * r * (A(1) - r);
        const A dz_pre = dh * (static_cast<A>(h[k]) - cand) * z * (A(1) - z);
        di[j] = convert<T>(dr_pre);
        di[hidden + j] = convert<T>(dz_pre);
        di[2 * hidden + j] = convert<T>(dn);
        dr[j] = convert<T>(dr_pre);
        dr[hidden + j] = convert<T>(dz_pre);
        dr[2 * hidden + j] = convert<T>(dn * r);
        ghx[k] = convert<T>(dh * z);
      }
    });
  });
}

}  // namespace

}  // namespace kiln::cpu

namespace kiln {

const RnnCellKernels RnnCellKernels::cpu{.lstm_forward = cpu::lstm_forward,
                                         .lstm_backward = cpu::lstm_backward,
                                         .gru_forward = cpu::gru_forward,
                                         .gru_backward = cpu::gru_backward};

}  // namespace kiln
