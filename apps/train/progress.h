// A one-line progress bar for an epoch: step, loss, accuracy, images/s and ETA, redrawn in place
// on a terminal and printed every tenth of the epoch otherwise (so logs stay readable).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kiln::apps {

class ProgressBar {
 public:
  // A bar that is not `visible` (the ranks of a distributed job other than 0) draws nothing.
  ProgressBar(std::string label, int64_t total_steps, bool visible = true);
  // Called after each step with running averages over the epoch so far.
  void update(int64_t step, double loss, double accuracy, int64_t images);
  // Ends the line; returns the elapsed seconds.
  double finish();

 private:
  std::string label_;
  int64_t total_;
  bool tty_;
  bool visible_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t last_logged_tenth_ = -1;
};

}  // namespace kiln::apps
