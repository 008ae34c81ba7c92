#include "progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace kiln::apps {

ProgressBar::ProgressBar(std::string label, int64_t total_steps, bool visible)
    : label_(std::move(label)),
      total_(total_steps),
      tty_(isatty(fileno(stderr)) != 0),
      visible_(visible),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void ProgressBar::update(int64_t step, double loss, double accuracy, int64_t images) {
  auto now = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(now - start_).count();
  int64_t tenth = total_ > 0 ? step * 10 / total_ : 0;
  bool redraw = tty_ ? (now - last_draw_ > std::chrono::milliseconds(200) || step == total_)
                     : (tenth != last_logged_tenth_);
  if (!redraw || !visible_) return;
  last_draw_ = now;
  last_logged_tenth_ = tenth;
  double rate = elapsed > 0 ? static_cast<double>(images) / elapsed : 0.0;
  double eta =
      step > 0 ? elapsed * static_cast<double>(total_ - step) / static_cast<double>(step) : 0.0;
  const int width = 24;
  int filled = total_ > 0 ? static_cast<int>(width * step / total_) : 0;
  std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
  std::string line = fmt::format("{} [{}] {}/{} loss {:.4f} acc {:.2f}% {:.0f} img/s eta {:.0f}s",
                                 label_, bar, step, total_, loss, 100.0 * accuracy, rate, eta);
  if (tty_)
    std::fprintf(stderr, "\r%s\033[K", line.c_str());
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

double ProgressBar::finish() {
  if (tty_ && visible_) std::fprintf(stderr, "\n");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace kiln::apps
