#include "kiln/data/dataset.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "kiln/core/error.h"

namespace kiln::data {

// Defined out of line so that the vtable has one home.
Dataset::~Dataset() = default;

std::string Dataset::describe(int64_t index) const {
  return fmt::format("example {}", index);
}

void check_index(const char* dataset, int64_t index, int64_t size) {
  KILN_CHECK(index >= 0 && index < size, IndexError,
             "{}::get: index {} is out of range for a dataset of {} examples", dataset, index,
             size);
}

}  // namespace kiln::data
