// kiln-train's --checkpoint-dir: created with a clear error, cleared of what a killed run left
// behind, and metrics.csv kept so that a resumed run has every epoch's row exactly once.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::apps {

// One row of metrics.csv: an epoch's training and test figures.
struct EpochMetrics {
  int64_t epoch = 0;  // 1-based, as printed
  double train_loss = 0, train_accuracy = 0, test_loss = 0, test_accuracy = 0;
  double lr = 0, images_per_second = 0, seconds = 0;
  // Image folders of more than 5 classes; negative (an empty cell) where it would say nothing.
  double test_top5_accuracy = -1;
};

class RunDir {
 public:
  // `dir` empty: a run without a directory (every method does nothing). Otherwise creates it
  // (ValueError naming --checkpoint-dir and the system's reason when it cannot) and removes the
  // temporaries of checkpoints whose writer was killed.
  explicit RunDir(std::string dir);
  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return path_in(dir_, name); }
  // A file of the directory `dir`, for the ranks of a job that read it without owning it.
  static std::string path_in(const std::string& dir, const std::string& name);

  // The row is written before the checkpoint that counts its epoch as done. A run killed between
  // the two leaves a row for an epoch the checkpoint does not have; resuming from that checkpoint
  // drops such rows (epochs after `completed_epochs`) before they are trained again.
  void drop_metrics_after(int64_t completed_epochs) const;
  // Appends the row; a metrics.csv from before the top-5 column gets the column, empty in its rows.
  void append_metrics(const EpochMetrics& m) const;
  // Rows in metrics.csv, for the curves' x axis.
  int64_t metrics_rows() const;

 private:
  std::string dir_;
};

}  // namespace kiln::apps
