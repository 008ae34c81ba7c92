#include "kiln/sim/metrics/strict_memory.h"

#include <link.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kiln/sim/device_api.h"
#include "kiln/sim/grid.h"
#include "kiln/sim/runtime/state.h"

namespace kiln::sim::strict {

using Range = std::pair<std::uintptr_t, std::uintptr_t>;

// One OS thread's view of the block it runs.
struct BlockMemory {
  bool poison_shared = false, hold_stores = false;
  Range dynamic_shared{};
  // This OS thread's thread-local storage, where static __shared__ variables live (static
  // thread_local), less the built-in variables (threadIdx and the rest).
  std::vector<Range> tls, builtins;
  bool tls_known = false;
  std::unordered_set<std::uintptr_t> written_shared;  // static shared bytes written this block
  // The block's plain global stores since its last fence: where, how many bytes, and where in
  // `old_bytes` their previous bytes are kept.
  struct Held {
    std::uintptr_t address;
    std::size_t bytes, offset;
  };
  std::vector<Held> held;
  std::vector<unsigned char> old_bytes;
  std::size_t late = 0;  // held[0, late) were held at an atomic: no fence releases them

  static bool in(const std::vector<Range>& ranges, std::uintptr_t a) {
    for (const auto& [begin, end] : ranges)
      if (a >= begin && a < end) return true;
    return false;
  }
  bool static_shared(std::uintptr_t a) const {
    return !(a >= dynamic_shared.first && a < dynamic_shared.second) && in(tls, a) &&
           !in(builtins, a);
  }
  void find_tls() {
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* self) {
          if (!info->dlpi_tls_data) return 0;
          for (int i = 0; i < info->dlpi_phnum; ++i)
            if (info->dlpi_phdr[i].p_type == PT_TLS) {
              const auto begin = reinterpret_cast<std::uintptr_t>(info->dlpi_tls_data);
              static_cast<BlockMemory*>(self)->tls.emplace_back(begin,
                                                                begin + info->dlpi_phdr[i].p_memsz);
            }
          return 0;
        },
        this);
    const auto add = [&](const void* p, std::size_t bytes) {
      const auto begin = reinterpret_cast<std::uintptr_t>(p);
      builtins.emplace_back(begin, begin + bytes);
    };
    add(&current::thread_idx, sizeof current::thread_idx);
    add(&current::block_idx, sizeof current::block_idx);
    add(&current::block_dim, sizeof current::block_dim);
    add(&current::grid_dim, sizeof current::grid_dim);
    tls_known = true;
  }
  // The bytes of [a, a + bytes) no thread of the block has written become 0xFF.
  void poison_unwritten(std::uintptr_t a, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i)
      if (!written_shared.contains(a + i)) *reinterpret_cast<unsigned char*>(a + i) = 0xFF;
  }
  void mark_written(std::uintptr_t a, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i) written_shared.insert(a + i);
  }
};

thread_local BlockMemory* active = nullptr;

namespace {

BlockMemory& here() {
  static thread_local BlockMemory memory;
  return memory;
}

// The stores the grid's ended blocks held past their last fence, written when the grid ends.
struct Pending {
  std::mutex mutex;
  std::vector<std::pair<std::uintptr_t, std::vector<unsigned char>>> stores;
};
Pending& pending() {
  static Pending p;
  return p;
}

}  // namespace

void load(const void* address, std::size_t bytes) {
  BlockMemory& m = *active;
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (m.poison_shared && m.static_shared(a)) m.poison_unwritten(a, bytes);
}

void store(const void* address, std::size_t bytes) {
  BlockMemory& m = *active;
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (m.static_shared(a)) {
    if (m.poison_shared) m.mark_written(a, bytes);
  } else if (m.hold_stores && runtime::device_of(address) >= 0) {
    m.held.push_back({a, bytes, m.old_bytes.size()});
    const auto* old = static_cast<const unsigned char*>(address);
    m.old_bytes.insert(m.old_bytes.end(), old, old + bytes);
  }
}

void unheld_store(const void* address, std::size_t bytes) {
  BlockMemory& m = *active;
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (m.poison_shared && m.static_shared(a)) m.mark_written(a, bytes);
}

void atomic(const void* address, std::size_t bytes) {
  BlockMemory& m = *active;
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (m.static_shared(a)) {
    if (!m.poison_shared) return;
    m.poison_unwritten(a, bytes);  // an atomic reads before it writes
    m.mark_written(a, bytes);
  } else if (runtime::device_of(address) >= 0) {
    m.late = m.held.size();  // another block may see this before the stores held now
  }
}

void fence() {
  BlockMemory& m = *active;
  if (m.late == 0) {
    m.held.clear();
    m.old_bytes.clear();
  } else {
    m.held.resize(m.late);
    m.old_bytes.resize(m.held.empty() ? 0 : m.held.back().offset + m.held.back().bytes);
  }
}

void begin_block(const void* shared, std::size_t bytes) {
  const Schedule s = schedule();
  if (!s.poison_static_shared && !s.hold_global_stores) return;
  BlockMemory& m = here();
  if (!m.tls_known) m.find_tls();
  m.poison_shared = s.poison_static_shared;
  m.hold_stores = s.hold_global_stores;
  const auto begin = reinterpret_cast<std::uintptr_t>(shared);
  m.dynamic_shared = {begin, begin + bytes};
  m.written_shared.clear();
  m.held.clear();
  m.old_bytes.clear();
  m.late = 0;
  active = &m;
}

void end_block() {
  if (!active) return;
  BlockMemory& m = *active;
  active = nullptr;
  m.late = 0;
  if (m.held.empty()) return;
  std::vector<std::pair<std::uintptr_t, std::vector<unsigned char>>> stores;
  stores.reserve(m.held.size());
  for (const BlockMemory::Held& h : m.held) {
    const auto* now = reinterpret_cast<const unsigned char*>(h.address);
    stores.emplace_back(h.address, std::vector<unsigned char>(now, now + h.bytes));
  }
  // Newest first, so that an address stored twice gets the bytes from before the first store.
  for (auto h = m.held.rbegin(); h != m.held.rend(); ++h)
    std::memcpy(reinterpret_cast<void*>(h->address), m.old_bytes.data() + h->offset, h->bytes);
  m.held.clear();
  m.old_bytes.clear();
  Pending& p = pending();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (auto& s : stores) p.stores.push_back(std::move(s));
}

void end_grid() {
  Pending& p = pending();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (const auto& [address, bytes] : p.stores)
    std::memcpy(reinterpret_cast<void*>(address), bytes.data(), bytes.size());
  p.stores.clear();
}

}  // namespace kiln::sim::strict
