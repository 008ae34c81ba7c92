// The Work a backend hands back for an operation it runs later: done once, by whoever runs it,
// with nothing or with the error to rethrow in wait(). Backends only (dist/*.cpp).
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>

#include "kiln/dist/process_group.h"

namespace kiln::dist {

class FutureWork : public Work {
 public:
  void finish(std::exception_ptr error = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = error;
      done_ = true;
    }
    done_cv_.notify_all();
  }
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace kiln::dist
