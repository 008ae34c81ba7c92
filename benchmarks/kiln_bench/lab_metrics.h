// `kiln-bench lab FAMILY --metrics` on the CUDA simulator: beside each version, what its kernels'
// warp instructions were counted doing (sim/metrics/counts.h) and a roofline estimate of its time
// on named GPUs from those counts. Estimates from counts, not measurements.
#pragma once

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
double theoretical_occupancy(int registers, unsigned threads, std::uint64_t shared_bytes);

// The table: a header, then a row a version. `out` may be a CSV file (csv true) or the terminal.
void print_counts_header(std::FILE* out);
void print_counts_row(std::FILE* out, const std::string& version, const VersionCounts& counts);
void write_counts_csv_header(std::FILE* csv);
void write_counts_csv_row(std::FILE* csv, const std::string& family, const std::string& problem,
                          const std::string& version, const VersionCounts& counts);

}  // namespace kiln::bench
