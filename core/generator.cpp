#include "kiln/core/generator.h"

#include <cstdint>
#include <mutex>

namespace kiln {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = {seed, 0};
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.seed;
}

uint64_t Generator::next_offset() {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.offset++;
}

GeneratorState Generator::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

void Generator::set_state(GeneratorState state) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = state;
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace kiln
