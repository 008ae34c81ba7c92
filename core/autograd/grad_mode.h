// Whether ops record history. Thread-local, as in PyTorch: a NoGradGuard in one thread does not
// affect another (DataLoader workers, in-process distributed ranks).
#pragma once

namespace kiln {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Turns recording off for its scope (inference, optimizer steps, running-stat updates).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace kiln
