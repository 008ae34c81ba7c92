// The key-value store through which the ranks of a job find each other before any collective:
// each publishes its address under a key and reads the others'. Two kinds: TcpStore, served by
// rank 0 on MASTER_ADDR:MASTER_PORT (as PyTorch's TCPStore), for jobs on one or many machines,
// FileStore, a folder every rank can see, for one machine without a master address, and
// MemoryStore, for ranks that are threads of one process.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::dist {

// A rank still waiting for the others at the rendezvous says so on stderr after this long, then
// again at each interval: a job whose ranks did not all start is otherwise silent until the
// timeout.
inline constexpr std::chrono::seconds kRendezvousReportAfter{5};
inline constexpr std::chrono::seconds kRendezvousReportEvery{10};

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // The value of `key`, waiting until some rank sets it; DistError naming the key on timeout.
  virtual std::vector<char> get(const std::string& key) = 0;
  // Waits until every key is set; DistError naming the first missing one on timeout.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  // Adds `delta` to the integer under `key` (0 when unset) and returns the sum, atomically.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Where the ranks meet, for messages: "TCP store at 10.0.0.1:29500", "file store /tmp/...".
  virtual std::string where() const = 0;
  // The address of this machine that routes to the store's server (numeric), for a store served
  // over a network: what a rank on another machine than the master advertises. "" for a store
  // without a network (memory, file). On the master's machine, the master's address as this
  // machine resolves it: loopback when the master's name resolves to loopback here.
  virtual std::string local_address() const { return ""; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 protected:
  explicit Store(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  std::chrono::milliseconds timeout_;
};

// The key under which a TCP store's server puts the address of its machine that the first client
// from another machine reached it at (numeric): the master's address as the other machines see
// it, for ranks on the master's machine whose route to the master is loopback.
inline constexpr char kStoreReachedAtKey[] = "kiln/store/reached_at";

// A client of the store served by rank 0; rank 0 (`serve`) also runs the server, on a thread of
// its own, until the store is destroyed. Clients retry connecting until the timeout, so ranks may
// start in any order; one still trying after 5 s says so on stderr, and again every 10 s.
std::unique_ptr<Store> make_tcp_store(const std::string& host, int port, bool serve,
                                      std::chrono::milliseconds timeout);

// A store inside this process, for ranks that are threads of one process (tests, a group of one).
std::unique_ptr<Store> make_memory_store(std::chrono::milliseconds timeout);

// Keys as files in `folder` (created if needed), each written to a temporary name and renamed,
// so a reader never sees half a value.
std::unique_ptr<Store> make_file_store(const std::string& folder,
                                       std::chrono::milliseconds timeout);

}  // namespace kiln::dist
