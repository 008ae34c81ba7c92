// IDX files (the format of MNIST and Fashion-MNIST), plain or gzip-compressed, and the MNIST-style
// dataset built from a pair of them (images [N, H, W] u8, labels [N] u8).
//
// An IDX file is a 4-byte magic (0, 0, type code, number of dims), one big-endian u32 per dim,
// then the elements, big-endian, row-major. read_idx checks every header field against the file
// before it allocates anything the header sizes, so a corrupt or hostile file fails with a
// ValueError naming the file, the field and its byte offset instead of exhausting memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/data/dataset.h"

namespace kiln::data {

// Type codes of the IDX format.
enum IdxType : uint8_t {
  kIdxU8 = 0x08,
  kIdxI8 = 0x09,
  kIdxI16 = 0x0B,
  kIdxI32 = 0x0C,
  kIdxF32 = 0x0D,
  kIdxF64 = 0x0E,
};

struct IdxArray {
  uint8_t type_code = kIdxU8;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // the elements as stored in the file: big-endian

  int64_t numel() const;
};

// Bytes per element of an IDX type code; 0 for a code the format does not define.
size_t idx_element_size(uint8_t type_code);

// Reads a whole IDX file; gzip is detected by its magic (1f 8b), not by the file name.
IdxArray read_idx(const std::string& path);

// The array as a tensor in host byte order: u8, i32, f32 and f64 map to the kiln dtype of the same
// name; i8 and i16 have no kiln dtype and throw DTypeError.
Tensor idx_to_tensor(const IdxArray& array);

// MNIST or Fashion-MNIST: images stored as one u8 tensor [N, 1, H, W], labels as i64 [N].
// get(i) returns {u8 image [1, H, W], i64 0-dim label}.
class MnistDataset : public Dataset {
 public:
  MnistDataset(const std::string& images_path, const std::string& labels_path);

  // The four standard files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-...) in
  // `root`, each plain or with a .gz suffix. MNIST and Fashion-MNIST use the same names.
  static MnistDataset fashion(const std::string& root, bool train);
  static MnistDataset mnist(const std::string& root, bool train);

  int64_t size() const override;
  Example get(int64_t index) const override;

  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }

  static constexpr int64_t kNumClasses = 10;

 private:
  Tensor images_;
  Tensor labels_;
};

}  // namespace kiln::data
