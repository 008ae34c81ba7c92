// Ranks as threads of the test process: each builds its own process group over one in-memory
// store and runs the same function, as the processes of a real job would. Catch's assertions are
// not thread-safe, so a rank returns what it computed and the test checks it afterwards on the
// main thread; an exception on any rank is rethrown there.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/dist/process_group.h"
#include "kiln/dist/store.h"

namespace kiln::testing {

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
