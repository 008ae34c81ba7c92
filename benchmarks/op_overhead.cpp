// The host cost of an op call: nanoseconds per call of ops on tiny tensors, where the work is
// nothing and the call's overhead (checks, allocation, dispatch, autograd bookkeeping, the
// profiler's branch) is everything. Run it from a build with the profiler's hooks and one
// configured with -DKILN_PROFILER=OFF to measure what the hooks cost with no profile recording.
//
//   benchmarks/op_overhead --calls 200000 --rounds 7
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <ratio>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

int main(int argc, char** argv) {
  int64_t calls = 200000;
  int rounds = 7;
  CLI::App app{"op_overhead: nanoseconds per call of ops on tiny tensors"};
  app.add_option("--calls", calls, "calls per round")->capture_default_str();
  app.add_option("--rounds", rounds, "rounds; the median is printed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return kiln::apps::run_main("op_overhead", [&] {
    const Tensor a = randn({16}), b = randn({16});
    const std::vector<std::pair<std::string, std::function<void()>>> ops = {
        {"add [16]", [&] { add(a, b); }},
        {"relu [16]", [&] { relu(a); }},
        {"sum [16]", [&] { sum(a); }},
    };
    std::printf(
        "kiln op overhead (profiler hooks %s, no profile recording), median of %d rounds "
        "of %lld calls:\n",
        profiler::kHooksBuilt ? "built" : "not built", rounds, static_cast<long long>(calls));
    for (const auto& [name, op] : ops) {
      std::vector<double> ns;
      for (int r = 0; r < rounds; ++r) {
        const auto start = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < calls; ++i) op();
        const std::chrono::duration<double, std::nano> took =
            std::chrono::steady_clock::now() - start;
        ns.push_back(took.count() / static_cast<double>(calls));
      }
      std::sort(ns.begin(), ns.end());
      std::printf("%-10s %8.1f ns/call (min %.1f, max %.1f)\n", name.c_str(), ns[ns.size() / 2],
                  ns.front(), ns.back());
    }
    return 0;
  });
}
