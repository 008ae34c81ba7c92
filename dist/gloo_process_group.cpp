// The gloo backend: collectives on CPU tensors over Gloo's TCP transport (Debian's libgloo).
//
// The ranks meet through kiln's Store (each publishes its TCP address and connects to every other:
// a full mesh of pairs). Collectives run one at a time, in the order they were called, on a worker
// thread of the group, so the async forms return at once and the caller computes meanwhile (DDP's
// buckets all-reduce while backward goes on). Each collective gets the next tag, the same on
// every rank because every rank calls them in the same order. Sends and receives are posted on
// the caller's thread at once, under tags of their own (reserve_tags), so a ring can interleave
// them with its reductions.
//
// Gloo reduces with a function over raw buffers; kiln gives one per dtype and op, adding 16-bit
// floats in f32 and rounding once per pair, as NCCL does. An average is a sum divided by the world
// size afterwards, as PyTorch's gloo backend does it.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/core/memory_format.h"
#include "kiln/core/profiler.h"
#include "kiln/core/tensor.h"
#include "kiln/dist/backends.h"
#include "kiln/dist/heartbeat.h"
#include "kiln/dist/net.h"
#include "kiln/dist/store.h"
#include "kiln/dist/work.h"

namespace kiln::dist {

namespace {

using std::chrono::milliseconds;

size_t bytes_of(const Tensor& t) {
  return static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
}

// kiln's Store as Gloo's rendezvous store, every key under the group's name.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<dist::Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string& key) override { return store_->get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override { store_->wait(prefixed(keys)); }
  void wait(const std::vector<std::string>& keys, const milliseconds&) override {
    store_->wait(prefixed(keys));  // kiln's store applies its own timeout
  }

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const std::string& k : keys) out.push_back(prefix_ + k);
    return out;
  }
  std::shared_ptr<dist::Store> store_;
  std::string prefix_;
};

// c[i] = op(a[i], b[i]) over n elements of T, in acc_type_t<T> (f32 for the 16-bit floats).
template <class T, ReduceOp Op>
void reduce_buffers(void* c, const void* a, const void* b, size_t n) {
  using Acc = acc_type_t<T>;
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) {
    const Acc u = static_cast<Acc>(x[i]), v = static_cast<Acc>(y[i]);
    if constexpr (Op == ReduceOp::max) {
      // NaN wins, as torch.maximum's: a rank's NaN gradient is not hidden by the others.
      out[i] = static_cast<T>(u != u || u > v ? u : v);
    } else {
      out[i] = static_cast<T>(u + v);
    }
  }
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

ReduceFn reduce_fn(DType dtype, ReduceOp op) {
  return visit_dtype(dtype, [&](auto tag) -> ReduceFn {
    using T = typename decltype(tag)::type;
    if (op == ReduceOp::max) return &reduce_buffers<T, ReduceOp::max>;
    return &reduce_buffers<T, ReduceOp::sum>;
  });
}

void divide_in_place(const Tensor& t, int size) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_type_t<T>;
    T* p = static_cast<T*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i)
      p[i] = static_cast<T>(static_cast<Acc>(p[i]) / static_cast<Acc>(size));
  });
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::average:
      return "average";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

// Where a rank listens for the other ranks' pairs, and the words that say which and why.
struct Endpoint {
  gloo::transport::tcp::attr attr;
  std::string said;  // "10.0.0.2 (interface eth0), the address that routes to the master (...)"
};

std::string with_interface(const std::string& address) {
  const std::string iface = interface_of(address);
  return iface.empty() ? address : address + " (interface " + iface + ")";
}

// The first that applies: GLOO_SOCKET_IFNAME (an interface, as in PyTorch);
// ProcessGroupOptions::gloo_hostname; the address of this machine that routes to the master (the
// store's server), unless it is loopback; loopback when every rank runs on this machine; on the
// master's machine when the route to the master is loopback (its name resolves to 127.0.1.1),
// the address the other machines reached the store at; else this machine's host name.
Endpoint choose_endpoint(dist::Store& store, const ProcessGroupOptions& options) {
  Endpoint e;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface) {
    e.attr.iface = iface;
    const std::string address = address_of_interface(iface);
    e.said = "interface " + std::string(iface) + " (" +
             (address.empty() ? std::string("no address found") : address) +
             "), from GLOO_SOCKET_IFNAME";
    return e;
  }
  if (!options.gloo_hostname.empty()) {
    e.attr.hostname = options.gloo_hostname;
    e.said = with_interface(options.gloo_hostname) + ", from ProcessGroupOptions::gloo_hostname";
    return e;
  }
  const std::string route = store.local_address();
  if (!route.empty() && !is_loopback_address(route)) {
    e.attr.hostname = route;
    e.said = with_interface(route) + ", the address that routes to the master (" + store.where() +
             "); GLOO_SOCKET_IFNAME=<interface> chooses another";
    return e;
  }
  if (options.single_machine) {
    e.attr.hostname = "127.0.0.1";
    e.said = "127.0.0.1, every rank being on this machine";
    return e;
  }
  if (!route.empty()) {
    std::vector<char> seen;
    try {
      seen = store.get(kStoreReachedAtKey);
    } catch (const DistError& error) {
      throw DistError(
          "dist: on the master's machine the route to the master (" + store.where() +
          ") is loopback (" + route +
          "), and no rank from another machine reached the store to show the address they see: "
          "set GLOO_SOCKET_IFNAME to the interface the other machines reach (" +
          error.what() + ")");
    }
    e.attr.hostname.assign(seen.begin(), seen.end());
    e.said = with_interface(e.attr.hostname) +
             ", the address the other machines reached the master at (the route to it from here "
             "is loopback, " +
             route + "); GLOO_SOCKET_IFNAME=<interface> chooses another";
    return e;
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  e.attr.hostname = host;
  e.said = std::string(host) + ", this machine's host name (" + store.where() +
           " has no route to compare); GLOO_SOCKET_IFNAME=<interface> chooses another";
  return e;
}

// Point-to-point slots apart from the collectives' (Gloo's prefixes 0x01 to 0x08 in the top byte).
constexpr uint64_t kPointToPointSlot = uint64_t{0x40} << 56;

class GlooProcessGroup : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<dist::Store> store, int rank, int size, const std::string& name,
                   const ProcessGroupOptions& options)
      : ProcessGroup(rank, size, options.timeout), name_(name), store_(std::move(store)) {
    const Endpoint endpoint = choose_endpoint(*store_, options);
    // In a job across machines each rank says where the others reach it, and why there: the
    // line to read when ranks cannot connect.
    if (!options.single_machine)
      std::fprintf(stderr, "kiln: %s\n", describe("listening on " + endpoint.said).c_str());
    try {
      // Before connecting: once every rank has connected, every rank's first beat is in the store.
      if (size > 1)
        heartbeat_ = std::make_unique<Heartbeat>(store_, "heartbeat/" + name + "/", rank, size,
                                                 Heartbeat::period_for(options.timeout));
      auto device = gloo::transport::tcp::CreateDevice(endpoint.attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context_->setTimeout(options.timeout);
      GlooStore gloo_store(store_, "gloo/" + name + "/");
      context_->connectFullMesh(gloo_store, device);
      // A rank leaves the constructor only when every rank has connected: otherwise one that is
      // done early and destroys its group (a job with nothing to reduce) closes pairs that a
      // slower rank is still connecting. Tag 0 is this barrier's; collectives count from 1.
      gloo::BarrierOptions connected(context_);
      connected.setTag(0);
      connected.setTimeout(options.timeout);
      gloo::barrier(connected);
    } catch (const DistError&) {
      throw;
    } catch (const std::exception& e) {
      throw DistError(
          describe("connecting to the other ranks (this one listening on " + endpoint.said + ")") +
          ": " + e.what());
    }
    worker_ = std::thread([this] { run_worker(); });
  }

  ~GlooProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    worker_.join();
  }

  std::string backend() const override { return "gloo"; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op) override {
    const std::string what = "all_reduce(" + std::string(op_name(op)) + ") of " + describe(tensor);
    check_tensor(tensor, what);
    check_op(op, tensor, what);
    return enqueue(what, "dist::all_reduce", bytes_of(tensor), [this, tensor, op](uint32_t tag) {
      if (tensor.numel() > 0) {
        gloo::AllreduceOptions opts(context_);
        all_reduce_elements(opts, tensor);
        opts.setReduceFunction(reduce_fn(tensor.dtype(), op));
        opts.setTag(tag);
        opts.setTimeout(timeout());
        gloo::allreduce(opts);
      }
      if (op == ReduceOp::average) divide_in_place(tensor, size());
    });
  }

  std::shared_ptr<Work> broadcast_async(const Tensor& tensor, int root) override {
    const std::string what =
        "broadcast from rank " + std::to_string(root) + " of " + describe(tensor);
    check_tensor(tensor, what);
    KILN_CHECK(root >= 0 && root < size(), ValueError, "{}: the root must be a rank below {}",
               describe(what), size());
    return enqueue(what, "dist::broadcast", bytes_of(tensor), [this, tensor, root](uint32_t tag) {
      if (tensor.numel() == 0) return;
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(tensor.data_ptr()), bytes_of(tensor));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout());
      gloo::broadcast(opts);
    });
  }

  std::shared_ptr<Work> all_gather_async(const std::vector<Tensor>& outputs,
                                         const Tensor& input) override {
    const std::string what = "all_gather of " + describe(input);
    check_tensor(input, what);
    check_parts(outputs, input, what, "outputs");
    return enqueue(what, "dist::all_gather", bytes_of(input), [this, outputs, input](uint32_t tag) {
      const size_t bytes = bytes_of(input);
      if (bytes == 0) return;
      std::vector<uint8_t> gathered(bytes * size());
      gloo::AllgatherOptions opts(context_);
      opts.setInput(static_cast<uint8_t*>(input.data_ptr()), bytes);
      opts.setOutput(gathered.data(), gathered.size());
      opts.setTag(tag);
      opts.setTimeout(timeout());
      gloo::allgather(opts);
      for (int r = 0; r < size(); ++r)
        std::memcpy(outputs[r].data_ptr(), gathered.data() + r * bytes, bytes);
    });
  }

  // Through an all-reduce of every rank's inputs, keeping this rank's part: Gloo's own
  // reduce-scatter (halving-doubling) wants a world size that is a power of two.
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& output,
                                             const std::vector<Tensor>& inputs,
                                             ReduceOp op) override {
    const std::string what =
        "reduce_scatter(" + std::string(op_name(op)) + ") into " + describe(output);
    check_tensor(output, what);
    check_parts(inputs, output, what, "inputs");
    check_op(op, output, what);
    const size_t sent = bytes_of(output) * static_cast<size_t>(size());
    return enqueue(what, "dist::reduce_scatter", sent, [this, output, inputs, op](uint32_t tag) {
      const size_t bytes = bytes_of(output);
      if (bytes == 0) return;
      Tensor all = empty({static_cast<int64_t>(size()) * output.numel()}, output.dtype());
      for (int r = 0; r < size(); ++r)
        std::memcpy(static_cast<uint8_t*>(all.data_ptr()) + r * bytes, inputs[r].data_ptr(), bytes);
      gloo::AllreduceOptions opts(context_);
      all_reduce_elements(opts, all);
      opts.setReduceFunction(reduce_fn(output.dtype(), op));
      opts.setTag(tag);
      opts.setTimeout(timeout());
      gloo::allreduce(opts);
      std::memcpy(output.data_ptr(), static_cast<uint8_t*>(all.data_ptr()) + rank() * bytes, bytes);
      if (op == ReduceOp::average) divide_in_place(output, size());
    });
  }

  std::shared_ptr<Work> barrier_async() override {
    return enqueue("barrier", "dist::barrier", 0, [this](uint32_t tag) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(timeout());
      gloo::barrier(opts);
    });
  }

  std::shared_ptr<Work> send_async(const Tensor& tensor, int to, uint32_t tag) override {
    return point_to_point(tensor, to, tag, true);
  }
  std::shared_ptr<Work> recv_async(const Tensor& tensor, int from, uint32_t tag) override {
    return point_to_point(tensor, from, tag, false);
  }

 private:
  // A send or receive, posted now; its Work waits for the transfer.
  class PointToPointWork : public Work {
   public:
    PointToPointWork(std::unique_ptr<gloo::transport::UnboundBuffer> buffer, bool send,
                     milliseconds timeout, std::string what)
        : buffer_(std::move(buffer)), send_(send), timeout_(timeout), what_(std::move(what)) {}
    void wait() override {
      std::lock_guard<std::mutex> lock(mutex_);
      if (done_) return;
      try {
        const bool ok =
            !buffer_ || (send_ ? buffer_->waitSend(timeout_) : buffer_->waitRecv(timeout_));
        KILN_CHECK(ok, DistError, "{}: aborted", what_);
      } catch (const DistError&) {
        throw;
      } catch (const std::exception& e) {
        throw DistError(what_ + ": " + e.what());
      }
      done_ = true;
    }
    bool is_completed() override {
      std::lock_guard<std::mutex> lock(mutex_);
      return done_;
    }

   private:
    std::mutex mutex_;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
    bool send_;
    milliseconds timeout_;
    std::string what_;
    bool done_ = false;
  };

  std::shared_ptr<Work> point_to_point(const Tensor& tensor, int peer, uint32_t tag, bool send) {
    const std::string what = std::string(send ? "send to" : "recv from") + " rank " +
                             std::to_string(peer) + " of " + describe(tensor);
    check_tensor(tensor, what);
    KILN_CHECK(peer >= 0 && peer < size() && peer != rank(), ValueError,
               "{}: the peer must be another rank below {}", describe(what), size());
    if (bytes_of(tensor) == 0)
      return std::make_shared<PointToPointWork>(nullptr, send, timeout(), describe(what));
    try {
      auto buffer = context_->createUnboundBuffer(tensor.data_ptr(), bytes_of(tensor));
      if (send)
        buffer->send(peer, kPointToPointSlot | tag);
      else
        buffer->recv(peer, kPointToPointSlot | tag);
      return std::make_shared<PointToPointWork>(std::move(buffer), send, timeout(), describe(what));
    } catch (const std::exception& e) {
      throw DistError(describe(what) + ": " + e.what());
    }
  }

  // Gloo's options count elements of the type they were given (bytes here); a reduction must see
  // elements of the dtype, so the element size and count are set from the tensor.
  static void all_reduce_elements(gloo::AllreduceOptions& opts, const Tensor& t) {
    visit_dtype(t.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      opts.setOutput(static_cast<T*>(t.data_ptr()), static_cast<size_t>(t.numel()));
    });
  }

  std::string describe(const std::string& what) const {
    return "dist (gloo, group '" + name_ + "', rank " + std::to_string(rank()) + " of " +
           std::to_string(size()) + "): " + what;
  }
  static std::string describe(const Tensor& t) { return kiln::describe(t); }

  void check_tensor(const Tensor& t, const std::string& what) const {
    KILN_CHECK(t.defined(), ValueError, "{}: expected a tensor, got an undefined one",
               describe(what));
    KILN_CHECK(t.device().is_cpu(), DeviceError,
               "{}: the gloo backend takes CPU tensors, got one on {} (use the nccl backend for "
               "CUDA tensors)",
               describe(what), t.device().str());
    MemoryFormat format = MemoryFormat::contiguous;
    KILN_CHECK(dense_format(t, &format), ValueError,
               "{}: expected a tensor whose elements fill one block of memory (contiguous or "
               "channels-last); call contiguous() first",
               describe(what));
  }

  // An average of integers would round toward zero on every rank: refused, as PyTorch's gloo does.
  void check_op(ReduceOp op, const Tensor& t, const std::string& what) const {
    KILN_CHECK(op != ReduceOp::average || is_floating(t.dtype()), DTypeError,
               "{}: an average needs a floating-point tensor, got {} (sum, then divide as you "
               "choose)",
               describe(what), dtype_name(t.dtype()));
  }

  void check_parts(const std::vector<Tensor>& parts, const Tensor& like, const std::string& what,
                   const char* role) const {
    KILN_CHECK(static_cast<int>(parts.size()) == size(), ValueError,
               "{}: expected one of the {} per rank ({}), got {}", describe(what), role, size(),
               parts.size());
    for (const Tensor& p : parts) {
      check_tensor(p, what);
      // The parts are copied as bytes: each must hold its elements in the tensor's order.
      KILN_CHECK(p.dtype() == like.dtype() && same_dense_layout(p, like), ValueError,
                 "{}: each of the {} must be {} {} like the tensor, got {} {}", describe(what),
                 role, kiln::describe(like), memory_format_name(like.suggest_memory_format()),
                 kiln::describe(p), memory_format_name(p.suggest_memory_format()));
    }
  }

  // `event` names the profiler event of the collective's run on the worker thread, carrying
  // `bytes` (this rank's input).
  std::shared_ptr<Work> enqueue(const std::string& what, const char* event, size_t bytes,
                                std::function<void(uint32_t)> run) {
    auto work = std::make_shared<FutureWork>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({describe(what), event, static_cast<int64_t>(bytes), std::move(run), work});
    }
    queue_cv_.notify_one();
    return work;
  }

  void run_worker() {
    uint32_t tag = 1;
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      const int64_t collective = heartbeat_ ? heartbeat_->start_collective() : 0;
      try {
        profiler::OpScope event(job.event, Device::cpu(), job.bytes);
        job.run(tag++);
        job.work->finish();
      } catch (const std::exception& e) {
        // Which ranks did not answer: Gloo's own message names only this rank's wait.
        const std::string who = heartbeat_ ? heartbeat_->diagnose(collective) : "";
        job.work->finish(
            std::make_exception_ptr(DistError(job.what + " failed: " + e.what() + who)));
      }
    }
  }

  struct Job {
    std::string what;
    const char* event = nullptr;
    int64_t bytes = 0;
    std::function<void(uint32_t)> run;
    std::shared_ptr<FutureWork> work;
  };

  std::string name_;
  // Kept for the group's life: on rank 0 it is the server the other ranks may still be meeting
  // through after this rank has connected.
  std::shared_ptr<dist::Store> store_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::unique_ptr<Heartbeat> heartbeat_;  // null in a group of one
  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              const std::string& name,
                                              const ProcessGroupOptions& options) {
  return std::make_shared<GlooProcessGroup>(std::move(store), rank, size, name, options);
}

}  // namespace kiln::dist
