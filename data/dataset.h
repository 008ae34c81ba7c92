// Dataset: a fixed-size collection of examples addressed by index. Each example is a list of
// tensors (fields), e.g. {image, label}; the DataLoader stacks field k of many examples into one
// batch tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::data {

using Example = std::vector<Tensor>;

class Dataset {
 public:
  virtual ~Dataset();
  virtual int64_t size() const = 0;
  // Called from several DataLoader workers at once: implementations keep no mutable state, and
  // return tensors that own their data (a caller may modify them in place).
  virtual Example get(int64_t index) const = 0;
  // What example `index` is, for error messages: "example 17" here; a data set of files names
  // the file (ImageFolder: its path).
  virtual std::string describe(int64_t index) const;
};

// Throws IndexError naming `dataset` unless 0 <= index < size.
void check_index(const char* dataset, int64_t index, int64_t size);

}  // namespace kiln::data
