// A fake network of ranks in one process that records every send and receive each rank posts and
// delivers them as NCCL does: between one ordered pair of ranks, the k-th receive posted takes the
// k-th send posted, whatever the tags, and a 0-byte message is a message like any other. Sends
// are eager (the data is copied when the send is posted), so a send without its receive shows in
// the record instead of hanging; a receive waits for its send, and fails, waking every rank, when
// the two differ in size or no send comes within the timeout.
//
// RecordingGroup is one rank's ProcessGroup over it, with point to point only (what the ring
// all-reduce uses); it also counts the point-to-point batches left open.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/dist/process_group.h"

namespace kiln::testing {

struct PostedMessage {
  bool send = false;  // else a receive
  int peer = 0;
  int64_t bytes = 0;
};

class RecordingNetwork {
 public:
  explicit RecordingNetwork(int ranks, std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : ranks_(ranks),
        timeout_(timeout),
        posted_(static_cast<size_t>(ranks)),
        in_flight_(static_cast<size_t>(ranks * ranks)),
        receives_posted_(static_cast<size_t>(ranks * ranks), 0) {}

  int ranks() const { return ranks_; }

  void send(int from, int to, const Tensor& data) {
    std::lock_guard<std::mutex> lock(mutex_);
    posted_[from].push_back({true, to, bytes_of(data)});
    in_flight_[pair(from, to)].push_back(data.clone());
    arrived_.notify_all();
  }

  // Posts a receive into `target` and returns the function that waits for it and fills it.
  std::function<void()> recv(int to, int from, const Tensor& target) {
    std::lock_guard<std::mutex> lock(mutex_);
    posted_[to].push_back({false, from, bytes_of(target)});
    const size_t index = receives_posted_[pair(from, to)]++;
    return [this, to, from, index, target] { deliver(to, from, index, target); };
  }

  // What rank `rank` posted, in order.
  std::vector<PostedMessage> posted(int rank) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return posted_[rank];
  }

  // The sizes of the messages `from` sent to `to` (or `to` posted receives for from `from`), in
  // posting order.
  std::vector<int64_t> sizes(int from, int to, bool sends) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int64_t> out;
    for (const PostedMessage& m : posted_[sends ? from : to])
      if (m.send == sends && m.peer == (sends ? to : from)) out.push_back(m.bytes);
    return out;
  }

  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = why;
    arrived_.notify_all();
  }

 private:
  static int64_t bytes_of(const Tensor& t) {
    return t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  }
  size_t pair(int from, int to) const { return static_cast<size_t>(from * ranks_ + to); }

  void deliver(int to, int from, size_t index, Tensor target) {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::vector<Tensor>& sent = in_flight_[pair(from, to)];
    const bool arrived =
        arrived_.wait_for(lock, timeout_, [&] { return sent.size() > index || !failure_.empty(); });
    const std::string where = "rank " + std::to_string(to) + "'s receive #" +
                              std::to_string(index) + " from rank " + std::to_string(from);
    if (!failure_.empty()) throw DistError("another rank failed: " + failure_);
    if (!arrived) {
      failure_ = where + ": no matching send was posted";
      arrived_.notify_all();
      throw DistError(failure_);
    }
    const Tensor& data = sent[index];
    if (bytes_of(data) != bytes_of(target)) {
      failure_ = where + " takes " + std::to_string(bytes_of(target)) +
                 " bytes, the send it pairs with has " + std::to_string(bytes_of(data));
      arrived_.notify_all();
      throw DistError(failure_);
    }
    if (target.numel() > 0) target.copy_(data);
  }

  const int ranks_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<std::vector<PostedMessage>> posted_;  // per rank, in posting order
  std::vector<std::vector<Tensor>> in_flight_;      // per (from, to): every send's data
  std::vector<size_t> receives_posted_;             // per (from, to)
  std::string failure_;
};

class RecordingGroup : public dist::ProcessGroup {
 public:
  RecordingGroup(RecordingNetwork& network, int rank)
      : ProcessGroup(rank, network.ranks(), std::chrono::seconds(20)), network_(network) {}

  std::string backend() const override { return "recording"; }

  std::shared_ptr<dist::Work> send_async(const Tensor& tensor, int to, uint32_t) override {
    if (fail_sends) throw DistError("recording: this send fails, as the test asked");
    network_.send(rank(), to, tensor);
    return std::make_shared<Done>(nullptr);
  }
  std::shared_ptr<dist::Work> recv_async(const Tensor& tensor, int from, uint32_t) override {
    return std::make_shared<Done>(network_.recv(rank(), from, tensor));
  }
  void begin_point_to_point() override { ++open_batches; }
  void end_point_to_point() override { --open_batches; }

  std::shared_ptr<dist::Work> all_reduce_async(const Tensor&, dist::ReduceOp) override {
    return unsupported("all_reduce");
  }
  std::shared_ptr<dist::Work> broadcast_async(const Tensor&, int) override {
    return unsupported("broadcast");
  }
  std::shared_ptr<dist::Work> all_gather_async(const std::vector<Tensor>&, const Tensor&) override {
    return unsupported("all_gather");
  }
  std::shared_ptr<dist::Work> reduce_scatter_async(const Tensor&, const std::vector<Tensor>&,
                                                   dist::ReduceOp) override {
    return unsupported("reduce_scatter");
  }
  std::shared_ptr<dist::Work> barrier_async() override { return unsupported("barrier"); }

  int open_batches = 0;     // begin_point_to_point calls not yet ended
  bool fail_sends = false;  // every send_async throws

 private:
  class Done : public dist::Work {
   public:
    explicit Done(std::function<void()> finish) : finish_(std::move(finish)) {}
    void wait() override {
      if (finish_) finish_();
      finish_ = nullptr;
    }
    bool is_completed() override { return finish_ == nullptr; }

   private:
    std::function<void()> finish_;
  };

  static std::shared_ptr<dist::Work> unsupported(const std::string& what) {
    throw NotImplementedError("recording group: " + what + " is not simulated");
  }

  RecordingNetwork& network_;
};

}  // namespace kiln::testing
