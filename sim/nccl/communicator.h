// One rank's communicator in the NCCL model: a TCP connection to every other rank, a reader
// thread per connection that files what arrives, and a worker thread that joins the communicator
// and then runs its tasks one after another (the operations of one call, or of one group).
//
// Wire protocol, per pair of ranks: frames of a Header and its payload.
// - send: a point-to-point message. The receiver pairs it with its next receive from that rank,
//   whatever either's size, and answers with an ack saying whether the sizes agreed (the data is
//   copied only if they do). The send completes at the ack, so a send without its receive waits,
//   as NCCL's does.
// - coll: a rank's part of a collective, numbered in the communicator's order of collectives and
//   carrying what was called (collective, count, type, reduction, root). The collective completes
//   once every other rank's part of the same number has come; a part that describes another call
//   is an error on both ranks, never a result.
// - bye: the rank has finalized; nothing follows.
#pragma once

#include <nccl.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/sim/nccl/rendezvous.h"

namespace kiln::sim::nccl {

enum class OpKind : std::int32_t { send, recv, all_reduce, broadcast, all_gather, reduce_scatter };

// One NCCL call: `peer` is the send's or receive's peer, or the broadcast's root.
struct Op {
  OpKind kind;
  const void* send_buffer;
  void* recv_buffer;
  std::size_t count;
  ncclDataType_t type;
  ncclRedOp_t reduction;
  int peer;
};

std::string describe(const Op& op);

struct Task {
  std::vector<Op> ops;
  bool finalize = false;
  bool done = false;  // Communicator::mutex_ guards it and result
  ncclResult_t result = ncclSuccess;
};

class Communicator {
 public:
  Communicator(int nranks, int rank, int device, bool blocking, RendezvousAddress root);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int nranks() const { return nranks_; }
  int rank() const { return rank_; }
  int device() const { return device_; }
  bool blocking() const { return blocking_; }

  // Queues a task for the worker. The worker runs them in order, one at a time.
  std::shared_ptr<Task> submit(std::vector<Op> ops, bool finalize = false);
  // A blocking communicator waits until the task is done (or the communicator aborted); a
  // non-blocking one gives it a moment and answers ncclInProgress if it is still running.
  ncclResult_t wait(const Task& task);
  // Waits for the join, as wait() does for a task.
  ncclResult_t wait_joined();
  // The first error, else ncclInProgress while a non-blocking communicator's join or tasks run.
  ncclResult_t async_error();
  std::string last_error();
  // Ends every thread and connection; pending and later tasks fail. Peers see the connection end.
  void abort();
  // Finalizes (if it was not) and ends every thread and connection.
  ncclResult_t destroy();

 private:
  struct Header {
    std::uint32_t kind;
    std::uint32_t sizes_agree;  // an ack's answer
    std::uint64_t bytes;        // the payload's; an ack's: the receive's size
    std::uint64_t sequence;     // a collective's number
    std::int32_t call[4];       // a collective's OpKind, type, reduction, root
    std::uint64_t count;
  };
  struct Frame {
    Header header;
    std::vector<char> payload;
  };
  struct Peer {
    int fd = -1;
    std::thread reader;
    std::deque<Frame> messages, acks, collectives;
    bool finalized = false;  // its bye came
    bool gone = false;       // its connection ended
  };

  void run_worker();
  ncclResult_t join();
  bool track(int fd);  // false (and fd closed) when the communicator is already aborted
  void read_frames(int peer);
  void execute(Task& task);
  ncclResult_t run_ops(std::vector<Op>& ops);
  ncclResult_t run_finalize();
  bool write_frame(int peer, const Header& header, const void* payload);
  Header collective_header(const Op& op, std::uint64_t sequence) const;
  const char* collective_part(const Op& op, int peer, std::size_t* bytes) const;
  // With mutex_ held: files an error (the first stays) and wakes everyone.
  ncclResult_t fail(ncclResult_t error, const std::string& why);
  bool try_collective(const Op& op, std::uint64_t sequence);  // mutex_ held
  // With mutex_ held: a peer whose connection ended without its bye is the error; true if one.
  bool report_lost_peer();
  std::string where() const;

  const int nranks_;
  const int rank_;
  const int device_;
  const bool blocking_;
  const RendezvousAddress root_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Task>> queue_;
  std::size_t pending_ = 0;
  bool joined_ = false;
  ncclResult_t join_result_ = ncclInProgress;
  bool aborted_ = false;
  bool stopping_ = false;
  bool finalized_ = false;
  ncclResult_t error_ = ncclSuccess;
  std::string error_text_;
  std::vector<int> fds_;  // every socket, for abort to shut down
  std::vector<Peer> peers_;
  std::uint64_t collectives_ = 0;  // the worker's count of collectives posted
  std::thread worker_;
};

}  // namespace kiln::sim::nccl
