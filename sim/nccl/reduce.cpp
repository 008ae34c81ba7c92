#include "kiln/sim/nccl/reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::sim::nccl {

namespace {

// How an element is computed on: itself, or float for the 16-bit floating types.
template <class T>
struct Arithmetic {
  using Compute = T;
  static Compute load(T v) { return v; }
  static T store(Compute v) { return v; }
};
template <>
struct Arithmetic<__half> {
  using Compute = float;
  static float load(__half v) { return __half2float(v); }
  static __half store(float v) { return __float2half(v); }
};
template <>
struct Arithmetic<__nv_bfloat16> {
  using Compute = float;
  static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __nv_bfloat16 store(float v) { return __float2bfloat16(v); }
};

template <class T>
void reduce_typed(void* accumulator, const void* contribution, std::size_t count, ncclRedOp_t op) {
  using A = Arithmetic<T>;
  using C = typename A::Compute;
  T* out = static_cast<T*>(accumulator);
  const T* in = static_cast<const T*>(contribution);
  for (std::size_t i = 0; i < count; ++i) {
    const C a = A::load(out[i]);
    const C b = A::load(in[i]);
    C r = a;
    switch (op) {
      case ncclProd:
        r = static_cast<C>(a * b);
        break;
      case ncclMax:
        r = std::max(a, b);
        break;
      case ncclMin:
        r = std::min(a, b);
        break;
      default:  // ncclSum, ncclAvg
        r = static_cast<C>(a + b);
        break;
    }
    out[i] = A::store(r);
  }
}

template <class T>
void divide_typed(void* accumulator, std::size_t count, int ranks) {
  using A = Arithmetic<T>;
  using C = typename A::Compute;
  T* out = static_cast<T*>(accumulator);
  for (std::size_t i = 0; i < count; ++i)
    out[i] = A::store(static_cast<C>(A::load(out[i]) / static_cast<C>(ranks)));
}

template <class F>
void by_type(ncclDataType_t type, F&& f) {
  switch (type) {
    case ncclInt8:
      return f(std::int8_t{});
    case ncclUint8:
      return f(std::uint8_t{});
    case ncclInt32:
      return f(std::int32_t{});
    case ncclUint32:
      return f(std::uint32_t{});
    case ncclInt64:
      return f(std::int64_t{});
    case ncclUint64:
      return f(std::uint64_t{});
    case ncclFloat16:
      return f(__half{});
    case ncclFloat32:
      return f(float{});
    case ncclFloat64:
      return f(double{});
    case ncclBfloat16:
      return f(__nv_bfloat16{});
    default:
      return;
  }
}

}  // namespace

std::size_t type_size(ncclDataType_t type) {
  std::size_t size = 0;
  by_type(type, [&](auto value) { size = sizeof value; });
  return size;
}

std::string type_name(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return "int8";
    case ncclUint8:
      return "uint8";
    case ncclInt32:
      return "int32";
    case ncclUint32:
      return "uint32";
    case ncclInt64:
      return "int64";
    case ncclUint64:
      return "uint64";
    case ncclFloat16:
      return "float16";
    case ncclFloat32:
      return "float32";
    case ncclFloat64:
      return "float64";
    case ncclBfloat16:
      return "bfloat16";
    case ncclFloat8e4m3:
      return "float8e4m3";
    case ncclFloat8e5m2:
      return "float8e5m2";
    default:
      return "type " + std::to_string(static_cast<int>(type));
  }
}

bool known_reduction(ncclRedOp_t op) {
  return op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin || op == ncclAvg;
}

std::string reduction_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return "sum";
    case ncclProd:
      return "prod";
    case ncclMax:
      return "max";
    case ncclMin:
      return "min";
    case ncclAvg:
      return "avg";
    default:
      return "reduction " + std::to_string(static_cast<int>(op));
  }
}

void reduce_into(void* accumulator, const void* contribution, std::size_t count,
                 ncclDataType_t type, ncclRedOp_t op) {
  by_type(type,
          [&](auto value) { reduce_typed<decltype(value)>(accumulator, contribution, count, op); });
}

void divide_by_ranks(void* accumulator, std::size_t count, ncclDataType_t type, int ranks) {
  by_type(type, [&](auto value) { divide_typed<decltype(value)>(accumulator, count, ranks); });
}

}  // namespace kiln::sim::nccl
