// The nccl backend: collectives on CUDA tensors through NCCL, on a stream of the group's own.
//
// Each rank drives one GPU (the current device when the group is made: init_process_group makes
// it cuda:LOCAL_RANK). Rank 0 makes the NCCL unique id and publishes it in the store; every rank
// then joins the communicator. An operation is ordered after the work already queued on the
// caller's current stream by an event the NCCL stream waits for, and its Work's wait() makes the
// caller's current stream wait for the operation in turn (the host does not block, as in
// PyTorch). The Work keeps the operation's tensors alive until then, so the caching allocator
// cannot hand their memory to other work while NCCL still reads or writes it; a caller must wait
// on every Work before freeing its tensors' storage.
//
// A watchdog thread checks the communicator every 100 ms: an asynchronous NCCL error, or an
// operation unfinished after the group's timeout, aborts the communicator (freeing the kernels
// that wait in it) and makes every later call and wait on this rank throw a DistError saying why.
//
// Sends and receives between begin_point_to_point and end_point_to_point form one NCCL group, so
// a ring step's receive and send run together.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
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
#include "kiln/core/profiler.h"
#include "kiln/core/tensor.h"
#include "kiln/dist/backends.h"
#include "kiln/ops/factories.h"

namespace kiln::dist {

namespace {

#define KILN_NCCL_CHECK(call, what)                                                             \
  do {                                                                                          \
    ncclResult_t kiln_nccl_ = (call);                                                           \
    if (kiln_nccl_ != ncclSuccess)                                                              \
      throw DistError(std::string(what) + ": NCCL error " + std::to_string(kiln_nccl_) + " (" + \
                      ncclGetErrorString(kiln_nccl_) + ") in " #call);                          \
  } while (0)

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

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::average:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

// What the watchdog found: empty while the communicator is healthy, else why it was aborted.
// Every later operation, and every wait, throws it.
struct Health {
  std::mutex mutex;
  std::string failure;
  void check() {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failure.empty()) throw DistError(failure);
  }
};

// One operation on the NCCL stream (or a group of them): done when its event has happened.
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<cuda::Event> done, std::vector<Tensor> keep,
           std::shared_ptr<Health> health, int device)
      : done_(std::move(done)),
        keep_(std::move(keep)),
        health_(std::move(health)),
        device_(device) {}
  void wait() override {
    health_->check();
    done_->wait(cuda::current_stream(device_));
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
};

class NcclProcessGroup : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, const std::string& name,
                   const ProcessGroupOptions& options)
      : ProcessGroup(rank, size, options.timeout),
        name_(name),
        store_(std::move(store)),
        device_(cuda::current_device()),
        stream_(cuda::Stream::create(device_)) {
    ncclUniqueId id;
    const std::string key = "nccl/" + name + "/id";
    if (rank == 0) {
      KILN_NCCL_CHECK(ncclGetUniqueId(&id), describe("making the unique id"));
      const char* bytes = reinterpret_cast<const char*>(&id);
      store_->set(key, std::vector<char>(bytes, bytes + sizeof id));
    } else {
      const std::vector<char> bytes = store_->get(key);
      KILN_CHECK(bytes.size() == sizeof id, DistError,
                 "{}: the unique id in the store has {} bytes", describe("joining"), bytes.size());
      std::memcpy(&id, bytes.data(), sizeof id);
    }
    cuda::DeviceGuard guard(device_);
    KILN_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank), describe("joining the communicator"));
    watchdog_ = std::thread([this] { run_watchdog(); });
  }

  ~NcclProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      stopping_ = true;
    }
    watch_cv_.notify_all();
    watchdog_.join();
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }

  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op) override {
    const std::string what = describe("all_reduce of " + kiln::describe(tensor));
    check_tensor(tensor, what);
    profiler::OpScope event("dist::all_reduce", {&tensor}, bytes_of(tensor));
    return run({tensor}, [&](cudaStream_t s) {
      KILN_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                    nccl_type(tensor.dtype(), what), nccl_op(op), comm_, s),
                      what);
    });
  }

  std::shared_ptr<Work> broadcast_async(const Tensor& tensor, int root) override {
    const std::string what = describe("broadcast of " + kiln::describe(tensor));
    check_tensor(tensor, what);
    profiler::OpScope event("dist::broadcast", {&tensor}, bytes_of(tensor));
    KILN_CHECK(root >= 0 && root < size(), ValueError, "{}: the root must be a rank below {}", what,
               size());
    return run({tensor}, [&](cudaStream_t s) {
      KILN_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                    nccl_type(tensor.dtype(), what), root, comm_, s),
                      what);
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
    return run(keep, [&](cudaStream_t s) {
      KILN_NCCL_CHECK(ncclAllGather(input.data_ptr(), flat.data_ptr(), input.numel(),
                                    nccl_type(input.dtype(), what), comm_, s),
                      what);
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
    profiler::OpScope event("dist::reduce_scatter", {&output}, bytes_of(output) * size());
    const Tensor flat = empty({size() * output.numel()}, output.dtype(), output.device());
    std::vector<Tensor> keep = inputs;
    keep.push_back(output);
    keep.push_back(flat);
    return run(keep, [&](cudaStream_t s) {
      const size_t bytes = output.numel() * dtype_size(output.dtype());
      for (int r = 0; r < size(); ++r)
        KILN_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(flat.data_ptr()) + r * bytes,
                                        inputs[r].data_ptr(), bytes, cudaMemcpyDeviceToDevice, s));
      KILN_NCCL_CHECK(ncclReduceScatter(flat.data_ptr(), output.data_ptr(), output.numel(),
                                        nccl_type(output.dtype(), what), nccl_op(op), comm_, s),
                      what);
    });
  }

  // An all-reduce of one element, then the host waits for it: every rank has reached this point.
  std::shared_ptr<Work> barrier_async() override {
    profiler::OpScope event("dist::barrier", Device::cuda(device_), 0);
    const Tensor one = zeros({1}, DType::f32, Device::cuda(device_));
    auto work = all_reduce_async(one, ReduceOp::sum);
    stream_.synchronize();
    return work;
  }

  std::shared_ptr<Work> send_async(const Tensor& tensor, int to, uint32_t) override {
    const std::string what =
        describe("send to rank " + std::to_string(to) + " of " + kiln::describe(tensor));
    check_tensor(tensor, what);
    return run({tensor}, [&](cudaStream_t s) {
      KILN_NCCL_CHECK(ncclSend(tensor.data_ptr(), tensor.numel(), nccl_type(tensor.dtype(), what),
                               to, comm_, s),
                      what);
    });
  }

  std::shared_ptr<Work> recv_async(const Tensor& tensor, int from, uint32_t) override {
    const std::string what =
        describe("recv from rank " + std::to_string(from) + " of " + kiln::describe(tensor));
    check_tensor(tensor, what);
    return run({tensor}, [&](cudaStream_t s) {
      KILN_NCCL_CHECK(ncclRecv(tensor.data_ptr(), tensor.numel(), nccl_type(tensor.dtype(), what),
                               from, comm_, s),
                      what);
    });
  }

  // Inside a group the operations only queue; the group's one event is recorded when it ends.
  void begin_point_to_point() override {
    if (group_depth_++ == 0) {
      order_after_caller();
      group_done_ = std::make_shared<cuda::Event>();
    }
    KILN_NCCL_CHECK(ncclGroupStart(), describe("starting a point-to-point group"));
  }
  void end_point_to_point() override {
    KILN_NCCL_CHECK(ncclGroupEnd(), describe("ending a point-to-point group"));
    if (--group_depth_ == 0) {
      group_done_->record(stream_);
      watch(group_done_);
      group_done_.reset();
    }
  }

 private:
  // Later work on the NCCL stream waits for what the caller has queued so far.
  void order_after_caller() {
    cuda::Event ready;
    ready.record(cuda::current_stream(device_));
    ready.wait(stream_);
  }

  // Queues `enqueue` on the NCCL stream, after the caller's current stream's work, and returns a
  // Work whose event follows it (the group's, inside a point-to-point group).
  template <class F>
  std::shared_ptr<Work> run(std::vector<Tensor> keep, F&& enqueue) {
    health_->check();
    cuda::DeviceGuard guard(device_);
    if (group_depth_ > 0) {
      enqueue(stream_.handle());
      return std::make_shared<NcclWork>(group_done_, std::move(keep), health_, device_);
    }
    order_after_caller();
    enqueue(stream_.handle());
    auto done = std::make_shared<cuda::Event>();
    done->record(stream_);
    watch(done);
    return std::make_shared<NcclWork>(std::move(done), std::move(keep), health_, device_);
  }

  void watch(const std::shared_ptr<cuda::Event>& done) {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    watched_.push_back({done, std::chrono::steady_clock::now()});
  }

  // Every 100 ms: an asynchronous NCCL error (a peer died, a network failure), or an operation
  // still unfinished after the group's timeout (a peer hangs), aborts the communicator, which
  // frees the kernels waiting in it, and makes every later call on this rank throw, naming why.
  void run_watchdog() {
    std::unique_lock<std::mutex> lock(watch_mutex_);
    while (!stopping_) {
      watch_cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (stopping_ || comm_ == nullptr) continue;
      std::string failure;
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess)
        failure = describe(std::string("NCCL reported an asynchronous error: ") +
                           ncclGetErrorString(async));
      const auto now = std::chrono::steady_clock::now();
      std::erase_if(watched_, [](const Watched& w) { return w.done->query(); });
      for (const Watched& w : watched_)
        if (failure.empty() && now - w.start > timeout())
          failure =
              describe("an operation did not finish within " + std::to_string(timeout().count()) +
                       " ms: a rank has hung or died; the communicator was aborted");
      if (failure.empty()) continue;
      ncclCommAbort(comm_);
      comm_ = nullptr;
      watched_.clear();
      std::lock_guard<std::mutex> health_lock(health_->mutex);
      health_->failure = failure;
    }
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
    KILN_CHECK(t.is_contiguous(), ValueError, "{}: expected a contiguous tensor", what);
  }

  void check_parts(const std::vector<Tensor>& parts, const Tensor& like,
                   const std::string& what) const {
    KILN_CHECK(static_cast<int>(parts.size()) == size(), ValueError,
               "{}: expected one tensor per rank ({}), got {}", what, size(), parts.size());
    for (const Tensor& p : parts) {
      check_tensor(p, what);
      KILN_CHECK(p.shape() == like.shape() && p.dtype() == like.dtype(), ValueError,
                 "{}: each part must be {}, got {}", what, kiln::describe(like), kiln::describe(p));
    }
  }

  std::string name_;
  std::shared_ptr<Store> store_;
  int device_;
  cuda::Stream stream_;
  ncclComm_t comm_ = nullptr;
  int group_depth_ = 0;
  std::shared_ptr<cuda::Event> group_done_;

  struct Watched {
    std::shared_ptr<cuda::Event> done;
    std::chrono::steady_clock::time_point start;
  };
  std::shared_ptr<Health> health_ = std::make_shared<Health>();
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  std::vector<Watched> watched_;
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
