// safetensors checkpoints: round trips of every dtype and layout, the exact bytes of a small file,
// atomic replacement, and a loader that turns every malformed or truncated file into kiln::Error.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/nn/safetensors.h"
#include "temp_dir.h"

using namespace kiln;
using namespace kiln::nn;
namespace fs = std::filesystem;
using kiln::testing::TempDir;

namespace {

// A fresh directory under /tmp, removed with everything in it when the test ends.
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// A safetensors file from a header written by hand and the data section that follows it.
std::string file_bytes(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

// The raw bytes of a tensor in row-major order.
std::string raw(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

std::string f32_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

uint64_t header_length(const std::string& file) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(file[i])} << (8 * i);
  return n;
}

void check_same(const Tensor& got, const Tensor& want) {
  INFO(dtype_name(got.dtype()) << shape_str(got.shape()) << " vs " << dtype_name(want.dtype())
                               << shape_str(want.shape()));
  CHECK(got.dtype() == want.dtype());
  CHECK(got.shape() == want.shape());
  CHECK(got.device() == want.device());
  CHECK(got.is_contiguous());
  CHECK(raw(got) == raw(want));
}

// Values that exercise every byte of each dtype, reproducibly.
Tensor sample(DType dtype, const Shape& shape, uint64_t seed) {
  if (dtype == DType::boolean) return gt(testing::random_f64(shape, seed), 0.0);
  if (dtype == DType::u8) return testing::random_f64(shape, seed, 0, 250).to(dtype);
  if (is_integral(dtype)) return testing::random_f64(shape, seed, -1e6, 1e6).to(dtype);
  return testing::random_f64(shape, seed, -3, 3).to(dtype);
}

// Writes `bytes` to a file, loads it, and checks that it fails with a ValueError whose message
// starts with the loader's name and the path, and mentions each fragment.
void check_load_error(const std::string& bytes, std::initializer_list<const char*> fragments) {
  TempDir dir("kiln-safetensors");
  std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  std::string message;
  try {
    load_safetensors(path);
  } catch (const ValueError& e) {
    message = e.what();
  }
  INFO("message: " << message);
  REQUIRE(!message.empty());
  CHECK(message.rfind("load_safetensors: " + path + ":", 0) == 0);
  for (const char* fragment : fragments) CHECK_THAT(message, Catch::Contains(fragment));
}

std::string entry(const std::string& dtype, const std::string& shape, uint64_t begin,
                  uint64_t end) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// A small file with three dtypes, metadata and a zero-size tensor: the subject of the corruption
// tables below.
std::string small_valid_file(const TempDir& dir, TensorMap* tensors) {
  *tensors = {{"bias", sample(DType::f32, {3}, 1)},
              {"mask", sample(DType::boolean, {2, 2}, 2)},
              {"steps", sample(DType::i64, {}, 3)},
              {"empty", zeros({0, 2}, DType::f16)}};
  std::string path = dir.file("small.safetensors");
  save_safetensors(path, *tensors, {{"epoch", "3"}});
  return read_bytes(path);
}

// When a corrupted file still loads, its tensors must be the original ones, possibly renamed:
// each loaded tensor has the dtype, shape and bytes of one of the originals. An empty tensor may
// come back with another empty shape ([0, 2] -> [0, 3] changes no byte of the data).
void check_consistent(const SafetensorsFile& loaded, const TensorMap& original) {
  auto signature = [](const Tensor& t) {
    std::string shape = t.numel() == 0 ? "empty" : shape_str(t.shape());
    return std::string(dtype_name(t.dtype())) + shape + raw(t);
  };
  std::vector<std::string> got, want;
  for (const auto& [name, t] : loaded.tensors) got.push_back(signature(t));
  for (const auto& [name, t] : original) want.push_back(signature(t));
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  CHECK(got == want);
}

}  // namespace

// ---- round trips ----

TEST_CASE("safetensors: round trip of every dtype") {
  TempDir dir("kiln-safetensors");
  TensorMap tensors;
  for (DType d : kAllDTypes) tensors[dtype_name(d)] = sample(d, {2, 3}, 10 + static_cast<int>(d));
  std::string path = dir.file("all.safetensors");
  save_safetensors(path, tensors);
  SafetensorsFile loaded = load_safetensors(path);
  REQUIRE(loaded.tensors.size() == tensors.size());
  CHECK(loaded.metadata.empty());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    REQUIRE(loaded.tensors.count(name));
    check_same(loaded.tensors.at(name), t);
  }
}

TEST_CASE("safetensors: round trip of 0-dim and zero-size tensors") {
  TempDir dir("kiln-safetensors");
  TensorMap tensors = {{"scalar", scalar_tensor(2.5, DType::f64)},
                       {"scalar_bool", scalar_tensor(1, DType::boolean)},
                       {"empty", zeros({0}, DType::f32)},
                       {"empty_rows", zeros({0, 4}, DType::bf16)},
                       {"empty_middle", zeros({3, 0, 2}, DType::i32)},
                       {"after", tensor({7.f, 8.f})}};
  std::string path = dir.file("edge.safetensors");
  save_safetensors(path, tensors);
  SafetensorsFile loaded = load_safetensors(path);
  REQUIRE(loaded.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    check_same(loaded.tensors.at(name), t);
  }
  CHECK(loaded.tensors.at("scalar").dim() == 0);
  CHECK(loaded.tensors.at("scalar").item<double>() == 2.5);
  CHECK(loaded.tensors.at("after").tolist() == std::vector<double>{7, 8});
}

TEST_CASE("safetensors: an empty map round trips") {
  TempDir dir("kiln-safetensors");
  std::string path = dir.file("nothing.safetensors");
  save_safetensors(path, {});
  CHECK(read_bytes(path) == file_bytes("{}      "));
  SafetensorsFile loaded = load_safetensors(path);
  CHECK(loaded.tensors.empty());
  CHECK(loaded.metadata.empty());
}

TEST_CASE("safetensors: non-contiguous inputs are saved in row-major order") {
  TempDir dir("kiln-safetensors");
  Tensor base = testing::random_f64({4, 6}, 5);
  TensorMap tensors = {
      {"transposed", base.t()},
      {"strided", base.slice(1, 0, 6, 2)},
      {"expanded", testing::random_f64({1, 3}, 6).expand({4, 3})},
      {"column", base.select(1, 2)},
      {"permuted_i32", sample(DType::i32, {2, 3, 4}, 7).permute({2, 0, 1})},
      {"non_contiguous_f16", testing::non_contiguous(sample(DType::f16, {3, 5}, 8))}};
  for (const auto& [name, t] : tensors) {
    if (name != "column") CHECK_FALSE(t.is_contiguous());
  }
  std::string path = dir.file("views.safetensors");
  save_safetensors(path, tensors);
  SafetensorsFile loaded = load_safetensors(path);
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const Tensor& got = loaded.tensors.at(name);
    CHECK(got.shape() == t.shape());
    CHECK(got.dtype() == t.dtype());
    CHECK(got.tolist() == t.tolist());
  }
}

TEST_CASE("safetensors: tensors that require grad are saved as plain data") {
  TempDir dir("kiln-safetensors");
  Tensor w = testing::random_f64({3}, 9);
  w.requires_grad_();
  Tensor y = w * 2.0;
  std::string path = dir.file("grad.safetensors");
  save_safetensors(path, {{"w", w}, {"y", y}});
  SafetensorsFile loaded = load_safetensors(path);
  CHECK_FALSE(loaded.tensors.at("w").requires_grad());
  CHECK(loaded.tensors.at("w").tolist() == w.tolist());
  CHECK(loaded.tensors.at("y").tolist() == y.tolist());
}

TEST_CASE("safetensors: metadata round trip") {
  TempDir dir("kiln-safetensors");
  Metadata metadata = {{"format", "pt"},
                       {"empty", ""},
                       {"quoted \"key\"", "line\nbreak\ttab \\ slash"},
                       {"unicode", "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93"}};
  std::string path = dir.file("meta.safetensors");
  save_safetensors(path, {{"x", tensor({1.f})}}, metadata);
  SafetensorsFile loaded = load_safetensors(path);
  CHECK(loaded.metadata == metadata);
  CHECK(loaded.tensors.at("x").tolist() == std::vector<double>{1});
  // The Python library writes __metadata__ first; so do we.
  CHECK(read_bytes(path).substr(8, 16) == "{\"__metadata__\":");
}

TEST_CASE("safetensors: loading onto a device") {
  TempDir dir("kiln-safetensors");
  std::string path = dir.file("device.safetensors");
  Tensor x = sample(DType::f32, {2, 2}, 11);
  save_safetensors(path, {{"x", x}});
  check_same(load_safetensors(path, Device::cpu()).tensors.at("x"), x);
  if (cuda::is_available()) {
    Tensor got = load_safetensors(path, Device::cuda()).tensors.at("x");
    CHECK(got.device() == Device::cuda());
    check_same(got.cpu(), x);
    std::string from_gpu = dir.file("from_gpu.safetensors");
    save_safetensors(from_gpu, {{"x", got}});
    CHECK(read_bytes(from_gpu) == read_bytes(path));
  } else {
    CHECK_THROWS_AS(load_safetensors(path, Device::cuda()), Error);
  }
}

// ---- the exact format ----

TEST_CASE("safetensors: byte-exact file for one F32 tensor") {
  TempDir dir("kiln-safetensors");
  std::string path = dir.file("a.safetensors");
  save_safetensors(path, {{"a", tensor({1.f, 2.f})}});
  // 54 bytes of JSON padded with two spaces to 56, a multiple of 8.
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(header.size() == 54);
  std::string expected = std::string("\x38\0\0\0\0\0\0\0", 8) + header + "  " +
                         std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  CHECK(read_bytes(path) == expected);
  CHECK(read_bytes(path).size() == 72);
}

TEST_CASE("safetensors: header is padded to a multiple of 8 and data is in sorted-name order") {
  TempDir dir("kiln-safetensors");
  for (int name_length = 1; name_length <= 9; ++name_length) {
    INFO("name length " << name_length);
    TensorMap tensors = {{std::string(name_length, 'z'), sample(DType::f32, {2}, 20)},
                         {"b", sample(DType::u8, {3}, 21)},
                         {"a", sample(DType::f64, {1}, 22)},
                         {"B", sample(DType::bf16, {2, 1}, 23)}};
    std::string path = dir.file("padded.safetensors");
    save_safetensors(path, tensors, {{"k", std::string(name_length, 'v')}});
    std::string file = read_bytes(path);
    uint64_t n = header_length(file);
    CHECK(n % 8 == 0);
    std::string header = file.substr(8, n);
    size_t last = header.find_last_not_of(' ');
    CHECK(header[last] == '}');
    CHECK(n - last - 1 < 8);
    std::string data;
    for (const auto& [name, t] : tensors) data += raw(t);  // std::map iterates in sorted order
    CHECK(file.substr(8 + n) == data);
  }
}

TEST_CASE("safetensors: loads files laid out in another order and without padding") {
  // As another writer may produce them: data not in name order, no padding, no metadata.
  std::string header =
      "{\"b\":" + entry("I64", "[1]", 0, 8) + ",\"a\":" + entry("F32", "[2]", 8, 16) + "}";
  int64_t seven = 7;
  std::string data =
      std::string(reinterpret_cast<const char*>(&seven), 8) + f32_bytes({1.5f, -2.f});
  TempDir dir("kiln-safetensors");
  std::string path = dir.file("other.safetensors");
  write_bytes(path, file_bytes(header, data));
  SafetensorsFile loaded = load_safetensors(path);
  CHECK(loaded.tensors.at("a").tolist() == std::vector<double>{1.5, -2});
  CHECK(loaded.tensors.at("b").item<int64_t>() == 7);
  CHECK(loaded.tensors.at("b").dtype() == DType::i64);
}

// ---- atomic writes ----

TEST_CASE("safetensors: saving over an existing file replaces it") {
  TempDir dir("kiln-safetensors");
  std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"old", tensor({1.f, 2.f, 3.f})}}, {{"v", "1"}});
  save_safetensors(path, {{"new", tensor({4.0})}}, {{"v", "2"}});
  SafetensorsFile loaded = load_safetensors(path);
  CHECK(loaded.tensors.size() == 1);
  CHECK(loaded.tensors.at("new").tolist() == std::vector<double>{4});
  CHECK(loaded.metadata.at("v") == "2");
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("safetensors: a save into a missing directory throws and leaves nothing behind") {
  TempDir dir("kiln-safetensors");
  std::string path = dir.file("missing/model.safetensors");
  CHECK_THROWS_AS(save_safetensors(path, {{"x", tensor({1.f})}}), Error);
  CHECK_THROWS_WITH(
      save_safetensors(path, {{"x", tensor({1.f})}}),
      Catch::Contains("save_safetensors: " + path) && Catch::Contains("No such file or directory"));
  CHECK(dir.entries().empty());
}

TEST_CASE("safetensors: a failed rename removes the temporary file") {
  // The temporary file is written beside `path`; renaming it over a directory then fails.
  TempDir dir("kiln-safetensors");
  std::string path = dir.file("taken");
  fs::create_directory(path);
  CHECK_THROWS_WITH(save_safetensors(path, {{"x", tensor({1.f})}}),
                    Catch::Contains("save_safetensors: " + path) && Catch::Contains("renaming"));
  CHECK(dir.entries() == std::vector<std::string>{"taken"});
  CHECK(fs::is_directory(path));
}

TEST_CASE("safetensors: rejected inputs leave an existing file untouched") {
  TempDir dir("kiln-safetensors");
  std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"x", tensor({1.f})}});
  std::string before = read_bytes(path);
  CHECK_THROWS_AS(save_safetensors(path, {{"x", Tensor()}}), ValueError);
  CHECK_THROWS_WITH(save_safetensors(path, {{"x", Tensor()}}),
                    Catch::Contains("\"x\" is undefined"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", tensor({1.f})}}),
                    Catch::Contains("reserved for metadata"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"bad\xff", tensor({1.f})}}),
                    Catch::Contains("valid UTF-8"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"x", tensor({1.f})}}, {{"k", "\xc3"}}),
                    Catch::Contains("valid UTF-8"));
  CHECK(read_bytes(path) == before);
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
}

// ---- corruption tables ----

TEST_CASE("safetensors: every truncation of a valid file throws") {
  TempDir dir("kiln-safetensors");
  TensorMap tensors;
  std::string file = small_valid_file(dir, &tensors);
  std::string path = dir.file("truncated.safetensors");
  for (size_t length = 0; length < file.size(); ++length) {
    INFO("length " << length << " of " << file.size());
    write_bytes(path, file.substr(0, length));
    CHECK_THROWS_AS(load_safetensors(path), ValueError);
  }
  write_bytes(path, file);
  check_consistent(load_safetensors(path), tensors);
}

TEST_CASE("safetensors: flipping any header byte loads consistently or throws") {
  TempDir dir("kiln-safetensors");
  TensorMap tensors;
  std::string file = small_valid_file(dir, &tensors);
  uint64_t header_end = 8 + header_length(file);
  std::string path = dir.file("flipped.safetensors");
  int loaded_count = 0, thrown_count = 0;
  // 0xFF makes bytes invalid UTF-8; 0x01 and 0x20 keep ASCII, turning digits into other digits,
  // brackets into letters, and letters between cases.
  for (unsigned char mask : {0xFF, 0x01, 0x20}) {
    for (uint64_t i = 0; i < header_end; ++i) {
      INFO("byte " << i << " xor " << int(mask));
      std::string corrupt = file;
      corrupt[i] = static_cast<char>(corrupt[i] ^ mask);
      write_bytes(path, corrupt);
      try {
        SafetensorsFile loaded = load_safetensors(path);
        check_consistent(loaded, tensors);
        ++loaded_count;
      } catch (const Error& e) {
        CHECK_THAT(std::string(e.what()), Catch::StartsWith("load_safetensors: " + path + ":"));
        ++thrown_count;
      }
    }
  }
  // Renamed tensors and metadata load; most flips are rejected.
  CHECK(loaded_count > 0);
  CHECK(thrown_count > loaded_count);
}

TEST_CASE("safetensors: flipping data bytes changes values but BOOL bytes must stay 0 or 1") {
  TempDir dir("kiln-safetensors");
  std::string path = dir.file("one_bool.safetensors");
  save_safetensors(path, {{"flag", tensor(std::vector<bool>{true, false, true})}});
  std::string file = read_bytes(path);
  uint64_t data_start = 8 + header_length(file);
  for (uint64_t i = data_start; i < file.size(); ++i) {
    INFO("byte " << i);
    std::string corrupt = file;
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x02);
    write_bytes(path, corrupt);
    CHECK_THROWS_WITH(load_safetensors(path),
                      Catch::Contains("\"flag\": BOOL byte at file offset " + std::to_string(i)));
  }
}

// ---- specific malformed files ----

TEST_CASE("safetensors: a file shorter than the length field") {
  check_load_error("", {"0 bytes", "8-byte header length"});
  check_load_error(std::string("\x02\0\0", 3), {"3 bytes"});
}

TEST_CASE("safetensors: a missing file or a directory") {
  TempDir dir("kiln-safetensors");
  std::string missing = dir.file("absent.safetensors");
  CHECK_THROWS_WITH(load_safetensors(missing),
                    Catch::StartsWith("load_safetensors: " + missing + ":") &&
                        Catch::Contains("No such file or directory"));
  CHECK_THROWS_WITH(load_safetensors(dir.path.string()), Catch::Contains("not a regular file"));
}

TEST_CASE("safetensors: a huge header length") {
  check_load_error(std::string(8, '\xff') + "{}", {"header length 18446744073709551615", "limit"});
  check_load_error(le64(100'000'001) + "{}", {"header length 100000001", "limit of 100000000"});
}

TEST_CASE("safetensors: a header length past the end of the file") {
  check_load_error(le64(1000) + "{}",
                   {"header length 1000", "past the end of the file", "2 bytes"});
}

TEST_CASE("safetensors: headers that are not JSON objects") {
  check_load_error(file_bytes(""), {"not valid JSON"});
  check_load_error(file_bytes("{\"a\": "), {"not valid JSON", "header byte"});
  check_load_error(file_bytes("{\"a\":1}}"), {"not valid JSON"});
  check_load_error(file_bytes("{\"a\xff\":1}"), {"not valid JSON"});
  check_load_error(file_bytes("[]"), {"must be a JSON object", "[]"});
  check_load_error(file_bytes(std::string(100000, '[') + std::string(100000, ']')),
                   {"deeper than 3 levels"});
}

TEST_CASE("safetensors: duplicate keys") {
  std::string a = entry("F32", "[1]", 0, 4);
  check_load_error(file_bytes("{\"a\":" + a + ",\"a\":" + a + "}", f32_bytes({1})),
                   {"duplicate key \"a\""});
  check_load_error(file_bytes("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F64\",\"shape\":[1],"
                              "\"data_offsets\":[0,4]}}",
                              f32_bytes({1})),
                   {"duplicate key \"dtype\""});
}

TEST_CASE("safetensors: malformed tensor entries") {
  check_load_error(file_bytes("{\"w\":5}"), {"tensor \"w\"", "expected an object"});
  check_load_error(file_bytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[]}}"),
                   {"tensor \"w\"", "missing field \"data_offsets\""});
  check_load_error(file_bytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4],"
                              "\"extra\":1}}",
                              f32_bytes({1})),
                   {"tensor \"w\"", "unknown field \"extra\""});
}

TEST_CASE("safetensors: an unknown dtype") {
  check_load_error(file_bytes("{\"w\":" + entry("F8_E4M3", "[4]", 0, 4) + "}", "abcd"),
                   {"tensor \"w\"", "dtype \"F8_E4M3\"", "F32, F64"});
  check_load_error(file_bytes("{\"w\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd"),
                   {"tensor \"w\"", "dtype 3"});
}

TEST_CASE("safetensors: negative and non-integer shapes") {
  check_load_error(file_bytes("{\"w\":" + entry("F32", "[-1]", 0, 0) + "}"),
                   {"tensor \"w\"", "shape[0] is -1"});
  check_load_error(
      file_bytes("{\"w\":" + entry("F32", "[2,2.5]", 0, 20) + "}", std::string(20, 'x')),
      {"tensor \"w\"", "shape[1] is 2.5"});
  check_load_error(file_bytes("{\"w\":" + entry("F32", "[\"2\"]", 0, 8) + "}", std::string(8, 'x')),
                   {"shape[0] is \"2\""});
  check_load_error(file_bytes("{\"w\":" + entry("F32", "2", 0, 8) + "}", std::string(8, 'x')),
                   {"shape must be an array"});
  check_load_error(file_bytes("{\"w\":" + entry("F32", "[[2]]", 0, 8) + "}", std::string(8, 'x')),
                   {"deeper than 3 levels"});
}

TEST_CASE("safetensors: shapes whose element or byte count overflows") {
  check_load_error(file_bytes("{\"w\":" + entry("F32", "[4294967296,4294967296]", 0, 0) + "}"),
                   {"tensor \"w\"", "more elements than fit in int64"});
  // Zero elements, yet the strides of the other dims would overflow.
  check_load_error(file_bytes("{\"w\":" + entry("U8", "[0,4294967296,4294967296]", 0, 0) + "}"),
                   {"more elements than fit in int64"});
  check_load_error(file_bytes("{\"w\":" + entry("F32", "[99999999999999999999]", 0, 0) + "}"),
                   {"shape[0] is"});
  check_load_error(file_bytes("{\"w\":" + entry("F64", "[1152921504606846976]", 0, 0) + "}"),
                   {"tensor \"w\"", "more bytes than fit in int64"});
}

TEST_CASE("safetensors: data_offsets that are malformed or reversed") {
  check_load_error(file_bytes("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0]}}"),
                   {"tensor \"w\"", "data_offsets must be two non-negative integers", "[0]"});
  check_load_error(file_bytes("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[-1,0]}}"),
                   {"data_offsets must be two non-negative integers"});
  check_load_error(file_bytes("{\"w\":" + entry("F32", "[2]", 8, 0) + "}", std::string(8, 'x')),
                   {"tensor \"w\"", "data_offsets [8, 0] are reversed"});
}

TEST_CASE("safetensors: data_offsets past the end of the file") {
  std::string header = "{\"w\":" + entry("F32", "[2]", 0, 8) + "}";
  uint64_t data_start = 8 + header.size();
  check_load_error(file_bytes(header, "1234"),
                   {"tensor \"w\"", "data_offsets [0, 8] run past the end of the data section",
                    "4 bytes", ("file offsets " + std::to_string(data_start)).c_str()});
  check_load_error(
      file_bytes("{\"w\":" + entry("F32", "[2]", 18446744073709551607u, 18446744073709551615u) +
                 "}"),
      {"run past the end"});
}

TEST_CASE("safetensors: a range whose size does not match its shape") {
  check_load_error(file_bytes("{\"w\":" + entry("F32", "[3]", 0, 8) + "}", std::string(8, 'x')),
                   {"tensor \"w\"", "span 8 bytes", "[3] of F32 needs 12"});
}

TEST_CASE("safetensors: overlapping ranges") {
  std::string header =
      "{\"a\":" + entry("F32", "[2]", 0, 8) + ",\"b\":" + entry("F32", "[2]", 4, 12) + "}";
  check_load_error(file_bytes(header, std::string(12, 'x')),
                   {"tensor \"b\"", "overlaps tensor \"a\"",
                    ("file offset " + std::to_string(8 + header.size() + 4)).c_str()});
  std::string same =
      "{\"a\":" + entry("F32", "[2]", 0, 8) + ",\"b\":" + entry("F32", "[2]", 0, 8) + "}";
  check_load_error(file_bytes(same, std::string(8, 'x')), {"overlaps"});
}

TEST_CASE("safetensors: a hole between ranges or extra bytes after them") {
  std::string header =
      "{\"a\":" + entry("F32", "[2]", 0, 8) + ",\"b\":" + entry("F32", "[2]", 12, 20) + "}";
  check_load_error(file_bytes(header, std::string(20, 'x')),
                   {"hole in the data section", "bytes [8, 12)",
                    ("file offsets " + std::to_string(8 + header.size() + 8)).c_str()});
  std::string late = "{\"a\":" + entry("F32", "[1]", 4, 8) + "}";
  check_load_error(file_bytes(late, std::string(8, 'x')), {"hole", "bytes [0, 4)"});
  check_load_error(file_bytes("{\"a\":" + entry("F32", "[2]", 0, 8) + "}", std::string(12, 'x')),
                   {"data section has 12 bytes", "cover only 8", "4 extra bytes"});
  check_load_error(file_bytes("{}", "x"), {"data section has 1 bytes"});
}

TEST_CASE("safetensors: metadata that is not a map of strings") {
  check_load_error(file_bytes("{\"__metadata__\":{\"epoch\":1}}"),
                   {"\"__metadata__\" value of \"epoch\" must be a string", "got 1"});
  check_load_error(file_bytes("{\"__metadata__\":{\"ok\":\"1\",\"list\":[\"a\"]}}"),
                   {"\"list\" must be a string"});
  check_load_error(file_bytes("{\"__metadata__\":\"text\"}"),
                   {"\"__metadata__\" must be an object of strings"});
}

// A damaged header's bytes reach the message escaped: no byte outside UTF-8 and no control
// character goes to the terminal raw (kiln-checkpoint once echoed them).
TEST_CASE("safetensors: bytes of a damaged header are quoted escaped") {
  TempDir dir("kiln_test_safetensors");
  const std::string path = dir.file("damaged.safetensors");
  for (const std::string& header :
       {std::string("{\"w\xff\xfe\": 1}"),
        std::string("{\"w\\u001b[31m\": {\"dtype\": \"X\", \"shape\": [1], \"data_offsets\": "
                    "[0, 4]}}")}) {
    write_bytes(path, file_bytes(header));
    std::string message;
    try {
      load_safetensors(path);
    } catch (const ValueError& e) {
      message = e.what();
    }
    INFO(message);
    REQUIRE_THAT(message, Catch::StartsWith("load_safetensors: " + path));
    for (const char c : message) {
      const auto byte = static_cast<unsigned char>(c);
      CHECK((byte >= 0x20 && byte < 0x7f));
    }
    CHECK_THAT(message, Catch::Contains("\\xff") || Catch::Contains("w\\x1b[31m"));
  }
}
