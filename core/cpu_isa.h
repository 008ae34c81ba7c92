// Which x86 vector instructions kiln's CPU kernels use, chosen at run time as oneDNN and PyTorch
// do: one binary carries a portable version of each hot kernel and AVX2 and AVX-512 versions
// (kernels/cpu/*_avx2.cpp, *_avx512*.cpp, compiled with their own target flags), and the best
// the CPU runs is picked once, on first use. KILN_CPU_ISA caps it, as ONEDNN_MAX_CPU_ISA does:
//
//   KILN_CPU_ISA=avx2 kiln-train ...     # the AVX2 kernels even on an AVX-512 machine
//
// A cap above what the CPU runs leaves the CPU's best; an unknown name is an error.
#pragma once

#include <string>

namespace kiln {

// Ordered levels: each includes the ones before it.
enum class CpuIsa : int {
  baseline = 0,     // x86-64 (SSE2) or any other architecture: the portable C++ kernels
  avx2 = 1,         // AVX2, FMA and F16C (Intel Haswell, AMD Zen and later)
  avx512 = 2,       // AVX-512 F, BW, DQ and VL on top (Intel Skylake-SP, AMD Zen 4 and later)
  avx512_bf16 = 3,  // AVX512-BF16 on top: bf16 dot products (Intel Cooper Lake, AMD Zen 4)
};

// "baseline", "avx2", "avx512", "avx512_bf16": the names KILN_CPU_ISA takes.
const char* cpu_isa_name(CpuIsa isa);

// The level named `name` (any case); an unknown name throws a ValueError listing the names.
CpuIsa parse_cpu_isa(const std::string& name);

// The best level this CPU (and its operating system) runs.
CpuIsa cpu_isa_supported();

// The level the kernels use now: the CPU's best, capped by KILN_CPU_ISA when set (read once;
// an unknown name throws a ValueError naming the variable and the names it takes).
CpuIsa cpu_isa();

// Makes the kernels use `isa` from now on, process-wide (tests and benchmarks compare the
// versions this way); a level the CPU cannot run throws a ValueError. Returns the previous level.
CpuIsa set_cpu_isa(CpuIsa isa);

}  // namespace kiln
