#include "kiln/data/dataset.h"

#include <cstdint>

#include "kiln/core/error.h"

namespace kiln::data {

// Defined out of line so that the vtable has one home.
Dataset::~Dataset() = default;

void check_index(const char* dataset, int64_t index, int64_t size) {
  KILN_CHECK(index >= 0 && index < size, IndexError,
             "{}::get: index {} is out of range for a dataset of {} examples", dataset, index,
             size);
}

}  // namespace kiln::data
