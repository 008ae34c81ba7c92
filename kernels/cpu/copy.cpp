#include "kiln/kernels/copy.h"

#include <array>
#include <cstdint>
#include <cstring>

#include "kiln/kernels/cpu/convert/convert.h"
#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

namespace {

// A contiguous conversion between f32 and a 16-bit float, through the vectorised conversions of
// the instruction set in use (autocast's casts, batch norm's f32 copies); false for any other.
bool convert_contiguous(const Tensor& src, const Tensor& dst) {
  if (!src.is_contiguous() || !dst.is_contiguous()) return false;
  const ConvertKernels& k = convert_kernels();
  const int64_t n = src.numel();
  const DType from = src.dtype(), to = dst.dtype();
  auto run = [&](auto convert, auto in, auto out) {
    parallel_for(
        n, 1, [&](int64_t begin, int64_t end) { convert(in + begin, out + begin, end - begin); });
    return true;
  };
  auto bits = [](const Tensor& t) { return static_cast<uint16_t*>(t.data_ptr()); };
  auto floats = [](const Tensor& t) { return static_cast<float*>(t.data_ptr()); };
  if (from == DType::f32 && to == DType::bf16) return run(k.f32_to_bf16, floats(src), bits(dst));
  if (from == DType::bf16 && to == DType::f32) return run(k.bf16_to_f32, bits(src), floats(dst));
  if (from == DType::f32 && to == DType::f16) return run(k.f32_to_f16, floats(src), bits(dst));
  if (from == DType::f16 && to == DType::f32) return run(k.f16_to_f32, bits(src), floats(dst));
  return false;
}

}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    std::memmove(dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size());
    return;
  }
  if (convert_contiguous(src, dst)) return;
  visit_dtype(src.dtype(), [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    visit_dtype(dst.dtype(), [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      const S* in = static_cast<const S*>(src.data_ptr());
      D* out = static_cast<D*>(dst.data_ptr());
      for_each_offset<2>(
          dst.shape(), {dst.strides(), src.strides()},
          [&](const std::array<int64_t, 2>& o) { out[o[0]] = convert<D>(in[o[1]]); });
    });
  });
}

void fill(const Tensor& dst, double value) {
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = convert<T>(value);
    T* out = static_cast<T*>(dst.data_ptr());
    for_each_offset<1>(dst.shape(), {dst.strides()},
                       [&](const std::array<int64_t, 1>& o) { out[o[0]] = v; });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const CopyKernels CopyKernels::cpu{.copy = cpu::copy, .fill = cpu::fill};

}  // namespace kiln
