#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/data/cifar.h"
#include "kiln/kiln.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using Catch::Contains;
using kiln::data::CifarDataset;
using kiln::testing::TempDir;

namespace {

using Bytes = std::vector<uint8_t>;

// Pixel p of record r (across all files written by one test) is (r * 7 + p) mod 256.
uint8_t pixel(int64_t record, int64_t p) {
  return static_cast<uint8_t>((record * 7 + p) % 256);
}

// Records [first, first + count) with the given labels: one byte for CIFAR-10, coarse and fine
// for CIFAR-100 (the coarse one is deliberately out of the fine range, to catch using it).
Bytes cifar_records(int variant, int64_t first, const std::vector<uint8_t>& labels) {
  Bytes out;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (variant == 100) out.push_back(static_cast<uint8_t>(200 + i));
    out.push_back(labels[i]);
    for (int64_t p = 0; p < 3072; ++p) out.push_back(pixel(first + static_cast<int64_t>(i), p));
  }
  return out;
}

std::string write(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
  return path;
}

void check_record(const CifarDataset& ds, int64_t record, int64_t label) {
  const kiln::data::Example e = ds.get(record);
  REQUIRE(e.size() == 2);
  CHECK(e[0].shape() == kiln::Shape{3, 32, 32});
  CHECK(e[0].dtype() == kiln::DType::u8);
  CHECK(e[1].dim() == 0);
  CHECK(e[1].dtype() == kiln::DType::i64);
  CHECK(e[1].item<int64_t>() == label);
  const std::vector<double> got = e[0].tolist();
  bool all_match = true;
  for (int64_t p = 0; p < 3072; ++p)
    all_match = all_match && got[static_cast<size_t>(p)] == pixel(record, p);
  CHECK(all_match);
}

}  // namespace

TEST_CASE("cifar: CIFAR-10 records across two files") {
  TempDir dir("kiln_test_cifar");
  const std::string a = write(dir.file("a.bin"), cifar_records(10, 0, {3, 9}));
  const std::string b = write(dir.file("b.bin"), cifar_records(10, 2, {0}));
  const CifarDataset ds({a, b}, 10);
  REQUIRE(ds.size() == 3);
  CHECK(ds.num_classes() == 10);
  CHECK(ds.images().shape() == kiln::Shape{3, 3, 32, 32});
  CHECK(ds.labels().tolist() == std::vector<double>{3, 9, 0});
  check_record(ds, 0, 3);
  check_record(ds, 1, 9);
  check_record(ds, 2, 0);
  CHECK_THROWS_AS(ds.get(3), kiln::IndexError);
}

TEST_CASE("cifar: CIFAR-100 uses the fine label") {
  TempDir dir("kiln_test_cifar");
  const std::string f = write(dir.file("train.bin"), cifar_records(100, 0, {99, 0, 42}));
  const CifarDataset ds({f}, 100);
  REQUIRE(ds.size() == 3);
  CHECK(ds.labels().tolist() == std::vector<double>{99, 0, 42});
  check_record(ds, 0, 99);
  check_record(ds, 2, 42);
}

TEST_CASE("cifar: from_root finds the standard files, in root or the archive folder") {
  TempDir dir("kiln_test_cifar");
  const fs::path nested = dir.path / "cifar-10-batches-bin";
  fs::create_directory(nested);
  for (int i = 1; i <= 5; ++i)
    write((nested / ("data_batch_" + std::to_string(i) + ".bin")).string(),
          cifar_records(10, i - 1, {static_cast<uint8_t>(i)}));
  write((nested / "test_batch.bin").string(), cifar_records(10, 0, {7, 8}));
  const CifarDataset train = CifarDataset::from_root(dir.path.string(), true, 10);
  CHECK(train.labels().tolist() == std::vector<double>{1, 2, 3, 4, 5});
  check_record(train, 4, 5);
  CHECK(CifarDataset::from_root(nested.string(), false, 10).size() == 2);

  write(dir.file("test.bin"), cifar_records(100, 0, {55}));
  CHECK(CifarDataset::from_root(dir.path.string(), false, 100).labels().tolist() ==
        std::vector<double>{55});
  CHECK_THROWS_AS(CifarDataset::from_root(dir.path.string(), true, 100), kiln::ValueError);
  CHECK_THROWS_WITH(CifarDataset::from_root(dir.path.string(), true, 100),
                    Contains("train.bin") && Contains("cifar-100-binary"));
}

TEST_CASE("cifar: a file that is not whole records names its size") {
  TempDir dir("kiln_test_cifar");
  Bytes bytes = cifar_records(10, 0, {1, 2});
  bytes.pop_back();
  const std::string f = write(dir.file("short.bin"), bytes);
  CHECK_THROWS_AS(CifarDataset({f}, 10), kiln::ValueError);
  CHECK_THROWS_WITH(CifarDataset({f}, 10),
                    Contains(f) && Contains("6145 bytes") && Contains("3073-byte record"));
  // A CIFAR-10 file read as CIFAR-100 is caught the same way.
  const std::string ten = write(dir.file("ten.bin"), cifar_records(10, 0, {1, 2}));
  CHECK_THROWS_WITH(CifarDataset({ten}, 100), Contains(ten) && Contains("3074-byte record"));
}

TEST_CASE("cifar: a label out of range names file, record and byte offset") {
  TempDir dir("kiln_test_cifar");
  const std::string ok = write(dir.file("ok.bin"), cifar_records(10, 0, {1}));
  const std::string bad = write(dir.file("bad.bin"), cifar_records(10, 0, {1, 2, 10}));
  CHECK_THROWS_AS(CifarDataset({ok, bad}, 10), kiln::ValueError);
  CHECK_THROWS_WITH(CifarDataset({ok, bad}, 10), Contains(bad) && Contains("record 2") &&
                                                     Contains("label 10") &&
                                                     Contains("byte offset 6146"));
  const std::string bad100 = write(dir.file("bad100.bin"), cifar_records(100, 0, {5, 100}));
  CHECK_THROWS_WITH(CifarDataset({bad100}, 100),
                    Contains(bad100) && Contains("record 1") && Contains("byte offset 3075"));
}

TEST_CASE("cifar: bad arguments") {
  TempDir dir("kiln_test_cifar");
  const std::string f = write(dir.file("a.bin"), cifar_records(10, 0, {1}));
  CHECK_THROWS_AS(CifarDataset({f}, 20), kiln::ValueError);
  CHECK_THROWS_WITH(CifarDataset({f}, 20), Contains("variant") && Contains("20"));
  CHECK_THROWS_AS(CifarDataset({}, 10), kiln::ValueError);
  CHECK_THROWS_WITH(CifarDataset({dir.file("missing.bin")}, 10), Contains("missing.bin"));
}

TEST_CASE("cifar: an empty file is an empty dataset") {
  TempDir dir("kiln_test_cifar");
  const std::string f = write(dir.file("empty.bin"), {});
  const CifarDataset ds({f}, 10);
  CHECK(ds.size() == 0);
  CHECK(ds.images().shape() == kiln::Shape{0, 3, 32, 32});
}
