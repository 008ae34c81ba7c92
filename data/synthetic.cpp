#include "kiln/data/synthetic.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/core/philox.h"

namespace kiln::data {

SyntheticDataset::SyntheticDataset(int64_t size, Shape image_shape, int64_t num_classes,
                                   uint64_t seed)
    : size_(size), image_shape_(std::move(image_shape)), num_classes_(num_classes), seed_(seed) {
  KILN_CHECK(size >= 0, ValueError, "SyntheticDataset: size must be non-negative, got {}", size);
  KILN_CHECK(num_classes >= 1, ValueError,
             "SyntheticDataset: num_classes must be at least 1, got {}", num_classes);
  check_shape("SyntheticDataset", image_shape_);
}

Example SyntheticDataset::get(int64_t index) const {
  check_index("SyntheticDataset", index, size_);
  // Example i owns Philox offsets 2i (image bytes, 16 per block) and 2i + 1 (label), so no two
  // examples share a stream.
  const auto offset = 2 * static_cast<uint64_t>(index);
  Tensor image = empty(image_shape_, DType::u8);
  auto* pixels = static_cast<uint8_t*>(image.data_ptr());
  const auto nbytes = static_cast<uint64_t>(image.numel());
  for (uint64_t block = 0; block * 16 < nbytes; ++block) {
    const PhiloxCounter words = philox_block(seed_, offset, block);
    uint8_t bytes[16];
    // Little-endian byte order within each word, on any host, so a seed names the same images.
    for (int b = 0; b < 16; ++b) bytes[b] = static_cast<uint8_t>(words.x[b / 4] >> (8 * (b % 4)));
    const uint64_t begin = block * 16;
    std::memcpy(pixels + begin, bytes, std::min<uint64_t>(16, nbytes - begin));
  }
  Tensor label = empty({}, DType::i64);
  // The modulo bias is below num_classes / 2^32: irrelevant for benchmark data.
  *label.data<int64_t>() =
      static_cast<int64_t>(philox_word(seed_, offset + 1, 0) % static_cast<uint64_t>(num_classes_));
  return {image, label};
}

}  // namespace kiln::data
