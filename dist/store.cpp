// The two stores. The TCP protocol is one request and one reply per call over a connection each
// client keeps: a command byte, then length-prefixed strings (u64 little-endian lengths).
//   SET key value -> ok      GET key -> value (the server waits for the key)
//   ADD key delta -> sum     WAIT keys -> ok
// Waiting happens on the server, so a client sends one request however long the wait; the server
// answers a late key with a timeout status rather than hold the connection forever.
#include "kiln/dist/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/dist/net.h"

namespace kiln::dist {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

enum class Command : uint8_t { set = 1, get = 2, add = 3, wait = 4 };
enum class Status : uint8_t { ok = 0, timeout = 1 };

std::string errno_text(int e) {
  return std::system_category().message(e);
}

// ---- framing: whole reads and writes, and the length-prefixed strings ----

bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool write_u64(int fd, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  return write_all(fd, b, 8);
}

bool read_u64(int fd, uint64_t* v) {
  unsigned char b[8];
  if (!read_all(fd, b, 8)) return false;
  *v = 0;
  for (int i = 0; i < 8; ++i) *v |= static_cast<uint64_t>(b[i]) << (8 * i);
  return true;
}

bool write_bytes(int fd, const void* data, size_t bytes) {
  return write_u64(fd, bytes) && write_all(fd, data, bytes);
}

// A string of at most 1 GiB: a longer length is a corrupt or hostile peer, not a value.
bool read_bytes(int fd, std::vector<char>* out) {
  uint64_t n = 0;
  if (!read_u64(fd, &n) || n > (uint64_t{1} << 30)) return false;
  out->resize(static_cast<size_t>(n));
  return read_all(fd, out->data(), out->size());
}

bool read_string(int fd, std::string* out) {
  std::vector<char> bytes;
  if (!read_bytes(fd, &bytes)) return false;
  out->assign(bytes.begin(), bytes.end());
  return true;
}

// ---- the server, on rank 0 ----

class TcpStoreServer {
 public:
  TcpStoreServer(int port, milliseconds timeout) : timeout_(timeout) {
    listen_fd_ = ::socket(AF_INET6, SOCK_STREAM, 0);
    bool v6 = listen_fd_ >= 0;
    if (!v6) listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    KILN_CHECK(listen_fd_ >= 0, DistError, "dist: store server: cannot open a socket: {}",
               errno_text(errno));
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int bound = -1;
    if (v6) {
      int zero = 0;  // accept IPv4 clients too
      ::setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 addr{};
      addr.sin6_family = AF_INET6;
      addr.sin6_addr = in6addr_any;
      addr.sin6_port = htons(static_cast<uint16_t>(port));
      bound = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    } else {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      addr.sin_port = htons(static_cast<uint16_t>(port));
      bound = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    }
    if (bound != 0 || ::listen(listen_fd_, 128) != 0) {
      const int e = errno;
      ::close(listen_fd_);
      throw DistError("dist: store server: cannot listen on port " + std::to_string(port) + ": " +
                      errno_text(e) + " (is another job using MASTER_PORT?)");
    }
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~TcpStoreServer() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    accept_thread_.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int fd : clients_) ::shutdown(fd, SHUT_RDWR);
    }
    changed_.notify_all();
    for (std::thread& t : client_threads_) t.join();
  }

 private:
  void accept_loop() {
    while (!stopping_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const std::string reached_at = remote_client_reached_at(fd);
      std::lock_guard<std::mutex> lock(mutex_);
      if (!reached_at.empty() && !values_.count(kStoreReachedAtKey)) {
        values_[kStoreReachedAtKey] = std::vector<char>(reached_at.begin(), reached_at.end());
        changed_.notify_all();
      }
      clients_.push_back(fd);
      client_threads_.emplace_back([this, fd] { serve(fd); });
    }
  }

  // For a client from another machine (one not connecting from a loopback address), the address
  // of this machine it reached: this end of the connection. "" for a client on this machine.
  static std::string remote_client_reached_at(int fd) {
    sockaddr_storage peer{}, local{};
    socklen_t peer_length = sizeof peer, local_length = sizeof local;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0)
      return "";
    const std::string from = numeric_address(reinterpret_cast<const sockaddr*>(&peer));
    const std::string at = numeric_address(reinterpret_cast<const sockaddr*>(&local));
    if (from.empty() || is_loopback_address(from) || from == at) return "";
    return at;
  }

  // Waits until every key is set, or the timeout, or the server stops.
  bool wait_for(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys) {
    return changed_.wait_for(lock, timeout_, [&] {
      if (stopping_) return true;
      for (const std::string& k : keys)
        if (!values_.count(k)) return false;
      return true;
    }) && !stopping_;
  }

  void serve(int fd) {
    for (;;) {
      uint8_t command = 0;
      if (!read_all(fd, &command, 1)) break;
      bool ok = true;
      if (command == static_cast<uint8_t>(Command::set)) {
        std::string key;
        std::vector<char> value;
        ok = read_string(fd, &key) && read_bytes(fd, &value);
        if (!ok) break;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          values_[key] = std::move(value);
        }
        changed_.notify_all();
        ok = write_all(fd, "\0", 1);
      } else if (command == static_cast<uint8_t>(Command::get)) {
        std::string key;
        if (!read_string(fd, &key)) break;
        std::unique_lock<std::mutex> lock(mutex_);
        if (wait_for(lock, {key})) {
          const std::vector<char> value = values_[key];
          lock.unlock();
          const uint8_t status = static_cast<uint8_t>(Status::ok);
          ok = write_all(fd, &status, 1) && write_bytes(fd, value.data(), value.size());
        } else {
          lock.unlock();
          const uint8_t status = static_cast<uint8_t>(Status::timeout);
          ok = write_all(fd, &status, 1);
        }
      } else if (command == static_cast<uint8_t>(Command::add)) {
        std::string key;
        uint64_t delta = 0;
        if (!read_string(fd, &key) || !read_u64(fd, &delta)) break;
        int64_t sum = 0;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          std::vector<char>& v = values_[key];
          const std::string text(v.begin(), v.end());
          sum = (text.empty() ? 0 : std::stoll(text)) + static_cast<int64_t>(delta);
          const std::string updated = std::to_string(sum);
          v.assign(updated.begin(), updated.end());
        }
        changed_.notify_all();
        ok = write_u64(fd, static_cast<uint64_t>(sum));
      } else if (command == static_cast<uint8_t>(Command::wait)) {
        uint64_t count = 0;
        if (!read_u64(fd, &count) || count > 1'000'000) break;
        std::vector<std::string> keys(static_cast<size_t>(count));
        for (std::string& k : keys)
          if (!read_string(fd, &k)) return;
        std::unique_lock<std::mutex> lock(mutex_);
        const bool all = wait_for(lock, keys);
        lock.unlock();
        const uint8_t status = static_cast<uint8_t>(all ? Status::ok : Status::timeout);
        ok = write_all(fd, &status, 1);
      } else {
        break;  // not a kiln store client
      }
      if (!ok) break;
    }
    ::close(fd);
  }

  milliseconds timeout_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;
  std::vector<int> clients_;
  std::vector<std::thread> client_threads_;
};

// ---- the client, on every rank ----

int connect_with_retries(const std::string& host, int port, milliseconds timeout) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto next_report = start + kRendezvousReportAfter;
  std::string last_error = "no attempt";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
    if (rc != 0) {
      last_error = std::string("cannot resolve: ") + ::gai_strerror(rc);
    } else {
      for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(found);
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          return fd;
        }
        last_error = errno_text(errno);
        ::close(fd);
      }
      ::freeaddrinfo(found);
    }
    if (Clock::now() >= deadline)
      throw DistError("dist: cannot reach the store at " + host + ":" + std::to_string(port) +
                      " within " + std::to_string(timeout.count()) + " ms (" + last_error +
                      "); is rank 0 running, and are MASTER_ADDR and MASTER_PORT its?");
    if (Clock::now() >= next_report) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start);
      std::fprintf(stderr,
                   "kiln: dist: waiting for rank 0's store at %s:%d (%lld s so far, %s): rank 0 "
                   "serves it when it starts\n",
                   host.c_str(), port, static_cast<long long>(waited.count()), last_error.c_str());
      next_report += kRendezvousReportEvery;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
}

class TcpStore final : public Store {
 public:
  TcpStore(const std::string& host, int port, bool serve, milliseconds timeout)
      : Store(timeout), where_(host + ":" + std::to_string(port)) {
    if (serve) server_ = std::make_unique<TcpStoreServer>(port, timeout);
    fd_ = connect_with_retries(serve ? "localhost" : host, port, timeout);
    // The server's rank reached it through loopback: its route to the master is the one the
    // kernel would take to the master's address, the address itself when it is this machine's.
    // A master's name that does not resolve here leaves the connection's own end (loopback).
    if (serve) local_address_ = route_source(host, port);
    if (local_address_.empty()) {
      sockaddr_storage local{};
      socklen_t length = sizeof local;
      if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &length) == 0)
        local_address_ = numeric_address(reinterpret_cast<const sockaddr*>(&local));
    }
  }
  ~TcpStore() override {
    if (fd_ >= 0) ::close(fd_);
    server_.reset();
  }

  void set(const std::string& key, const std::vector<char>& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint8_t command = static_cast<uint8_t>(Command::set);
    uint8_t reply = 1;
    check(write_all(fd_, &command, 1) && write_bytes(fd_, key.data(), key.size()) &&
              write_bytes(fd_, value.data(), value.size()) && read_all(fd_, &reply, 1),
          "set", key);
  }

  std::vector<char> get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint8_t command = static_cast<uint8_t>(Command::get);
    uint8_t status = 0;
    check(write_all(fd_, &command, 1) && write_bytes(fd_, key.data(), key.size()) &&
              read_all(fd_, &status, 1),
          "get", key);
    KILN_CHECK(status == static_cast<uint8_t>(Status::ok), DistError,
               "dist: store {}: key '{}' was not set within {} ms: a rank did not arrive", where_,
               key, timeout_.count());
    std::vector<char> value;
    check(read_bytes(fd_, &value), "get", key);
    return value;
  }

  void wait(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint8_t command = static_cast<uint8_t>(Command::wait);
    bool ok = write_all(fd_, &command, 1) && write_u64(fd_, keys.size());
    for (const std::string& k : keys) ok = ok && write_bytes(fd_, k.data(), k.size());
    uint8_t status = 0;
    check(ok && read_all(fd_, &status, 1), "wait", keys.empty() ? "" : keys.front());
    KILN_CHECK(status == static_cast<uint8_t>(Status::ok), DistError,
               "dist: store {}: keys were not all set within {} ms: a rank did not arrive", where_,
               timeout_.count());
  }

  std::string where() const override { return "TCP store at " + where_; }
  std::string local_address() const override { return local_address_; }

  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint8_t command = static_cast<uint8_t>(Command::add);
    uint64_t sum = 0;
    check(write_all(fd_, &command, 1) && write_bytes(fd_, key.data(), key.size()) &&
              write_u64(fd_, static_cast<uint64_t>(delta)) && read_u64(fd_, &sum),
          "add", key);
    return static_cast<int64_t>(sum);
  }

 private:
  void check(bool ok, const char* what, const std::string& key) const {
    KILN_CHECK(ok, DistError,
               "dist: store {}: the connection broke during {} '{}' (rank 0, which serves the "
               "store, has probably exited)",
               where_, what, key);
  }

  std::string where_;
  std::string local_address_;
  std::unique_ptr<TcpStoreServer> server_;
  int fd_ = -1;
  std::mutex mutex_;  // one request at a time on the connection
};

// ---- the in-process store ----

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(milliseconds timeout) : Store(timeout) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    std::lock_guard<std::mutex> lock(mutex_);
    return values_.at(key);
  }
  void wait(const std::vector<std::string>& keys) override {
    std::unique_lock<std::mutex> lock(mutex_);
    for (const std::string& key : keys) {
      const bool arrived =
          changed_.wait_for(lock, timeout_, [&] { return values_.count(key) != 0; });
      KILN_CHECK(arrived, DistError,
                 "dist: memory store: key '{}' was not set within {} ms: a rank did not arrive",
                 key, timeout_.count());
    }
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t sum = delta;
    auto it = counters_.find(key);
    if (it != counters_.end()) sum += it->second;
    counters_[key] = sum;
    return sum;
  }
  std::string where() const override { return "in-process store"; }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;
  std::map<std::string, int64_t> counters_;
};

// ---- the file store ----

class FileStore final : public Store {
 public:
  FileStore(const std::string& folder, milliseconds timeout) : Store(timeout), folder_(folder) {
    std::error_code error;
    std::filesystem::create_directories(folder_, error);
    KILN_CHECK(!error, DistError, "dist: file store {}: cannot create it: {}", folder,
               error.message());
  }

  void set(const std::string& key, const std::vector<char>& value) override {
    const std::filesystem::path target = path_of(key);
    const std::filesystem::path temp = target.string() + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      KILN_CHECK(out.good(), DistError, "dist: file store: cannot write {}", temp.string());
    }
    std::filesystem::rename(temp, target);
  }

  std::vector<char> get(const std::string& key) override {
    wait({key});
    std::ifstream in(path_of(key), std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  void wait(const std::vector<std::string>& keys) override {
    const auto deadline = Clock::now() + timeout_;
    for (const std::string& key : keys) {
      while (!std::filesystem::exists(path_of(key))) {
        KILN_CHECK(Clock::now() < deadline, DistError,
                   "dist: file store {}: key '{}' was not set within {} ms: a rank did not arrive",
                   folder_.string(), key, timeout_.count());
        std::this_thread::sleep_for(milliseconds(10));
      }
    }
  }

  // A counter file updated under an exclusive lock on a companion file.
  int64_t add(const std::string& key, int64_t delta) override {
    const std::string lock_path = path_of(key).string() + ".lock";
    const int lock_fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
    KILN_CHECK(lock_fd >= 0, DistError, "dist: file store: cannot open {}: {}", lock_path,
               errno_text(errno));
    struct flock whole {};
    whole.l_type = F_WRLCK;
    whole.l_whence = SEEK_SET;
    while (::fcntl(lock_fd, F_SETLKW, &whole) != 0 && errno == EINTR) {
    }
    int64_t sum = delta;
    if (std::filesystem::exists(path_of(key))) {
      std::ifstream in(path_of(key));
      int64_t old = 0;
      in >> old;
      sum += old;
    }
    const std::string text = std::to_string(sum);
    set(key, std::vector<char>(text.begin(), text.end()));
    ::close(lock_fd);  // releases the lock
    return sum;
  }

  std::string where() const override { return "file store " + folder_.string(); }

 private:
  // Keys are kiln's own ("rank_3", "barrier/2"): '/' becomes '%' so each is one file name.
  std::filesystem::path path_of(const std::string& key) const {
    std::string name = key;
    for (char& c : name)
      if (c == '/') c = '%';
    return folder_ / name;
  }

  std::filesystem::path folder_;
};

}  // namespace

std::unique_ptr<Store> make_tcp_store(const std::string& host, int port, bool serve,
                                      std::chrono::milliseconds timeout) {
  return std::make_unique<TcpStore>(host, port, serve, timeout);
}

std::unique_ptr<Store> make_memory_store(std::chrono::milliseconds timeout) {
  return std::make_unique<MemoryStore>(timeout);
}

std::unique_ptr<Store> make_file_store(const std::string& folder,
                                       std::chrono::milliseconds timeout) {
  return std::make_unique<FileStore>(folder, timeout);
}

}  // namespace kiln::dist
