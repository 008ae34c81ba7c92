// `kiln-bench ops`: kiln's ops at the sizes where they are bound by memory or by math, each
// against the device-to-device copy of the same bytes (the bandwidth ceiling) or in TFLOP/s
// (GFLOP/s on a CPU), and the host cost of a tiny op. The ops are the entries of the tests' op
// table (tests/support/op_table.cpp), looked up by name and run on inputs of the benchmark's sizes:
// one list of ops for the parity tests, the gradient checks and this. Its peer, ops_torch.py,
// prints the same lines for PyTorch, so one call on one machine compares the two.
#include "ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <ratio>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "op_table.h"

namespace kiln::bench {

namespace {

struct Row {
  std::string op, shape;
  double ms = 0;
  double rate = 0;      // GB/s or TFLOP/s
  std::string unit;     // "GB/s", "TFLOP/s" or "us/op"
  double of_copy = -1;  // GB/s as a fraction of the copy's; negative for the others
};

// Median milliseconds of `repeats` calls of f, each timed alone, after one untimed call; the
// device is synchronised around each so a GPU's time is counted, not just the launch.
double median_ms(const std::function<void()>& f, int repeats, Device device) {
  auto sync = [&] {
    if (device.is_cuda()) cuda::synchronize(device.index);
  };
  f();
  sync();
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    sync();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The op of the op table's entry `name`; an entry the table does not hold is an error naming it
// (the ctest kiln_bench_ops_smoke runs every one).
testing::OpEntry::RunFn table_op(const std::string& name) {
  for (const testing::OpEntry& op : testing::op_table())
    if (op.name == name) return op.run;
  throw Error(fmt::format(
      "kiln-bench ops: the op table (tests/support/op_table.cpp) has no entry '{}'", name));
}

std::string format_row(const Row& r) {
  std::string line =
      fmt::format("kiln {} {}: {:.3f} ms, {:.1f} {}", r.op, r.shape, r.ms, r.rate, r.unit);
  if (r.of_copy >= 0) line += fmt::format(" ({:.0f}% of copy)", 100 * r.of_copy);
  return line;
}

}  // namespace

int run_ops(const OpsOptions& options) {
  const Device device = Device::parse(options.device);
  const bool gpu = device.is_cuda();
  // A vector of 2^log2 f32, a square matrix of side rows for the row/column sums and softmax, and
  // matmul of side `side`: large enough to leave the caches on a GPU, small enough for a CPU.
  const int log2 = options.smoke ? 16 : (options.log2 > 0 ? options.log2 : (gpu ? 28 : 24));
  const int64_t n = int64_t{1} << log2;
  const int64_t side = options.smoke ? 128 : (gpu ? 8192 : 1024);
  const int64_t square = options.smoke ? 256 : (gpu ? 16384 : 2048);
  const int repeats = options.smoke ? 2 : options.repeats;
  backends::set_cuda_matmul_allow_tf32(false);

  manual_seed(0);
  const Tensor a = randn({n}).to(device), b = randn({n}).to(device);
  const Tensor m = randn({square, square}).to(device);
  const Tensor logits = randn({square / 4, square}).to(device);
  const Tensor x = randn({side, side}).to(device), y = randn({side, side}).to(device);
  const double vector_bytes = static_cast<double>(n) * 4;
  const double square_bytes = static_cast<double>(square * square) * 4;

  const auto clone_op = table_op("clone"), add_op = table_op("add"), relu_op = table_op("relu");
  const auto sum_op = table_op("sum"), sum_rows = table_op("sum dim 1");
  const auto sum_cols = table_op("sum dim 0"), softmax_op = table_op("softmax dim 1");
  const auto batch_norm_op = table_op("batch_norm training"), mm_op = table_op("mm");

  std::vector<Row> rows;
  auto bandwidth = [&](const std::string& op, const std::string& shape, double bytes,
                       const std::function<void()>& f) {
    const double ms = median_ms(f, repeats, device);
    rows.push_back({op, shape, ms, bytes / (ms * 1e-3) / 1e9, "GB/s"});
  };
  const std::string vec = fmt::format("f32 2^{}", log2);
  const std::string mat = fmt::format("[{}, {}]", square, square);
  bandwidth("copy", vec, 2 * vector_bytes, [&] { clone_op({a}); });
  const double copy_gbps = rows.back().rate;
  bandwidth("add", vec, 3 * vector_bytes, [&] { add_op({a, b}); });
  bandwidth("relu", vec, 2 * vector_bytes, [&] { relu_op({a}); });
  bandwidth("sum", vec, vector_bytes, [&] { sum_op({a}); });
  bandwidth("sum rows (dim 1)", mat, square_bytes, [&] { sum_rows({m}); });
  bandwidth("sum cols (dim 0)", mat, square_bytes, [&] { sum_cols({m}); });
  bandwidth("softmax rows", fmt::format("[{}, {}]", square / 4, square), 2 * square_bytes / 4,
            [&] { softmax_op({logits}); });
  // Batch norm in training, forward and backward: x read twice and the output written (statistics,
  // then normalisation), then x and the gradient read twice and grad_x written, 8 passes in all.
  // ResNet-50's first stage at batch 128 (few channels of many values: one block per channel left
  // most of a GPU idle) and a later one.
  const std::vector<Shape> norm_shapes =
      options.smoke ? std::vector<Shape>{{4, 8, 16, 16}}
                    : (gpu ? std::vector<Shape>{{128, 64, 112, 112}, {128, 512, 28, 28}}
                           : std::vector<Shape>{{32, 64, 56, 56}});
  for (const Shape& shape : norm_shapes) {
    const int64_t channels = shape[1];
    const Tensor input = randn(shape).to(device).requires_grad_();
    const Tensor grad = randn(shape).to(device);
    const Tensor weight = ones({channels}).to(device).requires_grad_();
    const Tensor bias = zeros({channels}).to(device).requires_grad_();
    Tensor running_mean = zeros({channels}).to(device), running_var = ones({channels}).to(device);
    // .grad dropped first, so the backward hands its gradients over rather than adding to them.
    bandwidth("batch_norm train fwd+bwd", shape_str(shape),
              8.0 * static_cast<double>(input.numel()) * 4, [&] {
                for (Tensor t : {input, weight, bias}) t.zero_grad();
                batch_norm_op({input, running_mean, running_var, weight, bias})[0].backward(grad);
              });
  }
  for (Row& r : rows) r.of_copy = r.rate / copy_gbps;

  auto flops = [&](const std::string& op, const Tensor& p, const Tensor& q, bool tf32) {
    backends::set_cuda_matmul_allow_tf32(tf32);
    const double ms = median_ms([&] { mm_op({p, q}); }, repeats, device);
    backends::set_cuda_matmul_allow_tf32(false);
    const double work = 2.0 * static_cast<double>(side) * side * side;
    // A CPU's rate in GFLOP/s: in TFLOP/s with one decimal it would print 0.0.
    const double unit = gpu ? 1e12 : 1e9;
    rows.push_back({op, fmt::format("{}^3", side), ms, work / (ms * 1e-3) / unit,
                    gpu ? "TFLOP/s" : "GFLOP/s"});
  };
  flops("matmul f32", x, y, false);
  if (gpu) flops("matmul f32 (tf32)", x, y, true);
  flops("matmul bf16", x.to(DType::bf16), y.to(DType::bf16), false);

  // The host's cost of an op: many tiny adds, the device synchronised once at the end. The table's
  // add, called directly: its function's argument vector would add to the cost measured.
  const Tensor tiny = randn({16}).to(device);
  const int calls = options.smoke ? 100 : 20000;
  const double tiny_ms = median_ms(
      [&] {
        for (int i = 0; i < calls; ++i) add(tiny, tiny);
      },
      repeats, device);
  rows.push_back({"add tiny", "[16]", tiny_ms / calls, 1e3 * tiny_ms / calls, "us/op"});

  std::printf("kiln-bench ops on %s, median of %d repeats each\n", device.str().c_str(), repeats);
  for (const Row& r : rows) std::printf("%s\n", format_row(r).c_str());
  if (!options.csv.empty()) {
    std::ofstream csv(options.csv, std::ios::trunc);
    csv << "tool,device,op,shape,ms,rate,unit,of_copy\n";
    for (const Row& r : rows)
      csv << fmt::format("kiln,{},\"{}\",\"{}\",{:.6f},{:.3f},{},{}\n", device.str(), r.op, r.shape,
                         r.ms, r.rate, r.unit,
                         r.of_copy >= 0 ? fmt::format("{:.4f}", r.of_copy) : std::string());
    KILN_CHECK(csv.good(), Error, "kiln-bench ops: cannot write {}", options.csv);
  }
  return 0;
}

}  // namespace kiln::bench
