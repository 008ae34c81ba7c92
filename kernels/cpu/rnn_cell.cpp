// The fused LSTM and GRU cells on the CPU (kernels/rnn_cell.h): rows of the batch split across
// threads (parallel_for), each row's H elements one contiguous loop reading its gates in place. The
// arithmetic is the composed cell's (nn/recurrent.cpp's former step: sigmoid as 1 / (1 + exp(-a)),
// std::tanh, the same products and sums in the same order), so f32 and f64 results equal the
// composition's but for the rounding of intermediates that the composition stores in 16 bits. The
// transcendental functions are libm's scalar ones, as the elementwise family's: the library is
// compiled for plain x86-64 and no vector exp exists in kernels/cpu/simd.h.
#include "kiln/kernels/rnn_cell.h"

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
      const T* a = ig + n * 4 * hidden;
      const T* b = hg + n * 4 * hidden;
      for (int64_t j = 0; j < hidden; ++j) {
        const A i = sigmoid_of<A>(static_cast<A>(a[j]) + static_cast<A>(b[j]));
        const A f = sigmoid_of<A>(static_cast<A>(a[hidden + j]) + static_cast<A>(b[hidden + j]));
        const A g =
            std::tanh(static_cast<A>(a[2 * hidden + j]) + static_cast<A>(b[2 * hidden + j]));
        const A o =
            sigmoid_of<A>(static_cast<A>(a[3 * hidden + j]) + static_cast<A>(b[3 * hidden + j]));
        const A c_new = f * static_cast<A>(c[n * hidden + j]) + i * g;
        const A tc = std::tanh(c_new);
        c_out[n * hidden + j] = convert<T>(c_new);
        h_out[n * hidden + j] = convert<T>(o * tc);
        if (ws != nullptr) {
          T* w = ws + n * 5 * hidden;
          w[j] = convert<T>(i);
          w[hidden + j] = convert<T>(f);
          w[2 * hidden + j] = convert<T>(g);
          w[3 * hidden + j] = convert<T>(o);
          w[4 * hidden + j] = convert<T>(tc);
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
      const T* a = ig + n * 3 * hidden;
      const T* b = hg + n * 3 * hidden;
      for (int64_t j = 0; j < hidden; ++j) {
        const A r = sigmoid_of<A>(static_cast<A>(a[j]) + static_cast<A>(b[j]));
        const A z = sigmoid_of<A>(static_cast<A>(a[hidden + j]) + static_cast<A>(b[hidden + j]));
        const A cand =
            std::tanh(static_cast<A>(a[2 * hidden + j]) + r * static_cast<A>(b[2 * hidden + j]));
        out[n * hidden + j] = convert<T>((A(1) - z) * cand + z * static_cast<A>(h[n * hidden + j]));
        if (ws != nullptr) {
          T* w = ws + n * 3 * hidden;
          w[j] = convert<T>(r);
          w[hidden + j] = convert<T>(z);
          w[2 * hidden + j] = convert<T>(cand);
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
