#include "run_dir.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/nn/safetensors.h"

namespace fs = std::filesystem;

namespace kiln::apps {

namespace {

const std::string kMetricsHeader =
    "epoch,train_loss,train_accuracy,test_loss,test_accuracy,lr,images_per_second,seconds,"
    "test_top5_accuracy";
// The header before the top-5 column (until 2026-11-28), which a resumed run may find.
const std::string kOldMetricsHeader =
    "epoch,train_loss,train_accuracy,test_loss,test_accuracy,lr,images_per_second,seconds";

// Writes `lines` to `csv` beside it and renames it over it, so a kill leaves the old file or the
// new one.
void replace_lines(const std::string& csv, const std::vector<std::string>& lines) {
  const std::string temp = csv + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    for (const std::string& line : lines) out << line << '\n';
    KILN_CHECK(out.good(), Error, "cannot rewrite {}", csv);
  }
  fs::rename(temp, csv);
}

// Gives an old metrics.csv the top-5 column, empty in the rows it has.
void add_top5_column(const std::string& csv) {
  std::ifstream in(csv);
  std::string header;
  if (!std::getline(in, header) || header != kOldMetricsHeader) return;
  std::vector<std::string> lines = {kMetricsHeader};
  for (std::string line; std::getline(in, line);) lines.push_back(line + ",");
  in.close();
  replace_lines(csv, lines);
}

// The epoch number that starts a metrics row, or -1 for the header and anything unreadable.
int64_t row_epoch(const std::string& line) {
  int64_t epoch = -1;
  const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), epoch);
  return error == std::errc() && end != line.data() && *end == ',' ? epoch : -1;
}

}  // namespace

RunDir::RunDir(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) return;
  std::error_code error;
  fs::create_directories(dir_, error);
  KILN_CHECK(!error && fs::is_directory(dir_), ValueError,
             "--checkpoint-dir {}: cannot create it as a directory ({})", dir_,
             error ? error.message() : "a file of that name exists");
  nn::remove_stale_temporaries(path("last.safetensors"));
  nn::remove_stale_temporaries(path("model.safetensors"));
}

std::string RunDir::path_in(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

void RunDir::drop_metrics_after(int64_t completed_epochs) const {
  const std::string csv = path("metrics.csv");
  if (!enabled() || !fs::exists(csv)) return;
  std::ifstream in(csv);
  std::vector<std::string> kept;
  bool dropped = false;
  for (std::string line; std::getline(in, line);) {
    if (row_epoch(line) > completed_epochs)
      dropped = true;
    else
      kept.push_back(line);
  }
  if (dropped) replace_lines(csv, kept);
}

void RunDir::append_metrics(const EpochMetrics& m) const {
  if (!enabled()) return;
  const std::string csv = path("metrics.csv");
  const bool fresh = !fs::exists(csv);
  if (!fresh) add_top5_column(csv);
  std::ofstream out(csv, std::ios::app);
  if (fresh) out << kMetricsHeader << '\n';
  const std::string top5 =
      m.test_top5_accuracy >= 0 ? fmt::format("{:.6f}", m.test_top5_accuracy) : std::string();
  out << fmt::format("{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6g},{:.1f},{:.1f},{}\n", m.epoch,
                     m.train_loss, m.train_accuracy, m.test_loss, m.test_accuracy, m.lr,
                     m.images_per_second, m.seconds, top5);
  out.flush();
  KILN_CHECK(out.good(), Error, "cannot write metrics to {}", csv);
}

int64_t RunDir::metrics_rows() const {
  std::ifstream in(path("metrics.csv"));
  int64_t rows = 0;
  for (std::string line; std::getline(in, line);) rows += row_epoch(line) >= 0;
  return rows;
}

}  // namespace kiln::apps
