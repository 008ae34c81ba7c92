// kiln-run: starts a data-parallel job's processes on this machine, as torchrun does.
//
//   kiln-run --nproc-per-node 4 kiln-train --distributed --epochs 2
//
// Each process gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT
// (dist/env.h reads them), and OMP_NUM_THREADS = cores / processes unless it is set; rank 0
// serves the job's store on MASTER_PORT. Several machines run one
// kiln-run each with --nnodes, --node-rank and rank 0's --master-addr; each rank then finds the
// address of its machine that routes to the master by itself (dist/gloo_process_group.cpp) and
// says which. The ranks get this process's whole environment besides (NCCL_*, GLOO_SOCKET_IFNAME,
// KILN_DIST_TIMEOUT, ...). The processes are started with an argument vector (posix_spawnp),
// never through a shell.
//
// SIGINT and SIGTERM are passed on to every process. When one process fails (a non-zero status, or
// killed by a signal), the others get SIGTERM, then SIGKILL after --grace-seconds, and kiln-run
// exits with the first failure's status (128 + the signal for a signal), naming the rank. A process
// that stops on an interrupt (status 130) has not failed: the others get --grace-seconds to stop by
// themselves (rank 0 saving its checkpoint) before SIGKILL, and kiln-run exits with 130.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "command_line.h"
#include "kiln/core/error.h"
#include "kiln/dist/spawn.h"
#include "main_guard.h"

namespace {

volatile sig_atomic_t g_forward_signal = 0;

void on_signal(int sig) {
  g_forward_signal = sig;
}

struct Child {
  pid_t pid = -1;
  int rank = 0;
  bool running = false;
  bool stopped = false;  // by SIGSTOP or the like, until SIGCONT
};

std::string signal_name(int sig) {
  return "signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by " + signal_name(sig);
  }
  return "stopped";
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// An address that names this machine on every machine: the other nodes would meet themselves.
bool is_loopback(const std::string& address) {
  return address == "localhost" || address.starts_with("127.") || address == "::1";
}

// A stopped rank is continued after the signal, so that it can act on it (a SIGTERM would wait
// until SIGKILL otherwise, and kiln-train saves its checkpoint on SIGTERM).
void signal_all(std::vector<Child>& children, int sig) {
  for (Child& c : children) {
    if (!c.running) continue;
    ::kill(c.pid, sig);
    if (c.stopped) ::kill(c.pid, SIGCONT);
  }
}

int run(int argc, char** argv) {
  CLI::App app{"kiln-run: start the processes of a data-parallel job (as torchrun)"};
  int nproc = 1, nnodes = 1, node_rank = 0, master_port = 0;
  double grace_seconds = 10;
  std::string master_addr = "127.0.0.1";
  std::vector<std::string> command;
  app.add_option("--nproc-per-node", nproc, "processes on this machine (one per GPU)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", nnodes, "machines in the job")->check(CLI::Range(1, 65536));
  app.add_option("--node-rank", node_rank, "this machine's index, 0 for the one serving the store")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", master_addr,
                 "rank 0's host (default 127.0.0.1: a job of one machine)");
  app.add_option("--master-port", master_port, "rank 0's store port (default: a free one)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--grace-seconds", grace_seconds,
                 "after one process fails, how long the others get to stop before SIGKILL")
      ->check(CLI::NonNegativeNumber);
  app.add_option("command", command, "the program and its arguments")->required();
  app.positionals_at_end();
  app.prefix_command();
  if (auto status = kiln::apps::parse_command_line(app, "kiln-run", argc, argv)) return *status;
  if (command.empty()) command = app.remaining();
  KILN_CHECK(!command.empty(), kiln::ValueError,
             "no program to run (kiln-run --nproc-per-node N program args...)");
  KILN_CHECK(node_rank < nnodes, kiln::ValueError, "--node-rank {} is not below --nnodes {}",
             node_rank, nnodes);
  KILN_CHECK(nnodes == 1 || master_port != 0, kiln::ValueError,
             "a job of {} machines needs --master-port (and --master-addr): every machine must "
             "name the same one",
             nnodes);
  KILN_CHECK(nnodes == 1 || !is_loopback(master_addr), kiln::ValueError,
             "a job of {} machines needs --master-addr: rank 0's host as the other machines reach "
             "it, not {}",
             nnodes, master_addr);
  if (master_port == 0) master_port = kiln::dist::free_port();

  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);

  const int world = nproc * nnodes;
  // As torchrun: processes that each start a full OpenMP team oversubscribe the cores (on 2 cores,
  // 2 ranks with 2 threads each ran kiln's ring all-reduce at half speed), so each rank gets an
  // equal share unless the user chose.
  std::vector<std::pair<std::string, std::string>> threads;
  if (std::getenv("OMP_NUM_THREADS") == nullptr && nproc > 1) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const unsigned share = std::max(1u, cores / static_cast<unsigned>(nproc));
    threads.emplace_back("OMP_NUM_THREADS", std::to_string(share));
    std::fprintf(stderr,
                 "kiln-run: OMP_NUM_THREADS=%u for each of %d processes (%u cores); set it "
                 "to choose\n",
                 share, nproc, cores);
  }
  std::vector<Child> children;
  for (int local = 0; local < nproc; ++local) {
    const int rank = node_rank * nproc + local;
    std::vector<std::string> env = kiln::dist::environment_with({
        {"RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(local)},
        {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
        {"MASTER_ADDR", master_addr},
        {"MASTER_PORT", std::to_string(master_port)},
    });
    for (const auto& [name, value] : threads) env.push_back(name + "=" + value);
    std::vector<std::string> args = command;
    std::vector<char*> argv_ptrs = kiln::dist::argv_pointers(args),
                       env_ptrs = kiln::dist::argv_pointers(env);
    pid_t pid = -1;
    const int err =
        ::posix_spawnp(&pid, args[0].c_str(), nullptr, nullptr, argv_ptrs.data(), env_ptrs.data());
    if (err != 0) {
      signal_all(children, SIGTERM);
      for (Child& c : children) ::waitpid(c.pid, nullptr, 0);
      throw kiln::Error("cannot start '" + args[0] + "' for rank " + std::to_string(rank) + ": " +
                        std::strerror(err));
    }
    children.push_back({pid, rank, true});
  }

  using Clock = std::chrono::steady_clock;
  int running = nproc, result = 0;
  auto kill_at = Clock::time_point::max();  // when the ranks that were told to stop get SIGKILL
  bool killed = false;
  auto begin_stop = [&] {
    if (kill_at == Clock::time_point::max())
      kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(grace_seconds));
  };
  while (running > 0) {
    if (g_forward_signal != 0) {
      signal_all(children, g_forward_signal);
      g_forward_signal = 0;
      begin_stop();
    }
    // Every rank that has exited since the last look. When one rank dies the others' collectives
    // fail within milliseconds, so several may have by now, and waitpid hands them back oldest
    // (rank 0) first: ranks ended by a signal go first, being the likelier cause to report.
    std::vector<std::pair<Child*, int>> exited;
    for (int status = 0;;) {
      const pid_t pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (pid <= 0) break;
      for (Child& c : children) {
        if (c.pid != pid) continue;
        // A stopped rank (SIGSTOP, a debugger) hangs the others in their next collective; said
        // at once, and the collectives' timeout ends the job if it does not continue.
        if (WIFSTOPPED(status)) {
          c.stopped = true;
          std::fprintf(stderr,
                       "kiln-run: rank %d (pid %d) is stopped by %s: the other ranks wait for it "
                       "until it continues (SIGCONT) or their collectives time out "
                       "(--dist-timeout, KILN_DIST_TIMEOUT; 600 s by default)\n",
                       c.rank, static_cast<int>(c.pid), signal_name(WSTOPSIG(status)).c_str());
        } else if (WIFCONTINUED(status)) {
          c.stopped = false;
          std::fprintf(stderr, "kiln-run: rank %d (pid %d) continues\n", c.rank,
                       static_cast<int>(c.pid));
        } else {
          exited.emplace_back(&c, status);
        }
      }
    }
    std::stable_partition(exited.begin(), exited.end(),
                          [](const std::pair<Child*, int>& e) { return WIFSIGNALED(e.second); });
    for (const auto& [child, status] : exited) {
      Child& c = *child;
      c.running = false;
      --running;
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      // A rank that stopped on Ctrl-C (its own or one passed on) has not failed, and the others
      // are stopping too: rank 0 may still be writing its checkpoint, which SIGTERM would lose.
      const bool interrupted = exit_code(status) == kiln::apps::kExitInterrupted;
      if (failed && result == 0 && interrupted) {
        result = kiln::apps::kExitInterrupted;
        std::fprintf(stderr,
                     "kiln-run: rank %d (pid %d) stopped on an interrupt; giving the other "
                     "ranks %g s to stop\n",
                     c.rank, static_cast<int>(c.pid), grace_seconds);
        begin_stop();
      } else if (failed && (result == 0 || result == kiln::apps::kExitInterrupted) &&
                 !interrupted) {
        result = exit_code(status);
        std::fprintf(stderr, "kiln-run: rank %d (pid %d) %s; stopping the other ranks\n", c.rank,
                     static_cast<int>(c.pid), describe_status(status).c_str());
        signal_all(children, SIGTERM);
        begin_stop();
      }
    }
    if (!exited.empty()) continue;
    if (!killed && Clock::now() > kill_at) {
      std::fprintf(stderr,
                   "kiln-run: ranks still running %.0f s after being told to stop: "
                   "killing them\n",
                   grace_seconds);
      signal_all(children, SIGKILL);
      killed = true;  // once: the loop then only reaps them
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (result == kiln::apps::kExitInterrupted)
    std::fprintf(stderr, "kiln-run: the job was interrupted; every rank has stopped\n");
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::apps::run_main("kiln-run", [&] { return run(argc, argv); });
}
