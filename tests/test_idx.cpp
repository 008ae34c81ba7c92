#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/data/idx.h"
#include "kiln/kiln.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using Catch::Contains;
using kiln::data::IdxArray;
using kiln::data::MnistDataset;
using kiln::data::read_idx;
using kiln::testing::TempDir;

namespace {

using Bytes = std::vector<uint8_t>;

void put_be32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

Bytes idx_file(uint8_t type_code, const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes out = {0, 0, type_code, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_be32(out, d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes counting_bytes(size_t n, uint8_t start = 0) {
  Bytes out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(start + i);
  return out;
}

// Incompressible bytes, so that cutting a gzip file short cuts into the data.
Bytes noise_bytes(size_t n) {
  Bytes out(n);
  uint32_t x = 12345;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

void write_plain(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) > 0);
  REQUIRE(gzclose(f) == Z_OK);
}

std::string write_file(const TempDir& dir, const std::string& name, const Bytes& bytes, bool gz) {
  const std::string path = dir.file(gz ? name + ".gz" : name);
  if (gz)
    write_gz(path, bytes);
  else
    write_plain(path, bytes);
  return path;
}

std::string fashion_root() {
  const char* env = std::getenv("KILN_FASHION_MNIST");
  return env != nullptr ? env : "/usr/share/datasets/fashion-mnist";
}

// The raw decompressed bytes [offset, offset + n) of a gzip file, read without kiln.
Bytes raw_gz_bytes(const std::string& path, size_t offset, size_t n) {
  gzFile f = gzopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  Bytes skip(offset), out(n);
  REQUIRE(gzread(f, skip.data(), static_cast<unsigned>(offset)) == static_cast<int>(offset));
  REQUIRE(gzread(f, out.data(), static_cast<unsigned>(n)) == static_cast<int>(n));
  gzclose(f);
  return out;
}

}  // namespace

TEST_CASE("idx: reads a plain and a gzip u8 file") {
  TempDir dir("kiln_test_idx");
  const Bytes data = counting_bytes(2 * 3 * 4, 7);
  for (bool gz : {false, true}) {
    const std::string path = write_file(dir, "a.idx", idx_file(0x08, {2, 3, 4}, data), gz);
    const IdxArray a = read_idx(path);
    CHECK(a.type_code == 0x08);
    CHECK(a.dims == std::vector<int64_t>{2, 3, 4});
    CHECK(a.numel() == 24);
    CHECK(a.bytes == data);
    const kiln::Tensor t = kiln::data::idx_to_tensor(a);
    CHECK(t.dtype() == kiln::DType::u8);
    CHECK(t.shape() == kiln::Shape{2, 3, 4});
    CHECK(t.tolist()[5] == 12.0);
  }
}

TEST_CASE("idx: empty arrays and the gzip magic decides, not the name") {
  TempDir dir("kiln_test_idx");
  const IdxArray empty = read_idx(write_file(dir, "e.idx", idx_file(0x08, {0, 28}, {}), false));
  CHECK(empty.dims == std::vector<int64_t>{0, 28});
  CHECK(empty.bytes.empty());
  // A gzip file without the .gz suffix, and a plain file with it.
  const std::string gz_no_suffix = dir.file("gz_data");
  write_gz(gz_no_suffix, idx_file(0x08, {3}, {1, 2, 3}));
  CHECK(read_idx(gz_no_suffix).bytes == Bytes{1, 2, 3});
  const std::string plain_with_suffix = dir.file("plain.gz");
  write_plain(plain_with_suffix, idx_file(0x08, {3}, {4, 5, 6}));
  CHECK(read_idx(plain_with_suffix).bytes == Bytes{4, 5, 6});
}

TEST_CASE("idx: big-endian i32, f32 and f64 convert to host order") {
  TempDir dir("kiln_test_idx");
  Bytes i32_data;
  put_be32(i32_data, 1);
  put_be32(i32_data, 0xFFFFFFFEu);  // -2
  put_be32(i32_data, 70000);
  const kiln::Tensor i = kiln::data::idx_to_tensor(
      read_idx(write_file(dir, "i.idx", idx_file(0x0C, {3}, i32_data), false)));
  CHECK(i.dtype() == kiln::DType::i32);
  CHECK(i.tolist() == std::vector<double>{1, -2, 70000});

  Bytes f32_data;
  put_be32(f32_data, 0x3FC00000u);  // 1.5f
  put_be32(f32_data, 0xC0200000u);  // -2.5f
  const kiln::Tensor f = kiln::data::idx_to_tensor(
      read_idx(write_file(dir, "f.idx", idx_file(0x0D, {1, 2}, f32_data), true)));
  CHECK(f.dtype() == kiln::DType::f32);
  CHECK(f.shape() == kiln::Shape{1, 2});
  CHECK(f.tolist() == std::vector<double>{1.5, -2.5});

  Bytes f64_data;
  put_be32(f64_data, 0x400C0000u);  // 3.5 (high word first)
  put_be32(f64_data, 0);
  const kiln::Tensor d = kiln::data::idx_to_tensor(
      read_idx(write_file(dir, "d.idx", idx_file(0x0E, {1}, f64_data), false)));
  CHECK(d.dtype() == kiln::DType::f64);
  CHECK(d.tolist() == std::vector<double>{3.5});
}

TEST_CASE("idx: i8 and i16 read but have no tensor dtype") {
  TempDir dir("kiln_test_idx");
  const IdxArray a =
      read_idx(write_file(dir, "s.idx", idx_file(0x0B, {2}, {0, 1, 0xFF, 0xFF}), false));
  CHECK(a.type_code == 0x0B);
  CHECK(a.bytes.size() == 4);
  CHECK_THROWS_AS(kiln::data::idx_to_tensor(a), kiln::DTypeError);
  CHECK_THROWS_WITH(kiln::data::idx_to_tensor(a), Contains("idx_to_tensor") && Contains("0x0b"));
}

TEST_CASE("idx: corrupt files fail naming path, field and byte offset") {
  struct Case {
    const char* name;
    Bytes bytes;
    const char* field;
    int64_t plain_offset;
    int64_t gz_offset;
    const char* detail;
  };
  Bytes bad_magic = idx_file(0x08, {4}, counting_bytes(4));
  bad_magic[1] = 0x03;
  const Bytes header_cut = Bytes{0, 0, 0x08, 2, 0, 0, 0, 5, 0, 0};
  const std::vector<Case> cases = {
      {"bad magic", bad_magic, "magic", 0, 0, "not an IDX file"},
      {"shorter than the magic", Bytes{0, 0}, "magic", 0, 0, "fewer than the 4-byte magic"},
      {"unknown type code", idx_file(0x07, {4}, counting_bytes(4)), "type code", 2, 2, "0x07"},
      {"type code 0x0A", idx_file(0x0A, {4}, counting_bytes(4)), "type code", 2, 2, "0x0a"},
      {"zero dims", Bytes{0, 0, 0x08, 0}, "number of dims", 3, 3, "got 0"},
      {"five dims", idx_file(0x08, {1, 1, 1, 1, 1}, {9}), "number of dims", 3, 3, "got 5"},
      {"header cut inside dim 1", header_cut, "dim 1", 8, 8, "inside the 2-dim header"},
      {"dims overflow", idx_file(0x0E, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}), "dim 1", 8, 8,
       "more than 2^63 bytes"},
      {"truncated data", idx_file(0x08, {10}, counting_bytes(5)), "data", 8, 13, "truncated"},
      {"trailing bytes", idx_file(0x08, {4}, counting_bytes(6)), "data", 12, 12, "trailing"},
      {"dims far beyond the file", idx_file(0x08, {1u << 30, 1u << 30}, counting_bytes(3)), "data",
       12, 12, "bytes of data"},
      {"i32 data cut mid-element", idx_file(0x0C, {2}, counting_bytes(6)), "data", 8, 14,
       "truncated"},
  };
  TempDir dir("kiln_test_idx");
  for (const Case& c : cases) {
    for (bool gz : {false, true}) {
      INFO(c.name << (gz ? " (gzip)" : " (plain)"));
      const std::string path = write_file(dir, "bad.idx", c.bytes, gz);
      const std::string offset = "byte offset " + std::to_string(gz ? c.gz_offset : c.plain_offset);
      CHECK_THROWS_AS(read_idx(path), kiln::ValueError);
      CHECK_THROWS_WITH(read_idx(path), Contains(path) && Contains(c.field) && Contains(offset) &&
                                            Contains(c.detail));
    }
  }
}

TEST_CASE("idx: a truncated gzip stream is an error, wherever it is cut") {
  TempDir dir("kiln_test_idx");
  const Bytes data = noise_bytes(4000);
  const std::string whole = dir.file("whole.gz");
  write_gz(whole, idx_file(0x08, {4000}, data));
  const auto compressed = static_cast<int64_t>(fs::file_size(whole));
  // Cut in the middle of the deflate data, and cut only the 8-byte CRC/size trailer.
  for (int64_t keep : {compressed / 2, compressed - 4}) {
    INFO("keeping " << keep << " of " << compressed << " bytes");
    const std::string path = dir.file("cut" + std::to_string(keep) + ".gz");
    fs::copy_file(whole, path);
    fs::resize_file(path, static_cast<uintmax_t>(keep));
    CHECK_THROWS_AS(read_idx(path), kiln::ValueError);
    CHECK_THROWS_WITH(read_idx(path),
                      Contains(path) && Contains("data at byte offset") && Contains("truncated"));
  }
  CHECK(read_idx(whole).bytes == data);
}

TEST_CASE("idx: a gzip file with a corrupt checksum is an error") {
  TempDir dir("kiln_test_idx");
  const std::string path = dir.file("crc.gz");
  write_gz(path, idx_file(0x08, {64}, noise_bytes(64)));
  Bytes file(fs::file_size(path));
  {
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(file.data()), static_cast<std::streamsize>(file.size()));
  }
  file[file.size() - 8] ^= 0xFF;  // first byte of the CRC32 trailer
  write_plain(path, file);
  CHECK_THROWS_AS(read_idx(path), kiln::ValueError);
  CHECK_THROWS_WITH(read_idx(path), Contains(path) && Contains("gzip stream at byte offset") &&
                                        Contains("incorrect data check"));
}

TEST_CASE("idx: a missing file names its path") {
  CHECK_THROWS_AS(read_idx("/nonexistent/kiln/file.idx"), kiln::ValueError);
  CHECK_THROWS_WITH(read_idx("/nonexistent/kiln/file.idx"), Contains("/nonexistent/kiln/file.idx"));
}

TEST_CASE("idx: MnistDataset from small files") {
  TempDir dir("kiln_test_idx");
  const Bytes pixels = counting_bytes(3 * 2 * 2);
  const std::string images = write_file(dir, "img", idx_file(0x08, {3, 2, 2}, pixels), true);
  const std::string labels = write_file(dir, "lab", idx_file(0x08, {3}, {4, 0, 9}), false);
  const MnistDataset ds(images, labels);
  REQUIRE(ds.size() == 3);
  CHECK(ds.images().shape() == kiln::Shape{3, 1, 2, 2});
  CHECK(ds.images().dtype() == kiln::DType::u8);
  CHECK(ds.labels().dtype() == kiln::DType::i64);
  CHECK(ds.labels().tolist() == std::vector<double>{4, 0, 9});
  kiln::data::Example e = ds.get(2);
  REQUIRE(e.size() == 2);
  CHECK(e[0].shape() == kiln::Shape{1, 2, 2});
  CHECK(e[0].dtype() == kiln::DType::u8);
  CHECK(e[0].tolist() == std::vector<double>{8, 9, 10, 11});
  CHECK(e[1].dim() == 0);
  CHECK(e[1].dtype() == kiln::DType::i64);
  CHECK(e[1].item<int64_t>() == 9);
  // The example owns its data: writing to it leaves the dataset unchanged.
  e[0].fill_(0);
  CHECK(ds.get(2)[0].tolist() == std::vector<double>{8, 9, 10, 11});
  CHECK_THROWS_AS(ds.get(3), kiln::IndexError);
  CHECK_THROWS_AS(ds.get(-1), kiln::IndexError);
  CHECK_THROWS_WITH(ds.get(3), Contains("MnistDataset") && Contains("3"));
}

TEST_CASE("idx: MnistDataset rejects mismatched counts, bad labels and wrong layouts") {
  TempDir dir("kiln_test_idx");
  const std::string images =
      write_file(dir, "img", idx_file(0x08, {3, 2, 2}, counting_bytes(12)), false);
  const std::string two_labels = write_file(dir, "two", idx_file(0x08, {2}, {1, 2}), true);
  CHECK_THROWS_AS(MnistDataset(images, two_labels), kiln::ValueError);
  CHECK_THROWS_WITH(MnistDataset(images, two_labels), Contains(images) && Contains(two_labels) &&
                                                          Contains("3 images") &&
                                                          Contains("2 labels"));

  const std::string bad_label = write_file(dir, "bad", idx_file(0x08, {3}, {1, 10, 2}), false);
  CHECK_THROWS_AS(MnistDataset(images, bad_label), kiln::ValueError);
  CHECK_THROWS_WITH(MnistDataset(images, bad_label), Contains(bad_label) && Contains("label 10") &&
                                                         Contains("example 1") &&
                                                         Contains("byte offset 9"));

  const std::string flat_images =
      write_file(dir, "flat", idx_file(0x08, {3, 4}, counting_bytes(12)), false);
  const std::string labels = write_file(dir, "lab", idx_file(0x08, {3}, {1, 2, 3}), false);
  CHECK_THROWS_WITH(MnistDataset(flat_images, labels),
                    Contains(flat_images) && Contains("[N, H, W]"));
  const std::string i32_labels = write_file(dir, "i32", idx_file(0x0C, {1}, {0, 0, 0, 1}), false);
  CHECK_THROWS_WITH(MnistDataset(images, i32_labels), Contains(i32_labels) && Contains("i32"));
}

TEST_CASE("idx: MnistDataset::fashion finds plain or gz files and names what is missing") {
  TempDir dir("kiln_test_idx");
  write_file(dir, "t10k-images-idx3-ubyte", idx_file(0x08, {2, 1, 1}, {5, 6}), false);
  write_file(dir, "t10k-labels-idx1-ubyte", idx_file(0x08, {2}, {7, 8}), true);
  const MnistDataset test = MnistDataset::fashion(dir.path.string(), false);
  CHECK(test.size() == 2);
  CHECK(test.labels().tolist() == std::vector<double>{7, 8});
  CHECK(MnistDataset::mnist(dir.path.string(), false).size() == 2);
  CHECK_THROWS_AS(MnistDataset::fashion(dir.path.string(), true), kiln::ValueError);
  CHECK_THROWS_WITH(MnistDataset::fashion(dir.path.string(), true),
                    Contains("train-images-idx3-ubyte") && Contains("train-images-idx3-ubyte.gz"));
}

TEST_CASE("idx: Fashion-MNIST train set") {
  const std::string root = fashion_root();
  INFO("Fashion-MNIST is expected in " << root << " (set KILN_FASHION_MNIST to move it)");
  const MnistDataset train = MnistDataset::fashion(root, true);
  REQUIRE(train.size() == 60000);
  CHECK(train.images().shape() == kiln::Shape{60000, 1, 28, 28});
  CHECK(train.images().dtype() == kiln::DType::u8);
  CHECK(train.labels().shape() == kiln::Shape{60000});
  CHECK(train.labels().dtype() == kiln::DType::i64);

  const std::string labels_path = root + "/train-labels-idx1-ubyte.gz";
  const std::string images_path = root + "/train-images-idx3-ubyte.gz";
  const Bytes first_labels = raw_gz_bytes(labels_path, 8, 2);
  CHECK(first_labels[0] == 9);
  const kiln::data::Example first = train.get(0);
  CHECK(first[1].item<int64_t>() == 9);
  CHECK(train.get(1)[1].item<int64_t>() == first_labels[1]);

  const Bytes image0 = raw_gz_bytes(images_path, 16, 28 * 28);
  const std::vector<double> got = first[0].tolist();
  REQUIRE(got.size() == image0.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == image0[i]);
  CHECK(first[0].shape() == kiln::Shape{1, 28, 28});

  // Fashion-MNIST is balanced: 6000 of each class.
  std::vector<int64_t> counts(10, 0);
  for (double label : train.labels().tolist()) ++counts[static_cast<size_t>(label)];
  CHECK(counts == std::vector<int64_t>(10, 6000));
}

TEST_CASE("idx: Fashion-MNIST test set") {
  const std::string root = fashion_root();
  INFO("Fashion-MNIST is expected in " << root << " (set KILN_FASHION_MNIST to move it)");
  const MnistDataset test = MnistDataset::fashion(root, false);
  REQUIRE(test.size() == 10000);
  CHECK(test.images().shape() == kiln::Shape{10000, 1, 28, 28});
  const Bytes first_label = raw_gz_bytes(root + "/t10k-labels-idx1-ubyte.gz", 8, 1);
  CHECK(first_label[0] == 9);
  CHECK(test.get(0)[1].item<int64_t>() == 9);
  const Bytes last_image = raw_gz_bytes(root + "/t10k-images-idx3-ubyte.gz", 16 + 9999 * 784, 784);
  const std::vector<double> got = test.get(9999)[0].tolist();
  REQUIRE(got.size() == last_image.size());
  CHECK(std::equal(got.begin(), got.end(), last_image.begin()));
}
