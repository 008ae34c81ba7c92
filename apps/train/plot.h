// Loss and accuracy curves of metrics.csv as curves.png, drawn by gnuplot when it is installed.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::apps {

// Writes `dir`/curves.gp and runs gnuplot on it, in `dir`, without a shell: the script names only
// relative files (metrics.csv, curves.png), so no path can be read as a command or break its
// quoting. `epochs` is the number of rows of metrics.csv, for the x axis. Returns whether
// curves.png was drawn (false when gnuplot is not on PATH or fails).
bool plot_metrics(const std::string& dir, int64_t epochs);

}  // namespace kiln::apps
