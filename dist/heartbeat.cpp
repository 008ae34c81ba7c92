#include "kiln/dist/heartbeat.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::dist {

namespace {

struct Sign {
  int64_t beat = -1;
  int64_t started = -1;
};

std::vector<char> encode(int64_t beat, int64_t started) {
  const std::string text = std::to_string(beat) + "," + std::to_string(started);
  return {text.begin(), text.end()};
}

Sign decode(const std::vector<char>& value) {
  const std::string text(value.begin(), value.end());
  const size_t comma = text.find(',');
  Sign s;
  if (comma == std::string::npos) return s;
  try {
    s.beat = std::stoll(text.substr(0, comma));
    s.started = std::stoll(text.substr(comma + 1));
  } catch (const std::exception&) {
    return Sign{};
  }
  return s;
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

}  // namespace

struct Heartbeat::Shared {
  std::shared_ptr<Store> store;
  std::string prefix;
  int rank = 0, size = 1;
  std::chrono::milliseconds period{1000};
  std::atomic<int64_t> beat{0}, started{0};
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;

  std::string key(int r) const { return prefix + std::to_string(r); }
  void write() { store->set(key(rank), encode(++beat, started.load())); }
  std::vector<Sign> read_others() const {
    std::vector<Sign> signs(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r)
      if (r != rank) signs[static_cast<size_t>(r)] = decode(store->get(key(r)));
    return signs;
  }
};

Heartbeat::Heartbeat(std::shared_ptr<Store> store, std::string prefix, int rank, int size,
                     std::chrono::milliseconds period)
    : shared_(std::make_shared<Shared>()) {
  shared_->store = std::move(store);
  shared_->prefix = std::move(prefix);
  shared_->rank = rank;
  shared_->size = size;
  shared_->period =
      std::clamp(period, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  shared_->write();
  // Detached, holding the shared state: a write blocked on a store that does not answer must not
  // hold up the group's destruction.
  std::thread([shared = shared_] {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(shared->mutex);
        if (shared->wake.wait_for(lock, shared->period, [&] { return shared->stop; })) return;
      }
      try {
        shared->write();
      } catch (const std::exception&) {
        return;  // the store is gone (the job is ending); nothing left to tell
      }
    }
  }).detach();
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stop = true;
  }
  shared_->wake.notify_all();
}

int64_t Heartbeat::start_collective() {
  return ++shared_->started;
}

int64_t Heartbeat::started() const {
  return shared_->started.load();
}

std::chrono::milliseconds Heartbeat::period_for(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 8, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

std::string Heartbeat::diagnose(int64_t collective) const {
  if (shared_->size == 1) return "";
  // Two reads two periods apart, on a thread of their own: a store that does not answer blocks
  // them, and the caller waits only so long.
  struct Reads {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::vector<Sign> first, second;
  };
  auto reads = std::make_shared<Reads>();
  const std::chrono::milliseconds window = 2 * shared_->period;
  std::thread([shared = shared_, reads, window] {
    std::vector<Sign> first, second;
    try {
      first = shared->read_others();
      std::this_thread::sleep_for(window);
      second = shared->read_others();
    } catch (const std::exception&) {
      return;  // the store failed: reported below as not answering
    }
    std::lock_guard<std::mutex> lock(reads->mutex);
    reads->first = std::move(first);
    reads->second = std::move(second);
    reads->done = true;
    reads->done_cv.notify_all();
  }).detach();
  const auto patience =
      window + std::max<std::chrono::milliseconds>(3 * shared_->period, std::chrono::seconds(2));
  std::unique_lock<std::mutex> lock(reads->mutex);
  if (!reads->done_cv.wait_for(lock, patience, [&] { return reads->done; })) {
    const std::string where = shared_->store->where();
    return fmt::format("; the {} did not answer within {:.1f} s either{}", where,
                       std::chrono::duration<double>(patience).count(),
                       where.rfind("TCP store", 0) == 0
                           ? ": rank 0, which serves it, is likely stopped, gone, or unreachable "
                             "from this machine"
                           : "");
  }
  std::vector<int> silent, behind;
  std::string behind_detail;
  for (int r = 0; r < shared_->size; ++r) {
    if (r == shared_->rank) continue;
    const Sign& a = reads->first[static_cast<size_t>(r)];
    const Sign& b = reads->second[static_cast<size_t>(r)];
    if (b.beat == a.beat) {
      silent.push_back(r);
    } else if (b.started < collective) {
      behind.push_back(r);
      behind_detail +=
          fmt::format("{}rank {} has started {}", behind_detail.empty() ? "" : ", ", r, b.started);
    }
  }
  std::string out;
  if (!silent.empty())
    out +=
        fmt::format("; not answering: {} (no heartbeat in {:.1f} s: stopped, hung, or unreachable)",
                    rank_list(silent), std::chrono::duration<double>(window).count());
  if (!behind.empty())
    out += fmt::format(
        "; alive but not at this collective: {} ({} collectives of the group; this one is number "
        "{} here)",
        rank_list(behind), behind_detail, collective);
  return out;
}

}  // namespace kiln::dist
