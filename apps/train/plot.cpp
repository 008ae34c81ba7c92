#include "plot.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace kiln::apps {

namespace {

// The first executable `name` in $PATH, or empty: what a shell's `command -v` would find.
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::string dirs = path;
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > begin ? dirs.substr(begin, end - begin) : ".";
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return "";
}

std::string gnuplot_script(int64_t epochs) {
  // A single epoch would get an x axis from 0.99 to 1.01 around one dot: give every epoch a unit.
  const std::string xtics = epochs <= 20 ? "set xtics 1\n" : "";
  const std::string series =
      "'metrics.csv' skip 1 using 1:{} with linespoints pointtype 7 title 'train', "
      "'metrics.csv' skip 1 using 1:{} with linespoints pointtype 7 title 'test'\n";
  return fmt::format(
             "set datafile separator ','\n"
             "set terminal png size 1000,400\n"
             "set output 'curves.png'\n"
             "set xrange [0.5:{}.5]\n"
             "{}"
             "set xlabel 'epoch'\n"
             "set multiplot layout 1,2\n"
             "set title 'loss'\n",
             epochs, xtics) +
         "plot " + fmt::format(fmt::runtime(series), 2, 4) + "set title 'accuracy'\n" + "plot " +
         fmt::format(fmt::runtime(series), 3, 5) + "unset multiplot\n";
}

}  // namespace

bool plot_metrics(const std::string& dir, int64_t epochs) {
  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) return false;
  {
    std::ofstream script(std::filesystem::path(dir) / "curves.gp");
    script << gnuplot_script(epochs);
    if (!script.good()) return false;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // The child starts in `dir` and writes nothing to this program's terminal.
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = {"gnuplot", "curves.gp"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, gnuplot.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return false;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace kiln::apps
