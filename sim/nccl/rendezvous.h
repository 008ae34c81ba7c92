// The NCCL model's unique id and its rendezvous. ncclGetUniqueId starts a root in the calling
// process (rank 0's, in kiln): a thread listening on 127.0.0.1, whose port and a random token the
// id carries. Every rank connects to it and says which rank it is, how many ranks it expects and
// the port of its own listener; once all have come, the root answers each with every rank's port
// and ends. The ranks then connect to each other (communicator.cpp).
#pragma once

#include <nccl.h>

#include <cstdint>
#include <optional>

namespace kiln::sim::nccl {

struct RendezvousAddress {
  std::uint16_t port = 0;
  std::uint64_t token = 0;  // tells this communicator's connections from strays
};

// What a rank sends the root, and the root's answer's head (then `nranks` ports).
struct Hello {
  std::uint64_t token;
  std::int32_t nranks;
  std::int32_t rank;
  std::uint16_t port;
};
struct RootAnswer {
  std::int32_t ok;  // 0: the ranks disagreed on their number, or two claimed one rank
};

// Starts the root and writes its id; ncclSystemError when no socket could be made.
ncclResult_t start_root(ncclUniqueId* id);
// The address in an id ncclGetUniqueId made, or nothing for any other 128 bytes.
std::optional<RendezvousAddress> read_id(const ncclUniqueId& id);

}  // namespace kiln::sim::nccl
