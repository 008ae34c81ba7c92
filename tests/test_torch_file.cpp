// PyTorch's zip checkpoints (.pt/.pth): round trips of every dtype and layout, a file PyTorch
// wrote (tests/reference/make_torch_state_dict.py), files kiln must refuse, damaged files that must
// throw kiln errors, and state dicts that lack BatchNorm's num_batches_tracked.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/nn/pickle_reader.h"
#include "kiln/nn/state_dict.h"
#include "kiln/nn/torch_file.h"
#include "kiln/nn/zip_archive.h"
#include "temp_dir.h"
#include "torch_reference.h"

using namespace kiln;
using namespace kiln::nn;
using kiln::testing::TempDir;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string raw(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

void check_same(const Tensor& got, const Tensor& want) {
  INFO(dtype_name(got.dtype()) << shape_str(got.shape()) << " vs " << dtype_name(want.dtype())
                               << shape_str(want.shape()));
  CHECK(got.dtype() == want.dtype());
  CHECK(got.shape() == want.shape());
  CHECK(got.is_contiguous());
  CHECK(raw(got) == raw(want));
}

Tensor sample(DType dtype, const Shape& shape, uint64_t seed) {
  if (dtype == DType::boolean) return gt(testing::random_f64(shape, seed), 0.0);
  if (dtype == DType::u8) return testing::random_f64(shape, seed, 0, 250).to(dtype);
  if (is_integral(dtype)) return testing::random_f64(shape, seed, -1e6, 1e6).to(dtype);
  return testing::random_f64(shape, seed, -3, 3).to(dtype);
}

// The message of the ValueError that loading `path` throws ("" if it throws none); any other
// exception escapes and fails the test.
std::string load_error(const std::string& path) {
  try {
    load_torch_file(path);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

void check_load_error(const std::string& path, std::initializer_list<const char*> fragments) {
  const std::string message = load_error(path);
  INFO("message: " << message);
  REQUIRE(!message.empty());
  CHECK(message.rfind("load_torch_file: " + path + ":", 0) == 0);
  for (const char* fragment : fragments) CHECK_THAT(message, Catch::Contains(fragment));
}

// A zip archive with the given entries, in order, as kiln's writer lays them out, and then
// archive/version.
void write_archive(const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string archive;
  ZipWriter zip([&](const void* data, size_t nbytes) {
    archive.append(static_cast<const char*>(data), nbytes);
  });
  for (const auto& [name, bytes] : entries) zip.add(name, bytes.data(), bytes.size());
  zip.add("archive/version", "3\n", 2);
  zip.finish();
  write_bytes(path, archive);
}

// data.pkl of a state dict with one f32 tensor "t" over storage "0" (numel elements), with the
// given offset, sizes and strides.
std::string one_tensor_pickle(int64_t numel, int64_t offset, const Shape& sizes,
                              const Shape& strides) {
  PickleWriter p;
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.reduce();
  p.mark();
  p.string("t");
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.mark();
  p.mark();
  p.string("storage");
  p.global("torch", "FloatStorage");
  p.string("0");
  p.string("cpu");
  p.integer(numel);
  p.tuple();
  p.persistent_id();
  p.integer(offset);
  p.mark();
  for (int64_t s : sizes) p.integer(s);
  p.tuple();
  p.mark();
  for (int64_t s : strides) p.integer(s);
  p.tuple();
  p.boolean(false);
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.reduce();
  p.tuple();
  p.reduce();
  p.set_items();
  return p.finish();
}

std::string f32_bytes(int64_t n) {
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(i) + 0.5f;
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  return out;
}

uint64_t le(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  return v;
}

void put_le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// The archive (as kiln writes it: no comment) with every size, offset and count moved into zip64
// records, as a writer does past 4 GiB: the central directory's fields hold 0xFFFFFFFF and a zip64
// extra field the values, and the end record defers to a zip64 end record.
std::string as_zip64(const std::string& zip) {
  const size_t end = zip.size() - 22;
  const uint64_t count = le(zip, end + 10, 2), directory_offset = le(zip, end + 16, 4);
  std::string out = zip.substr(0, directory_offset);
  size_t at = directory_offset;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t name = le(zip, at + 28, 2), extra = le(zip, at + 30, 2);
    std::string header = zip.substr(at, 46);
    std::string zip64;
    put_le(zip64, 0x0001, 2);
    put_le(zip64, 24, 2);
    put_le(zip64, le(zip, at + 24, 4), 8);
    put_le(zip64, le(zip, at + 20, 4), 8);
    put_le(zip64, le(zip, at + 42, 4), 8);
    header.replace(20, 8, std::string(8, '\xff'));
    header.replace(42, 4, std::string(4, '\xff'));
    header[6] = 45;
    header.replace(30, 2, std::string{static_cast<char>(extra + zip64.size()), 0});
    out += header + zip.substr(at + 46, name + extra) + zip64;
    at += 46 + name + extra;
  }
  const uint64_t directory_size = out.size() - directory_offset, end64_at = out.size();
  put_le(out, 0x06064b50, 4);
  put_le(out, 44, 8);
  put_le(out, 45, 2);
  put_le(out, 45, 2);
  put_le(out, 0, 8);
  put_le(out, count, 8);
  put_le(out, count, 8);
  put_le(out, directory_size, 8);
  put_le(out, directory_offset, 8);
  put_le(out, 0x07064b50, 4);
  put_le(out, 0, 4);
  put_le(out, end64_at, 8);
  put_le(out, 1, 4);
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 4);
  put_le(out, 0xffff, 2);
  put_le(out, 0xffff, 2);
  put_le(out, 0xffffffff, 4);
  put_le(out, 0xffffffff, 4);
  put_le(out, 0, 2);
  return out;
}

// A Conv2d + BatchNorm2d + Linear model under the names of make_torch_state_dict.py's Net.
class Net : public Module {
 public:
  Net() {
    conv = register_module("conv", std::make_shared<Conv2d>(2, 3, 3));
    bn = register_module("bn", std::make_shared<BatchNorm2d>(3));
    fc = register_module("fc", std::make_shared<Linear>(12, 4));
  }
  Tensor forward(const Tensor& x) override {
    return fc->forward(bn->forward(conv->forward(x)).flatten(1));
  }
  std::string name() const override { return "Net"; }
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;
  std::shared_ptr<Linear> fc;
};

DType torch_dtype(const std::string& name) {
  const std::map<std::string, DType> names = {{"float32", DType::f32}, {"float64", DType::f64},
                                              {"float16", DType::f16}, {"bfloat16", DType::bf16},
                                              {"int32", DType::i32},   {"int64", DType::i64},
                                              {"uint8", DType::u8},    {"bool", DType::boolean}};
  return names.at(name);
}

}  // namespace

TEST_CASE("torch file: names must be UTF-8 for Python to read them") {
  TempDir dir("kiln-torch-file");
  const std::string path = dir.file("names.pth");
  CHECK_THROWS_WITH(save_torch_file(path, {{"bad\xff", sample(DType::f32, {1}, 1)}}),
                    Catch::Contains("not valid UTF-8") && Catch::Contains("bad\\xff"));
  CHECK(dir.entries().empty());
}

TEST_CASE("torch file: every dtype, 0-d, empty and strided tensors round trip") {
  TempDir dir("kiln-torch-file");
  TensorMap tensors;
  uint64_t seed = 1;
  for (DType dtype : kAllDTypes) {
    const std::string name = dtype_name(dtype);
    tensors[name + ".matrix"] = sample(dtype, {3, 5}, seed++);
    tensors[name + ".scalar"] = sample(dtype, {}, seed++);
    tensors[name + ".empty"] = sample(dtype, {0, 4}, seed++);
    Tensor base = sample(dtype, {4, 6}, seed++);
    tensors[name + ".transposed"] = base.t();
    tensors[name + ".sliced"] = base.narrow(1, 2, 3);
  }
  // Two entries over one storage: tied weights.
  tensors["tied.a"] = tensors["f32.matrix"];
  const std::string path = dir.file("all.pth");
  save_torch_file(path, tensors);
  CHECK(is_torch_file(path));
  const TensorMap loaded = load_torch_file(path);
  REQUIRE(loaded.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    REQUIRE(loaded.count(name));
    check_same(loaded.at(name), t.contiguous());
  }
  CHECK(dir.entries() == std::vector<std::string>{"all.pth"});
}

TEST_CASE("torch file: the archive is laid out as torch.save lays it out") {
  TempDir dir("kiln-torch-file");
  const std::string path = dir.file("layout.pth");
  save_torch_file(path, {{"w", sample(DType::f32, {7}, 3)}, {"b", sample(DType::i64, {2}, 4)}});
  ZipReader zip("test", path);
  std::vector<std::string> names;
  for (const ZipEntry& e : zip.entries()) {
    names.push_back(e.name);
    INFO(e.name << " at " << e.data_offset);
    CHECK(e.data_offset % 64 == 0);
  }
  CHECK(names == std::vector<std::string>{"archive/data.pkl", "archive/byteorder", "archive/data/0",
                                          "archive/data/1", "archive/version"});
  CHECK(zip.read(*zip.find("archive/version")) == "3\n");
  CHECK(zip.read(*zip.find("archive/byteorder")) == "little");
  CHECK(read_bytes(path).substr(0, 4) == std::string("PK\x03\x04", 4));
  CHECK(crc32("123456789", 9) == 0xcbf43926u);  // the check value of CRC-32/ISO-HDLC
}

TEST_CASE("torch file: zip64 records are read") {
  TempDir dir("kiln-torch-file");
  const TensorMap tensors = {{"w", sample(DType::f32, {2, 3}, 7)},
                             {"n", sample(DType::i64, {}, 8)}};
  const std::string path = dir.file("small.pth"), zip64_path = dir.file("zip64.pth");
  save_torch_file(path, tensors);
  write_bytes(zip64_path, as_zip64(read_bytes(path)));
  ZipReader zip("test", zip64_path);
  CHECK(zip.entries().size() == 5);
  const TensorMap loaded = load_torch_file(zip64_path);
  REQUIRE(loaded.size() == tensors.size());
  for (const auto& [name, t] : tensors) check_same(loaded.at(name), t);
}

TEST_CASE("torch file: save_state_dict writes .pth and load_state_dict reads it back") {
  TempDir dir("kiln-torch-file");
  Net model;
  model.train();
  model.forward(testing::random_f64({4, 2, 4, 4}, 5).to(DType::f32));  // running stats move
  const std::string pth = dir.file("model.pth"), pt = dir.file("model.pt"),
                    safetensors = dir.file("model.safetensors");
  save_state_dict(model, pth);
  save_state_dict(model, pt);
  save_state_dict(model, safetensors);
  CHECK(is_torch_file(pth));
  CHECK(is_torch_file(pt));
  CHECK_FALSE(is_torch_file(safetensors));
  for (const std::string& path : {pth, pt, safetensors}) {
    INFO(path);
    Net other;
    const LoadResult result = load_state_dict(other, path);
    CHECK(result.missing_keys.empty());
    const StateDict want = model.state_dict(), got = other.state_dict();
    REQUIRE(got.size() == want.size());
    for (const auto& [name, t] : want) check_same(got.at(name), t);
  }
  CHECK(model.bn->num_batches_tracked.item<int64_t>() == 1);
}

TEST_CASE("torch file: a state dict written by PyTorch 1.13 [reference]") {
  const std::string path = testing::reference_dir() + "/torch_state_dict.pth";
  const nlohmann::json expected = testing::torch_reference("torch_state_dict.json")["tensors"];
  const TensorMap loaded = load_torch_file(path);
  REQUIRE(loaded.size() == expected.size());
  for (const auto& [name, want] : expected.items()) {
    INFO(name);
    REQUIRE(loaded.count(name));
    const Tensor& t = loaded.at(name);
    CHECK(t.dtype() == torch_dtype(want["dtype"].get<std::string>()));
    CHECK(t.shape() == want["shape"].get<Shape>());
    REQUIRE(t.numel() == static_cast<int64_t>(want["values"].size()));
    if (is_integral(t.dtype(), true)) {
      const Tensor v = t.to(DType::i64);
      for (int64_t i = 0; i < t.numel(); ++i)
        CHECK(v.data<int64_t>()[i] == want["values"][i].get<int64_t>());
    } else {
      const Tensor v = t.to(DType::f64);
      for (int64_t i = 0; i < t.numel(); ++i)
        CHECK(v.data<double>()[i] == want["values"][i].get<double>());
    }
  }
  // The views share fc.weight's storage in the file; kiln's copies hold the same values.
  CHECK(raw(loaded.at("extra.transposed")) == raw(loaded.at("fc.weight").t()));

  // Into the equivalent kiln model, strictly, once the extra tensors are left out.
  StateDict state;
  for (const auto& [name, t] : loaded)
    if (name.rfind("extra.", 0) != 0) state[name] = t;
  Net model;
  model.load_state_dict(state);
  CHECK(model.bn->num_batches_tracked.item<int64_t>() == 2);
  CHECK(raw(model.fc->weight) == raw(loaded.at("fc.weight")));
}

TEST_CASE("torch file: a state dict pickled with protocol 4 [reference]") {
  const nlohmann::json expected = testing::torch_reference("torch_state_dict.json")["tensors"];
  const TensorMap loaded = load_torch_file(testing::reference_dir() + "/torch_protocol4.pth");
  REQUIRE(loaded.size() == 3);
  for (const auto& [name, t] : loaded) {
    INFO(name);
    REQUIRE(expected.contains(name));
    CHECK(t.shape() == expected[name]["shape"].get<Shape>());
    const Tensor v = t.to(DType::f64);
    REQUIRE(t.numel() == static_cast<int64_t>(expected[name]["values"].size()));
    for (int64_t i = 0; i < t.numel(); ++i)
      CHECK(v.data<double>()[i] == expected[name]["values"][i].get<double>());
  }
  CHECK(loaded.at("extra.bf16").dtype() == DType::bf16);
}

TEST_CASE("torch file: a pickled whole model and the legacy format are refused [reference]") {
  check_load_error(testing::reference_dir() + "/torch_whole_model.pth",
                   {"__main__.Net", "model.state_dict()"});
  check_load_error(testing::reference_dir() + "/torch_legacy.pth",
                   {"legacy format", "_use_new_zipfile_serialization=False"});
}

TEST_CASE("torch file: every truncation of a file is a ValueError [reference]") {
  TempDir dir("kiln-torch-file");
  const std::string small = dir.file("small.pth");
  save_torch_file(small, {{"w", sample(DType::f32, {2, 3}, 7)},
                          {"n", sample(DType::i64, {}, 8)},
                          {"m", sample(DType::boolean, {2}, 9)}});
  // Every length of kiln's small file; of PyTorch's larger one, every length within its central
  // directory and end records (the last 1500 bytes) and every 7th before, to keep the test short.
  for (const std::string& source : {small, testing::reference_dir() + "/torch_state_dict.pth"}) {
    const std::string bytes = read_bytes(source);
    const std::string path = dir.file("cut.pth");
    for (size_t length = 0; length < bytes.size(); length += length + 1500 < bytes.size() ? 7 : 1) {
      write_bytes(path, bytes.substr(0, length));
      INFO(source << " cut to " << length << " bytes");
      CHECK_FALSE(load_error(path).empty());
    }
  }
}

TEST_CASE("torch file: a flipped byte is a ValueError or harmless, never a crash") {
  TempDir dir("kiln-torch-file");
  const std::string small = dir.file("small.pth");
  const TensorMap tensors = {{"w", sample(DType::f32, {2, 3}, 7)},
                             {"n", sample(DType::i64, {}, 8)},
                             {"m", sample(DType::boolean, {2}, 9)}};
  save_torch_file(small, tensors);
  const std::string bytes = read_bytes(small);
  std::vector<bool> in_entry(bytes.size(), false);
  {
    ZipReader zip("test", small);
    for (const ZipEntry& e : zip.entries())
      for (uint64_t i = 0; i < e.size; ++i) in_entry[e.data_offset + i] = true;
  }
  const std::string path = dir.file("flipped.pth");
  int refused = 0;
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::string flipped = bytes;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x5a);
    write_bytes(path, flipped);
    INFO("byte " << at << " flipped");
    const std::string message = load_error(path);
    if (!message.empty()) {
      ++refused;
      continue;
    }
    // Bytes the format does not read (dates, padding, attributes) may change; data may not.
    CHECK_FALSE(in_entry[at]);
    const TensorMap loaded = load_torch_file(path);
    REQUIRE(loaded.size() == tensors.size());
    for (const auto& [name, t] : tensors) check_same(loaded.at(name), t);
  }
  CHECK(refused > static_cast<int>(bytes.size() / 2));
}

TEST_CASE("torch file: damaged pickles with valid checksums are ValueErrors") {
  TempDir dir("kiln-torch-file");
  const std::string pickle = one_tensor_pickle(6, 0, {2, 3}, {3, 1});
  const std::string data = f32_bytes(6);
  const std::string path = dir.file("mutated.pth");
  write_archive(path, {{"archive/data.pkl", pickle}, {"archive/data/0", data}});
  REQUIRE(load_error(path).empty());
  for (size_t length = 0; length < pickle.size(); ++length) {
    write_archive(path, {{"archive/data.pkl", pickle.substr(0, length)}, {"archive/data/0", data}});
    INFO("pickle cut to " << length << " bytes");
    CHECK_FALSE(load_error(path).empty());
  }
  // Bytes that end, start or change opcodes and lengths.
  const std::vector<int> values = {0x00, 0x01, 0x7f, 0x80, 0xff, '(', 't', 'R', 'u', 'h', 'q'};
  for (size_t at = 0; at < pickle.size(); ++at) {
    for (int value : values) {
      std::string mutated = pickle;
      mutated[at] = static_cast<char>(value);
      write_archive(path, {{"archive/data.pkl", mutated}, {"archive/data/0", data}});
      INFO("pickle byte " << at << " set to " << value);
      const std::string message = load_error(path);
      if (message.empty()) CHECK(load_torch_file(path).size() <= 2);
    }
  }
}

TEST_CASE("torch file: offsets, strides and sizes are checked against the storage") {
  TempDir dir("kiln-torch-file");
  const std::string path = dir.file("view.pth");
  auto write = [&](int64_t numel, int64_t offset, const Shape& sizes, const Shape& strides) {
    write_archive(path, {{"archive/data.pkl", one_tensor_pickle(numel, offset, sizes, strides)},
                         {"archive/data/0", f32_bytes(numel)}});
  };
  // A view with an offset and strides: elements 7, 9, 13, 15 of 0.5, 1.5, ...
  write(16, 7, {2, 2}, {6, 2});
  const Tensor t = load_torch_file(path).at("t");
  CHECK(t.shape() == Shape{2, 2});
  CHECK(t.data<float>()[0] == 7.5f);
  CHECK(t.data<float>()[1] == 9.5f);
  CHECK(t.data<float>()[2] == 13.5f);
  CHECK(t.data<float>()[3] == 15.5f);

  write(16, 7, {2, 2}, {6, 5});
  check_load_error(path, {"tensor \"t\"", "reach past its storage's 16 elements"});
  write(16, 16, {1}, {1});
  check_load_error(path, {"reach past"});
  write(3, 0, {int64_t{1} << 40}, {0});
  check_load_error(path, {"more than its storage's 3"});
  write(3, 0, {int64_t{1} << 20, int64_t{1} << 20}, {1, 1});
  check_load_error(path, {"1099511627776 elements, more than its storage's 3"});
  write(4, 0, {int64_t{1} << 62, 2, 2}, {0, 0, 0});
  check_load_error(path, {"does not fit in int64"});
  // Empty, but kiln's strides for it would overflow.
  write(4, 0, {0, int64_t{1} << 62, int64_t{1} << 62}, {1, 1, 1});
  check_load_error(path, {"does not fit in int64"});
  // The storage's entry must hold numel elements exactly.
  write_archive(path, {{"archive/data.pkl", one_tensor_pickle(6, 0, {6}, {1})},
                       {"archive/data/0", f32_bytes(5)}});
  check_load_error(path, {"archive/data/0", "has 20 bytes, expected 6 elements"});
  write_archive(path, {{"archive/data.pkl", one_tensor_pickle(6, 0, {6}, {1})}});
  check_load_error(path, {"no entry archive/data/0"});
}

TEST_CASE("torch file: pickles that are not plain state dicts are refused") {
  TempDir dir("kiln-torch-file");
  const std::string path = dir.file("pickle.pth");
  auto write = [&](const std::string& pickle) {
    write_archive(path, {{"archive/data.pkl", pickle}, {"archive/data/0", f32_bytes(2)}});
  };
  // What a malicious file would call: refused as soon as it is named, never looked up.
  PickleWriter call;
  call.global("os", "system");
  call.mark();
  call.string("echo hi");
  call.tuple();
  call.reduce();
  write(call.finish());
  check_load_error(path, {"pickles os.system", "model.state_dict()"});

  PickleWriter complex_storage;
  complex_storage.global("torch", "ComplexFloatStorage");
  write(complex_storage.finish());
  check_load_error(path, {"torch.ComplexFloatStorage", "dtype kiln does not have"});

  // A training checkpoint that nests the state dict: {"epoch": 3}.
  PickleWriter nested;
  nested.global("collections", "OrderedDict");
  nested.empty_tuple();
  nested.reduce();
  nested.mark();
  nested.string("epoch");
  nested.integer(3);
  nested.set_items();
  write(nested.finish());
  check_load_error(path, {"\"epoch\" is the int 3, not a tensor", "checkpoint[\"model\"]"});

  // Parameters of parameters, nested deeper than a stack: refused at the first level.
  PickleWriter deep;
  deep.global("collections", "OrderedDict");
  deep.empty_tuple();
  deep.reduce();
  deep.mark();
  deep.string("p");
  for (int i = 0; i < 200000; ++i) {
    deep.global("torch._utils", "_rebuild_parameter");
    deep.mark();
  }
  deep.integer(0);
  for (int i = 0; i < 200000; ++i) {
    deep.boolean(false);
    deep.empty_tuple();
    deep.tuple();
    deep.reduce();
  }
  deep.set_items();
  write(deep.finish());
  check_load_error(path, {"\"p\" is the result of torch._utils._rebuild_parameter, not a tensor"});

  // A key with a control character is quoted escaped.
  PickleWriter escape;
  escape.global("collections", "OrderedDict");
  escape.empty_tuple();
  escape.reduce();
  escape.mark();
  escape.string("bad\x1b[31mkey");
  escape.boolean(true);
  escape.set_items();
  write(escape.finish());
  check_load_error(path, {"\"bad\\x1b[31mkey\" is True"});
}

TEST_CASE("torch file: big-endian files, compressed entries and other zips are refused") {
  TempDir dir("kiln-torch-file");
  const std::string path = dir.file("other.pth");
  const std::string pickle = one_tensor_pickle(2, 0, {2}, {1});
  write_archive(path, {{"archive/data.pkl", pickle},
                       {"archive/byteorder", "big"},
                       {"archive/data/0", f32_bytes(2)}});
  check_load_error(path, {"big-endian"});
  write_archive(path, {});
  check_load_error(path, {"no archive/data.pkl entry"});
  {
    std::string archive;
    ZipWriter zip([&](const void* data, size_t nbytes) {
      archive.append(static_cast<const char*>(data), nbytes);
    });
    zip.add("archive/data.pkl", pickle.data(), pickle.size());
    zip.add("archive/data/0", f32_bytes(2).data(), 8);
    zip.finish();
    write_bytes(path, archive);
  }
  check_load_error(path, {"no archive/version entry"});

  write_archive(path, {{"data.pkl", pickle}});
  check_load_error(path, {"not inside a folder"});
  write_bytes(path, "");
  check_load_error(path, {"empty"});
  write_bytes(path, "{\"not\": \"a zip\"}");
  check_load_error(path, {"expected a zip archive"});
  check_load_error(dir.file("missing.pth"), {"cannot open"});
}

TEST_CASE("torch file: a state dict without num_batches_tracked loads strictly, with 0") {
  TempDir dir("kiln-torch-file");
  auto make = [] {
    auto model = std::make_shared<Sequential>();
    model->push_back(std::make_shared<Conv2d>(1, 2, 1));
    model->push_back(std::make_shared<BatchNorm2d>(2));
    return model;
  };
  auto source = make();
  TensorMap tensors;
  for (auto& [name, t] : source->state_dict())
    if (name != "1.num_batches_tracked") tensors[name] = t;
  const std::string path = dir.file("old.pth");
  save_torch_file(path, tensors);

  auto model = make();
  auto* bn = dynamic_cast<BatchNorm2d*>((*model)[1].get());
  REQUIRE(bn != nullptr);
  bn->num_batches_tracked.fill_(5);
  const LoadResult result = load_state_dict(*model, path);
  CHECK(result.missing_keys.empty());
  CHECK(bn->num_batches_tracked.item<int64_t>() == 0);
  // Another key missing is still an error under strict loading.
  tensors.erase("1.running_mean");
  save_torch_file(path, tensors);
  CHECK_THROWS_AS(load_state_dict(*model, path), ValueError);
}
