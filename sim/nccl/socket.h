// Loopback TCP for the NCCL model: a listener on 127.0.0.1 with a port the kernel picks, a
// connection to a port, and whole reads and writes. Every call answers false (or -1) on failure
// rather than throwing: the callers turn a failure into an NCCL error.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::sim::nccl {

// A listening socket on 127.0.0.1 and its port, or fd -1.
struct Listener {
  int fd = -1;
  std::uint16_t port = 0;
};
Listener listen_loopback(int backlog);

int connect_loopback(std::uint16_t port);  // -1 on failure
int accept_connection(int listener);       // -1 on failure (or after shutdown)

// Whole transfers; false on an error or an end of stream before `bytes`.
bool read_all(int fd, void* data, std::size_t bytes);
bool write_all(int fd, const void* data, std::size_t bytes);

// Wakes every thread blocked on `fd` (their reads and accepts fail); closes nothing.
void shut_down(int fd);
void close_socket(int fd);

}  // namespace kiln::sim::nccl
