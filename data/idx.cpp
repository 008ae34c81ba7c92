#include "kiln/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <system_error>

#include "kiln/core/error.h"
#include "kiln/core/open_error.h"

namespace kiln::data {
namespace {

// Deflate cannot expand data more than 1032:1, which bounds what a gzip file of a given size can
// hold before a single byte has been decompressed.
constexpr uint64_t kMaxDeflateRatio = 1032;
// Reading a gzip file grows the buffer as data arrives, so a header that lies about its size
// costs at most this much more than the file really holds.
constexpr uint64_t kReadChunkBytes = uint64_t{16} << 20;
constexpr uint64_t kMaxReserveBytes = uint64_t{64} << 20;

[[noreturn]] void fail(const std::string& path, const std::string& field, uint64_t offset,
                       const std::string& detail) {
  throw ValueError(
      fmt::format("read_idx: '{}': {} at byte offset {}: {}", path, field, offset, detail));
}

bool starts_with_gzip_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  KILN_CHECK(f != nullptr, ValueError, "read_idx: cannot open '{}': {}", path,
             open_failure_reason(path, errno));
  unsigned char magic[2] = {0, 0};
  size_t n = std::fread(magic, 1, 2, f);
  std::fclose(f);
  return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

// Reads a plain or gzip file front to back. zlib passes plain files through unchanged, so both
// take one path; offsets are in the decompressed stream.
class FileReader {
 public:
  explicit FileReader(const std::string& path) : path_(path) {
    std::error_code ec;
    KILN_CHECK(std::filesystem::is_regular_file(path, ec), ValueError,
               "read_idx: cannot open '{}': {}", path, unreadable_file_reason(path));
    file_bytes_ = std::filesystem::file_size(path, ec);
    KILN_CHECK(!ec, ValueError, "read_idx: cannot read the size of '{}': {}", path, ec.message());
    gzip_ = starts_with_gzip_magic(path);
    file_ = gzopen(path.c_str(), "rb");
    KILN_CHECK(file_ != nullptr, ValueError, "read_idx: cannot open '{}': {}", path,
               open_failure_reason(path, errno));
    gzbuffer(file_, 1 << 17);
  }
  ~FileReader() { gzclose(file_); }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  bool gzip() const { return gzip_; }
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t position() const { return position_; }

  // Returns the bytes read: fewer than n only at the end of the data. A gzip stream cut short
  // throws, naming `field` and the offset where the data stops; a corrupt one (bad deflate data
  // or checksum) throws naming the gzip stream, since zlib reads ahead and cannot say which
  // field the damage lies in.
  uint64_t read(void* dst, uint64_t n, const std::string& field, uint64_t field_offset) {
    uint64_t done = 0;
    int errnum = Z_OK;
    while (done < n) {
      auto chunk = static_cast<unsigned>(std::min<uint64_t>(n - done, 1u << 30));
      int got = gzread(file_, static_cast<char*>(dst) + done, chunk);
      const char* message = gzerror(file_, &errnum);
      if (got < 0 || (errnum != Z_OK && errnum != Z_BUF_ERROR)) {
        std::string what = message;
        if (what.rfind(path_ + ": ", 0) == 0) what.erase(0, path_.size() + 2);
        fail(path_, "gzip stream", position_ + done,
             fmt::format("the compressed data is corrupt ({})", what));
      }
      done += static_cast<uint64_t>(got);
      if (static_cast<unsigned>(got) < chunk) break;
    }
    // zlib flags a cut-off stream as soon as it reads ahead to the cut, but still hands out
    // everything before it: the read fails only once it comes up short.
    if (done < n && errnum == Z_BUF_ERROR)
      fail(path_, field, field_offset + done,
           fmt::format("the gzip stream is truncated: it ends after {} decompressed bytes",
                       position_ + done));
    position_ += done;
    return done;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
  bool gzip_ = false;
  uint64_t file_bytes_ = 0;
  uint64_t position_ = 0;
};

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

const char* idx_type_name(uint8_t type_code) {
  switch (type_code) {
    case kIdxU8:
      return "u8";
    case kIdxI8:
      return "i8";
    case kIdxI16:
      return "i16";
    case kIdxI32:
      return "i32";
    case kIdxF32:
      return "f32";
    case kIdxF64:
      return "f64";
    default:
      return "unknown";
  }
}

}  // namespace

int64_t IdxArray::numel() const {
  return shape_numel(dims);
}

size_t idx_element_size(uint8_t type_code) {
  switch (type_code) {
    case kIdxU8:
    case kIdxI8:
      return 1;
    case kIdxI16:
      return 2;
    case kIdxI32:
    case kIdxF32:
      return 4;
    case kIdxF64:
      return 8;
    default:
      return 0;
  }
}

IdxArray read_idx(const std::string& path) {
  FileReader in(path);
  uint8_t magic[4];
  uint64_t got = in.read(magic, 4, "magic", 0);
  if (got < 4)
    fail(path, "magic", 0,
         fmt::format("the file holds {} bytes, fewer than the 4-byte magic", got));
  if (magic[0] != 0 || magic[1] != 0)
    fail(path, "magic", 0,
         fmt::format("the first two bytes must be 0, got 0x{:02x} 0x{:02x} (not an IDX file)",
                     magic[0], magic[1]));
  IdxArray array;
  array.type_code = magic[2];
  const uint64_t element_size = idx_element_size(array.type_code);
  if (element_size == 0)
    fail(path, "type code", 2,
         fmt::format("expected 0x08 (u8), 0x09 (i8), 0x0B (i16), 0x0C (i32), 0x0D (f32) or "
                     "0x0E (f64), got 0x{:02x}",
                     array.type_code));
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4)
    fail(path, "number of dims", 3, fmt::format("expected 1 to 4, got {}", ndims));

  // Bytes, not elements, must fit: the product is checked against int64 after each dim.
  uint64_t data_bytes = element_size;
  for (int k = 0; k < ndims; ++k) {
    const uint64_t offset = 4 + 4 * static_cast<uint64_t>(k);
    const std::string field = fmt::format("dim {}", k);
    uint8_t word[4];
    if (in.read(word, 4, field, offset) < 4)
      fail(path, field, offset,
           fmt::format("the file ends after {} bytes, inside the {}-dim header", in.position(),
                       ndims));
    const uint32_t dim = read_be32(word);
    array.dims.push_back(dim);
    if (dim != 0 && data_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim)
      fail(path, field, offset,
           fmt::format("the dims so far, {}, of {} elements need more than 2^63 bytes",
                       shape_str(array.dims), idx_type_name(array.type_code)));
    data_bytes *= dim;
  }

  const uint64_t header_bytes = 4 + 4 * static_cast<uint64_t>(ndims);
  const std::string dims_text =
      fmt::format("dims {} of {}", shape_str(array.dims), idx_type_name(array.type_code));
  if (!in.gzip()) {
    const uint64_t available = in.file_bytes() - header_bytes;
    if (available < data_bytes)
      fail(path, "data", header_bytes,
           fmt::format("the {} need {} bytes of data but the file holds {} (truncated)", dims_text,
                       data_bytes, available));
    if (available > data_bytes)
      fail(path, "data", header_bytes + data_bytes,
           fmt::format("the {} need {} bytes of data but {} more bytes follow (trailing bytes)",
                       dims_text, data_bytes, available - data_bytes));
  } else if (data_bytes > kMaxDeflateRatio * in.file_bytes()) {
    fail(path, "data", header_bytes,
         fmt::format("the {} need {} bytes of data, more than a {}-byte gzip file can hold "
                     "(deflate expands at most 1032:1)",
                     dims_text, data_bytes, in.file_bytes()));
  }

  array.bytes.reserve(std::min(data_bytes, kMaxReserveBytes));
  uint64_t done = 0;
  while (done < data_bytes) {
    const uint64_t chunk = std::min(data_bytes - done, kReadChunkBytes);
    array.bytes.resize(done + chunk);
    const uint64_t n = in.read(array.bytes.data() + done, chunk, "data", header_bytes + done);
    done += n;
    if (n < chunk) break;
  }
  if (done < data_bytes)
    fail(path, "data", header_bytes + done,
         fmt::format("the {} need {} bytes of data but the file ends after {} (truncated)",
                     dims_text, data_bytes, done));
  uint8_t extra;
  if (in.read(&extra, 1, "data", header_bytes + data_bytes) != 0)
    fail(path, "data", header_bytes + data_bytes,
         fmt::format("the {} need {} bytes of data but more follow (trailing bytes)", dims_text,
                     data_bytes));
  return array;
}

Tensor idx_to_tensor(const IdxArray& array) {
  DType dtype;
  switch (array.type_code) {
    case kIdxU8:
      dtype = DType::u8;
      break;
    case kIdxI32:
      dtype = DType::i32;
      break;
    case kIdxF32:
      dtype = DType::f32;
      break;
    case kIdxF64:
      dtype = DType::f64;
      break;
    default:
      throw DTypeError(fmt::format("idx_to_tensor: IDX type code 0x{:02x} ({}) has no kiln dtype",
                                   array.type_code, idx_type_name(array.type_code)));
  }
  const size_t element_size = dtype_size(dtype);
  KILN_CHECK(array.bytes.size() == static_cast<size_t>(array.numel()) * element_size, ValueError,
             "idx_to_tensor: dims {} need {} bytes, the array holds {}", shape_str(array.dims),
             static_cast<size_t>(array.numel()) * element_size, array.bytes.size());
  Tensor out = empty(array.dims, dtype);
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  std::memcpy(dst, array.bytes.data(), array.bytes.size());
  if constexpr (std::endian::native == std::endian::little) {
    for (size_t i = 0; i + element_size <= array.bytes.size(); i += element_size)
      std::reverse(dst + i, dst + i + element_size);
  }
  return out;
}

namespace {

std::string find_standard_file(const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path plain = fs::path(root) / name;
  fs::path gz = plain;
  gz += ".gz";
  std::error_code ec;
  if (fs::exists(plain, ec)) return plain.string();
  if (fs::exists(gz, ec)) return gz.string();
  throw ValueError(
      fmt::format("MnistDataset: neither '{}' nor '{}' exists", plain.string(), gz.string()));
}

MnistDataset from_standard_files(const std::string& root, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  std::string images = find_standard_file(root, prefix + "-images-idx3-ubyte");
  std::string labels = find_standard_file(root, prefix + "-labels-idx1-ubyte");
  return MnistDataset(images, labels);
}

}  // namespace

MnistDataset::MnistDataset(const std::string& images_path, const std::string& labels_path) {
  const IdxArray images = read_idx(images_path);
  KILN_CHECK(images.type_code == kIdxU8 && images.dims.size() == 3, ValueError,
             "MnistDataset: '{}': expected u8 images [N, H, W], got {} dims {}", images_path,
             idx_type_name(images.type_code), shape_str(images.dims));
  const IdxArray labels = read_idx(labels_path);
  KILN_CHECK(labels.type_code == kIdxU8 && labels.dims.size() == 1, ValueError,
             "MnistDataset: '{}': expected u8 labels [N], got {} dims {}", labels_path,
             idx_type_name(labels.type_code), shape_str(labels.dims));
  const int64_t n = images.dims[0];
  KILN_CHECK(n == labels.dims[0], ValueError,
             "MnistDataset: '{}' holds {} images but '{}' holds {} labels", images_path, n,
             labels_path, labels.dims[0]);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t label = labels.bytes[static_cast<size_t>(i)];
    KILN_CHECK(label < kNumClasses, ValueError,
               "MnistDataset: '{}': label {} of example {} (byte offset {}) is not in [0, {})",
               labels_path, label, i, 8 + i, kNumClasses);
  }
  images_ = empty({n, 1, images.dims[1], images.dims[2]}, DType::u8);
  std::memcpy(images_.data_ptr(), images.bytes.data(), images.bytes.size());
  labels_ = empty({n}, DType::i64);
  std::copy(labels.bytes.begin(), labels.bytes.end(), labels_.data<int64_t>());
}

MnistDataset MnistDataset::fashion(const std::string& root, bool train) {
  return from_standard_files(root, train);
}

MnistDataset MnistDataset::mnist(const std::string& root, bool train) {
  return from_standard_files(root, train);
}

int64_t MnistDataset::size() const {
  return labels_.size(0);
}

Example MnistDataset::get(int64_t index) const {
  check_index("MnistDataset", index, size());
  const Shape image_shape = {1, images_.size(2), images_.size(3)};
  const auto image_bytes = static_cast<size_t>(shape_numel(image_shape));
  Tensor image = empty(image_shape, DType::u8);
  std::memcpy(image.data_ptr(), images_.data<uint8_t>() + index * image_bytes, image_bytes);
  Tensor label = empty({}, DType::i64);
  *label.data<int64_t>() = labels_.data<int64_t>()[index];
  return {image, label};
}

}  // namespace kiln::data
