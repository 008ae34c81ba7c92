#include "kiln/sim/metrics/recorder.h"

#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kiln/sim/device_api.h"
#include "kiln/sim/metrics/counts.h"
#include "kiln/sim/metrics/warp_access.h"
#include "kiln/sim/runtime/state.h"

namespace kiln::sim {

namespace metrics {

namespace {

constexpr unsigned kWarp = 32;
constexpr std::uint64_t kSector = 32;

enum class Space : std::uint8_t { global, shared };

struct Record {
  std::uint64_t address;
  const void* site;
  std::uint32_t thread;      // linear index in the block
  std::uint32_t occurrence;  // how many times before this thread reached the site
  std::uint32_t bytes;
  Kind kind;
  Space space;
};

std::atomic<int> files{0};

std::atomic<bool>& switch_state() {
  static std::atomic<bool> on = [] {
    const char* text = std::getenv("KILN_SIM_METRICS");
    if (!text || !*text || std::string(text) == "0") return false;
    if (std::string(text) == "1") return true;
    throw std::invalid_argument(std::string("KILN_SIM_METRICS: expected 0 or 1, got '") + text +
                                "'");
  }();
  return on;
}

// The grid being counted (the worker pool runs one grid at a time).
struct Grid {
  std::mutex mutex;
  std::atomic<bool> counted{false};
  KernelCounts counts;
  std::unordered_set<std::uint64_t> read_sectors, write_sectors;
};
Grid& grid() {
  static Grid g;
  return g;
}

struct Totals {
  std::mutex mutex;
  std::vector<KernelCounts> kernels;
  std::map<std::string, std::size_t> index;
};
Totals& totals() {
  static Totals t;
  return t;
}

}  // namespace

// One OS thread's recording of the block it runs.
struct ThreadRecorder {
  unsigned threads_per_block = 0;
  std::uint64_t shared_begin = 0, shared_end = 0;
  // This OS thread's thread-local storage, where __shared__ arrays live (static thread_local),
  // less the simulator's own built-in variables (threadIdx and the rest).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> tls;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> builtins;
  bool tls_known = false;
  std::vector<Record> records;

  bool in(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges,
          std::uint64_t a) const {
    for (const auto& [begin, end] : ranges)
      if (a >= begin && a < end) return true;
    return false;
  }
  void find_tls() {
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* self) {
          if (!info->dlpi_tls_data) return 0;
          for (int i = 0; i < info->dlpi_phnum; ++i)
            if (info->dlpi_phdr[i].p_type == PT_TLS) {
              const auto begin = reinterpret_cast<std::uint64_t>(info->dlpi_tls_data);
              static_cast<ThreadRecorder*>(self)->tls.emplace_back(
                  begin, begin + info->dlpi_phdr[i].p_memsz);
            }
          return 0;
        },
        this);
    const auto add = [&](const void* p, std::size_t bytes) {
      const auto begin = reinterpret_cast<std::uint64_t>(p);
      builtins.emplace_back(begin, begin + bytes);
    };
    add(&current::thread_idx, sizeof current::thread_idx);
    add(&current::block_idx, sizeof current::block_idx);
    add(&current::block_dim, sizeof current::block_dim);
    add(&current::grid_dim, sizeof current::grid_dim);
    tls_known = true;
  }
};

thread_local ThreadRecorder* active = nullptr;

namespace {

ThreadRecorder& here() {
  static thread_local ThreadRecorder recorder;
  return recorder;
}

// The block's accesses as warp instructions, added to `counts` and the grid's sector sets.
void group(ThreadRecorder& r, KernelCounts& counts, std::vector<std::uint64_t>& read_sectors,
           std::vector<std::uint64_t>& write_sectors) {
  std::vector<Record>& records = r.records;
  std::vector<std::uint32_t> order(records.size());
  std::iota(order.begin(), order.end(), 0u);
  // Program order within each thread is the order of the records: number each thread's visits
  // to each site.
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::tie(records[a].thread, records[a].site) <
           std::tie(records[b].thread, records[b].site);
  });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const Record& before = records[order[i - 1]];
    Record& now = records[order[i]];
    if (before.thread == now.thread && before.site == now.site)
      now.occurrence = before.occurrence + 1;
  }
  const auto key = [&](std::uint32_t i) {
    const Record& x = records[i];
    return std::make_tuple(x.thread / kWarp, x.site, x.occurrence, x.space, x.kind, x.thread);
  };
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t a, std::uint32_t b) { return key(a) < key(b); });
  std::vector<LaneAccess> lanes;
  for (std::size_t first = 0; first < order.size();) {
    const Record& head = records[order[first]];
    std::size_t past = first;
    lanes.clear();
    while (past < order.size()) {
      const Record& x = records[order[past]];
      if (x.thread / kWarp != head.thread / kWarp || x.site != head.site ||
          x.occurrence != head.occurrence || x.space != head.space || x.kind != head.kind)
        break;
      lanes.push_back({x.address, x.bytes, x.thread % kWarp});
      ++past;
    }
    const unsigned warp_base = head.thread / kWarp * kWarp;
    ++counts.instructions;
    counts.active_lanes += lanes.size();
    counts.lane_slots += std::min(kWarp, r.threads_per_block - warp_base);
    if (head.space == Space::shared) {
      const SharedCost cost = shared_cost(lanes);
      const bool load = head.kind == Kind::load;
      ++(load ? counts.shared_load_requests : counts.shared_store_requests);
      (load ? counts.shared_load_wavefronts : counts.shared_store_wavefronts) += cost.wavefronts;
      (load ? counts.shared_load_ideal : counts.shared_store_ideal) += cost.ideal;
    } else {
      const GlobalCost cost = global_cost(lanes);
      const bool reads = head.kind != Kind::store, writes = head.kind != Kind::load;
      for (const LaneAccess& a : lanes)
        for (std::uint64_t s = a.address / kSector; s <= (a.address + a.bytes - 1) / kSector; ++s) {
          if (reads) read_sectors.push_back(s);
          if (writes) write_sectors.push_back(s);
        }
      std::uint64_t* fields[3] = {&counts.load_requests, &counts.load_sectors, &counts.load_bytes};
      if (head.kind == Kind::store)
        fields[0] = &counts.store_requests, fields[1] = &counts.store_sectors,
        fields[2] = &counts.store_bytes;
      if (head.kind == Kind::atomic)
        fields[0] = &counts.atomic_requests, fields[1] = &counts.atomic_sectors,
        fields[2] = &counts.atomic_bytes;
      ++*fields[0];
      *fields[1] += cost.sectors;
      *fields[2] += cost.bytes_used;
    }
    first = past;
  }
}

}  // namespace

void record(const void* address, std::size_t bytes, Kind kind, const void* site) {
  ThreadRecorder* r = active;
  if (!r || bytes == 0) return;
  const auto a = reinterpret_cast<std::uint64_t>(address);
  Space space = Space::global;
  if ((a >= r->shared_begin && a < r->shared_end) || (r->in(r->tls, a) && !r->in(r->builtins, a)))
    space = Space::shared;
  else if (runtime::device_of(address) < 0)
    return;  // the thread's own stack, the kernel's arguments, host data
  const uint3 t = current::thread_idx;
  const dim3 b = current::block_dim;
  const auto thread = static_cast<std::uint32_t>(t.x + b.x * (t.y + b.y * t.z));
  r->records.push_back({a, site, thread, 0, static_cast<std::uint32_t>(bytes), kind, space});
}

void note_counted_file() {
  files.fetch_add(1, std::memory_order_relaxed);
}

void begin_grid(const char* kernel, unsigned threads_per_block, std::size_t shared_bytes) {
  Grid& g = grid();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.counted = switch_state().load(std::memory_order_relaxed);
  g.counts = KernelCounts{};
  g.counts.kernel = kernel;
  g.counts.threads_per_block = threads_per_block;
  g.counts.dynamic_shared_bytes = shared_bytes;
  g.read_sectors.clear();
  g.write_sectors.clear();
}

void end_grid() {
  Grid& g = grid();
  KernelCounts counts;
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (!g.counted) return;
    g.counted = false;
    counts = g.counts;
    counts.launches = 1;
    counts.unique_read_bytes = g.read_sectors.size() * kSector;
    counts.unique_write_bytes = g.write_sectors.size() * kSector;
  }
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  const auto [it, fresh] = t.index.emplace(counts.kernel, t.kernels.size());
  if (fresh)
    t.kernels.push_back(counts);
  else
    t.kernels[it->second] += counts;
}

void begin_block(unsigned threads_per_block, const void* shared, std::size_t bytes) {
  if (!grid().counted.load(std::memory_order_relaxed)) return;
  ThreadRecorder& r = here();
  if (!r.tls_known) r.find_tls();
  r.threads_per_block = threads_per_block;
  r.shared_begin = reinterpret_cast<std::uint64_t>(shared);
  r.shared_end = r.shared_begin + bytes;
  r.records.clear();
  active = &r;
}

void end_block() {
  if (!active) return;
  ThreadRecorder& r = *active;
  active = nullptr;
  KernelCounts counts;
  std::vector<std::uint64_t> read_sectors, write_sectors;
  group(r, counts, read_sectors, write_sectors);
  r.records.clear();
  Grid& g = grid();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.counts += counts;
  g.read_sectors.insert(read_sectors.begin(), read_sectors.end());
  g.write_sectors.insert(write_sectors.begin(), write_sectors.end());
}

}  // namespace metrics

bool counting() {
  return metrics::switch_state().load(std::memory_order_relaxed);
}

void set_counting(bool on) {
  metrics::switch_state().store(on, std::memory_order_relaxed);
}

int counted_files() {
  return metrics::files.load(std::memory_order_relaxed);
}

std::vector<KernelCounts> take_counts() {
  metrics::Totals& t = metrics::totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<KernelCounts> counts = std::move(t.kernels);
  t.kernels.clear();
  t.index.clear();
  return counts;
}

}  // namespace kiln::sim
