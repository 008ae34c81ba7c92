// All-reduce bandwidth: kiln's ring (dist/ring.h) next to the backend's own all-reduce (Gloo's on
// CPU tensors, ncclAllReduce on CUDA tensors), in one job, on the same buffers, reported with
// nccl-tests' formulas:
//
//   algbw = bytes / time          busbw = algbw x 2 (n - 1) / n
//
// busbw is what each rank's link carried, so it compares across world sizes and with the link's
// own bandwidth. Run it under a launcher, one process per rank:
//
//   kiln-run --nproc-per-node 4 build/benchmarks/all_reduce --device cpu --max-mb 64
//
// Each size is reduced `--warmup` times, then timed over `--iters` reductions (barrier, then
// wall clock on rank 0, after the last reduction has finished on every rank). Rank 0 prints one
// line per algorithm and size; --csv prints the same as CSV.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kiln/dist/process_group.h"
#include "kiln/dist/ring.h"
#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

// Seconds per reduction, the slowest rank's: the barrier before the clock stops waits for all.
double time_per_call(const std::function<void()>& reduce, int warmup, int iters, Device device) {
  for (int i = 0; i < warmup; ++i) reduce();
  if (device.is_cuda()) cuda::synchronize();
  dist::barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) reduce();
  if (device.is_cuda()) cuda::synchronize();
  dist::barrier();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
}

int run(int argc, char** argv) {
  CLI::App app{"all-reduce bandwidth: kiln's ring against the backend's all-reduce"};
  std::string device_name = "cpu";
  double min_mb = 1.0 / 1024, max_mb = 64;
  int warmup = 2, iters = 5;
  bool csv = false;
  app.add_option("--device", device_name, "cpu (gloo) or cuda (nccl)")->capture_default_str();
  app.add_option("--min-mb", min_mb, "smallest buffer, MiB")->capture_default_str();
  app.add_option("--max-mb", max_mb, "largest buffer, MiB (sizes double up to it)")
      ->capture_default_str();
  app.add_option("--warmup", warmup)->capture_default_str();
  app.add_option("--iters", iters)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--csv", csv, "CSV instead of aligned text");
  CLI11_PARSE(app, argc, argv);

  const bool gpu = device_name.rfind("cuda", 0) == 0;
  dist::init_process_group(gpu ? "nccl" : "gloo");
  // init_process_group("nccl") made the rank's GPU current (dist::local_device).
  const Device device = gpu ? Device::cuda(cuda::current_device()) : Device::cpu();
  const int rank = dist::get_rank(), n = dist::get_world_size();
  dist::ProcessGroup& group = dist::default_group();
  if (rank == 0) {
    if (csv)
      std::printf("algorithm,ranks,backend,bytes,seconds,algbw_gbs,busbw_gbs\n");
    else
      std::printf("%d ranks, %s backend, f32 sum, %d iterations after %d warm-up\n", n,
                  group.backend().c_str(), iters, warmup);
  }
  for (double mb = min_mb; mb <= max_mb * 1.0001; mb *= 2) {
    const auto numel = static_cast<int64_t>(mb * 1024 * 1024 / 4);
    const Tensor buffer = full({numel}, 1.0, DType::f32, device);
    const double bytes = static_cast<double>(numel) * 4;
    struct Algorithm {
      const char* name;
      std::function<void()> reduce;
    };
    const Algorithm algorithms[] = {
        {"kiln-ring", [&] { dist::ring_all_reduce(group, buffer, dist::ReduceOp::sum); }},
        {gpu ? "ncclAllReduce" : "gloo-allreduce",
         [&] { group.all_reduce(buffer, dist::ReduceOp::sum); }},
    };
    for (const Algorithm& a : algorithms) {
      const double seconds = time_per_call(a.reduce, warmup, iters, device);
      const double algbw = bytes / seconds / 1e9;
      const double busbw = algbw * 2.0 * (n - 1) / n;
      if (rank != 0) continue;
      if (csv)
        std::printf("%s,%d,%s,%.0f,%.6g,%.4g,%.4g\n", a.name, n, group.backend().c_str(), bytes,
                    seconds, algbw, busbw);
      else
        std::printf("%-15s %10.0f B  %10.3f ms  algbw %8.3f GB/s  busbw %8.3f GB/s\n", a.name,
                    bytes, seconds * 1e3, algbw, busbw);
    }
  }
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::apps::run_main("all_reduce", [&] { return run(argc, argv); });
}
