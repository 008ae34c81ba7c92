// Conversions between f32 and the 16-bit floats over contiguous runs, one version per instruction
// set (core/cpu_isa.h): portable loops (convert.cpp), AVX2 with F16C (convert_avx2.cpp) and
// AVX-512 (convert_avx512.cpp). Each rounds exactly as core/half.h's Half and BFloat16 do (to
// nearest even, NaN kept quiet, subnormals kept), so the versions agree bit for bit; the copy
// kernel and the convolution's bf16 stores call them.
#pragma once

#include <cstdint>

#include "kiln/core/cpu_isa.h"

namespace kiln::cpu {

struct ConvertKernels {
  CpuIsa isa;
  void (*f32_to_bf16)(const float* src, uint16_t* dst, int64_t n);
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
};

extern const ConvertKernels convert_kernels_baseline;
#if defined(__x86_64__)
extern const ConvertKernels convert_kernels_avx2;
extern const ConvertKernels convert_kernels_avx512;
#endif

// The set for `isa`: the widest compiled one at or below it.
const ConvertKernels& convert_kernels(CpuIsa isa = cpu_isa());

}  // namespace kiln::cpu
