#include "kiln/ops/factories.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "kiln/core/cuda_graph.h"
#include "kiln/core/op_name.h"
#include "kiln/core/philox.h"
#include "kiln/kernels/cpu/loops.h"
#include "kiln/kernels/random.h"
#include "kiln/ops/dispatch.h"

namespace kiln {

namespace {
// Zeroes a new dense tensor (contiguous or channels-last: either fills its bytes from data_ptr).
Tensor zeroed(Tensor out) {
  if (out.numel() == 0) return out;
  if (out.device().is_cpu())
    std::memset(out.data_ptr(), 0, out.numel() * out.element_size());
  else
    out.fill_(0.0);
  return out;
}
}  // namespace

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  return zeroed(empty(shape, dtype, device));
}

Tensor ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor out = empty(shape, dtype, device);
  out.fill_(value);
  return out;
}

Tensor scalar_tensor(double value, DType dtype, Device device) {
  return full({}, value, dtype, device);
}

namespace {

// Fills a new CPU tensor with f(i) for each flat index i, then moves it to `device`.
template <class F>
Tensor generate(const Shape& shape, DType dtype, Device device, F&& f) {
  Tensor out = empty(shape, dtype);
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(out.data_ptr());
    cpu::parallel_for(out.numel(), 8, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) p[i] = convert<T>(f(i));
    });
  });
  return out.to(device);
}

}  // namespace

Tensor arange(int64_t end, DType dtype, Device device) {
  return arange(0.0, static_cast<double>(end), 1.0, dtype, device);
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  KILN_CHECK(step != 0 && std::isfinite(step), ValueError,
             "arange: step must be finite and non-zero, got {}", step);
  KILN_CHECK((end - start) / step >= 0 || end == start, ValueError,
             "arange: end {} cannot be reached from start {} with step {}", end, start, step);
  int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  return generate({n}, dtype, device,
                  [&](int64_t i) { return start + static_cast<double>(i) * step; });
}

Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device) {
  KILN_CHECK(steps >= 0, ValueError, "linspace: steps must be non-negative, got {}", steps);
  double delta = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // The second half counts back from `end`, so the last element is exactly `end` (as PyTorch);
  // a single step is `start`.
  return generate({steps}, dtype, device, [&](int64_t i) {
    return i < steps / 2 || steps == 1 ? start + delta * static_cast<double>(i)
                                       : end - delta * static_cast<double>(steps - 1 - i);
  });
}

Tensor eye(int64_t n, int64_t m, DType dtype, Device device) {
  if (m < 0) m = n;
  KILN_CHECK(n >= 0, ValueError, "eye: n must be non-negative, got {}", n);
  return generate({n, m}, dtype, device, [&](int64_t i) { return i / m == i % m ? 1.0 : 0.0; });
}

namespace {
// The generator of a random factory, unless the tensor is made on a GPU during a graph capture: its
// draw would be frozen into the graph (the offset is a kernel argument, or the values are copied
// from the host), so every replay would repeat it.
Generator& pick(Generator* generator, Device device) {
  if (device.is_cuda() && cuda::is_current_stream_capturing(device.index))
    cuda::check_not_capturing(
        "draws random numbers for a tensor on the GPU, and a graph would repeat the same draw at "
        "every replay (kiln does not register generator state with graphs as PyTorch does): make "
        "it before the capture,");
  return generator ? *generator : default_generator();
}
}  // namespace

Tensor uniform(const Shape& shape, double low, double high, DType dtype, Device device,
               Generator* generator) {
  check_shape("uniform", shape);
  KILN_CHECK(is_floating(dtype), DTypeError, "uniform: expected a floating dtype, got {}",
             dtype_name(dtype));
  KILN_CHECK(low <= high, ValueError, "uniform: low {} is greater than high {}", low, high);
  const OpNameScope name("uniform");
  Generator& gen = pick(generator, device);
  uint64_t seed = gen.seed(), offset = gen.next_offset();
  Tensor out = empty(shape, dtype, device);
  if (out.numel() > 0)
    kernels_for<RandomKernels>("uniform", device).uniform(out, seed, offset, low, high);
  return out;
}

Tensor rand(const Shape& shape, DType dtype, Device device, Generator* generator) {
  return uniform(shape, 0.0, 1.0, dtype, device, generator);
}

Tensor randn(const Shape& shape, DType dtype, Device device, Generator* generator) {
  check_shape("randn", shape);
  KILN_CHECK(is_floating(dtype), DTypeError, "randn: expected a floating dtype, got {}",
             dtype_name(dtype));
  const OpNameScope name("randn");
  Generator& gen = pick(generator, device);
  uint64_t seed = gen.seed(), offset = gen.next_offset();
  return generate(shape, dtype, device, [&](int64_t i) {
    return static_cast<double>(philox_normal(seed, offset, static_cast<uint64_t>(i)));
  });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device,
               Generator* generator) {
  check_shape("randint", shape);
  KILN_CHECK(low < high, ValueError, "randint: low {} must be less than high {}", low, high);
  const OpNameScope name("randint");
  Generator& gen = pick(generator, device);
  uint64_t seed = gen.seed(), offset = gen.next_offset();
  uint64_t range = static_cast<uint64_t>(high - low);
  return generate(shape, dtype, device, [&](int64_t i) {
    // Two words give 64 random bits; the modulo bias is below 2^-32 for ranges under 2^32.
    uint64_t hi = philox_word(seed, offset, 2 * static_cast<uint64_t>(i));
    uint64_t lo = philox_word(seed, offset, 2 * static_cast<uint64_t>(i) + 1);
    return static_cast<double>(low + static_cast<int64_t>(((hi << 32) | lo) % range));
  });
}

// The *_like factories keep t's memory format (PyTorch's preserve_format); the random ones draw
// in the logical order, so a seed gives the same values whatever the layout.
Tensor empty_like(const Tensor& t) {
  return empty_like_layout(t, t.dtype(), t.device());
}
Tensor zeros_like(const Tensor& t) {
  return zeroed(empty_like(t));
}
Tensor ones_like(const Tensor& t) {
  return full_like(t, 1.0);
}
Tensor full_like(const Tensor& t, double value) {
  Tensor out = empty_like(t);
  out.fill_(value);
  return out;
}
Tensor rand_like(const Tensor& t, Generator* generator) {
  return rand(t.shape(), t.dtype(), t.device(), generator);
}
Tensor randn_like(const Tensor& t, Generator* generator) {
  return randn(t.shape(), t.dtype(), t.device(), generator);
}

Tensor from_blob(const void* data, const Shape& shape, DType dtype, Device device) {
  Tensor out = empty(shape, dtype);
  if (out.numel() > 0) std::memcpy(out.data_ptr(), data, out.numel() * out.element_size());
  return out.to(device);
}

namespace {
// C++ element type -> kiln dtype for tensor(): int means i64, as a Python int does in PyTorch.
template <class T>
DType literal_dtype() {
  if constexpr (std::is_same_v<T, int> || std::is_same_v<T, long> || std::is_same_v<T, long long>)
    return DType::i64;
  else
    return dtype_of<T>();
}
template <class T>
using stored_t = std::conditional_t<
    std::is_same_v<T, int> || std::is_same_v<T, long> || std::is_same_v<T, long long>, int64_t, T>;
}  // namespace

template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape) {
  Shape s = shape.empty() ? Shape{static_cast<int64_t>(values.size())} : shape;
  KILN_CHECK(shape_numel(s) == static_cast<int64_t>(values.size()), ShapeError,
             "tensor: {} values do not fill shape {}", values.size(), shape_str(s));
  std::vector<stored_t<T>> stored(values.begin(), values.end());
  if constexpr (std::is_same_v<T, bool>) {
    Tensor out = empty(s, DType::boolean);
    for (size_t i = 0; i < values.size(); ++i) static_cast<bool*>(out.data_ptr())[i] = values[i];
    return out;
  } else {
    return from_blob(stored.data(), s, literal_dtype<T>());
  }
}

template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<T>> rows) {
  std::vector<T> values;
  int64_t cols = rows.size() ? static_cast<int64_t>(rows.begin()->size()) : 0;
  for (const auto& row : rows) {
    KILN_CHECK(static_cast<int64_t>(row.size()) == cols, ShapeError,
               "tensor: rows of different lengths ({} and {})", cols, row.size());
    values.insert(values.end(), row.begin(), row.end());
  }
  return tensor(values, {static_cast<int64_t>(rows.size()), cols});
}

#define KILN_INSTANTIATE_TENSOR(T)                                \
  template Tensor tensor<T>(const std::vector<T>&, const Shape&); \
  template Tensor tensor<T>(std::initializer_list<std::initializer_list<T>>);
KILN_INSTANTIATE_TENSOR(float)
KILN_INSTANTIATE_TENSOR(double)
KILN_INSTANTIATE_TENSOR(int)
KILN_INSTANTIATE_TENSOR(long)
KILN_INSTANTIATE_TENSOR(uint8_t)
KILN_INSTANTIATE_TENSOR(bool)
KILN_INSTANTIATE_TENSOR(Half)
KILN_INSTANTIATE_TENSOR(BFloat16)
#undef KILN_INSTANTIATE_TENSOR

}  // namespace kiln
