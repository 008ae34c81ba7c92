// The nccl backend: collectives on CUDA tensors through NCCL, on a stream of the group's own.
//
// Each rank drives one GPU (the current device when the group is made: init_process_group makes
// it the rank's GPU). Rank 0 makes the NCCL unique id and publishes it in the store; every rank
// then joins the communicator. An operation is ordered after the work already queued on the
// caller's current stream by an event the NCCL stream waits for, and its Work's wait() makes the
// caller's current stream wait for the operation in turn (the host does not block, as in
// PyTorch; with ProcessGroupOptions::blocking_wait it does, and a failure is thrown there). The
// operation's tensors are marked as used on the NCCL stream (cuda::record_stream), so the caching
// allocator does not hand their memory to other work while NCCL still reads or writes it, even when
// the Work is dropped without a wait.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0), so that no NCCL call, joining
// included, can hang the host past the group's timeout: a call may answer ncclInProgress, and
// the caller then polls ncclCommGetAsyncError until it settles, as NCCL requires before the next
// call on the communicator.
//
// A watchdog thread checks the communicator every 100 ms. An asynchronous NCCL error, a failed
// call, a CUDA error, or an operation unfinished after the group's timeout ends the process by
// default, saying why (ProcessGroupOptions::end_process_on_failure); else the watchdog aborts the
// communicator (freeing the kernels that wait in it), and every later call and wait on this rank
// throws a DistError saying why. The communicator is used under a mutex that the abort takes
// too, so no call ever reaches a communicator the watchdog has freed.
//
// Sends and receives between begin_point_to_point and end_point_to_point form one NCCL group, so
// a ring step's receive and send run together.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/memory_format.h"
#include "kiln/core/profiler.h"
#include "kiln/core/tensor.h"
#include "kiln/dist/backends.h"
#include "kiln/dist/heartbeat.h"
#include "kiln/ops/factories.h"

namespace kiln::dist {

namespace {

// NCCL's sentence about its last error (ncclGetLastError: which rank, which call), when it has
// one; read before the communicator is aborted.
std::string nccl_detail(ncclComm_t comm) {
  const char* text = ncclGetLastError(comm);
  return text != nullptr && *text != '\0' ? std::string(": ") + text : std::string();
}

std::string nccl_error(const std::string& what, ncclResult_t result, const char* call,
                       const std::string& detail) {
  return what + ": NCCL error " + std::to_string(result) + " (" + ncclGetErrorString(result) +
         ") in " + call + detail;
}

// What a collective's profiler event carries.
int64_t bytes_of(const Tensor& t) {
  return t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
}

ncclDataType_t nccl_type(DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i64:
      return ncclInt64;
    case DType::i32:
      return ncclInt32;
    case DType::u8:
    case DType::boolean:
      return ncclUint8;
    default:
      throw DTypeError(what + ": NCCL has no type for " + dtype_name(dtype));
  }
}

// The ops as the gloo backend and the ring compute them: a bool sum is an "or" (a sum of bytes
// would write 2..n into a bool, so NCCL takes the max, as PyTorch maps it), and an average needs
// a floating dtype (ncclAvg of integers truncates on every rank), refused as the others refuse it.
ncclRedOp_t nccl_op(ReduceOp op, DType dtype, const std::string& what) {
  KILN_CHECK(op != ReduceOp::average || is_floating(dtype), DTypeError,
             "{}: an average needs a floating-point tensor, got {} (sum, then divide as you "
             "choose)",
             what, dtype_name(dtype));
  switch (op) {
    case ReduceOp::sum:
      return dtype == DType::boolean ? ncclMax : ncclSum;
    case ReduceOp::average:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

// What went wrong with the communicator: empty while it is healthy, else why it failed. Every
// later operation, and every wait, throws it.
class Health {
 public:
  void check() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.empty()) throw DistError(failure_);
  }
  std::string failure() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }
  void fail(const std::string& why) {  // the first reason stays
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = why;
  }

 private:
  mutable std::mutex mutex_;
  std::string failure_;
};

// One operation on the NCCL stream (or a group of them): done when its event has happened.
// With ProcessGroupOptions::blocking_wait, wait() polls the event on the host instead, until it
// has happened or the watchdog has failed the group (an NCCL error, or the timeout): the abort
// lets hung kernels finish, so the failure is checked again once the event has happened.
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<cuda::Event> done, std::vector<Tensor> keep,
           std::shared_ptr<Health> health, int device, bool blocking)
      : done_(std::move(done)),
        keep_(std::move(keep)),
        health_(std::move(health)),
        device_(device),
        blocking_(blocking) {}
  void wait() override {
    health_->check();
    if (!blocking_) {
      done_->wait(cuda::current_stream(device_));
      return;
    }
    auto pause = std::chrono::microseconds(20);
    while (!done_->query()) {
      health_->check();
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(2 * pause, std::chrono::milliseconds(1));
    }
    health_->check();
  }
  bool is_completed() override {
    health_->check();
    return done_->query();
  }

 private:
  std::shared_ptr<cuda::Event> done_;
  std::vector<Tensor> keep_;
  std::shared_ptr<Health> health_;
  int device_;
  bool blocking_;
};

class NcclProcessGroup : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, const std::string& name,
                   const ProcessGroupOptions& options)
      : ProcessGroup(rank, size, options.timeout),
        name_(name),
        store_(std::move(store)),
        end_process_on_failure_(options.end_process_on_failure && !options.blocking_wait),
        blocking_wait_(options.blocking_wait),
        device_(cuda::current_device()),
        stream_(cuda::Stream::create(device_)) {
    ncclUniqueId id;
    const std::string key = "nccl/" + name + "/id";
    if (rank == 0) {
      const ncclResult_t made = ncclGetUniqueId(&id);
      if (made != ncclSuccess)
        throw DistError(nccl_error(describe("making the unique id"), made, "ncclGetUniqueId",
                                   nccl_detail(nullptr)));
      const char* bytes = reinterpret_cast<const char*>(&id);
      store_->set(key, std::vector<char>(bytes, bytes + sizeof id));
    } else {
      const std::vector<char> bytes = store_->get(key);
      KILN_CHECK(bytes.size() == sizeof id, DistError,
                 "{}: the unique id in the store has {} bytes", describe("joining"), bytes.size());
      std::memcpy(&id, bytes.data(), sizeof id);
    }
    if (size > 1)
      heartbeat_ = std::make_unique<Heartbeat>(store_, "heartbeat/" + name + "/", rank, size,
                                               Heartbeat::period_for(options.timeout));
    join(id);
    watchdog_ = std::thread([this] { run_watchdog(); });
  }

  ~NcclProcessGroup() override {
    // A group its caller left open (begin_point_to_point without its end) holds the
    // communicator's mutex, which the watchdog may be waiting for.
    if (group_lock_.owns_lock()) group_lock_.unlock();
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      stopping_ = true;
    }
    watch_cv_.notify_all();
    watchdog_.join();
    if (comm_ == nullptr) return;
    try {
      cuda::DeviceGuard guard(device_);
      // ncclCommDestroy waits for the communicator's pending work, for ever if a peer is gone:
      // it is for a clean end only (nothing pending, nothing failed, no group left open).
      bool clean = health_->failure().empty() && group_depth_ == 0;
      for (const Watched& w : watched_) clean = clean && w.done->query();
      if (clean && settle(ncclCommFinalize(comm_)) == ncclSuccess) {
        ncclCommDestroy(comm_);
        return;
      }
    } catch (const std::exception&) {  // a CUDA error: abort below
    }
    ncclCommAbort(comm_);
  }

  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op) override {
    const std::string what = describe("all_reduce of " + kiln::describe(tensor));
    check_tensor(tensor, what);
    const ncclRedOp_t nccl = nccl_op(op, tensor.dtype(), what);
    profiler::OpScope event("dist::all_reduce", {&tensor}, bytes_of(tensor));
    return run({tensor}, what, [&](cudaStream_t s) {
      call(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                         nccl_type(tensor.dtype(), what), nccl, comm_, s),
           what, "ncclAllReduce");
    });
  }

  std::shared_ptr<Work> broadcast_async(const Tensor& tensor, int root) override {
    const std::string what = describe("broadcast of " + kiln::describe(tensor));
    check_tensor(tensor, what);
    profiler::OpScope event("dist::broadcast", {&tensor}, bytes_of(tensor));
    KILN_CHECK(root >= 0 && root < size(), ValueError, "{}: the root must be a rank below {}", what,
               size());
    return run({tensor}, what, [&](cudaStream_t s) {
      call(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                         nccl_type(tensor.dtype(), what), root, comm_, s),
           what, "ncclBroadcast");
    });
  }

  std::shared_ptr<Work> all_gather_async(const std::vector<Tensor>& outputs,
                                         const Tensor& input) override {
    const std::string what = describe("all_gather of " + kiln::describe(input));
    check_tensor(input, what);
    check_parts(outputs, input, what);
    profiler::OpScope event("dist::all_gather", {&input}, bytes_of(input));
    const Tensor flat = empty({size() * input.numel()}, input.dtype(), input.device());
    std::vector<Tensor> keep = outputs;
    keep.push_back(input);
    keep.push_back(flat);
    return run(keep, what, [&](cudaStream_t s) {
      call(ncclAllGather(input.data_ptr(), flat.data_ptr(), input.numel(),
                         nccl_type(input.dtype(), what), comm_, s),
           what, "ncclAllGather");
      const size_t bytes = input.numel() * dtype_size(input.dtype());
      for (int r = 0; r < size(); ++r)
        KILN_CUDA_CHECK(cudaMemcpyAsync(outputs[r].data_ptr(),
                                        static_cast<char*>(flat.data_ptr()) + r * bytes, bytes,
                                        cudaMemcpyDeviceToDevice, s));
    });
  }

  std::shared_ptr<Work> reduce_scatter_async(const Tensor& output,
                                             const std::vector<Tensor>& inputs,
                                             ReduceOp op) override {
    const std::string what = describe("reduce_scatter into " + kiln::describe(output));
    check_tensor(output, what);
    check_parts(inputs, output, what);
    const ncclRedOp_t nccl = nccl_op(op, output.dtype(), what);
    profiler::OpScope event("dist::reduce_scatter", {&output}, bytes_of(output) * size());
    const Tensor flat = empty({size() * output.numel()}, output.dtype(), output.device());
    std::vector<Tensor> keep = inputs;
    keep.push_back(output);
    keep.push_back(flat);
    return run(keep, what, [&](cudaStream_t s) {
      const size_t bytes = output.numel() * dtype_size(output.dtype());
      for (int r = 0; r < size(); ++r)
        KILN_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(flat.data_ptr()) + r * bytes,
                                        inputs[r].data_ptr(), bytes, cudaMemcpyDeviceToDevice, s));
      call(ncclReduceScatter(flat.data_ptr(), output.data_ptr(), output.numel(),
                             nccl_type(output.dtype(), what), nccl, comm_, s),
           what, "ncclReduceScatter");
    });
  }

  // An all-reduce of one element, then the host waits for it: every rank has reached this point.
  std::shared_ptr<Work> barrier_async() override {
    profiler::OpScope event("dist::barrier", Device::cuda(device_), 0);
    const Tensor one = zeros({1}, DType::f32, Device::cuda(device_));
    auto work = all_reduce_async(one, ReduceOp::sum);
    stream_.synchronize();
    health_->check();  // the watchdog may have aborted the all-reduce while the host waited
    return work;
  }

  std::shared_ptr<Work> send_async(const Tensor& tensor, int to, uint32_t) override {
    const std::string what =
        describe("send to rank " + std::to_string(to) + " of " + kiln::describe(tensor));
    check_tensor(tensor, what);
    return run({tensor}, what, [&](cudaStream_t s) {
      call(ncclSend(tensor.data_ptr(), tensor.numel(), nccl_type(tensor.dtype(), what), to, comm_,
                    s),
           what, "ncclSend");
    });
  }

  std::shared_ptr<Work> recv_async(const Tensor& tensor, int from, uint32_t) override {
    const std::string what =
        describe("recv from rank " + std::to_string(from) + " of " + kiln::describe(tensor));
    check_tensor(tensor, what);
    return run({tensor}, what, [&](cudaStream_t s) {
      call(ncclRecv(tensor.data_ptr(), tensor.numel(), nccl_type(tensor.dtype(), what), from, comm_,
                    s),
           what, "ncclRecv");
    });
  }

  // Inside a group the operations only queue; the group's one event is recorded when it ends. The
  // communicator's mutex is held from the outermost begin to its end: the watchdog must not abort
  // the communicator under a group whose operations NCCL has queued but not yet launched.
  void begin_point_to_point() override {
    const std::string what = describe("starting a point-to-point group");
    if (group_depth_ > 0) {
      call(ncclGroupStart(), what, "ncclGroupStart");
      ++group_depth_;
      return;
    }
    std::unique_lock<std::mutex> lock(comm_mutex_);
    health_->check();
    cuda::DeviceGuard guard(device_);
    order_after_caller();
    call(ncclGroupStart(), what, "ncclGroupStart");
    group_done_ = std::make_shared<cuda::Event>();
    group_ops_ = 0;
    group_first_.clear();
    group_lock_ = std::move(lock);
    group_depth_ = 1;
  }

  void end_point_to_point() override {
    const std::string what = describe("ending a point-to-point group");
    KILN_CHECK(group_depth_ > 0, ValueError, "{}: no group was started", what);
    cuda::DeviceGuard guard(device_);
    const ncclResult_t ended = ncclGroupEnd();
    if (--group_depth_ > 0) {
      call(ended, what, "ncclGroupEnd");
      return;
    }
    std::unique_lock<std::mutex> lock = std::move(group_lock_);
    const std::shared_ptr<cuda::Event> done = std::move(group_done_);
    const std::string group =
        describe("a point-to-point group of " + std::to_string(group_ops_) + " operations") +
        (group_ops_ > 0 ? ", the first " + group_first_ : "");
    {
      InCall in_call(*this, group);
      call(ended, group, "ncclGroupEnd");
    }
    done->record(stream_);
    lock.unlock();
    watch(done, group);
  }

 private:
  // Joins the communicator, non-blocking, within the timeout: a rank that died between the store
  // exchange and this point would otherwise hang every other rank here for ever.
  void join(const ncclUniqueId& id) {
    cuda::DeviceGuard guard(device_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t started = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
    const ncclResult_t joined = comm_ != nullptr ? settle(started) : started;
    if (joined == ncclSuccess) return;
    const std::string detail = nccl_detail(comm_);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    if (joined == ncclInProgress)
      throw DistError(describe("joining the communicator did not finish within " +
                               std::to_string(timeout().count()) +
                               " ms: a rank has not joined (it died, or never started)"));
    throw DistError(
        nccl_error(describe("joining the communicator"), joined, "ncclCommInitRankConfig", detail));
  }

  // A non-blocking communicator answers ncclInProgress while a call still runs in NCCL's own
  // threads, and no other call may be made on it until ncclCommGetAsyncError says it is over.
  // Polls until then, or until the timeout: ncclInProgress is then the answer.
  ncclResult_t settle(ncclResult_t result) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    while (result == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
      const ncclResult_t query = ncclCommGetAsyncError(comm_, &result);
      if (query != ncclSuccess) result = query;
    }
    return result;
  }

  // Settles a call on the communicator (comm_mutex_ held) and throws if it failed. After any
  // error nothing can be assumed of the communicator's work (NCCL's documentation): the failure
  // is recorded, and the watchdog aborts the communicator as soon as this thread lets go of it.
  void call(ncclResult_t result, const std::string& what, const char* name) {
    result = settle(result);
    if (result == ncclSuccess) return;
    const std::string failure =
        result == ncclInProgress
            ? what + ": " + name + " did not finish within " + std::to_string(timeout().count()) +
                  " ms: a rank has hung or died; the communicator is aborted"
            : nccl_error(what, result, name, nccl_detail(comm_));
    // Which ranks did not answer (NCCL's own error names this rank's call).
    const std::string described =
        failure + (heartbeat_ ? heartbeat_->diagnose(heartbeat_->started()) : "");
    health_->fail(described);
    watch_cv_.notify_all();
    throw DistError(described);
  }

  // Later work on the NCCL stream waits for what the caller has queued so far.
  void order_after_caller() {
    cuda::Event ready;
    ready.record(cuda::current_stream(device_));
    ready.wait(stream_);
  }

  // Queues `enqueue` on the NCCL stream, after the caller's current stream's work, and returns a
  // Work whose event follows it (the group's, inside a point-to-point group).
  template <class F>
  std::shared_ptr<Work> run(std::vector<Tensor> keep, const std::string& what, F&& enqueue) {
    cuda::DeviceGuard guard(device_);
    std::unique_lock<std::mutex> lock(comm_mutex_, std::defer_lock);
    if (group_depth_ == 0) lock.lock();  // inside a group, the group holds it
    health_->check();
    if (heartbeat_) heartbeat_->start_collective();
    KILN_CHECK(comm_ != nullptr, DistError, "{}: the communicator was aborted", what);
    if (group_depth_ > 0) {
      if (group_ops_++ == 0) group_first_ = what.substr(describe("").size());
      enqueue(stream_.handle());
      used_on_nccl_stream(keep);
      return std::make_shared<NcclWork>(group_done_, std::move(keep), health_, device_,
                                        blocking_wait_);
    }
    order_after_caller();
    {
      InCall in_call(*this, what);
      enqueue(stream_.handle());
    }
    used_on_nccl_stream(keep);
    auto done = std::make_shared<cuda::Event>();
    done->record(stream_);
    lock.unlock();
    watch(done, what);
    return std::make_shared<NcclWork>(std::move(done), std::move(keep), health_, device_,
                                      blocking_wait_);
  }

  // Freed before the NCCL stream is done with them (a Work dropped unwaited, or waited on another
  // stream), the tensors' blocks must not go back to their own stream's pool at once.
  void used_on_nccl_stream(const std::vector<Tensor>& tensors) const {
    for (const Tensor& t : tensors)
      if (t.numel() > 0) cuda::record_stream(t, stream_);
  }

  void watch(const std::shared_ptr<cuda::Event>& done, const std::string& what) {
    const int64_t number = heartbeat_ ? heartbeat_->started() : 0;
    std::lock_guard<std::mutex> lock(watch_mutex_);
    watched_.push_back({done, std::chrono::steady_clock::now(), what, number});
  }

  // What the caller's thread is inside NCCL for (a call still settling), for the watchdog to name.
  class InCall {
   public:
    InCall(NcclProcessGroup& group, const std::string& what) : group_(group) {
      std::lock_guard<std::mutex> lock(group_.watch_mutex_);
      group_.in_call_ = what;
    }
    ~InCall() {
      std::lock_guard<std::mutex> lock(group_.watch_mutex_);
      group_.in_call_.clear();
    }
    InCall(const InCall&) = delete;
    InCall& operator=(const InCall&) = delete;

   private:
    NcclProcessGroup& group_;
  };

  // Every 100 ms, until the group is destroyed or something fails; then aborts the communicator.
  void run_watchdog() {
    std::string failure;
    try {
      // This thread queries and destroys events of device_: without a device of its own the
      // CUDA runtime would bind device 0's context, creating one on GPU 0 in every rank.
      cuda::set_device(device_);
      failure = watch_until_failure();
    } catch (const std::exception& e) {
      // A CUDA error (sticky: every later call on the device fails the same way), met by an event
      // query. Escaping this thread it would end the process in std::terminate, saying nothing.
      failure = describe(std::string("the watchdog met an error: ") + e.what());
    }
    if (!failure.empty()) abort_communicator(failure);
  }

  std::string watch_until_failure() {
    std::unique_lock<std::mutex> lock(watch_mutex_);
    while (!stopping_) {
      watch_cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (stopping_) break;
      std::string failure = find_failure();
      if (!failure.empty()) return failure;
    }
    return "";
  }

  // A call that failed on the user's thread, an asynchronous NCCL error (a peer died, a network
  // failure), or an operation still unfinished after the group's timeout (a peer hangs).
  // watch_mutex_ held. comm_ is read without comm_mutex_: only this thread changes it.
  std::string find_failure() {
    if (std::string failure = health_->failure(); !failure.empty()) return failure;
    ncclResult_t async = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm_, &async);
    if (query != ncclSuccess) async = query;
    std::erase_if(watched_, [](const Watched& w) { return w.done->query(); });
    // The operation the failure hit: the call in progress, else the oldest unfinished one.
    const std::string pending = !in_call_.empty()   ? in_call_
                                : !watched_.empty() ? watched_.front().what
                                                    : describe("no operation in progress");
    if (async != ncclSuccess && async != ncclInProgress)
      return pending + ": NCCL reported an asynchronous error: " + ncclGetErrorString(async) +
             nccl_detail(comm_) +
             (heartbeat_ ? heartbeat_->diagnose(watched_.empty() ? heartbeat_->started()
                                                                 : watched_.front().number)
                         : "");
    const auto now = std::chrono::steady_clock::now();
    for (const Watched& w : watched_)
      if (now - w.start > timeout())
        return w.what + ": did not finish within " + std::to_string(timeout().count()) +
               " ms: a rank has hung or died; the communicator was aborted" +
               (heartbeat_ ? heartbeat_->diagnose(w.number) : "");
    return "";
  }

  // The failure first, so that a caller racing the abort reads the reason rather than an NCCL
  // error from a dead communicator. Then, by default, the end of the process, before the abort:
  // the abort frees the hung kernels, and the caller's stream would run on with what they left
  // (an optimizer step, a checkpoint's copy) for as long as this thread took to exit. Else the
  // abort, under the communicator's mutex, so no call is inside NCCL with it (a non-blocking
  // communicator returns from every call within the timeout).
  void abort_communicator(const std::string& failure) {
    health_->fail(failure);
    if (end_process_on_failure_) {
      // The one place kiln ends a process itself: this thread cannot throw into the caller's.
      // _Exit skips the destructors, which could block on the dead communicator's peers; the
      // driver ends the process's kernels with its context.
      std::fprintf(stderr,
                   "kiln: %s\nkiln: ending the process (ProcessGroupOptions::"
                   "end_process_on_failure = false keeps it running, with every later collective "
                   "throwing)\n",
                   health_->failure().c_str());
      std::fflush(stderr);
      std::_Exit(EXIT_FAILURE);
    }
    {
      std::lock_guard<std::mutex> lock(comm_mutex_);
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    std::lock_guard<std::mutex> lock(watch_mutex_);
    watched_.clear();
  }

  std::string describe(const std::string& what) const {
    return "dist (nccl, group '" + name_ + "', rank " + std::to_string(rank()) + " of " +
           std::to_string(size()) + ", cuda:" + std::to_string(device_) + "): " + what;
  }

  void check_tensor(const Tensor& t, const std::string& what) const {
    KILN_CHECK(t.defined(), ValueError, "{}: expected a tensor, got an undefined one", what);
    KILN_CHECK(t.device().is_cuda() && t.device().index == device_, DeviceError,
               "{}: the nccl backend of this rank takes tensors on cuda:{}, got one on {}", what,
               device_, t.device().str());
    MemoryFormat format = MemoryFormat::contiguous;
    KILN_CHECK(dense_format(t, &format), ValueError,
               "{}: expected a tensor whose elements fill one block of memory (contiguous or "
               "channels-last); call contiguous() first",
               what);
  }

  void check_parts(const std::vector<Tensor>& parts, const Tensor& like,
                   const std::string& what) const {
    KILN_CHECK(static_cast<int>(parts.size()) == size(), ValueError,
               "{}: expected one tensor per rank ({}), got {}", what, size(), parts.size());
    for (const Tensor& p : parts) {
      check_tensor(p, what);
      // The parts are copied as bytes: each must hold its elements in the tensor's order.
      KILN_CHECK(p.dtype() == like.dtype() && same_dense_layout(p, like), ValueError,
                 "{}: each part must be {} {}, got {} {}", what, kiln::describe(like),
                 memory_format_name(like.suggest_memory_format()), kiln::describe(p),
                 memory_format_name(p.suggest_memory_format()));
    }
  }

  std::string name_;
  std::shared_ptr<Store> store_;
  bool end_process_on_failure_;
  bool blocking_wait_;
  int device_;
  cuda::Stream stream_;

  // Used by the caller's thread under comm_mutex_; the watchdog aborts and nulls it under the same.
  std::mutex comm_mutex_;
  ncclComm_t comm_ = nullptr;
  int group_depth_ = 0;
  std::unique_lock<std::mutex> group_lock_;  // comm_mutex_, while a point-to-point group is open
  std::shared_ptr<cuda::Event> group_done_;
  int group_ops_ = 0;        // the operations of the open point-to-point group
  std::string group_first_;  // and the first one, as its errors describe it

  struct Watched {
    std::shared_ptr<cuda::Event> done;
    std::chrono::steady_clock::time_point start;
    std::string what;  // the operation, as its errors describe it
    int64_t number;    // of this rank's collectives and point-to-point groups, from 1
  };
  std::unique_ptr<Heartbeat> heartbeat_;  // null in a group of one
  std::shared_ptr<Health> health_ = std::make_shared<Health>();
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  std::vector<Watched> watched_;
  std::string in_call_;  // watch_mutex_: what the caller's thread is settling in NCCL, if anything
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size,
                                              const std::string& name,
                                              const ProcessGroupOptions& options) {
  return std::make_shared<NcclProcessGroup>(std::move(store), rank, size, name, options);
}

}  // namespace kiln::dist
