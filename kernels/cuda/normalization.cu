// Batch norm's passes and layer norm's forward. Batch norm reads and writes f32, f64, f16 and bf16
// activations with statistics, parameters and sums in P (f32 for the 16-bit floats, else x's
// dtype), in either layout (BatchNormLayout), two launches each way:
//
//   forward  1. batch_norm_stats_kernel (training only): a grid of channels (channel tiles for
//               channels_last) by splits of the batch; each thread folds its values into Welford's
//               (count, mean, M2), the block combines its threads in a fixed tree in shared memory
//               and writes one partial per channel. With few channels and large images (ResNet-50's
//               first stages) the splits keep the whole GPU busy, where a block per channel left
//               most of it idle.
//            2. batch_norm_apply_kernel: every thread combines its channel's partials in index
//               order, the same steps in every block, so every block normalises with the same bits
//               and the result never depends on which block finished first (no atomics); then
//               y = x * scale + shift, with the ReLU, or the residual add and the ReLU, in the same
//               pass. The first block of each channel stores mean and invstd and updates the
//               running statistics (and channel 0's nn::BatchNorm's count of batches), so they
//               need no kernels of their own.
//   backward 1. batch_norm_backward_reduce_kernel: partial Σ g and Σ g (x - mean) per channel and
//               block, g masked by the forward's ReLU;
//            2. batch_norm_backward_elemt_kernel: every thread combines its channel's partials as
//               above, then writes grad_x (and grad_residual); the first block stores the sums
//               (the weight's and the bias's gradients).
//
//   The layouts differ only in how a block walks x (BatchNormWalk): channels_first x [N, C, S], a
//   block on one channel reading tiles of `width` consecutive spatial positions by `rows` images;
//   channels_last x [M, C], a block on `width` adjacent channels (adjacent threads read adjacent
//   channels) by `rows` rows of M. PyTorch has the same pair (batch_norm_collect_statistics and
//   its _channels_last twin).
//
//   layer_norm: one warp per row (kThreads / 32 rows a block, grid-stride over rows). A row (the
//     features of one position) is short next to a channel, so a warp covers it and its sums need
//     shuffles only, no barrier.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/cuda/reduction.cuh"
#include "kiln/kernels/normalization.h"

namespace kiln::cuda {

namespace {

// Threads of every batch-norm block: a power of two, so the shared-memory tree halves evenly.
constexpr int kBlock = 256;
// Blocks per multiprocessor the reductions aim for (an SM holds eight of kBlock threads).
constexpr int64_t kReduceBlocksPerSm = 8;
// Tiles (kBlock elements each) a block of the elementwise passes takes at least, so that its
// threads' combining of the channel's partials stays small next to their elements.
constexpr int64_t kElementwiseTilesPerBlock = 8;
constexpr int64_t kMaxGridYZ = 65535;

template <class T>
const T* optional_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* optional_out(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// A tensor's elements as device type T (__half and __nv_bfloat16 for the 16-bit floats, whose
// bits are kiln's Half and BFloat16).
template <class T>
T* data_as(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
template <class T>
T* optional_as(const Tensor& t) {
  return t.defined() ? data_as<T>(t) : nullptr;
}

// Welford's running (count, mean, sum of squared deviations). Counts are P, exact up to 2^24
// values a block: a block holds a channel's whole M only when there are at least eight channels
// per multiprocessor, so passing that takes tens of gigabytes of activations. The variance divides
// by the host's exact M.
template <class P>
struct Welford {
  P n, mean, m2;

  __device__ void add(P v) {
    n += P(1);
    const P d = v - mean;
    mean += d / n;
    m2 += d * (v - mean);
  }
};

// Chan et al.'s combination of two Welford states, a's values first. Not symmetric in its
// rounding, so every caller combines in a fixed order.
struct CombineWelford {
  template <class P>
  __device__ Welford<P> operator()(const Welford<P>& a, const Welford<P>& b) const {
    if (b.n == P(0)) return a;
    if (a.n == P(0)) return b;
    const P n = a.n + b.n, d = b.mean - a.mean, wb = b.n / n;
    return {n, a.mean + d * wb, a.m2 + b.m2 + d * d * a.n * wb};
  }
};

// A block's two sums of the backward: Σ g and Σ g (x - mean).
template <class P>
struct GradSums {
  P g, gx;
};

struct AddGradSums {
  template <class P>
  __device__ GradSums<P> operator()(const GradSums<P>& a, const GradSums<P>& b) const {
    return {a.g + b.g, a.gx + b.gx};
  }
};

// Combines v over the threads t, t + stop, t + 2 stop, ... of the block into thread t < stop (the
// others get a partial result), in a fixed tree: at each level thread t takes t + stride's value,
// stride halving from blockDim.x / 2 down to stop. blockDim.x and stop are powers of two; every
// thread must call it.
template <class V, class Combine>
__device__ V block_tree_reduce(V v, V* smem, int stop, Combine combine) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int stride = static_cast<int>(blockDim.x) / 2; stride >= stop; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride)
      smem[threadIdx.x] = combine(smem[threadIdx.x], smem[threadIdx.x + stride]);
    __syncthreads();
  }
  return smem[threadIdx.x];
}

// Where a block's threads sit in x ([n, channels, s]; channels_last: [n, channels] with s = 1).
// A block is one channel (channels_first) or `width` adjacent channels (channels_last); its
// threads form tiles of width x (blockDim.x / width), and the grid's y and z split the channel's
// tiles: y over rows of tiles (images or rows of M), z over columns (channels_first's spatial
// positions). A launch's blocks of one channel are its splits: split() is one of
// gridDim.y * gridDim.z.
template <bool kChannelsLast>
struct BatchNormWalk {
  int64_t n, channels, s;
  int width;  // a power of two dividing blockDim.x

  __device__ int tx() const { return static_cast<int>(threadIdx.x) % width; }
  __device__ int ty() const { return static_cast<int>(threadIdx.x) / width; }
  __device__ int rows() const { return static_cast<int>(blockDim.x) / width; }
  // This thread's channel; channels_last's last tile may reach past the end.
  __device__ int64_t channel() const {
    return kChannelsLast ? static_cast<int64_t>(blockIdx.x) * width + tx() : blockIdx.x;
  }
  __device__ bool has_channel() const { return channel() < channels; }
  __device__ int64_t split() const {
    return blockIdx.y + static_cast<int64_t>(gridDim.y) * blockIdx.z;
  }
  __device__ int64_t splits() const { return static_cast<int64_t>(gridDim.y) * gridDim.z; }
  // The thread that stores its channel's results: one per channel, in the channel's first block.
  __device__ bool stores_channel() const {
    return blockIdx.y == 0 && blockIdx.z == 0 && has_channel() &&
           (kChannelsLast ? ty() == 0 : threadIdx.x == 0);
  }
  // The threads of a block that hold a channel's total after block_tree_reduce.
  __device__ int reduce_stop() const { return kChannelsLast ? width : 1; }

  // Calls f(k) for the offset k of every element of this thread's channel in this block's share.
  template <class F>
  __device__ void for_each(F f) const {
    if (!has_channel()) return;
    const int64_t c = channel(), row_tiles = (n + rows() - 1) / rows();
    for (int64_t tile = blockIdx.y; tile < row_tiles; tile += gridDim.y) {
      const int64_t i = tile * rows() + ty();
      if (i >= n) continue;
      if (kChannelsLast) {
        f(i * channels + c);
      } else {
        const int64_t base = (i * channels + c) * s;
        for (int64_t j = static_cast<int64_t>(blockIdx.z) * width + tx(); j < s;
             j += static_cast<int64_t>(gridDim.z) * width)
          f(base + j);
      }
    }
  }
};

__device__ inline float mul_rn(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ inline double mul_rn(double a, double b) {
  return __dmul_rn(a, b);
}

// Channel c's affine map y = x * scale + shift (the CPU's folding), in P, with every rounding
// pinned (no contraction left to the compiler): the apply kernel and the ReLU mask of the backward
// compute y from the same x bit for bit.
template <class P>
struct ChannelAffine {
  P scale, shift;
  __device__ ChannelAffine(P mean, P invstd, const P* weight, const P* bias, int64_t c)
      : scale(mul_rn(invstd, weight ? weight[c] : P(1))),
        shift(fma(-mean, scale, bias ? bias[c] : P(0))) {}
  __device__ P operator()(P x) const { return fma(x, scale, shift); }
};

// 1 / sqrt(var + eps) in double, rounded once to P.
template <class P>
__device__ P inverse_std(P var, double eps) {
  return static_cast<P>(1.0 / sqrt(static_cast<double>(var) + eps));
}

template <class T, class P, bool kChannelsLast>
__global__ void batch_norm_stats_kernel(const T* __restrict__ x, BatchNormWalk<kChannelsLast> walk,
                                        Welford<P>* __restrict__ partials) {
  __shared__ Welford<P> smem[kBlock];
  Welford<P> acc{P(0), P(0), P(0)};
  walk.for_each([&](int64_t k) { acc.add(device_convert<P>(x[k])); });
  acc = block_tree_reduce(acc, smem, walk.reduce_stop(), CombineWelford{});
  if (static_cast<int>(threadIdx.x) < walk.reduce_stop() && walk.has_channel())
    partials[walk.channel() * walk.splits() + walk.split()] = acc;
}

// Channel c's partials combined in index order: the same steps, so the same bits, in every thread
// that asks.
template <class V, class Combine>
__device__ V fold_partials(const V* partials, int64_t count, int64_t c, V zero, Combine combine) {
  V total = zero;
  for (int64_t i = 0; i < count; ++i) total = combine(total, partials[c * count + i]);
  return total;
}

// The statistics a forward pass normalises channel c with: the batch's from the partials
// (training), or the running ones.
template <class P>
struct ChannelStats {
  P mean, var, invstd;
};

template <class T, class P, bool kChannelsLast>
__global__ void batch_norm_apply_kernel(const T* __restrict__ x, BatchNormWalk<kChannelsLast> walk,
                                        const Welford<P>* __restrict__ partials,
                                        int64_t partial_count, int64_t count,
                                        P* __restrict__ running_mean, P* __restrict__ running_var,
                                        const P* __restrict__ weight, const P* __restrict__ bias,
                                        const T* __restrict__ residual, bool training, bool relu,
                                        double momentum, double eps, T* __restrict__ out,
                                        P* __restrict__ mean_out, P* __restrict__ invstd_out,
                                        int64_t* __restrict__ num_batches_tracked) {
  if (!walk.has_channel()) return;  // no barrier below
  const int64_t c = walk.channel();
  ChannelStats<P> stats;
  if (training) {
    const Welford<P> total =
        fold_partials(partials, partial_count, c, Welford<P>{P(0), P(0), P(0)}, CombineWelford{});
    stats.mean = count > 0 ? total.mean : P(0);
    stats.var = count > 0 ? static_cast<P>(total.m2 / static_cast<P>(count)) : P(0);
  } else {
    stats.mean = running_mean[c];
    stats.var = running_var[c];
  }
  stats.invstd = inverse_std(stats.var, eps);
  if (walk.stores_channel()) {
    if (num_batches_tracked && c == 0) ++*num_batches_tracked;
    if (mean_out) mean_out[c] = stats.mean;
    if (invstd_out) invstd_out[c] = stats.invstd;
    // An empty batch carries no statistics, so the running ones stay as they were.
    if (training && running_mean && count > 0) {
      const double unbiased = count > 1 ? static_cast<double>(count) / (count - 1) : 1.0;
      running_mean[c] = static_cast<P>((1.0 - momentum) * static_cast<double>(running_mean[c]) +
                                       momentum * static_cast<double>(stats.mean));
      running_var[c] = static_cast<P>((1.0 - momentum) * static_cast<double>(running_var[c]) +
                                      momentum * static_cast<double>(stats.var) * unbiased);
    }
  }
  const ChannelAffine<P> affine(stats.mean, stats.invstd, weight, bias, c);
  walk.for_each([&](int64_t k) {
    P y = affine(device_convert<P>(x[k]));
    if (residual) y += device_convert<P>(residual[k]);
    if (relu && y < P(0)) y = P(0);  // NaN passes, as relu
    out[k] = device_convert<T>(y);
  });
}

// The gradient that reaches batch norm's output at element k (BatchNormBackwardPass): grad, or 0
// where the forward's ReLU stopped it, judged from its stored output or from y worked out again
// and rounded to T as it was stored (a 16-bit y too small for T stored 0).
template <class T, class P>
struct MaskedGrad {
  const T* grad;
  const T* x;
  const T* output;  // the forward's output (it had a residual), or null
  bool relu;
  ChannelAffine<P> affine;

  __device__ P operator()(int64_t k) const {
    const P g = device_convert<P>(grad[k]);
    if (output) return device_convert<P>(output[k]) <= P(0) ? P(0) : g;  // NaN passes
    if (relu) {
      const P stored = device_convert<P>(device_convert<T>(affine(device_convert<P>(x[k]))));
      return stored <= P(0) ? P(0) : g;
    }
    return g;
  }
};

template <class T, class P, bool kChannelsLast>
__global__ void batch_norm_backward_reduce_kernel(
    const T* __restrict__ x, const T* __restrict__ grad, const T* __restrict__ output,
    BatchNormWalk<kChannelsLast> walk, const P* __restrict__ mean, const P* __restrict__ invstd,
    const P* __restrict__ weight, const P* __restrict__ bias, bool relu,
    GradSums<P>* __restrict__ partials) {
  __shared__ GradSums<P> smem[kBlock];
  GradSums<P> acc{P(0), P(0)};
  if (walk.has_channel()) {
    const int64_t c = walk.channel();
    const P mu = mean[c];
    const MaskedGrad<T, P> masked{grad, x, output, relu,
                                  ChannelAffine<P>(mu, invstd[c], weight, bias, c)};
    walk.for_each([&](int64_t k) {
      const P g = masked(k);
      acc.g += g;
      acc.gx += g * (device_convert<P>(x[k]) - mu);
    });
  }
  acc = block_tree_reduce(acc, smem, walk.reduce_stop(), AddGradSums{});
  if (static_cast<int>(threadIdx.x) < walk.reduce_stop() && walk.has_channel())
    partials[walk.channel() * walk.splits() + walk.split()] = acc;
}

template <class T, class P, bool kChannelsLast>
__global__ void batch_norm_backward_elemt_kernel(
    const T* __restrict__ x, const T* __restrict__ grad, const T* __restrict__ output,
    BatchNormWalk<kChannelsLast> walk, const GradSums<P>* __restrict__ partials,
    int64_t partial_count, int64_t count, const P* __restrict__ mean, const P* __restrict__ invstd,
    const P* __restrict__ weight, const P* __restrict__ bias, bool relu, bool training,
    T* __restrict__ grad_x, T* __restrict__ grad_residual, P* __restrict__ sum_g,
    P* __restrict__ sum_g_xhat) {
  if (!walk.has_channel()) return;  // no barrier below
  const int64_t c = walk.channel();
  const P mu = mean[c], rstd = invstd[c];
  const GradSums<P> sums =
      fold_partials(partials, partial_count, c, GradSums<P>{P(0), P(0)}, AddGradSums{});
  // Σ g * (x - mean), times invstd once here rather than per element, as the CPU.
  const P sum_gx = sums.gx * rstd;
  if (walk.stores_channel()) {
    if (sum_g) sum_g[c] = sums.g;
    if (sum_g_xhat) sum_g_xhat[c] = sum_gx;
  }
  if (!grad_x && !grad_residual) return;
  const MaskedGrad<T, P> masked{grad, x, output, relu, ChannelAffine<P>(mu, rstd, weight, bias, c)};
  // dx = a (g - Σg / M - (x - mean) * invstd * Σ(g x_hat) / M) in training: the batch mean and
  // variance depend on every x, so each gradient loses its projection on 1 and on x_hat.
  const P a = rstd * (weight ? weight[c] : P(1));
  const bool centre = training && count > 0;
  const P mean_g = centre ? sums.g / static_cast<P>(count) : P(0);
  const P k_x = centre ? rstd * (sum_gx / static_cast<P>(count)) : P(0);
  walk.for_each([&](int64_t k) {
    const P g = masked(k);
    if (grad_residual) grad_residual[k] = device_convert<T>(g);
    if (grad_x)
      grad_x[k] = device_convert<T>(a * (g - mean_g - (device_convert<P>(x[k]) - mu) * k_x));
  });
}

// One warp per row; a row's sums are reduced with shuffles, so no block barrier is needed, and the
// butterfly leaves the same total in every lane.
template <class T>
__global__ void layer_norm_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                  const T* __restrict__ bias, double eps, T* __restrict__ out,
                                  T* __restrict__ mean, T* __restrict__ invstd, int64_t rows,
                                  int64_t k) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = blockDim.x / kWarpSize;
  const int64_t step = static_cast<int64_t>(gridDim.x) * warps;
  for (int64_t row = blockIdx.x * warps + threadIdx.x / kWarpSize; row < rows; row += step) {
    const T* src = x + row * k;
    double total = 0.0;
    for (int64_t j = lane; j < k; j += kWarpSize) total += static_cast<double>(src[j]);
    total = warp_allreduce(total, Sum{});
    const double mu = k > 0 ? total / static_cast<double>(k) : 0.0;
    double squares = 0.0;
    for (int64_t j = lane; j < k; j += kWarpSize) {
      const double d = static_cast<double>(src[j]) - mu;
      squares += d * d;
    }
    squares = warp_allreduce(squares, Sum{});
    const double var = k > 0 ? squares / static_cast<double>(k) : 0.0;
    const double rstd = 1.0 / sqrt(var + eps);
    if (lane == 0) {
      mean[row] = static_cast<T>(mu);
      invstd[row] = static_cast<T>(rstd);
    }
    T* dst = out + row * k;
    for (int64_t j = lane; j < k; j += kWarpSize) {
      const T y = static_cast<T>((static_cast<double>(src[j]) - mu) * rstd);
      dst[j] = y * (weight ? weight[j] : T(1)) + (bias ? bias[j] : T(0));
    }
  }
}

// ---- batch norm's launches ----

// How a pass's blocks cover x: the walk, the blocks along x (channels, or channel tiles), and how
// many tiles of kBlock elements a channel has along each split axis.
struct Geometry {
  bool channels_last;
  int64_t n, channels, s;
  int width;
  int64_t blocks_x, row_tiles, col_tiles;

  template <bool kChannelsLast>
  BatchNormWalk<kChannelsLast> walk() const {
    return {n, channels, s, width};
  }
  int64_t count() const { return n * s; }  // values per channel
};

int pow2_at_least(int64_t v, int cap) {
  int p = 1;
  while (p < cap && p < v) p *= 2;
  return p;
}

// channels_first with S = 1 ([N, C]) is channels_last's [M, C]: walked that way, adjacent threads
// read adjacent channels instead of values C apart.
Geometry geometry_of(const Tensor& x, BatchNormLayout layout) {
  Geometry g{};
  g.n = x.size(0);
  g.channels = x.size(1);
  g.s = layout == BatchNormLayout::channels_first ? x.size(2) : 1;
  g.channels_last = layout == BatchNormLayout::channels_last || g.s == 1;
  if (g.channels_last) {
    // Up to a warp of adjacent channels per row of the tile: one 128-byte line of f32.
    g.width = pow2_at_least(g.channels, kWarpSize);
    g.blocks_x = ceil_div(g.channels, g.width);
    g.col_tiles = 1;
  } else {
    g.width = pow2_at_least(g.s, kBlock);
    g.blocks_x = g.channels;
    g.col_tiles = ceil_div(g.s, g.width);
  }
  g.row_tiles = ceil_div(g.n, kBlock / g.width);
  return g;
}

// A grid of `splits` blocks per blocks_x (or fewer: no block without a tile), spread over the rows
// of tiles first, then the columns.
dim3 grid_of(const Geometry& g, int64_t splits) {
  const int64_t y = std::clamp<int64_t>(std::min(splits, g.row_tiles), 1, kMaxGridYZ);
  const int64_t z = std::clamp<int64_t>(std::min(ceil_div(splits, y), g.col_tiles), 1, kMaxGridYZ);
  return dim3(static_cast<unsigned>(g.blocks_x), static_cast<unsigned>(y),
              static_cast<unsigned>(z));
}

// Splits for the reductions: enough blocks to fill the device. The count depends on the shape and
// the device only, never on timing, so a result repeats bit for bit.
int64_t reduction_splits(const Geometry& g, int device) {
  return ceil_div(kReduceBlocksPerSm * red::sm_count(device), g.blocks_x);
}

// Splits for the elementwise passes: blocks of at least kElementwiseTilesPerBlock tiles, and at
// least as many tiles as there are partials to combine.
int64_t elementwise_splits(const Geometry& g, int64_t partials) {
  return ceil_div(g.row_tiles * g.col_tiles,
                  std::max<int64_t>(kElementwiseTilesPerBlock, partials));
}

template <class F>
void with_layout(bool channels_last, F&& f) {
  if (channels_last)
    f(std::true_type{});
  else
    f(std::false_type{});
}

template <class V>
Tensor workspace_for(int64_t items, Device device) {
  return empty({items * static_cast<int64_t>(sizeof(V))}, DType::u8, device);
}

}  // namespace

void batch_norm_forward_pass(const BatchNormForwardPass& p) {
  const Geometry g = geometry_of(p.x, p.layout);
  if (g.channels == 0) return;
  const Device device = p.x.device();
  visit_floating_device("batch_norm", p.x.dtype(), [&](auto t) {
    using T = typename decltype(t)::type;
    using P = device_acc_t<T>;
    with_layout(g.channels_last, [&](auto last) {
      constexpr bool kLast = decltype(last)::value;
      const BatchNormWalk<kLast> walk = g.walk<kLast>();
      Tensor workspace;
      int64_t partial_count = 0;
      if (p.training && g.count() > 0) {
        const dim3 grid = grid_of(g, reduction_splits(g, device.index));
        partial_count = static_cast<int64_t>(grid.y) * grid.z;
        workspace = workspace_for<Welford<P>>(g.channels * partial_count, device);
        KILN_LAUNCH(grid, kBlock, 0, stream(), batch_norm_stats_kernel<T, P, kLast>)
        (data_as<T>(p.x), walk, data_as<Welford<P>>(workspace));
        KILN_CUDA_CHECK_LAUNCH();
      }
      KILN_LAUNCH(grid_of(g, elementwise_splits(g, partial_count)), kBlock, 0, stream(),
                  batch_norm_apply_kernel<T, P, kLast>)
      (data_as<T>(p.x), walk, optional_as<const Welford<P>>(workspace), partial_count, g.count(),
       optional_out<P>(p.running_mean), optional_out<P>(p.running_var), optional_data<P>(p.weight),
       optional_data<P>(p.bias), optional_as<const T>(p.residual), p.training, p.relu, p.momentum,
       p.eps, data_as<T>(p.out), optional_out<P>(p.mean), optional_out<P>(p.invstd),
       optional_out<int64_t>(p.num_batches_tracked));
      KILN_CUDA_CHECK_LAUNCH();
    });
  });
}

void batch_norm_backward_pass(const BatchNormBackwardPass& p) {
  const Geometry g = geometry_of(p.x, p.layout);
  if (g.channels == 0) return;
  const Device device = p.x.device();
  const bool need_sums = p.training || p.sum_g.defined() || p.sum_g_xhat.defined();
  const bool elementwise = p.grad_x.defined() || p.grad_residual.defined();
  visit_floating_device("batch_norm_backward", p.x.dtype(), [&](auto t) {
    using T = typename decltype(t)::type;
    using P = device_acc_t<T>;
    with_layout(g.channels_last, [&](auto last) {
      constexpr bool kLast = decltype(last)::value;
      const BatchNormWalk<kLast> walk = g.walk<kLast>();
      Tensor workspace;
      int64_t partial_count = 0;
      if (need_sums && g.count() > 0) {
        const dim3 grid = grid_of(g, reduction_splits(g, device.index));
        partial_count = static_cast<int64_t>(grid.y) * grid.z;
        workspace = workspace_for<GradSums<P>>(g.channels * partial_count, device);
        KILN_LAUNCH(grid, kBlock, 0, stream(), batch_norm_backward_reduce_kernel<T, P, kLast>)
        (data_as<T>(p.x), data_as<T>(p.grad), optional_as<const T>(p.output), walk,
         p.mean.data<P>(), p.invstd.data<P>(), optional_data<P>(p.weight), optional_data<P>(p.bias),
         p.relu, data_as<GradSums<P>>(workspace));
        KILN_CUDA_CHECK_LAUNCH();
      }
      if (!elementwise && !need_sums) return;
      // Without an elementwise output, one block per channel (tile) stores the sums.
      const int64_t splits = elementwise ? elementwise_splits(g, partial_count) : 1;
      KILN_LAUNCH(grid_of(g, splits), kBlock, 0, stream(),
                  batch_norm_backward_elemt_kernel<T, P, kLast>)
      (data_as<T>(p.x), data_as<T>(p.grad), optional_as<const T>(p.output), walk,
       optional_as<const GradSums<P>>(workspace), partial_count, g.count(), p.mean.data<P>(),
       p.invstd.data<P>(), optional_data<P>(p.weight), optional_data<P>(p.bias), p.relu, p.training,
       optional_as<T>(p.grad_x), optional_as<T>(p.grad_residual), optional_out<P>(p.sum_g),
       optional_out<P>(p.sum_g_xhat));
      KILN_CUDA_CHECK_LAUNCH();
    });
  });
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                const Tensor& out, const Tensor& mean, const Tensor& invstd) {
  const int64_t rows = x.size(0), k = x.size(1);
  if (rows == 0) return;
  visit_f32_f64("layer_norm", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(rows, kThreads / kWarpSize), kThreads, 0, stream(), layer_norm_kernel<T>)
    (x.data<T>(), optional_data<T>(weight), optional_data<T>(bias), eps, out.data<T>(),
     mean.data<T>(), invstd.data<T>(), rows, k);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr NormalizationKernels kCuda{.batch_norm_stats = nullptr,
                                     .batch_norm_apply = nullptr,
                                     .batch_norm_backward = nullptr,
                                     .layer_norm = cuda::layer_norm,
                                     .fuses_relu = true,
                                     .takes_half = true,
                                     .batch_norm_forward_pass = cuda::batch_norm_forward_pass,
                                     .batch_norm_backward_pass = cuda::batch_norm_backward_pass};
}  // namespace

const NormalizationKernels* const NormalizationKernels::cuda = &kCuda;

}  // namespace kiln
