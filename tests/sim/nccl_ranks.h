// Runs a body as NCCL ranks, one forked process each, as kiln-run launches them: rank 0 makes the
// unique id (its process hosts the rendezvous) and hands it to the others through a pipe; each
// rank takes simulated device rank % devices. A rank's body answers an empty string when all was
// well, else what went wrong; it never touches Catch2 (a forked child must not report into the
// parent's run). The parent kills a rank still running at the deadline.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using RankBody = std::function<std::string(int rank, int nranks, const ncclUniqueId& id)>;

namespace nccl_ranks_detail {

inline std::string run_one(int rank, int nranks, int id_read, int id_write, const RankBody& body) {
  ncclUniqueId id{};
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) return "ncclGetUniqueId failed";
    for (int r = 1; r < nranks; ++r)
      if (write(id_write, &id, sizeof id) != static_cast<ssize_t>(sizeof id))
        return "cannot hand the unique id on";
  } else if (read(id_read, &id, sizeof id) != static_cast<ssize_t>(sizeof id)) {
    return "no unique id came from rank 0";
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || cudaSetDevice(rank % devices) != cudaSuccess)
    return "no simulated device";
  try {
    return body(rank, nranks, id);
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace nccl_ranks_detail

// "rank r: why" for each rank that failed, died or ran past `limit`; empty when every rank passed.
inline std::vector<std::string> run_ranks(int nranks, const RankBody& body,
                                          std::chrono::seconds limit = std::chrono::seconds(60)) {
  int id_pipe[2];
  if (pipe(id_pipe) != 0) return {"no pipe"};
  std::vector<pid_t> pids;
  std::vector<int> reports;
  for (int rank = 0; rank < nranks; ++rank) {
    int report[2];
    if (pipe(report) != 0) return {"no pipe"};
    const pid_t pid = fork();
    if (pid == 0) {
      close(report[0]);
      const std::string why =
          nccl_ranks_detail::run_one(rank, nranks, id_pipe[0], id_pipe[1], body);
      if (!why.empty() && write(report[1], why.data(), why.size()) < 0) _exit(2);
      _exit(why.empty() ? 0 : 1);
    }
    close(report[1]);
    pids.push_back(pid);
    reports.push_back(report[0]);
  }
  close(id_pipe[0]);
  close(id_pipe[1]);
  std::vector<std::string> failures;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int rank = 0; rank < nranks; ++rank) {
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(pids[rank], &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (done == 0) {
      kill(pids[rank], SIGKILL);
      waitpid(pids[rank], &status, 0);
      failures.push_back("rank " + std::to_string(rank) + ": still running at the deadline");
      close(reports[rank]);
      continue;
    }
    std::string why;
    char buffer[4096];
    ssize_t got;
    while ((got = read(reports[rank], buffer, sizeof buffer)) > 0) why.append(buffer, got);
    close(reports[rank]);
    if (WIFSIGNALED(status)) why = "ended by signal " + std::to_string(WTERMSIG(status));
    if (!why.empty() || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failures.push_back("rank " + std::to_string(rank) + ": " +
                         (why.empty() ? "exited with " + std::to_string(status) : why));
  }
  return failures;
}
