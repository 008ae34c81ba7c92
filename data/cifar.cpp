#include "kiln/data/cifar.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/open_error.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

int64_t label_bytes(int variant) {
  return variant == 10 ? 1 : 2;
}

// The whole file, after checking that it holds whole records.
std::vector<uint8_t> read_records(const std::string& path, int64_t record_bytes) {
  std::error_code ec;
  KILN_CHECK(fs::is_regular_file(path, ec), ValueError, "CifarDataset: cannot open '{}': {}", path,
             unreadable_file_reason(path));
  const auto file_bytes = static_cast<int64_t>(fs::file_size(path, ec));
  KILN_CHECK(!ec, ValueError, "CifarDataset: cannot read the size of '{}': {}", path, ec.message());
  KILN_CHECK(file_bytes % record_bytes == 0, ValueError,
             "CifarDataset: '{}' is {} bytes, not a multiple of the {}-byte record ({} whole "
             "records and {} bytes over)",
             path, file_bytes, record_bytes, file_bytes / record_bytes, file_bytes % record_bytes);
  std::vector<uint8_t> bytes(static_cast<size_t>(file_bytes));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  KILN_CHECK(file != nullptr, ValueError, "CifarDataset: cannot open '{}': {}", path,
             open_failure_reason(path, errno));
  const size_t got = std::fread(bytes.data(), 1, bytes.size(), file.get());
  KILN_CHECK(got == bytes.size(), ValueError,
             "CifarDataset: '{}': read {} of its {} bytes (the file changed while being read?)",
             path, got, bytes.size());
  return bytes;
}

std::string find_folder(const std::string& root, const std::string& first_file,
                        const std::string& archive_folder) {
  std::error_code ec;
  if (fs::exists(fs::path(root) / first_file, ec)) return root;
  const fs::path nested = fs::path(root) / archive_folder;
  if (fs::exists(nested / first_file, ec)) return nested.string();
  throw ValueError(fmt::format("CifarDataset::from_root: found '{}' neither in '{}' nor in '{}'",
                               first_file, root, nested.string()));
}

}  // namespace

CifarDataset::CifarDataset(std::vector<std::string> files, int variant) : variant_(variant) {
  KILN_CHECK(variant == 10 || variant == 100, ValueError,
             "CifarDataset: variant must be 10 or 100, got {}", variant);
  KILN_CHECK(!files.empty(), ValueError, "CifarDataset: expected at least one file, got none");
  const int64_t record_bytes = label_bytes(variant) + kImageBytes;
  // The label is the last label byte: CIFAR-100's fine label follows its coarse one.
  const int64_t label_offset = label_bytes(variant) - 1;

  std::vector<std::vector<uint8_t>> contents;
  int64_t total = 0;
  for (const std::string& path : files) {
    contents.push_back(read_records(path, record_bytes));
    const auto records = static_cast<int64_t>(contents.back().size()) / record_bytes;
    for (int64_t r = 0; r < records; ++r) {
      const int64_t offset = r * record_bytes + label_offset;
      const uint8_t label = contents.back()[static_cast<size_t>(offset)];
      KILN_CHECK(label < variant, ValueError,
                 "CifarDataset: '{}': record {} has label {} at byte offset {}, expected a label "
                 "in [0, {})",
                 path, r, label, offset, variant);
    }
    total += records;
  }

  images_ = empty({total, kChannels, kHeight, kWidth}, DType::u8);
  labels_ = empty({total}, DType::i64);
  uint8_t* image_out = images_.data<uint8_t>();
  int64_t* label_out = labels_.data<int64_t>();
  for (const auto& bytes : contents) {
    for (size_t at = 0; at < bytes.size(); at += static_cast<size_t>(record_bytes)) {
      *label_out++ = bytes[at + static_cast<size_t>(label_offset)];
      std::memcpy(image_out, bytes.data() + at + label_bytes(variant), kImageBytes);
      image_out += kImageBytes;
    }
  }
}

CifarDataset CifarDataset::from_root(const std::string& root, bool train, int variant) {
  KILN_CHECK(variant == 10 || variant == 100, ValueError,
             "CifarDataset::from_root: variant must be 10 or 100, got {}", variant);
  std::vector<std::string> names;
  if (variant == 10) {
    if (train) {
      for (int i = 1; i <= 5; ++i) names.push_back(fmt::format("data_batch_{}.bin", i));
    } else {
      names.push_back("test_batch.bin");
    }
  } else {
    names.push_back(train ? "train.bin" : "test.bin");
  }
  const std::string folder =
      find_folder(root, names[0], variant == 10 ? "cifar-10-batches-bin" : "cifar-100-binary");
  std::vector<std::string> files;
  for (const std::string& name : names) files.push_back((fs::path(folder) / name).string());
  return CifarDataset(std::move(files), variant);
}

int64_t CifarDataset::size() const {
  return labels_.size(0);
}

Example CifarDataset::get(int64_t index) const {
  check_index("CifarDataset", index, size());
  Tensor image = empty({kChannels, kHeight, kWidth}, DType::u8);
  std::memcpy(image.data_ptr(), images_.data<uint8_t>() + index * kImageBytes, kImageBytes);
  Tensor label = empty({}, DType::i64);
  *label.data<int64_t>() = labels_.data<int64_t>()[index];
  return {image, label};
}

}  // namespace kiln::data
