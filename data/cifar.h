// CIFAR-10 and CIFAR-100 in their binary form (the "-binary" downloads): fixed-size records of
// label byte(s) followed by a 3x32x32 u8 image in CHW order.
//   CIFAR-10:  1 label byte  + 3072 pixels = 3073 bytes per record
//   CIFAR-100: coarse + fine label bytes + 3072 pixels = 3074 bytes; kiln uses the fine label.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/data/dataset.h"

namespace kiln::data {

// get(i) returns {u8 image [3, 32, 32], i64 0-dim label}.
class CifarDataset : public Dataset {
 public:
  // Reads every record of every file, in order. variant: 10 or 100.
  CifarDataset(std::vector<std::string> files, int variant);

  // CIFAR-10: data_batch_1.bin .. data_batch_5.bin (train) or test_batch.bin; CIFAR-100:
  // train.bin or test.bin. The files may sit in `root` or in the folder the archive unpacks to
  // (cifar-10-batches-bin, cifar-100-binary) inside it.
  static CifarDataset from_root(const std::string& root, bool train, int variant);

  int64_t size() const override;
  Example get(int64_t index) const override;

  int num_classes() const { return variant_; }
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }

  static constexpr int64_t kChannels = 3, kHeight = 32, kWidth = 32;
  static constexpr int64_t kImageBytes = kChannels * kHeight * kWidth;

 private:
  int variant_;
  Tensor images_;  // u8 [N, 3, 32, 32]
  Tensor labels_;  // i64 [N]
};

}  // namespace kiln::data
