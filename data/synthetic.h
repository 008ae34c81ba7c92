// SyntheticDataset: random u8 images and labels that are a pure function of (seed, index), so
// benchmarks and tests get data without files, and any worker can produce any example.
#pragma once

#include <cstdint>

#include "kiln/core/shape.h"
#include "kiln/data/dataset.h"

namespace kiln::data {

// get(i) returns {u8 image of image_shape, i64 0-dim label in [0, num_classes)}.
class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(int64_t size, Shape image_shape, int64_t num_classes, uint64_t seed);

  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;

  const Shape& image_shape() const { return image_shape_; }
  int64_t num_classes() const { return num_classes_; }

 private:
  int64_t size_;
  Shape image_shape_;
  int64_t num_classes_;
  uint64_t seed_;
};

}  // namespace kiln::data
