// `kiln-bench lab FAMILY --metrics` on the CUDA simulator: beside each version, what its kernels'
// warp instructions were counted doing (sim/metrics/counts.h) and a roofline estimate of its time
// on named GPUs from those counts. Estimates from counts, not measurements.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/sim/metrics/counts.h"

namespace kiln::bench {

// A GPU's published peaks (NVIDIA's datasheets, SXM parts, dense).
struct GpuPeaks {
  const char* name;
  double dram_gbps;
  double f32_tflops;
  double tensor_tflops;  // bf16/f16 in, f32 accumulate
};
const std::vector<GpuPeaks>& published_gpus();

// One version's counts: the sum over the kernels it launched, and what the sum cannot say.
struct VersionCounts {
  sim::KernelCounts total;
  int kernels = 0;          // kernels launched
  int counted_kernels = 0;  // of those, compiled for counting
  double flops = 0;         // the problem's nominal FLOPs (the family's formula)
  bool tensor = false;      // the FLOPs run on tensor cores
  double cpu_seconds = 0;   // the counted run on the simulator, host time
  // Of the kernel with the most counted instructions, from lab_kernel_resources.h (the most
  // registers of its instantiations) and the launch's shared memory; -1: not in the table.
  double occupancy = -1;
};
// family: the lab's folder (layernorm for both of its tables), for the kernels' registers.
VersionCounts sum_counts(const std::vector<sim::KernelCounts>& kernels, const std::string& family);

// The fraction of an sm_90 multiprocessor's 64 warps that blocks of this kernel can hold at once,
// limited by registers (allocated 256 a warp), shared memory (228 KiB, 1 KiB of it reserved a
// block), threads (2048) and blocks (32). 0 when a block does not fit.
constexpr double theoretical_occupancy(int registers, unsigned threads,
                                       std::uint64_t shared_bytes) {
  constexpr int kWarpsPerSm = 64, kBlocksPerSm = 32, kRegisterUnit = 256;
  constexpr std::uint64_t kRegisters = 65536, kSharedPerSm = 228 * 1024, kReserved = 1024;
  const int warps = static_cast<int>((threads + 31) / 32);
  if (warps == 0 || warps > kWarpsPerSm) return 0;
  const std::uint64_t per_warp = (static_cast<std::uint64_t>(registers) * 32 + kRegisterUnit - 1) /
                                 kRegisterUnit * kRegisterUnit;
  const auto by_registers = static_cast<int>(kRegisters / (per_warp * warps));
  const auto by_shared = static_cast<int>(kSharedPerSm / (shared_bytes + kReserved));
  const int blocks = std::min({by_registers, by_shared, kWarpsPerSm / warps, kBlocksPerSm});
  return static_cast<double>(blocks * warps) / kWarpsPerSm;
}
// Cases worked by hand: 255 registers x 128 threads take 2 x 4 x 8192 of the 65536 registers
// (two blocks, 8 warps of 64); 32 registers x 1024 threads, two blocks, every warp; 64 KiB of
// shared memory a block leaves room for 3; 162 registers (5376 a warp, rounded) x 256 threads fit
// once.
static_assert(theoretical_occupancy(255, 128, 0) == 0.125);
static_assert(theoretical_occupancy(32, 1024, 0) == 1.0);
static_assert(theoretical_occupancy(32, 256, 64 * 1024) == 0.375);
static_assert(theoretical_occupancy(162, 256, 8192) == 0.125);

// The table: a header, then a row a version. `out` may be a CSV file (csv true) or the terminal.
void print_counts_header(std::FILE* out);
void print_counts_row(std::FILE* out, const std::string& version, const VersionCounts& counts);
void write_counts_csv_header(std::FILE* csv);
void write_counts_csv_row(std::FILE* csv, const std::string& family, const std::string& problem,
                          const std::string& version, const VersionCounts& counts);

}  // namespace kiln::bench
