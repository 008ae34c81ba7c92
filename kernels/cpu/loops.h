// Strided loops: the one place that walks tensors of any shape and strides. An op hands in a shape,
// the strides of each operand (in elements) and a function of the operands' element offsets.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/core/shape.h"

namespace kiln::cpu {

// Below this many elements a loop stays on one thread: spawning costs more than it saves.
inline constexpr int64_t kParallelGrain = 32768;

template <size_t N>
struct StridedLayout {
  Shape shape;
  std::array<Shape, N> strides;
};

// Merges adjacent dims that are contiguous with each other in every operand (so a contiguous
// tensor becomes one dim), and drops size-1 dims. Fewer dims, longer inner loops.
template <size_t N>
StridedLayout<N> coalesce(const Shape& shape, const std::array<Shape, N>& strides) {
  StridedLayout<N> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!out.shape.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k)
        mergeable = mergeable && out.strides[k].back() == strides[k][d] * shape[d];
      if (mergeable) {
        out.shape.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) out.strides[k].back() = strides[k][d];
        continue;
      }
    }
    out.shape.push_back(shape[d]);
    for (size_t k = 0; k < N; ++k) out.strides[k].push_back(strides[k][d]);
  }
  if (out.shape.empty()) {
    out.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) out.strides[k].push_back(0);
  }
  return out;
}

// Calls fn(offsets) for every element of `shape` in row-major order, where offsets[k] is operand
// k's element offset. Splits the work across OpenMP threads when it is large enough; fn must then
// be safe to call concurrently for different elements.
template <size_t N, class F>
void for_each_offset(const Shape& shape, const std::array<Shape, N>& strides, F&& fn) {
  const int64_t total = shape_numel(shape);
  if (total == 0) return;
  const StridedLayout<N> layout = coalesce<N>(shape, strides);
  const int64_t ndim = static_cast<int64_t>(layout.shape.size());
  const int64_t inner = layout.shape.back();
  const int64_t rows = total / inner;
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = layout.strides[k].back();

  auto run_rows = [&](int64_t row_begin, int64_t row_end) {
    // The offsets of the first element of row_begin, from its multi-index.
    std::vector<int64_t> index(ndim, 0);
    std::array<int64_t, N> base{};
    int64_t r = row_begin;
    for (int64_t d = ndim - 2; d >= 0; --d) {
      index[d] = r % layout.shape[d];
      r /= layout.shape[d];
      for (size_t k = 0; k < N; ++k) base[k] += index[d] * layout.strides[k][d];
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
      std::array<int64_t, N> offsets = base;
      for (int64_t i = 0; i < inner; ++i) {
        fn(offsets);
        for (size_t k = 0; k < N; ++k) offsets[k] += inner_stride[k];
      }
      for (int64_t d = ndim - 2; d >= 0; --d) {
        ++index[d];
        for (size_t k = 0; k < N; ++k) base[k] += layout.strides[k][d];
        if (index[d] < layout.shape[d]) break;
        for (size_t k = 0; k < N; ++k) base[k] -= index[d] * layout.strides[k][d];
        index[d] = 0;
      }
    }
  };

  if (total < kParallelGrain || rows == 1 || omp_in_parallel()) {
    run_rows(0, rows);
    return;
  }
  int threads = omp_get_max_threads();
  int64_t chunk = (rows + threads - 1) / threads;
#pragma omp parallel for num_threads(threads)
  for (int t = 0; t < threads; ++t) {
    int64_t begin = t * chunk, end = std::min<int64_t>(rows, begin + chunk);
    if (begin < end) run_rows(begin, end);
  }
}

// Runs fn(begin, end) over [0, n) in parallel chunks when n * cost_per_item is large enough.
template <class F>
void parallel_for(int64_t n, int64_t cost_per_item, F&& fn) {
  if (n <= 0) return;
  if (n * cost_per_item < kParallelGrain || n == 1 || omp_in_parallel()) {
    fn(int64_t{0}, n);
    return;
  }
  int threads = omp_get_max_threads();
  int64_t chunk = (n + threads - 1) / threads;
#pragma omp parallel for num_threads(threads)
  for (int t = 0; t < threads; ++t) {
    int64_t begin = t * chunk, end = std::min<int64_t>(n, begin + chunk);
    if (begin < end) fn(begin, end);
  }
}

}  // namespace kiln::cpu
