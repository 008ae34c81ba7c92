// Generator: a seed and an offset into the Philox4x32-10 stream. Each random op takes the next
// offset, and element i of its output is a pure function of (seed, offset, i), on CPU and GPU
// alike.
#pragma once

#include <cstdint>
#include <mutex>

namespace kiln {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  // Returns the offset for one random op and advances past it.
  uint64_t next_offset();
  GeneratorState state() const;
  void set_state(GeneratorState state);

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

Generator& default_generator();
// Seeds the default generator, as torch.manual_seed.
void manual_seed(uint64_t seed);

}  // namespace kiln
