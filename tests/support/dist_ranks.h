// Ranks as threads of the test process: each builds its own process group over one in-memory
// store and runs the same function, as the processes of a real job would. Catch's assertions are
// not thread-safe, so a rank returns what it computed and the test checks it afterwards on the
// main thread; an exception on any rank is rethrown there.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/dist/process_group.h"
#include "kiln/dist/store.h"
#include "kiln/kiln.h"

namespace kiln::testing {

// Rank `rank`'s input to a collective: values that differ by rank and by position, negative ones
// among them, exact in every dtype the tests use.
inline Tensor rank_input(int rank, int64_t numel, DType dtype) {
  std::vector<double> values(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i)
    values[static_cast<size_t>(i)] = (rank + 1.0) * static_cast<double>(i % 7) - 3.0 * rank;
  return tensor(values).to(dtype);
}

// What an all-reduce of the first n ranks' rank_input must give, computed on one thread in f64.
inline Tensor expected_reduction(int n, int64_t numel, DType dtype, dist::ReduceOp op) {
  Tensor acc = rank_input(0, numel, DType::f64);
  for (int r = 1; r < n; ++r) {
    const Tensor x = rank_input(r, numel, DType::f64);
    acc = op == dist::ReduceOp::max ? maximum(acc, x) : add(acc, x);
  }
  if (op == dist::ReduceOp::average) acc = div(acc, static_cast<double>(n));
  return acc.to(dtype);
}

template <class Result>
std::vector<Result> run_ranks(int n, const std::string& name,
                              const std::function<Result(dist::ProcessGroup&)>& body,
                              std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  std::shared_ptr<dist::Store> store = dist::make_memory_store(timeout);
  std::vector<Result> results(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::ProcessGroupOptions options;
        options.timeout = timeout;
        auto group = dist::new_process_group("gloo", store, r, n, name, options);
        results[r] = body(*group);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

}  // namespace kiln::testing
