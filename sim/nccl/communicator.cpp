#include "kiln/sim/nccl/communicator.h"

#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/sim/nccl/reduce.h"
#include "kiln/sim/nccl/socket.h"

namespace kiln::sim::nccl {

namespace {

enum FrameKind : std::uint32_t { kSend = 1, kAck = 2, kCollective = 3, kBye = 4 };

// What a rank sends a rank that connects to it (or it connects to) in the mesh.
struct Introduction {
  std::uint64_t token;
  std::int32_t rank;
};

// How long a non-blocking communicator's call waits for its work before answering ncclInProgress.
constexpr auto kNonBlockingGrace = std::chrono::milliseconds(10);

const char* call_name(OpKind kind) {
  switch (kind) {
    case OpKind::send:
      return "ncclSend";
    case OpKind::recv:
      return "ncclRecv";
    case OpKind::all_reduce:
      return "ncclAllReduce";
    case OpKind::broadcast:
      return "ncclBroadcast";
    case OpKind::all_gather:
      return "ncclAllGather";
    case OpKind::reduce_scatter:
      return "ncclReduceScatter";
  }
  return "an unknown call";
}

bool is_collective(OpKind kind) {
  return kind != OpKind::send && kind != OpKind::recv;
}

bool reduces(OpKind kind) {
  return kind == OpKind::all_reduce || kind == OpKind::reduce_scatter;
}

}  // namespace

std::string describe(const Op& op) {
  const std::size_t bytes = op.count * type_size(op.type);
  std::string text = std::string(call_name(op.kind)) + " of " + std::to_string(op.count) + " " +
                     type_name(op.type) + " (" + std::to_string(bytes) + " bytes";
  if (op.kind == OpKind::send) text += ", to rank " + std::to_string(op.peer);
  if (op.kind == OpKind::recv) text += ", from rank " + std::to_string(op.peer);
  if (op.kind == OpKind::broadcast) text += ", root " + std::to_string(op.peer);
  if (reduces(op.kind)) text += ", " + reduction_name(op.reduction);
  return text + ")";
}

Communicator::Communicator(int nranks, int rank, int device, bool blocking, RendezvousAddress root)
    : nranks_(nranks),
      rank_(rank),
      device_(device),
      blocking_(blocking),
      root_(root),
      peers_(static_cast<std::size_t>(nranks)) {
  worker_ = std::thread([this] { run_worker(); });
}

Communicator::~Communicator() {
  if (worker_.joinable()) abort();
}

std::string Communicator::where() const {
  return "kiln-sim NCCL, rank " + std::to_string(rank_) + " of " + std::to_string(nranks_) + ": ";
}

ncclResult_t Communicator::fail(ncclResult_t error, const std::string& why) {
  if (error_ == ncclSuccess) {
    error_ = error;
    error_text_ = where() + why;
  }
  changed_.notify_all();
  return error;
}

bool Communicator::track(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) {
    close_socket(fd);
    return false;
  }
  fds_.push_back(fd);
  return true;
}

std::shared_ptr<Task> Communicator::submit(std::vector<Op> ops, bool finalize) {
  auto task = std::make_shared<Task>();
  task->ops = std::move(ops);
  task->finalize = finalize;
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_ || stopping_) {
    task->done = true;
    task->result = ncclInvalidUsage;
    return task;
  }
  queue_.push_back(task);
  ++pending_;
  changed_.notify_all();
  return task;
}

ncclResult_t Communicator::wait(const Task& task) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto over = [&] { return task.done || aborted_; };
  if (blocking_)
    changed_.wait(lock, over);
  else
    changed_.wait_for(lock, kNonBlockingGrace, over);
  if (task.done) return task.result;
  return aborted_ ? ncclSystemError : ncclInProgress;
}

ncclResult_t Communicator::wait_joined() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto over = [&] { return joined_ || aborted_; };
  if (blocking_)
    changed_.wait(lock, over);
  else
    changed_.wait_for(lock, kNonBlockingGrace, over);
  if (joined_) return join_result_;
  return aborted_ ? ncclSystemError : ncclInProgress;
}

ncclResult_t Communicator::async_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_ != ncclSuccess) return error_;
  if (aborted_) return ncclSystemError;
  if (!blocking_ && (!joined_ || pending_ > 0)) return ncclInProgress;
  return ncclSuccess;
}

std::string Communicator::last_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_text_;
}

void Communicator::abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
    for (int fd : fds_) shut_down(fd);
    changed_.notify_all();
  }
  // The worker first: once it has ended, no reader starts.
  if (worker_.joinable()) worker_.join();
  for (Peer& peer : peers_)
    if (peer.reader.joinable()) peer.reader.join();
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : fds_) close_socket(fd);
  fds_.clear();
}

ncclResult_t Communicator::destroy() {
  ncclResult_t result = ncclSuccess;
  bool finalize;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finalize = !finalized_ && !aborted_ && error_ == ncclSuccess && join_result_ == ncclSuccess;
  }
  if (finalize) {
    const std::shared_ptr<Task> task = submit({}, true);
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return task->done || aborted_; });
    result = task->result;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int fd : fds_) shut_down(fd);
  }
  for (Peer& peer : peers_)
    if (peer.reader.joinable()) peer.reader.join();
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : fds_) close_socket(fd);
  fds_.clear();
  return result;
}

void Communicator::run_worker() {
  const ncclResult_t joined = join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    joined_ = true;
    join_result_ = joined;
    changed_.notify_all();
  }
  for (;;) {
    std::shared_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || aborted_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = queue_.front();
      queue_.pop_front();
    }
    execute(*task);
  }
}

ncclResult_t Communicator::join() {
  const auto failed = [&](ncclResult_t error, const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    return aborted_ ? ncclSystemError : fail(error, why);
  };
  const Listener own = listen_loopback(nranks_);
  if (own.fd < 0) return failed(ncclSystemError, "no loopback socket to listen on");
  if (!track(own.fd)) return ncclSystemError;
  const int root = connect_loopback(root_.port);
  if (root < 0)
    return failed(ncclSystemError, "the rendezvous at 127.0.0.1:" + std::to_string(root_.port) +
                                       " cannot be reached (has the process that called "
                                       "ncclGetUniqueId ended?)");
  if (!track(root)) return ncclSystemError;
  const Hello hello{root_.token, nranks_, rank_, own.port};
  RootAnswer answer{};
  std::vector<std::uint16_t> ports(static_cast<std::size_t>(nranks_));
  if (!write_all(root, &hello, sizeof hello) || !read_all(root, &answer, sizeof answer))
    return failed(ncclSystemError, "the rendezvous closed its connection before every rank came");
  if (answer.ok == 0)
    return failed(ncclInvalidUsage,
                  "the ranks joining the communicator disagree on their number, or two of them "
                  "claimed one rank");
  if (!read_all(root, ports.data(), ports.size() * sizeof(std::uint16_t)))
    return failed(ncclSystemError, "the rendezvous closed its connection before every rank came");
  // Each rank connects to the ranks below it and accepts the ranks above it: one connection per
  // pair, made without a cycle of waits.
  for (int peer = 0; peer < rank_; ++peer) {
    const int fd = connect_loopback(ports[static_cast<std::size_t>(peer)]);
    if (fd < 0)
      return failed(ncclSystemError, "rank " + std::to_string(peer) + " cannot be reached");
    if (!track(fd)) return ncclSystemError;
    const Introduction me{root_.token, rank_};
    if (!write_all(fd, &me, sizeof me))
      return failed(ncclRemoteError, "rank " + std::to_string(peer) + " closed its connection");
    peers_[static_cast<std::size_t>(peer)].fd = fd;
  }
  for (int accepted = rank_ + 1; accepted < nranks_; ++accepted) {
    const int fd = accept_connection(own.fd);
    if (fd < 0) return failed(ncclSystemError, "a rank above this one did not connect");
    if (!track(fd)) return ncclSystemError;
    Introduction them{};
    if (!read_all(fd, &them, sizeof them) || them.token != root_.token || them.rank <= rank_ ||
        them.rank >= nranks_ || peers_[static_cast<std::size_t>(them.rank)].fd >= 0)
      return failed(ncclSystemError, "a connection that is not a rank of this communicator came");
    peers_[static_cast<std::size_t>(them.rank)].fd = fd;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return ncclSystemError;
  for (int peer = 0; peer < nranks_; ++peer)
    if (peer != rank_)
      peers_[static_cast<std::size_t>(peer)].reader =
          std::thread([this, peer] { read_frames(peer); });
  return ncclSuccess;
}

void Communicator::read_frames(int peer) {
  const int fd = peers_[static_cast<std::size_t>(peer)].fd;
  for (;;) {
    Frame frame{};
    if (!read_all(fd, &frame.header, sizeof frame.header)) break;
    const bool has_payload = frame.header.kind == kSend || frame.header.kind == kCollective;
    if (has_payload) {
      frame.payload.resize(frame.header.bytes);
      if (!read_all(fd, frame.payload.data(), frame.payload.size())) break;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    Peer& from = peers_[static_cast<std::size_t>(peer)];
    switch (frame.header.kind) {
      case kSend:
        from.messages.push_back(std::move(frame));
        break;
      case kAck:
        from.acks.push_back(std::move(frame));
        break;
      case kCollective:
        from.collectives.push_back(std::move(frame));
        break;
      default:
        from.finalized = true;
        break;
    }
    changed_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  peers_[static_cast<std::size_t>(peer)].gone = true;
  // While a task runs, the loss is its error only if it waits for something the peer never sent
  // (run_ops): what came before the end is used first, so a mismatch the peer saw and aborted
  // over is reported here as the mismatch, not as the abort.
  if (pending_ == 0) report_lost_peer();
  changed_.notify_all();
}

bool Communicator::report_lost_peer() {
  if (aborted_ || stopping_) return false;
  for (int peer = 0; peer < nranks_; ++peer) {
    const Peer& p = peers_[static_cast<std::size_t>(peer)];
    if (p.gone && !p.finalized) {
      fail(ncclRemoteError, "rank " + std::to_string(peer) +
                                "'s connection ended before it finalized: it aborted its "
                                "communicator, or its process ended");
      return true;
    }
  }
  return false;
}

bool Communicator::write_frame(int peer, const Header& header, const void* payload) {
  const bool has_payload = header.kind == kSend || header.kind == kCollective;
  if (peer == rank_) {  // a rank's message to itself is filed as the reader would file it
    Frame frame{header, {}};
    if (has_payload && header.bytes > 0)
      frame.payload.assign(static_cast<const char*>(payload),
                           static_cast<const char*>(payload) + header.bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    Peer& self = peers_[static_cast<std::size_t>(rank_)];
    (header.kind == kSend ? self.messages : self.acks).push_back(std::move(frame));
    changed_.notify_all();
    return true;
  }
  const int fd = peers_[static_cast<std::size_t>(peer)].fd;
  if (!write_all(fd, &header, sizeof header)) return false;
  return !has_payload || header.bytes == 0 || write_all(fd, payload, header.bytes);
}

void Communicator::execute(Task& task) {
  ncclResult_t result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    result = aborted_ ? ncclSystemError : error_;
  }
  if (result == ncclSuccess) result = task.finalize ? run_finalize() : run_ops(task.ops);
  std::lock_guard<std::mutex> lock(mutex_);
  report_lost_peer();
  task.done = true;
  task.result = result;
  --pending_;
  changed_.notify_all();
}

Communicator::Header Communicator::collective_header(const Op& op, std::uint64_t sequence) const {
  Header header{};
  header.kind = kCollective;
  header.sequence = sequence;
  header.call[0] = static_cast<std::int32_t>(op.kind);
  header.call[1] = static_cast<std::int32_t>(op.type);
  header.call[2] = reduces(op.kind) ? static_cast<std::int32_t>(op.reduction) : 0;
  header.call[3] = op.kind == OpKind::broadcast ? op.peer : 0;
  header.count = op.count;
  return header;
}

const char* Communicator::collective_part(const Op& op, int peer, std::size_t* bytes) const {
  const std::size_t size = op.count * type_size(op.type);
  const char* send = static_cast<const char*>(op.send_buffer);
  *bytes = size;
  switch (op.kind) {
    case OpKind::broadcast:
      if (rank_ != op.peer) *bytes = 0;
      return send;
    case OpKind::reduce_scatter:
      return send + static_cast<std::size_t>(peer) * size;
    default:
      return send;
  }
}

ncclResult_t Communicator::run_ops(std::vector<Op>& ops) {
  // Everything this rank sends goes out first, so the group's operations progress together: a
  // ring step's send never waits behind its receive.
  std::vector<std::uint64_t> sequence(ops.size(), 0);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    bool sent = true;
    int to = op.peer;
    if (op.kind == OpKind::send) {
      Header header{};
      header.kind = kSend;
      header.bytes = op.count * type_size(op.type);
      sent = write_frame(op.peer, header, op.send_buffer);
    } else if (is_collective(op.kind)) {
      sequence[i] = collectives_++;
      for (to = 0; to < nranks_; ++to) {
        if (to == rank_) continue;
        Header header = collective_header(op, sequence[i]);
        const char* part = collective_part(op, to, &header.bytes);
        sent = write_frame(to, header, part);
        if (!sent) break;
      }
    }
    if (!sent) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (aborted_) return ncclSystemError;
      return fail(ncclRemoteError, describe(op) + ": rank " + std::to_string(to) +
                                       "'s connection ended: it aborted its communicator, or "
                                       "its process ended");
    }
  }
  std::vector<bool> done(ops.size(), false);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (aborted_) return ncclSystemError;
    if (error_ != ncclSuccess) return error_;
    std::vector<std::pair<int, Header>> acks;
    std::string mismatch;
    bool collective_waits = false;  // a later collective waits behind an earlier one
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (done[i]) continue;
      const Op& op = ops[i];
      Peer& peer = peers_[static_cast<std::size_t>(op.peer)];
      const std::size_t bytes = op.count * type_size(op.type);
      if (op.kind == OpKind::send && !peer.acks.empty()) {
        const Header ack = peer.acks.front().header;
        peer.acks.pop_front();
        if (ack.sizes_agree == 0 && mismatch.empty())
          mismatch = describe(op) + " was paired with rank " + std::to_string(op.peer) +
                     "'s ncclRecv of " + std::to_string(ack.bytes) +
                     " bytes (sends and receives pair per peer in posting order, whatever their "
                     "sizes; the sizes must agree)";
        done[i] = true;
      } else if (op.kind == OpKind::recv && !peer.messages.empty()) {
        const Frame message = std::move(peer.messages.front());
        peer.messages.pop_front();
        Header ack{};
        ack.kind = kAck;
        ack.bytes = bytes;
        ack.sizes_agree = message.header.bytes == bytes ? 1 : 0;
        if (ack.sizes_agree != 0 && bytes > 0)
          std::memcpy(op.recv_buffer, message.payload.data(), bytes);
        if (ack.sizes_agree == 0 && mismatch.empty())
          mismatch = describe(op) + " was paired with rank " + std::to_string(op.peer) +
                     "'s ncclSend of " + std::to_string(message.header.bytes) +
                     " bytes (sends and receives pair per peer in posting order, whatever their "
                     "sizes; the sizes must agree)";
        acks.emplace_back(op.peer, ack);
        done[i] = true;
      } else if (is_collective(op.kind) && !collective_waits) {
        done[i] = try_collective(op, sequence[i]);
        collective_waits = !done[i];
        if (error_ != ncclSuccess) return error_;
      }
    }
    if (!acks.empty()) {
      lock.unlock();
      for (const auto& [peer, ack] : acks) write_frame(peer, ack, nullptr);
      lock.lock();
    }
    if (!mismatch.empty()) return fail(ncclInvalidUsage, mismatch);
    bool all_done = true;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (done[i]) continue;
      all_done = false;
      const Op& op = ops[i];
      // A peer that has finalized sends nothing more: what waits for it never completes.
      for (int p = 0; p < nranks_; ++p) {
        const Peer& peer = peers_[static_cast<std::size_t>(p)];
        const bool awaited = is_collective(op.kind) ? p != rank_ : p == op.peer;
        const bool empty = op.kind == OpKind::send   ? peer.acks.empty()
                           : op.kind == OpKind::recv ? peer.messages.empty()
                                                     : peer.collectives.empty();
        if (awaited && peer.finalized && empty)
          return fail(ncclInvalidUsage, describe(op) + " waits for rank " + std::to_string(p) +
                                            ", which has finalized its communicator");
        if (awaited && peer.gone && empty)
          return fail(ncclRemoteError,
                      describe(op) + " waits for rank " + std::to_string(p) + ", but rank " +
                          std::to_string(p) +
                          "'s connection ended: it aborted its communicator, or its process "
                          "ended");
      }
    }
    if (all_done) return ncclSuccess;
    if (acks.empty()) changed_.wait(lock);
  }
}

// Says bye to every peer, then waits for every peer's bye (or the end of its connection): after
// both, nothing more crosses the pair's connection, and closing it loses nothing.
ncclResult_t Communicator::run_finalize() {
  for (int peer = 0; peer < nranks_; ++peer) {
    if (peer == rank_) continue;
    Header bye{};
    bye.kind = kBye;
    write_frame(peer, bye, nullptr);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] {
    if (aborted_) return true;
    for (int peer = 0; peer < nranks_; ++peer) {
      const Peer& p = peers_[static_cast<std::size_t>(peer)];
      if (peer != rank_ && !p.finalized && !p.gone) return false;
    }
    return true;
  });
  if (aborted_) return ncclSystemError;
  finalized_ = true;
  report_lost_peer();
  return error_;
}

bool Communicator::try_collective(const Op& op, std::uint64_t sequence) {
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_ && peers_[static_cast<std::size_t>(p)].collectives.empty()) return false;
  const Header mine = collective_header(op, sequence);
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    const Header& theirs = peers_[static_cast<std::size_t>(p)].collectives.front().header;
    if (theirs.sequence == mine.sequence && theirs.count == mine.count &&
        std::memcmp(theirs.call, mine.call, sizeof mine.call) == 0)
      continue;
    const Op called{static_cast<OpKind>(theirs.call[0]),
                    nullptr,
                    nullptr,
                    theirs.count,
                    static_cast<ncclDataType_t>(theirs.call[1]),
                    static_cast<ncclRedOp_t>(theirs.call[2]),
                    theirs.call[3]};
    fail(ncclInvalidUsage, "collective #" + std::to_string(sequence) + ": this rank called " +
                               describe(op) + ", rank " + std::to_string(p) + " called " +
                               describe(called) +
                               " (every rank must call the same collectives, with the same "
                               "counts and types, in the same order)");
    return false;
  }
  std::vector<std::vector<char>> parts(static_cast<std::size_t>(nranks_));
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    parts[static_cast<std::size_t>(p)] = std::move(peer.collectives.front().payload);
    peer.collectives.pop_front();
  }
  const std::size_t bytes = op.count * type_size(op.type);
  const char* send = static_cast<const char*>(op.send_buffer);
  char* recv = static_cast<char*>(op.recv_buffer);
  // Rank r's contribution: this rank's own from its buffer, the others' as they came.
  const auto contribution = [&](int r) -> const char* {
    if (r != rank_) return parts[static_cast<std::size_t>(r)].data();
    std::size_t own_bytes = 0;
    return collective_part(op, rank_, &own_bytes);
  };
  switch (op.kind) {
    case OpKind::all_reduce:
    case OpKind::reduce_scatter: {
      // Every rank reduces in rank order, so every rank holds the same bits.
      std::vector<char> sum(contribution(0), contribution(0) + bytes);
      for (int r = 1; r < nranks_; ++r)
        reduce_into(sum.data(), contribution(r), op.count, op.type, op.reduction);
      if (op.reduction == ncclAvg) divide_by_ranks(sum.data(), op.count, op.type, nranks_);
      if (bytes > 0) std::memcpy(recv, sum.data(), bytes);
      break;
    }
    case OpKind::broadcast:
      if (rank_ != op.peer && bytes > 0)
        std::memcpy(recv, parts[static_cast<std::size_t>(op.peer)].data(), bytes);
      else if (rank_ == op.peer && recv != send && bytes > 0)
        std::memmove(recv, send, bytes);
      break;
    case OpKind::all_gather:
      for (int r = 0; r < nranks_; ++r)
        if (bytes > 0)
          std::memmove(recv + static_cast<std::size_t>(r) * bytes, contribution(r), bytes);
      break;
    default:
      break;
  }
  return true;
}

}  // namespace kiln::sim::nccl
