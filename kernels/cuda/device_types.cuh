// kiln's element types as the device sees them, and the one conversion between them. Kernels name
// the 16-bit floats by CUDA's types (__half, __nv_bfloat16) to get the hardware conversions; every
// kernel converts through device_convert, so a value rounds the same way in every kernel and as
// kiln::convert rounds it on the CPU. Only for .cu files (nvcc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/half.h"

namespace kiln::cuda {

// kiln's 16-bit floats are bit-compatible with CUDA's.
template <class T>
struct DeviceTypeOf {
  using type = T;
};
template <>
struct DeviceTypeOf<Half> {
  using type = __half;
};
template <>
struct DeviceTypeOf<BFloat16> {
  using type = __nv_bfloat16;
};
template <class T>
using device_t = typename DeviceTypeOf<T>::type;

template <class T>
inline constexpr bool is_device_half_v =
    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// The type arithmetic on a device element type is carried out in (float for the 16-bit floats),
// as acc_type_t on the host.
template <class T>
using device_acc_t = std::conditional_t<is_device_half_v<T>, float, T>;

// Calls f(TypeTag<T>) with the device type of a floating dtype (float, double, __half,
// __nv_bfloat16); any other dtype is a DTypeError naming `op`.
template <class F>
void visit_floating_device(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(TypeTag<float>{});
    case DType::f64:
      return f(TypeTag<double>{});
    case DType::f16:
      return f(TypeTag<__half>{});
    case DType::bf16:
      return f(TypeTag<__nv_bfloat16>{});
    default:
      throw DTypeError(std::string(op) + ": expected a floating dtype, got " + dtype_name(dtype));
  }
}

template <class T>
__device__ __forceinline__ float half_to_float(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else
    return __bfloat162float(v);
}

template <class T>
__device__ __forceinline__ T float_to_half(float v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(v);
  else
    return __float2bfloat16_rn(v);
}

// kiln::convert on the device: the 16-bit floats go through float with round to nearest even (so
// f64 -> f16 rounds twice, exactly as the CPU does), anything to bool is "!= 0".
template <class To, class From>
__device__ __forceinline__ To device_convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_device_half_v<From>) {
    return device_convert<To>(half_to_float(v));
  } else if constexpr (is_device_half_v<To>) {
    return float_to_half<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

// A host value of kiln type T (Half, BFloat16, float...) as the device type's bits.
template <class T>
device_t<T> to_device_value(T v) {
  static_assert(sizeof(T) == sizeof(device_t<T>));
  device_t<T> out;
  std::memcpy(static_cast<void*>(&out), &v, sizeof out);
  return out;
}

// ---- math in the accumulation type ----

// exp and log in the accumulation type: the float forms for float, the double ones for double.
__device__ __forceinline__ float exp_acc(float v) {
  return expf(v);
}
__device__ __forceinline__ double exp_acc(double v) {
  return exp(v);
}
__device__ __forceinline__ float log_acc(float v) {
  return logf(v);
}
__device__ __forceinline__ double log_acc(double v) {
  return log(v);
}

template <class A>
__device__ __forceinline__ bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>)
    return isnan(v);
  else
    return false;
}

}  // namespace kiln::cuda
