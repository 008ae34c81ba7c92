#include "kiln/dist/spawn.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kiln/core/error.h"

extern char** environ;

namespace kiln::dist {

namespace {

// Set in a rank's environment by its parent: which rank it is, and the pipe its error goes to.
constexpr const char* kRankVariable = "KILN_SPAWN_RANK";
constexpr const char* kErrorFdVariable = "KILN_SPAWN_ERROR_FD";
// Less than a pipe holds (64 KiB on Linux), so a rank never blocks writing its error.
constexpr std::size_t kMaxMessageBytes = 16 * 1024;

std::string type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> name(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), &std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(type.name());
}

void write_all(int fd, std::string text) {
  if (fd < 0) return;
  if (text.size() > kMaxMessageBytes) text.resize(kMaxMessageBytes);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

int parse_int(const char* variable, const char* text) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  KILN_CHECK(errno == 0 && end != text && *end == '\0' && value >= 0 && value <= 1 << 20,
             ValueError, "dist::spawn: {} must be a non-negative integer, got '{}'", variable,
             text);
  return static_cast<int>(value);
}

// In a rank: fn(rank), then the end of this process, which exists to run it.
[[noreturn]] void run_rank(const std::function<void(int)>& fn, const char* rank_text) {
  const int rank = parse_int(kRankVariable, rank_text);
  int error_fd = -1;
  if (const char* fd = std::getenv(kErrorFdVariable)) error_fd = parse_int(kErrorFdVariable, fd);
  // Nothing this rank starts keeps the pipe open, and a spawn inside fn starts ranks of its own.
  if (error_fd >= 0) ::fcntl(error_fd, F_SETFD, FD_CLOEXEC);
  ::unsetenv(kRankVariable);
  ::unsetenv(kErrorFdVariable);
  int status = 0;
  try {
    fn(rank);
  } catch (const std::exception& e) {
    write_all(error_fd, type_name(typeid(e)) + ": " + e.what());
    status = 1;
  } catch (...) {
    write_all(error_fd, "an exception that is not a std::exception");
    status = 1;
  }
  std::fflush(nullptr);
  std::exit(status);
}

// This program's arguments, argv[0] first.
std::vector<std::string> own_arguments() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\0', start);
    args.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return args;
}

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  int error_fd = -1;  // the pipe's read end
  bool running = false;
  int status = 0;
  std::string message = {};  // what the rank wrote to the pipe
};

std::string drain(int fd) {
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  return out;
}

std::string describe_failure(const Rank& r, int nprocs) {
  std::string what = "rank " + std::to_string(r.rank) + " of " + std::to_string(nprocs);
  if (!r.message.empty()) return what + " failed with " + r.message;
  if (WIFEXITED(r.status))
    return what + " exited with status " + std::to_string(WEXITSTATUS(r.status));
  if (WIFSIGNALED(r.status)) {
    const int sig = WTERMSIG(r.status);
    return what + " was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return what + " ended with wait status " + std::to_string(r.status);
}

// A rank whose error is a DistError most likely saw another rank fail: named after the others.
bool echoes_another(const Rank& r) {
  return r.message.rfind("kiln::DistError", 0) == 0;
}

void signal_running(std::vector<Rank>& ranks, int sig) {
  for (Rank& r : ranks)
    if (r.running) ::kill(r.pid, sig);
}

// On the way out of an error of spawn's own: no rank outlives it.
void kill_and_reap(std::vector<Rank>& ranks) {
  signal_running(ranks, SIGKILL);
  for (Rank& r : ranks) {
    if (r.running) ::waitpid(r.pid, nullptr, 0);
    if (r.error_fd >= 0) ::close(r.error_fd);
  }
}

}  // namespace

// This process's environment with `set` replacing any inherited values of those names.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [name, value] : set) replaced = replaced || entry.rfind(name + "=", 0) == 0;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> argv_pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  KILN_CHECK(fd >= 0, DistError, "cannot open a socket to find a free port: {}",
             std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  KILN_CHECK(ok, DistError, "cannot find a free port: {}", std::strerror(errno));
  return ntohs(addr.sin_port);
}

void spawn(const std::function<void(int rank)>& fn, int nprocs, SpawnOptions options) {
  if (const char* rank = std::getenv(kRankVariable)) run_rank(fn, rank);
  KILN_CHECK(nprocs >= 1, ValueError, "dist::spawn: nprocs must be at least 1, got {}", nprocs);
  KILN_CHECK(options.grace_seconds >= 0, ValueError,
             "dist::spawn: grace_seconds must not be negative, got {}", options.grace_seconds);
  KILN_CHECK(fn != nullptr, ValueError, "dist::spawn: expected a function to run, got none");
  std::vector<std::string> command = own_arguments();
  KILN_CHECK(!command.empty(), DistError,
             "dist::spawn: cannot read this program's arguments from /proc/self/cmdline");
  if (options.args) {
    command.resize(1);
    command.insert(command.end(), options.args->begin(), options.args->end());
  }
  const int port = options.master_port != 0 ? options.master_port : free_port();
  std::vector<std::pair<std::string, std::string>> job = {
      {"WORLD_SIZE", std::to_string(nprocs)},
      {"LOCAL_WORLD_SIZE", std::to_string(nprocs)},
      {"MASTER_ADDR", options.master_addr},
      {"MASTER_PORT", std::to_string(port)}};
  // As kiln-run: ranks that each start a full OpenMP team would oversubscribe the cores.
  if (std::getenv("OMP_NUM_THREADS") == nullptr && nprocs > 1) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    job.emplace_back("OMP_NUM_THREADS",
                     std::to_string(std::max(1u, cores / static_cast<unsigned>(nprocs))));
  }

  std::vector<Rank> ranks;
  for (int r = 0; r < nprocs; ++r) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      const int err = errno;
      kill_and_reap(ranks);
      throw DistError("dist::spawn: cannot make a pipe for rank " + std::to_string(r) + ": " +
                      std::strerror(err));
    }
    std::vector<std::pair<std::string, std::string>> set = job;
    set.insert(set.end(), {{"RANK", std::to_string(r)},
                           {"LOCAL_RANK", std::to_string(r)},
                           {kRankVariable, std::to_string(r)},
                           {kErrorFdVariable, std::to_string(fds[1])}});
    std::vector<std::string> env = environment_with(set), args = command;
    std::vector<char*> argv = argv_pointers(args), envp = argv_pointers(env);
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Only async-signal-safe calls until execve: the parent may have other threads, whose
      // locks this copy of the process holds with nobody to release them.
      ::fcntl(fds[1], F_SETFD, 0);
      ::execve("/proc/self/exe", argv.data(), envp.data());
      const char failed[] = "dist::spawn: execve(\"/proc/self/exe\") failed";
      const ssize_t ignored = ::write(fds[1], failed, sizeof failed - 1);
      static_cast<void>(ignored);
      ::_exit(127);
    }
    const int err = errno;
    ::close(fds[1]);
    if (pid < 0) {
      ::close(fds[0]);
      kill_and_reap(ranks);
      throw DistError("dist::spawn: cannot start rank " + std::to_string(r) + ": " +
                      std::strerror(err));
    }
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
    ranks.push_back(Rank{.rank = r, .pid = pid, .error_fd = fds[0], .running = true});
  }

  using Clock = std::chrono::steady_clock;
  std::vector<const Rank*> failed;
  auto kill_at = Clock::time_point::max();
  bool stopping = false, killed = false;
  int running = nprocs;
  while (running > 0) {
    std::vector<const Rank*> failed_now;
    for (Rank& r : ranks) {
      if (!r.running) continue;
      int status = 0;
      const pid_t got = ::waitpid(r.pid, &status, WNOHANG);
      if (got != r.pid) continue;
      r.running = false;
      --running;
      r.status = status;
      r.message = drain(r.error_fd);
      ::close(r.error_fd);
      r.error_fd = -1;
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) failed_now.push_back(&r);
    }
    // The failures that came before any rank was told to stop; the rest followed from them.
    if (!stopping && !failed_now.empty()) {
      std::stable_partition(failed_now.begin(), failed_now.end(),
                            [](const Rank* r) { return !echoes_another(*r); });
      failed = failed_now;
      stopping = true;
      signal_running(ranks, SIGTERM);
      kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(options.grace_seconds));
    }
    if (stopping && !killed && Clock::now() > kill_at) {
      signal_running(ranks, SIGKILL);
      killed = true;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (failed.empty()) return;
  std::string message = "dist::spawn: " + describe_failure(*failed[0], nprocs);
  for (std::size_t i = 1; i < failed.size(); ++i)
    message += "; with it, " + describe_failure(*failed[i], nprocs);
  if (static_cast<int>(failed.size()) < nprocs) message += "; the ranks still running were stopped";
  throw DistError(message);
}

}  // namespace kiln::dist
