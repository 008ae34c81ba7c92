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

// Anomaly detection, as torch.autograd.set_detect_anomaly: while on (for every thread), the
// backward pass checks each node's gradients for NaN and throws an AutogradError naming the node
// (MulBackward, ConvolutionBackward, ...) that made one. Each check waits for the device, so it is
// for finding a bug, not for training.
class AnomalyMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Turns anomaly detection on for its scope (torch.autograd.detect_anomaly()).
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : previous_(AnomalyMode::is_enabled()) { AnomalyMode::set_enabled(true); }
  ~DetectAnomalyGuard() { AnomalyMode::set_enabled(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace kiln
