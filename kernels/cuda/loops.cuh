// The GPU twin of kernels/cpu/loops.h: the one place that walks tensors of any shape and strides on
// the device. cuda::elementwise(f, out, inputs...) writes out[i] = f(inputs[i]...) for every
// element of out's shape; the inputs already have that shape (expanded where they broadcast).
//
// Three kernels behind it, picked per call:
//   vectorised: every operand contiguous and 16-byte aligned: each thread moves 16 bytes of the
//               widest operand per load (float4, 8 halves), and the last n % Vec elements go
//               through the same grid-stride loop one at a time;
//   contiguous: every operand contiguous but some pointer misaligned (a view at an odd offset);
//   strided:    anything else, with the offsets of up to kMaxDims coalesced dims computed per
//               element from the flat index.
// Each is a grid-stride loop over the flat index (or the vector index) on blocks of kThreads, with
// grid_for's cap (launch.h): one element (vector) a thread up to 2^24 of them, a few each beyond.
// Neighbouring threads take neighbouring elements, so contiguous operands are read coalesced.
// Only for .cu files (nvcc).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::cuda {

// ---- strided offsets ----

inline constexpr int kMaxDims = 8;

template <int N>
struct Offsets {
  int64_t v[N];
};

// The element offsets of N operands for a flat row-major index. Dims are stored innermost first,
// after coalescing (size-1 dims dropped, dims contiguous in every operand merged), so most
// tensors need one or two divisions per element. Passed to kernels by value.
template <int N>
struct OffsetCalculator {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims][N] = {};

  __device__ __forceinline__ Offsets<N> get(int64_t linear) const {
    Offsets<N> out{};
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      const int64_t index = linear % sizes[d];
      linear /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) out.v[k] += index * strides[d][k];
    }
    return out;
  }
};

// Builds the calculator for `shape` and the operands' strides (in elements). Throws
// NotImplementedError naming `op` when more than kMaxDims dims remain after coalescing.
template <int N>
OffsetCalculator<N> make_offset_calculator(const char* op, const Shape& shape,
                                           const std::array<const Shape*, N>& strides) {
  // Coalesce outermost first, as cpu::coalesce does, then store innermost first.
  Shape sizes;
  std::array<Shape, N> merged;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!sizes.empty()) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        mergeable = mergeable && merged[k].back() == (*strides[k])[d] * shape[d];
      if (mergeable) {
        sizes.back() *= shape[d];
        for (int k = 0; k < N; ++k) merged[k].back() = (*strides[k])[d];
        continue;
      }
    }
    sizes.push_back(shape[d]);
    for (int k = 0; k < N; ++k) merged[k].push_back((*strides[k])[d]);
  }
  if (sizes.size() > static_cast<size_t>(kMaxDims))
    throw NotImplementedError(std::string(op) + ": a strided CUDA operand has " +
                              std::to_string(sizes.size()) +
                              " dims that cannot be merged; at most " + std::to_string(kMaxDims) +
                              " are supported (call contiguous() first)");
  OffsetCalculator<N> calc;
  calc.ndim = static_cast<int>(sizes.size());
  for (int d = 0; d < calc.ndim; ++d) {
    const size_t from = sizes.size() - 1 - static_cast<size_t>(d);
    calc.sizes[d] = sizes[from];
    for (int k = 0; k < N; ++k) calc.strides[d][k] = merged[k][from];
  }
  return calc;
}

// ---- the elementwise kernels ----

template <class T, int Vec>
struct alignas(sizeof(T) * Vec) AlignedVec {
  T v[Vec];
};

// The inputs by value: copying each AlignedVec is what makes one 16-byte load of it (through a
// reference the compiler loads the elements one by one).
template <int Vec, class F, class Out, class... In>
__device__ __forceinline__ void apply_vec(const F& f, Out* out, const AlignedVec<In, Vec>... in) {
  AlignedVec<Out, Vec> result;
#pragma unroll
  for (int k = 0; k < Vec; ++k) result.v[k] = f(in.v[k]...);
  *reinterpret_cast<AlignedVec<Out, Vec>*>(out) = result;
}

// Every operand contiguous. With Vec > 1 every pointer is aligned to Vec elements of its type.
template <int Vec, class F, class Out, class... In>
__global__ void contiguous_kernel(int64_t n, F f, Out* out, const In*... in) {
  const int64_t step = grid_stride();
  const int64_t vectors = n / Vec;
  for (int64_t v = global_thread_index(); v < vectors; v += step)
    apply_vec<Vec>(f, out + v * Vec,
                   *reinterpret_cast<const AlignedVec<In, Vec>*>(in + v * Vec)...);
  if constexpr (Vec > 1) {
    for (int64_t i = vectors * Vec + global_thread_index(); i < n; i += step) out[i] = f(in[i]...);
  }
}

template <class F, class Out, class... In, size_t... I>
__device__ __forceinline__ void apply_strided(const F& f, Out* out,
                                              const Offsets<sizeof...(In) + 1>& offsets,
                                              std::index_sequence<I...>, const In*... in) {
  out[offsets.v[0]] = f(in[offsets.v[I + 1]]...);
}

template <class F, class Out, class... In>
__global__ void strided_kernel(int64_t n, OffsetCalculator<sizeof...(In) + 1> calc, F f, Out* out,
                               const In*... in) {
  const int64_t step = grid_stride();
  for (int64_t i = global_thread_index(); i < n; i += step)
    apply_strided(f, out, calc.get(i), std::index_sequence_for<In...>{}, in...);
}

template <int Vec, class T>
bool aligned_for(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * Vec) == 0;
}

// Elements per 16-byte load of the widest operand.
template <class Out, class... In>
constexpr int vec_width() {
  constexpr size_t widest = std::max({sizeof(Out), sizeof(In)...});
  return static_cast<int>(16 / widest);
}

// out[i] = f(inputs[i]...) over out's shape. Out and In are the device element types (__half, not
// kiln::Half); every input has out's shape and lives on out's device. `op` names the caller in
// errors.
template <class Out, class... In, class F, class... Ts>
void elementwise(const char* op, F f, const Tensor& out, const Ts&... inputs) {
  static_assert(sizeof...(In) == sizeof...(Ts), "one element type per input tensor");
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(out.device());  // launches go to the current device's stream
  Out* o = static_cast<Out*>(out.data_ptr());
  const bool contiguous = out.is_contiguous() && (inputs.is_contiguous() && ...);
  if (contiguous) {
    constexpr int kVec = vec_width<Out, In...>();
    const bool aligned = aligned_for<kVec>(o) &&
                         (aligned_for<kVec>(static_cast<const In*>(inputs.data_ptr())) && ...);
    if (kVec > 1 && aligned) {
      KILN_LAUNCH(grid_for(n / kVec), kThreads, 0, stream(), contiguous_kernel<kVec>)
      (n, f, o, static_cast<const In*>(inputs.data_ptr())...);
    } else {
      KILN_LAUNCH(grid_for(n), kThreads, 0, stream(), contiguous_kernel<1>)
      (n, f, o, static_cast<const In*>(inputs.data_ptr())...);
    }
    KILN_CUDA_CHECK_LAUNCH();
    return;
  }
  constexpr int N = sizeof...(In) + 1;
  auto calc = make_offset_calculator<N>(op, out.shape(), {&out.strides(), &inputs.strides()...});
  KILN_LAUNCH(grid_for(n), kThreads, 0, stream(), strided_kernel)
  (n, calc, f, o, static_cast<const In*>(inputs.data_ptr())...);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
