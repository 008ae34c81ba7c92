#include "kiln/sim/nccl/rendezvous.h"

#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "kiln/sim/nccl/socket.h"

namespace kiln::sim::nccl {

namespace {

constexpr char kMagic[16] = "kiln-ncclsim-v1";

// Accepts ranks until all have come, then answers them and ends. A connection that does not
// carry the token is dropped; ranks that disagree all get a refusal.
void serve_root(Listener listener, std::uint64_t token) {
  std::vector<int> connections;
  std::vector<Hello> hellos;
  bool consistent = true;
  int expected = -1;
  while (expected < 0 || static_cast<int>(hellos.size()) < expected) {
    const int fd = accept_connection(listener.fd);
    if (fd < 0) break;
    Hello hello{};
    if (!read_all(fd, &hello, sizeof hello) || hello.token != token) {
      close_socket(fd);
      continue;
    }
    if (expected < 0) expected = hello.nranks;
    for (const Hello& seen : hellos) consistent = consistent && seen.rank != hello.rank;
    consistent = consistent && hello.nranks == expected && hello.rank >= 0 && hello.rank < expected;
    connections.push_back(fd);
    hellos.push_back(hello);
    if (!consistent) break;
  }
  close_socket(listener.fd);
  std::vector<std::uint16_t> ports(expected > 0 ? expected : 0);
  for (const Hello& hello : hellos)
    if (consistent) ports[hello.rank] = hello.port;
  const RootAnswer answer{consistent ? 1 : 0};
  for (int fd : connections) {
    write_all(fd, &answer, sizeof answer);
    if (consistent) write_all(fd, ports.data(), ports.size() * sizeof(std::uint16_t));
    close_socket(fd);
  }
}

}  // namespace

ncclResult_t start_root(ncclUniqueId* id) {
  const Listener listener = listen_loopback(64);
  if (listener.fd < 0) return ncclSystemError;
  std::random_device entropy;
  const std::uint64_t token = (std::uint64_t{entropy()} << 32) | entropy();
  std::memset(id, 0, sizeof *id);
  const RendezvousAddress address{listener.port, token};
  std::memcpy(id->internal, kMagic, sizeof kMagic);
  std::memcpy(id->internal + sizeof kMagic, &address, sizeof address);
  std::thread(serve_root, listener, token).detach();
  return ncclSuccess;
}

std::optional<RendezvousAddress> read_id(const ncclUniqueId& id) {
  if (std::memcmp(id.internal, kMagic, sizeof kMagic) != 0) return std::nullopt;
  RendezvousAddress address;
  std::memcpy(&address, id.internal + sizeof kMagic, sizeof address);
  return address;
}

}  // namespace kiln::sim::nccl
