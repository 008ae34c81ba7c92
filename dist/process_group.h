// Process groups: the ranks of a distributed job and the collectives they run together, as
// torch.distributed's. Two backends on real engines: "gloo" for CPU tensors (Debian's Gloo, over
// TCP) and "nccl" for CUDA tensors (NCCL, on a stream of its own). The environment says where this
// process stands (dist/env.h: kiln-run, torchrun, mpirun or srun), so one call sets a job up:
//
//   kiln::dist::init_process_group("gloo");   // or "nccl"; from RANK, WORLD_SIZE, MASTER_ADDR...
//   kiln::dist::all_reduce(grad);             // sum over every rank, in place
//
// Every collective runs on every rank with tensors of one shape and dtype, in the same order on
// every rank. Each has an async form returning a Work to wait on; a collective that fails (a rank
// died, or hung past the timeout) throws DistError naming this rank and the collective.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/dist/env.h"
#include "kiln/dist/store.h"

namespace kiln::dist {

enum class ReduceOp { sum, average, max };

// A collective or a send/receive in flight.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until it is done (on a GPU: until the current stream is ordered after it), rethrowing
  // its error as DistError.
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

struct ProcessGroupOptions {
  // How long any one collective (and the rendezvous) may take before every rank gives up with a
  // DistError: a rank that died or hangs then stops the others instead of hanging them forever.
  // The error names the ranks that did not answer (dist/heartbeat.h). For the default group,
  // the environment variable KILN_DIST_TIMEOUT (seconds) replaces the default 10 minutes when a
  // program leaves it at that default: a launcher or a user bounds any program's waits.
  std::chrono::milliseconds timeout = kDefaultTimeout;
  static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(10);
  // gloo: the address the other ranks reach this one at (a name or a numeric address; Gloo's
  // device is bound on it). GLOO_SOCKET_IFNAME, a network interface as in PyTorch, comes first.
  // Empty: the address of this machine that routes to the master (the machine serving the
  // store), found from the store's connection; 127.0.0.1 when that is loopback and every rank
  // runs on this machine (`single_machine`, which init_process_group sets from the environment);
  // on the master's machine of a job across machines whose master name resolves to loopback
  // there, the address the other machines reached the store at. In a job across machines each
  // rank says on stderr which address it listens on and why.
  std::string gloo_hostname;
  bool single_machine = true;
  // nccl: what a rank does when its watchdog finds the communicator failed (an NCCL error, or an
  // operation unfinished after the timeout). true, as PyTorch's default: it says why on stderr
  // and ends the process. The host does not block on NCCL, so once the communicator is aborted,
  // work waited on before may hand partial sums to the caller's stream; an optimizer step or a
  // checkpoint taken from them would be garbage. false: the communicator is aborted, the process
  // goes on, and every later collective, wait and is_completed of the group throws DistError
  // with the reason (results of work waited on before the abort are the caller's to distrust).
  bool end_process_on_failure = true;
  // nccl: Work::wait() blocks the host until the operation has finished, as PyTorch's
  // TORCH_NCCL_BLOCKING_WAIT=1, and a failure (an NCCL error, or the operation outliving the
  // timeout) is thrown by that wait, in the caller's thread, as a DistError: the process goes on
  // (end_process_on_failure counts as false), and what a wait returned is complete. By default a
  // wait only orders the caller's stream after the operation. For the default group,
  // KILN_NCCL_BLOCKING_WAIT=1 in the environment sets it. gloo: a wait always blocks the host.
  bool blocking_wait = false;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;
  std::chrono::milliseconds timeout() const { return timeout_; }

  // `tensor` (contiguous, on the backend's device) becomes the reduction over every rank's.
  virtual std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op) = 0;
  // Every rank's `tensor` becomes rank `root`'s.
  virtual std::shared_ptr<Work> broadcast_async(const Tensor& tensor, int root) = 0;
  // outputs[r] (one per rank, each of input's shape) becomes rank r's input.
  virtual std::shared_ptr<Work> all_gather_async(const std::vector<Tensor>& outputs,
                                                 const Tensor& input) = 0;
  // `output` becomes the reduction over ranks of inputs[rank()] (one input per rank).
  virtual std::shared_ptr<Work> reduce_scatter_async(const Tensor& output,
                                                     const std::vector<Tensor>& inputs,
                                                     ReduceOp op) = 0;
  virtual std::shared_ptr<Work> barrier_async() = 0;
  // Point to point, for kiln's ring all-reduce (dist/ring.h): posted at once, not queued behind
  // the collectives; `tag` tells apart the messages between one pair of ranks.
  virtual std::shared_ptr<Work> send_async(const Tensor& tensor, int to, uint32_t tag) = 0;
  virtual std::shared_ptr<Work> recv_async(const Tensor& tensor, int from, uint32_t tag) = 0;

  // Brackets a batch of sends and receives that must be in flight together: NCCL runs each on the
  // stream in turn, so a ring step whose receive waits for a neighbour that is itself waiting to
  // receive would deadlock unless the batch is one group (ncclGroupStart/End). Gloo posts each at
  // once and needs nothing.
  virtual void begin_point_to_point() {}
  virtual void end_point_to_point() {}

  // `count` consecutive point-to-point tags no other caller on this rank gets: ranks that reserve
  // in the same order get the same tags, so one operation's messages never meet another's.
  uint32_t reserve_tags(uint32_t count) {
    const uint32_t first = next_tag_;
    next_tag_ += count;
    return first;
  }

  // The blocking forms.
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum) {
    all_reduce_async(tensor, op)->wait();
  }
  void broadcast(const Tensor& tensor, int root = 0) { broadcast_async(tensor, root)->wait(); }
  void all_gather(const std::vector<Tensor>& outputs, const Tensor& input) {
    all_gather_async(outputs, input)->wait();
  }
  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                      ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(output, inputs, op)->wait();
  }
  void barrier() { barrier_async()->wait(); }

 protected:
  ProcessGroup(int rank, int size, std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), timeout_(timeout) {}

 private:
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  uint32_t next_tag_ = 0;
};

// The store of a job from its launch environment: rank 0 serves a TcpStore on MASTER_PORT, or the
// ranks share a file store (dist/env.h).
std::shared_ptr<Store> store_from_env(const LaunchEnv& env, std::chrono::milliseconds timeout);

// A group of every rank of the job over `store`, under `name` (groups of one job need distinct
// names). backend: "gloo" or "nccl" (NCCL when kiln was built with it; each rank uses GPU
// local_rank).
std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend,
                                                std::shared_ptr<Store> store, int rank, int size,
                                                const std::string& name,
                                                ProcessGroupOptions options = {});

// ---- the default group, as torch.distributed's ----

// Reads the environment (dist/env.h), meets the other ranks and makes the default group. A single
// process without a launcher is a group of one. For "nccl" it first makes the rank's GPU current
// (local_device).
void init_process_group(const std::string& backend, ProcessGroupOptions options = {});
// KILN_DIST_TIMEOUT in seconds, or nullopt when unset; ValueError naming it when it is not a
// positive number.
std::optional<std::chrono::milliseconds> timeout_from_env();
// KILN_NCCL_BLOCKING_WAIT: true for 1, false for 0 or unset; ValueError naming it otherwise.
bool blocking_wait_from_env();
// The GPU of a rank among `device_count` visible ones: device 0 when the process sees one GPU
// (launchers that bind a GPU per process: SLURM's --gpus-per-task=1, MPI wrappers or Kubernetes
// setting CUDA_VISIBLE_DEVICES), else cuda:LOCAL_RANK as torchrun's users set it, wrapped around
// the visible devices when there are fewer (each process then sees its own set).
int local_device(const LaunchEnv& env, int device_count);
bool is_initialized();
void destroy_process_group();
ProcessGroup& default_group();                      // DistError when init_process_group has not run
std::shared_ptr<ProcessGroup> default_group_ptr();  // the same, shared (DDP keeps it)
int get_rank();                                     // 0 without a group
int get_world_size();                               // 1 without a group
int get_local_rank();                               // from the environment, 0 without a launcher

void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum);
void broadcast(const Tensor& tensor, int root = 0);
void all_gather(const std::vector<Tensor>& outputs, const Tensor& input);
void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                    ReduceOp op = ReduceOp::sum);
void barrier();

}  // namespace kiln::dist
