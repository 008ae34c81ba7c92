// An LSTM (or GRU) over a sequence, forward and backward, with its cells composed (sigmoid, tanh
// and elementwise ops) and fused (ops/rnn_cell.h), for the decision recorded in nn/recurrent.h and
// docs/results.md ("Recurrent cells"). On the CPU: milliseconds per sequence, the two alternating
// call by call, each round in the other order (so a shared machine's load falls on both alike),
// medians of --repeats each. On the
// CUDA simulator (--device cuda in a KILN_CUDA=SIM build) times mean nothing: it counts the kernel
// launches and library calls one more step of the sequence costs (T + 1 steps less T steps, so
// the per-sequence linear and stack drop out), forward and forward + backward, and lists them by
// kernel with --by-name. --clock cpu times the process's CPU time instead of the wall clock: on one
// thread of a shared machine it leaves out the time the process waited for a core.
//
//   benchmarks/recurrent_cell --steps 64 --batch 32 --input 256 --hidden 256 --repeats 11
//   benchmarks/recurrent_cell --threads 1 --clock cpu --steps 32 --batch 8 --hidden 64 --input 32
//   build-sim/benchmarks/recurrent_cell --device cuda --by-name
#include <omp.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <ratio>
#include <string>
#include <vector>

#include "kiln/core/cuda_simulated.h"
#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

struct Problem {
  std::string kind;
  int64_t steps, batch, input, hidden;
};

std::shared_ptr<nn::Module> make_model(const Problem& p, Device device) {
  manual_seed(0);
  std::shared_ptr<nn::Module> m;
  if (p.kind == "lstm")
    m = std::make_shared<nn::LSTM>(p.input, p.hidden);
  else
    m = std::make_shared<nn::GRU>(p.input, p.hidden);
  m->to(device);
  return m;
}

struct Times {
  double forward_ms = 0.0, total_ms = 0.0;
};

double now_ms(bool cpu_clock) {
  if (cpu_clock) {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One forward and backward of a [steps, batch, input] sequence, with the cells fused or composed.
Times run_once(nn::Module& model, const Tensor& x, const Tensor& grad, bool fused, bool cpu_clock) {
  backends::set_fused_rnn_cell_enabled(fused);
  for (auto& [name, p] : model.named_parameters()) p.set_grad(Tensor());
  const double t0 = now_ms(cpu_clock);
  const Tensor y = model.forward(x);
  const double t1 = now_ms(cpu_clock);
  y.backward(grad);
  const double t2 = now_ms(cpu_clock);
  return {t1 - t0, t2 - t0};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The cell alone, `steps` times on [batch, gates * hidden] leaves: forward, and forward + backward
// to the three inputs from fixed gradients of the outputs (autograd::grad).
Times run_cells(const Problem& p, const std::vector<Tensor>& in, const std::vector<Tensor>& grads,
                bool fused, bool cpu_clock) {
  const bool lstm = p.kind == "lstm";
  double forward = 0.0, total = 0.0;
  for (int64_t s = 0; s < p.steps; ++s) {
    const double t0 = now_ms(cpu_clock);
    std::vector<Tensor> out;
    if (lstm) {
      const LstmCellState c =
          fused ? fused_lstm_cell(in[0], in[1], in[2]) : composed_lstm_cell(in[0], in[1], in[2]);
      out = {c.h, c.c};
    } else {
      out = {fused ? fused_gru_cell(in[0], in[1], in[2]) : composed_gru_cell(in[0], in[1], in[2])};
    }
    const double t1 = now_ms(cpu_clock);
    autograd::grad(out, in, {grads.begin(), grads.begin() + static_cast<int64_t>(out.size())});
    const double t2 = now_ms(cpu_clock);
    forward += t1 - t0;
    total += t2 - t0;
  }
  return {forward, total};
}

void time_cpu(const Problem& p, int64_t repeats, bool cpu_clock) {
  const std::shared_ptr<nn::Module> model = make_model(p, Device::cpu());
  const Tensor x = randn({p.steps, p.batch, p.input});
  const Tensor grad = randn({p.steps, p.batch, p.hidden});
  std::vector<double> forward[2], total[2];
  for (int64_t r = 0; r < repeats + 1; ++r) {  // the first round warms up
    // Each round in the other order, so that neither goes first every time.
    for (const bool second : {false, true}) {
      const bool fused = second != (r % 2 == 1);
      const Times t = run_once(*model, x, grad, fused, cpu_clock);
      if (r == 0) continue;
      forward[fused].push_back(t.forward_ms);
      total[fused].push_back(t.total_ms);
    }
  }
  backends::set_fused_rnn_cell_enabled(true);
  // The cells alone, on leaves: no linear, no select of the sequence's projections.
  const int64_t gates = p.kind == "lstm" ? 4 : 3;
  const std::vector<Tensor> in = {randn({p.batch, gates * p.hidden}).requires_grad_(),
                                  randn({p.batch, gates * p.hidden}).requires_grad_(),
                                  randn({p.batch, p.hidden}).requires_grad_()};
  const std::vector<Tensor> grads = {randn({p.batch, p.hidden}), randn({p.batch, p.hidden})};
  std::vector<double> cell_forward[2], cell_total[2];
  for (int64_t r = 0; r < repeats + 1; ++r) {
    for (const bool second : {false, true}) {
      const bool fused = second != (r % 2 == 1);
      const Times t = run_cells(p, in, grads, fused, cpu_clock);
      if (r == 0) continue;
      cell_forward[fused].push_back(t.forward_ms);
      cell_total[fused].push_back(t.total_ms);
    }
  }
  std::printf(
      "%s cpu f32 T %lld N %lld input %lld hidden %lld threads %d, %s clock, medians of %lld: "
      "composed %.2f ms (forward %.2f), fused %.2f ms (forward %.2f): fused/composed %.2f\n",
      p.kind.c_str(), static_cast<long long>(p.steps), static_cast<long long>(p.batch),
      static_cast<long long>(p.input), static_cast<long long>(p.hidden), omp_get_max_threads(),
      cpu_clock ? "cpu" : "wall", static_cast<long long>(repeats), median(total[0]),
      median(forward[0]), median(total[1]), median(forward[1]),
      median(total[1]) / median(total[0]));
  std::printf(
      "  the cell alone, %lld steps on leaves: composed %.2f ms (forward %.2f), fused %.2f ms "
      "(forward %.2f): fused/composed %.2f\n",
      static_cast<long long>(p.steps), median(cell_total[0]), median(cell_forward[0]),
      median(cell_total[1]), median(cell_forward[1]),
      median(cell_total[1]) / median(cell_total[0]));
}

uint64_t all(const cuda::SimulatedLaunches& l) {
  return l.kernels + l.library_calls;
}

// The launches of one forward and of one forward + backward over `steps` steps.
struct Counted {
  cuda::SimulatedLaunches before, after_forward, after_backward;
};
Counted count(nn::Module& model, const Problem& p, int64_t steps, bool fused) {
  const Device gpu = Device::cuda(0);
  const Tensor x = randn({steps, p.batch, p.input}, DType::f32, gpu);
  const Tensor grad = randn({steps, p.batch, p.hidden}, DType::f32, gpu);
  backends::set_fused_rnn_cell_enabled(fused);
  for (auto& [name, param] : model.named_parameters()) param.set_grad(Tensor());
  Counted c;
  c.before = cuda::simulated_launches();
  const Tensor y = model.forward(x);
  c.after_forward = cuda::simulated_launches();
  y.backward(grad);
  c.after_backward = cuda::simulated_launches();
  return c;
}

void count_simulated(const Problem& p, bool by_name) {
  backends::set_fused_rnn_cell_on_gpu(true);
  const std::shared_ptr<nn::Module> model = make_model(p, Device::cuda(0));
  for (const bool fused : {false, true}) {
    count(*model, p, p.steps, fused);  // warm-up: the caching allocator, cuBLAS handles
    const Counted a = count(*model, p, p.steps, fused);
    const Counted b = count(*model, p, p.steps + 1, fused);
    const auto forward = [](const Counted& c) { return all(c.after_forward) - all(c.before); };
    const auto total = [](const Counted& c) { return all(c.after_backward) - all(c.before); };
    std::printf(
        "%s on the CUDA simulator, %s cells: one more step launches %lld kernels and library "
        "calls forward, %lld forward + backward (a sequence of %lld steps: %lld and %lld)\n",
        p.kind.c_str(), fused ? "fused" : "composed",
        static_cast<long long>(forward(b) - forward(a)),
        static_cast<long long>(total(b) - total(a)), static_cast<long long>(p.steps),
        static_cast<long long>(forward(a)), static_cast<long long>(total(a)));
    if (!by_name) continue;
    for (const auto& [name, after] : b.after_backward.by_name) {
      auto launched = [&](const cuda::SimulatedLaunches& l) -> long long {
        const auto it = l.by_name.find(name);
        return it == l.by_name.end() ? 0 : static_cast<long long>(it->second);
      };
      const long long per_step = (launched(b.after_backward) - launched(b.before)) -
                                 (launched(a.after_backward) - launched(a.before));
      if (per_step != 0) std::printf("  %5lld  %s\n", per_step, name.c_str());
    }
  }
  backends::set_fused_rnn_cell_enabled(true);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"LSTM/GRU forward and backward over a sequence: composed vs fused cells"};
  Problem p{"lstm", 64, 32, 256, 256};
  int64_t repeats = 11;
  int threads = 0;
  std::string device = "cpu", clock = "wall";
  bool by_name = false;
  app.add_option("--kind", p.kind, "lstm or gru")
      ->check(CLI::IsMember({"lstm", "gru"}))
      ->capture_default_str();
  app.add_option("--steps", p.steps, "T")->capture_default_str();
  app.add_option("--batch", p.batch, "N")->capture_default_str();
  app.add_option("--input", p.input)->capture_default_str();
  app.add_option("--hidden", p.hidden)->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs of each, alternating; medians are reported")
      ->capture_default_str();
  app.add_option("--threads", threads, "OpenMP threads (0: OpenMP's default)");
  app.add_option("--device", device, "cpu: times; cuda: launch counts on the CUDA simulator")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--clock", clock, "wall|cpu (the process's CPU time)")
      ->check(CLI::IsMember({"wall", "cpu"}))
      ->capture_default_str();
  app.add_flag("--by-name", by_name, "with --device cuda: one more step's launches by kernel");
  CLI11_PARSE(app, argc, argv);
  return apps::run_main("recurrent_cell", [&] {
    if (threads > 0) omp_set_num_threads(threads);
    if (device == "cpu") {
      time_cpu(p, repeats, clock == "cpu");
      return 0;
    }
    KILN_CHECK(
        cuda::is_simulated(), ValueError,
        "recurrent_cell: --device cuda counts launches on the CUDA simulator (a KILN_CUDA=SIM "
        "build); this build's GPU is {}",
        cuda::device_count() > 0 ? "real (time it with a profiler instead)" : "absent");
    count_simulated(p, by_name);
    return 0;
  });
}
