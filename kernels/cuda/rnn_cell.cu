// The fused LSTM and GRU cells on the GPU (kernels/rnn_cell.h): one thread per element (n, j) of
// the [N, H] state, grid-stride over N * H with kThreads a block; a thread reads its four (LSTM) or
// three (GRU) gates at j, H + j, ... of row n, so neighbouring threads read neighbouring gate
// elements (coalesced within each gate's stretch). The arithmetic is the CPU kernel's, in
// device_acc_t (float for __half and __nv_bfloat16), each result rounded once through
// device_convert; the forward writes the workspace of activated gates the backward reads. Checked
// in the CUDA simulator only: nn/recurrent.cpp runs it on a GPU only when
// backends::fused_rnn_cell_on_gpu() is on.
#include <cmath>
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/rnn_cell.h"

namespace kiln::cuda {

namespace {

template <class A>
__device__ __forceinline__ A sigmoid_of(A v) {
  return A(1) / (A(1) + exp_acc(-v));
}

__device__ __forceinline__ float tanh_acc(float v) {
  return tanhf(v);
}
__device__ __forceinline__ double tanh_acc(double v) {
  return tanh(v);
}

template <class T>
__device__ __forceinline__ device_acc_t<T> acc(T v) {
  return device_convert<device_acc_t<T>>(v);
}

template <class T>
__global__ void lstm_forward_kernel(const T* __restrict__ ig, const T* __restrict__ hg,
                                    const T* __restrict__ cx, T* __restrict__ hy,
                                    T* __restrict__ cy, T* __restrict__ ws, int64_t hidden,
                                    int64_t total) {
  using A = device_acc_t<T>;
  for (int64_t k = global_thread_index(); k < total; k += grid_stride()) {
    const int64_t n = k / hidden, j = k - n * hidden;
    const T* a = ig + n * 4 * hidden;
    const T* b = hg + n * 4 * hidden;
    const A i = sigmoid_of<A>(acc(a[j]) + acc(b[j]));
    const A f = sigmoid_of<A>(acc(a[hidden + j]) + acc(b[hidden + j]));
    const A g = tanh_acc(acc(a[2 * hidden + j]) + acc(b[2 * hidden + j]));
    const A o = sigmoid_of<A>(acc(a[3 * hidden + j]) + acc(b[3 * hidden + j]));
    const A c_new = f * acc(cx[k]) + i * g;
    const A tc = tanh_acc(c_new);
    cy[k] = device_convert<T>(c_new);
    hy[k] = device_convert<T>(o * tc);
    if (ws != nullptr) {
      T* w = ws + n * 5 * hidden;
      w[j] = device_convert<T>(i);
      w[hidden + j] = device_convert<T>(f);
      w[2 * hidden + j] = device_convert<T>(g);
      w[3 * hidden + j] = device_convert<T>(o);
      w[4 * hidden + j] = device_convert<T>(tc);
    }
  }
}

template <class T>
__global__ void lstm_backward_kernel(const T* __restrict__ ws, const T* __restrict__ cx,
                                     const T* __restrict__ grad_hy, const T* __restrict__ grad_cy,
                                     T* __restrict__ grad_gates, T* __restrict__ grad_cx,
                                     int64_t hidden, int64_t total) {
  using A = device_acc_t<T>;
  for (int64_t k = global_thread_index(); k < total; k += grid_stride()) {
    const int64_t n = k / hidden, j = k - n * hidden;
    const T* w = ws + n * 5 * hidden;
    T* d = grad_gates + n * 4 * hidden;
    const A i = acc(w[j]), f = acc(w[hidden + j]), g = acc(w[2 * hidden + j]);
    const A o = acc(w[3 * hidden + j]), tc = acc(w[4 * hidden + j]);
    const A c_prev = acc(cx[k]);
    const A dh = acc(grad_hy[k]);
    const A dc = acc(grad_cy[k]) + dh * o * (A(1) - tc * tc);
    d[j] = device_convert<T>(dc * g * i * (A(1) - i));
    d[hidden + j] = device_convert<T>(dc * c_prev * f * (A(1) - f));
    d[2 * hidden + j] = device_convert<T>(dc * i * (A(1) - g * g));
    d[3 * hidden + j] = device_convert<T>(dh * tc * o * (A(1) - o));
    grad_cx[k] = device_convert<T>(dc * f);
  }
}

template <class T>
__global__ void gru_forward_kernel(const T* __restrict__ ig, const T* __restrict__ hg,
                                   const T* __restrict__ hx, T* __restrict__ hy, T* __restrict__ ws,
                                   int64_t hidden, int64_t total) {
  using A = device_acc_t<T>;
  for (int64_t k = global_thread_index(); k < total; k += grid_stride()) {
    const int64_t n = k / hidden, j = k - n * hidden;
    const T* a = ig + n * 3 * hidden;
    const T* b = hg + n * 3 * hidden;
    const A r = sigmoid_of<A>(acc(a[j]) + acc(b[j]));
    const A z = sigmoid_of<A>(acc(a[hidden + j]) + acc(b[hidden + j]));
    const A cand = tanh_acc(acc(a[2 * hidden + j]) + r * acc(b[2 * hidden + j]));
    hy[k] = device_convert<T>((A(1) - z) * cand + z * acc(hx[k]));
    if (ws != nullptr) {
      T* w = ws + n * 3 * hidden;
      w[j] = device_convert<T>(r);
      w[hidden + j] = device_convert<T>(z);
      w[2 * hidden + j] = device_convert<T>(cand);
    }
  }
}

template <class T>
__global__ void gru_backward_kernel(const T* __restrict__ ws, const T* __restrict__ hg,
                                    const T* __restrict__ hx, const T* __restrict__ grad_hy,
                                    T* __restrict__ grad_ig, T* __restrict__ grad_hg,
                                    T* __restrict__ grad_hx, int64_t hidden, int64_t total) {
  using A = device_acc_t<T>;
  for (int64_t k = global_thread_index(); k < total; k += grid_stride()) {
    const int64_t n = k / hidden, j = k - n * hidden;
    const T* w = ws + n * 3 * hidden;
    T* di = grad_ig + n * 3 * hidden;
    T* dr = grad_hg + n * 3 * hidden;
    const A r = acc(w[j]), z = acc(w[hidden + j]), cand = acc(w[2 * hidden + j]);
    const A hn = acc(hg[n * 3 * hidden + 2 * hidden + j]);
    const A dh = acc(grad_hy[k]);
    const A dn = dh * (A(1) - z) * (A(1) - cand * cand);
    const A dr_pre = dn * hn * r * (A(1) - r);
    const A dz_pre = dh * (acc(hx[k]) - cand) * z * (A(1) - z);
    di[j] = device_convert<T>(dr_pre);
    di[hidden + j] = device_convert<T>(dz_pre);
    di[2 * hidden + j] = device_convert<T>(dn);
    dr[j] = device_convert<T>(dr_pre);
    dr[hidden + j] = device_convert<T>(dz_pre);
    dr[2 * hidden + j] = device_convert<T>(dn * r);
    grad_hx[k] = device_convert<T>(dh * z);
  }
}

template <class T>
const T* in(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <class T>
T* out(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

void lstm_forward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
                  const Tensor& hy, const Tensor& cy, const Tensor& workspace) {
  const int64_t hidden = cx.size(1), total = cx.numel();
  if (total == 0) return;
  visit_floating_device("fused_lstm_cell", cx.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), lstm_forward_kernel<T>)
    (in<T>(input_gates), in<T>(hidden_gates), in<T>(cx), out<T>(hy), out<T>(cy), out<T>(workspace),
     hidden, total);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void lstm_backward(const Tensor& workspace, const Tensor& cx, const Tensor& grad_hy,
                   const Tensor& grad_cy, const Tensor& grad_gates, const Tensor& grad_cx) {
  const int64_t hidden = cx.size(1), total = cx.numel();
  if (total == 0) return;
  visit_floating_device("fused_lstm_cell backward", cx.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), lstm_backward_kernel<T>)
    (in<T>(workspace), in<T>(cx), in<T>(grad_hy), in<T>(grad_cy), out<T>(grad_gates),
     out<T>(grad_cx), hidden, total);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void gru_forward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                 const Tensor& hy, const Tensor& workspace) {
  const int64_t hidden = hx.size(1), total = hx.numel();
  if (total == 0) return;
  visit_floating_device("fused_gru_cell", hx.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), gru_forward_kernel<T>)
    (in<T>(input_gates), in<T>(hidden_gates), in<T>(hx), out<T>(hy), out<T>(workspace), hidden,
     total);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void gru_backward(const Tensor& workspace, const Tensor& hidden_gates, const Tensor& hx,
                  const Tensor& grad_hy, const Tensor& grad_input_gates,
                  const Tensor& grad_hidden_gates, const Tensor& grad_hx) {
  const int64_t hidden = hx.size(1), total = hx.numel();
  if (total == 0) return;
  visit_floating_device("fused_gru_cell backward", hx.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), gru_backward_kernel<T>)
    (in<T>(workspace), in<T>(hidden_gates), in<T>(hx), in<T>(grad_hy), out<T>(grad_input_gates),
     out<T>(grad_hidden_gates), out<T>(grad_hx), hidden, total);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr RnnCellKernels kCuda{.lstm_forward = cuda::lstm_forward,
                               .lstm_backward = cuda::lstm_backward,
                               .gru_forward = cuda::gru_forward,
                               .gru_backward = cuda::gru_backward};
}  // namespace

const RnnCellKernels* const RnnCellKernels::cuda = &kCuda;

}  // namespace kiln
