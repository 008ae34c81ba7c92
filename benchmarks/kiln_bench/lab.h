// `kiln-bench lab`: the kernel lab's runner (docs/kernels/README.md). For each family it checks
// every version against version 0 (the library) with a tolerance scaled to the dtype and the
// problem, then times it with CUDA events, the L2 flushed before each repeat, and prints one row
// a version: time, TFLOP/s or GB/s, % of version 0 and % of the GPU's peak, the peak read from the
// device. Without a GPU it runs the host-side checks and the CPU references instead.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::bench {

struct LabOptions {
  std::string family;  // gemm, gemm_tc, reduction, softmax, layernorm, attention, or all
  int64_t m = 4096, n = 4096, k = 4096;  // gemm, gemm_tc
  std::string dtype = "bf16";            // gemm_tc, attention's tensor-core table: bf16 or f16
  // attention: heads (batch x heads), queries and keys a head, the head dimension; 0: the
  // family's default (kAttention* below, or the simulator's)
  int64_t batch_heads = 0, queries = 0, keys = 0, head_dim = 0;
  bool causal = false;            // attention: the causal mask
  int64_t rows = 0, cols = 0;     // reduction, softmax, layernorm; 0: the family's default
  int repeats = 0;                // timed repeats; 0: as many as fit in about 200 ms, 3 to 100
  std::vector<std::string> only;  // run these versions (and version 0); empty: all
  std::string csv;                // write the rows here as CSV
  bool smoke = false;             // the host-side checks only, even where a GPU is visible
  // On the CUDA simulator: count each version's run instead of timing it (lab_metrics.h); --csv
  // then writes the counts.
  bool metrics = false;
  bool simulated = false;  // on the simulator: its sizes where none were given
};

// The simulator's sizes, where a GPU's would take minutes there (`kiln-bench lab softmax` at
// 65536 x 4096 ran 5 minutes without a row): each family's problem in a few seconds.
inline constexpr int64_t kSimGemmSize = 256, kSimRows = 64, kSimCols = 4096;
inline constexpr int64_t kSimVectorCols = int64_t{1} << 20;
// attention: 32 heads (batch 4 x 8 heads) of 2048 queries and keys of 64 on a GPU; 1 head of
// 128 on the simulator (the counted tables of docs/kernels/attention.md).
inline constexpr int64_t kAttentionHeads = 32, kAttentionLength = 2048, kAttentionHeadDim = 64;
inline constexpr int64_t kSimAttentionHeads = 1, kSimAttentionLength = 128;

// The families `all` runs, in order.
inline const std::vector<std::string>& lab_families() {
  static const std::vector<std::string> families = {"reduction", "softmax", "layernorm",
                                                    "gemm",      "gemm_tc", "attention"};
  return families;
}

// Elements of every problem of the memory-bound tables in docs/kernels/ (1 GiB of f32).
inline constexpr int64_t kDefaultElements = int64_t{1} << 28;

// The rows and cols a family runs with when one or both were not given. Neither: the family's
// default (reduction: a 2^28-element vector; softmax and layernorm: 65536 x 4096). One: the other
// makes 2^28 elements with it (at least 1), so `softmax --rows 1024` runs 1024 x 262144.
inline void fill_family_defaults(const std::string& family, LabOptions& options) {
  if (family == "attention") {
    const bool sim = options.simulated;
    if (options.batch_heads == 0) options.batch_heads = sim ? kSimAttentionHeads : kAttentionHeads;
    if (options.queries == 0) options.queries = sim ? kSimAttentionLength : kAttentionLength;
    if (options.keys == 0) options.keys = options.queries;
    if (options.head_dim == 0) options.head_dim = kAttentionHeadDim;
    return;
  }
  if (options.rows > 0 && options.cols > 0) return;
  if (options.simulated && options.rows == 0 && options.cols == 0) {
    options.rows = family == "reduction" ? 1 : kSimRows;
    options.cols = family == "reduction" ? kSimVectorCols : kSimCols;
    return;
  }
  if (options.rows > 0) {
    options.cols = std::max<int64_t>(1, kDefaultElements / options.rows);
  } else if (options.cols > 0) {
    options.rows = std::max<int64_t>(1, kDefaultElements / options.cols);
  } else if (family == "reduction") {
    options.rows = 1;
    options.cols = kDefaultElements;
  } else {
    options.rows = 65536;
    options.cols = 4096;
  }
}

// The lab on the GPU (lab_gpu.cpp; a build without CUDA has lab_gpu_absent.cpp). Exit status 1
// when a version failed its check.
int run_lab_gpu(const LabOptions& options);
// The host-side checks (every version's tiling) and a CPU reference of each family on a small
// problem (smoke.cpp). Exit status 1 when one fails.
int run_lab_smoke(const LabOptions& options);

}  // namespace kiln::bench
