#include "kiln/sim/metrics/warp_access.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace kiln::sim::metrics {

namespace {
constexpr std::uint64_t kSector = 32;
constexpr unsigned kBanks = 32;
constexpr std::uint64_t kWord = 4;
}  // namespace

GlobalCost global_cost(const std::vector<LaneAccess>& lanes) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // [begin, end)
  ranges.reserve(lanes.size());
  for (const LaneAccess& a : lanes)
    if (a.bytes > 0) ranges.emplace_back(a.address, a.address + a.bytes);
  std::sort(ranges.begin(), ranges.end());
  GlobalCost cost{0, 0};
  std::uint64_t covered = 0;      // bytes are counted up to here
  std::uint64_t last_sector = 0;  // one past the last sector counted
  for (const auto& [begin, end] : ranges) {
    const std::uint64_t from = std::max(begin, covered);
    if (end > from) {
      cost.bytes_used += end - from;
      covered = end;
    }
    const std::uint64_t first = std::max(begin / kSector, last_sector);
    const std::uint64_t past = (end - 1) / kSector + 1;
    if (past > first) {
      cost.sectors += past - first;
      last_sector = past;
    }
  }
  return cost;
}

SharedCost shared_cost(const std::vector<LaneAccess>& lanes) {
  std::uint32_t widest = 4;
  for (const LaneAccess& a : lanes) widest = std::max(widest, std::min<std::uint32_t>(a.bytes, 16));
  const unsigned lanes_per_phase = 32 / ((widest + 3) / 4);
  SharedCost cost{0, 0};
  for (unsigned phase = 0; phase * lanes_per_phase < 32; ++phase) {
    std::vector<std::uint64_t> words;  // the distinct words of this phase
    for (const LaneAccess& a : lanes) {
      if (a.lane / lanes_per_phase != phase || a.bytes == 0) continue;
      for (std::uint64_t w = a.address / kWord; w <= (a.address + a.bytes - 1) / kWord; ++w)
        words.push_back(w);
    }
    if (words.empty()) continue;
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    std::array<std::uint64_t, kBanks> per_bank{};
    for (const std::uint64_t w : words) ++per_bank[w % kBanks];
    cost.wavefronts += *std::max_element(per_bank.begin(), per_bank.end());
    ++cost.ideal;
  }
  return cost;
}

}  // namespace kiln::sim::metrics
