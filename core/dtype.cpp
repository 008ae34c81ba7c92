#include "kiln/core/dtype.h"

#include <cstddef>
#include <ostream>
#include <string>

namespace kiln {

size_t dtype_size(DType dtype) {
  return visit_dtype(dtype, [](auto tag) { return sizeof(typename decltype(tag)::type); });
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType d : kAllDTypes)
    if (name == dtype_name(d)) return d;
  if (name == "float32" || name == "float") return DType::f32;
  if (name == "float64" || name == "double") return DType::f64;
  if (name == "float16" || name == "half") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "int32") return DType::i32;
  if (name == "int64") return DType::i64;
  if (name == "uint8") return DType::u8;
  throw DTypeError(
      fmt::format("dtype_from_name: unknown dtype '{}' (expected one of f32, f64, f16, "
                  "bf16, i32, i64, u8, bool)",
                  name));
}

void throw_expected_f32_f64(const char* op, DType got) {
  throw DTypeError(fmt::format("{}: expected a f32 or f64 tensor, got {}", op, dtype_name(got)));
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

bool is_integral(DType dtype, bool include_bool) {
  return dtype == DType::i32 || dtype == DType::i64 || dtype == DType::u8 ||
         (include_bool && dtype == DType::boolean);
}

namespace {
// Rank within a category; promotion picks the higher rank.
int float_rank(DType d) {
  switch (d) {
    case DType::f16:
      return 1;
    case DType::bf16:
      return 1;
    case DType::f32:
      return 2;
    case DType::f64:
      return 3;
    default:
      return 0;
  }
}
int int_rank(DType d) {
  switch (d) {
    case DType::boolean:
      return 0;
    case DType::u8:
      return 1;
    case DType::i32:
      return 2;
    case DType::i64:
      return 3;
    default:
      return -1;
  }
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    int ra = float_rank(a), rb = float_rank(b);
    if (ra == rb) return DType::f32;  // f16 with bf16: neither holds the other
    return ra > rb ? a : b;
  }
  return int_rank(a) > int_rank(b) ? a : b;
}

std::ostream& operator<<(std::ostream& out, DType dtype) {
  return out << dtype_name(dtype);
}

}  // namespace kiln
