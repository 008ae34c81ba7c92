// DType: the element types a tensor can hold, their sizes and names, the promotion rule for mixed
// inputs, and visit_dtype, which turns a runtime dtype into a compile-time C++ type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/core/half.h"

namespace kiln {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i32, DType::i64, DType::u8,  DType::boolean};

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"
std::ostream& operator<<(std::ostream& out, DType dtype);  // as dtype_name
DType dtype_from_name(const std::string& name);
bool is_floating(DType dtype);
bool is_integral(DType dtype, bool include_bool = false);

// PyTorch's rule for two tensor operands: floating beats integral, wider beats narrower, f16 with
// bf16 meets at f32, bool is the lowest.
DType promote_types(DType a, DType b);

template <class T>
struct TypeTag {
  using type = T;
};

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::boolean;
}

// The type arithmetic on T is carried out in: float for the 16-bit floats, T otherwise.
template <class T>
using acc_type_t =
    std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <class T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Converts between any two element types; the 16-bit floats go through float.
template <class To, class From>
inline To convert(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (is_reduced_float_v<From>) {
    return convert<To>(static_cast<float>(value));
  } else if constexpr (is_reduced_float_v<To>) {
    return To(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, bool>) {
    return value != From(0);
  } else {
    return static_cast<To>(value);
  }
}

// visit_dtype(dtype, [&](auto tag) { using T = typename decltype(tag)::type; ... }) calls the
// lambda with the C++ type of `dtype`.
template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(TypeTag<float>{});
    case DType::f64:
      return f(TypeTag<double>{});
    case DType::f16:
      return f(TypeTag<Half>{});
    case DType::bf16:
      return f(TypeTag<BFloat16>{});
    case DType::i32:
      return f(TypeTag<int32_t>{});
    case DType::i64:
      return f(TypeTag<int64_t>{});
    case DType::u8:
      return f(TypeTag<uint8_t>{});
    case DType::boolean:
      return f(TypeTag<bool>{});
  }
  throw DTypeError("visit_dtype: unknown dtype");
}

[[noreturn]] void throw_expected_f32_f64(const char* op, DType got);

// Like visit_dtype, restricted to f32 and f64: the dtypes every op computes in on the CPU.
template <class F>
decltype(auto) visit_f32_f64(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(TypeTag<float>{});
    case DType::f64:
      return f(TypeTag<double>{});
    default:
      throw_expected_f32_f64(op, dtype);
  }
}

}  // namespace kiln
