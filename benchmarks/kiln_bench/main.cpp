// kiln-bench: kiln's benchmark harness. Op bandwidth and FLOP rates (its PyTorch peer is
// ops_torch.py, which prints the same lines):
//
//   kiln-bench ops --device cuda [--csv ops.csv]
//
// and the kernel lab:
//
//   kiln-bench lab gemm --m 4096 --n 4096 --k 4096
//   kiln-bench lab gemm_tc --m 8192 --n 8192 --k 8192 --dtype bf16
//   kiln-bench lab reduction --n 268435456          (or --rows R --cols C: the sum of each row)
//   kiln-bench lab softmax --rows 65536 --cols 4096
//   kiln-bench lab layernorm --rows 65536 --cols 4096
//   kiln-bench lab attention --batch-heads 32 --l 2048 --s 2048 --d 64 [--causal] [--dtype f16]
//   kiln-bench lab all --csv lab.csv          (every family at fixed sizes, ~5 min on an H200)
//
// Each takes --csv FILE, --repeats N, --only NAME (repeatable) and --smoke. Without a GPU (or with
// --smoke) it runs the host-side checks and CPU references instead, and exits 0 when they pass.
// On the CUDA simulator, --metrics counts each version's run instead of timing it (lab_metrics.h),
// and a family runs at the simulator's sizes unless sizes are given.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_simulated.h"
#include "lab.h"
#include "main_guard.h"
#include "ops.h"

namespace {

using kiln::bench::LabOptions;

void add_common(CLI::App* command, LabOptions& options) {
  command->add_option("--csv", options.csv, "also write the rows to this CSV file");
  command
      ->add_option("--repeats", options.repeats,
                   "timed repeats (0: as many as fit in about 200 ms, 3 to 100)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  command->add_option("--only", options.only,
                      "run only these versions (v0 always runs: it is the reference)");
  command->add_flag("--smoke", options.smoke,
                    "only the host-side checks and CPU references, even with a GPU");
  command->add_flag("--metrics", options.metrics,
                    "on the CUDA simulator: count each version's memory accesses and estimate "
                    "its time on H100, H200 and A100 from the counts, instead of timing it");
}

int run(int argc, char** argv) {
  CLI::App app{"kiln-bench: kiln's benchmarks"};
  app.require_subcommand(1);
  kiln::bench::OpsOptions ops_options;
  CLI::App* ops = app.add_subcommand(
      "ops", "op bandwidth against the copy, matmul TFLOP/s and a tiny op's host cost");
  ops->add_option("--device", ops_options.device, "cpu|cuda|cuda:N")->capture_default_str();
  ops->add_option("--log2", ops_options.log2, "vectors of 2^log2 f32 (0: 28 on a GPU, 24 on a CPU)")
      ->check(CLI::Range(10, 31));
  ops->add_option("--repeats", ops_options.repeats)
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  ops->add_option("--csv", ops_options.csv, "also write the rows to this CSV file");
  ops->add_flag("--smoke", ops_options.smoke, "tiny sizes, 2 repeats: that it runs");
  CLI::App* lab = app.add_subcommand(
      "lab",
      "the kernel lab: every version of a kernel family, checked against version 0 "
      "(the library) and timed (docs/kernels/README.md)");
  lab->require_subcommand(1);

  LabOptions options;
  int64_t vector_n = 0;
  bool gemm_size_given = false;
  struct Family {
    const char* name;
    const char* help;
  };
  const Family families[] = {
      {"gemm", "f32 GEMM without tensor cores, against cuBLAS"},
      {"gemm_tc", "bf16/f16 GEMM on tensor cores with f32 accumulation, against cuBLASLt"},
      {"reduction", "sum of a vector or of each row, against CUB"},
      {"softmax", "softmax of each row, against kiln's own kernel"},
      {"layernorm", "layer norm forward and backward, against kiln's kernel"},
      {"attention",
       "scaled dot-product attention forward (f32; bf16/f16 on tensor cores) and backward, "
       "against the kernels of kiln's composed op"},
      {"all", "every family at the fixed sizes of docs/kernels (about 5 minutes on an H200)"},
  };
  for (const Family& family : families) {
    CLI::App* command = lab->add_subcommand(family.name, family.help);
    add_common(command, options);
    const std::string name = family.name;
    if (name == "gemm" || name == "gemm_tc") {
      for (auto [flag, value] : {std::pair{"--m", &options.m}, std::pair{"--n", &options.n},
                                 std::pair{"--k", &options.k}})
        command
            ->add_option_function<int64_t>(
                flag,
                [value, &gemm_size_given](int64_t given) {
                  *value = given;
                  gemm_size_given = true;
                },
                "(default 4096; 256 on the simulator)")
            ->check(CLI::PositiveNumber);
    }
    if (name == "attention") {
      for (auto [flag, value, help] :
           {std::tuple{"--batch-heads", &options.batch_heads, "heads, batch x heads (default 32)"},
            std::tuple{"--l", &options.queries, "queries a head (default 2048)"},
            std::tuple{"--s", &options.keys, "keys a head (default: --l)"},
            std::tuple{"--d", &options.head_dim, "the head dimension (default 64)"}})
        command->add_option(flag, *value, help)->check(CLI::PositiveNumber);
      command->add_flag("--causal", options.causal, "the causal mask (top-left aligned)");
    }
    if (name == "gemm_tc" || name == "attention")
      command->add_option("--dtype", options.dtype, "the inputs' dtype (attention: v4's)")
          ->capture_default_str()
          ->check(CLI::IsMember({"bf16", "f16"}));
    if (name == "reduction")
      command->add_option("--n", vector_n, "sum a vector of n elements (rows 1, cols n)")
          ->check(CLI::PositiveNumber);
    if (name == "reduction" || name == "softmax" || name == "layernorm") {
      command->add_option("--rows", options.rows, "rows (alone: cols make 2^28 elements)")
          ->check(CLI::PositiveNumber);
      command->add_option("--cols", options.cols, "cols (alone: rows make 2^28 elements)")
          ->check(CLI::PositiveNumber);
    }
    command->callback([&options, name] { options.family = name; });
  }
  CLI11_PARSE(app, argc, argv);
  if (ops->parsed()) return kiln::bench::run_ops(ops_options);
  if (vector_n > 0) {
    options.rows = 1;
    options.cols = vector_n;
  }

  options.simulated = kiln::cuda::is_simulated() && !options.smoke;
  if (options.simulated && !gemm_size_given)
    options.m = options.n = options.k = kiln::bench::kSimGemmSize;
  if (options.metrics && !options.simulated)
    throw std::invalid_argument(
        "kiln-bench lab --metrics: the counts come from the CUDA simulator (a -DKILN_CUDA=SIM "
        "build, without --smoke); on a GPU, Nsight Compute measures them");
  if (options.metrics && !kiln::cuda::simulator_can_count())
    throw std::invalid_argument(
        "kiln-bench lab --metrics: this simulator build compiled nothing for counting (it needs "
        "GCC, -DKILN_SIM_METRICS=ON and no KILN_SANITIZE)");
  if (!options.smoke && !kiln::cuda::is_available()) {
    std::printf(
        "kiln-bench lab: %s, and the lab's kernels need one; running the host-side "
        "checks and CPU references instead.\n",
        kiln::cuda::is_built() ? "no GPU is visible" : "kiln was built without CUDA");
    options.smoke = true;
  }
  return options.smoke ? kiln::bench::run_lab_smoke(options) : kiln::bench::run_lab_gpu(options);
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::apps::run_main("kiln-bench", [&] { return run(argc, argv); });
}
