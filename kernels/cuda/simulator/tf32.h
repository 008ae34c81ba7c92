// TF32 as the CUDA simulator's library stand-ins (conv2d.cpp, matmul.cpp here) model it: an f32
// operand rounded to 10 mantissa bits, to nearest with ties away from zero (PTX's
// cvt.rna.tf32.f32), products then summed in f32. cuDNN's and cuBLAS's own kernels may round
// differently, so this reproduces TF32's error, not its bits. TF32 tensor cores came with Ampere:
// a GPU below compute capability 8.0 computes f32 in f32 whatever the switches allow.
#pragma once

#include <cstdint>
#include <cstring>

#include "kiln/core/cuda.h"

namespace kiln::sim_library {

inline float round_to_tf32(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) {  // inf and NaN pass as they are
    bits += 0x1000u;                          // half of the 13 bits dropped: ties away from zero
    bits &= ~0x1fffu;
  }
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Whether GPU `device` has TF32 tensor cores (compute capability 8.0 or newer; the simulator
// reports what KILN_SIM_COMPUTE_CAPABILITY says).
inline bool has_tf32(int device) {
  return cuda::get_device_properties(device).major >= 8;
}

}  // namespace kiln::sim_library
