#include "kiln/nn/safetensors.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/nn/atomic_file.h"
#include "kiln/nn/printable.h"

namespace kiln::nn {
namespace {

// Tensors are written and read as raw host memory; that is the file's byte order only on a
// little-endian machine.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

// The reference implementation refuses larger headers; so do we, before allocating for one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr uint64_t kLengthBytes = 8;
// A valid header nests no deeper than root object -> tensor entry -> shape array; refusing deeper
// input during parsing bounds the parser's work on hostile files like "[[[[...".
constexpr int kMaxJsonDepth = 3;
constexpr const char* kMetadataKey = "__metadata__";

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
    case DType::boolean:
      return "BOOL";
  }
  throw DTypeError("save_safetensors: unknown dtype");
}

bool parse_safetensors_dtype(const std::string& name, DType* dtype) {
  for (DType d : kAllDTypes) {
    if (name == safetensors_dtype(d)) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

std::string errno_text(int err) {
  return std::generic_category().message(err);
}

// ---- save ----

// The JSON header, padded with spaces so the data that follows starts 8-byte aligned. Keys come in
// the order the Python library writes them: __metadata__ first, then dtype, shape, data_offsets.
std::string make_header(const std::string& path,
                        const std::vector<std::pair<std::string, Tensor>>& host,
                        const Metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[kMetadataKey] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : host) {
    uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype(t.dtype());
    entry["shape"] = t.shape();
    entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + nbytes});
    header[name] = std::move(entry);
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(
        fmt::format("save_safetensors: {}: tensor names and metadata must be valid UTF-8 ({})",
                    path, e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// ---- load ----

template <class... Args>
[[noreturn]] void fail(const std::string& path, fmt::format_string<Args...> format,
                       Args&&... args) {
  throw ValueError(fmt::format("load_safetensors: {}: {}", path,
                               printable(fmt::format(format, std::forward<Args>(args)...))));
}

// A JSON value as it appears in the file, cut short: error messages quote what they reject.
std::string quote(const nlohmann::json& value) {
  std::string text = value.dump();
  constexpr size_t kMaxChars = 60;
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

void read_exactly(const std::string& path, FILE* file, void* data, size_t nbytes, uint64_t offset,
                  const char* what) {
  if (nbytes == 0) return;
  size_t got = std::fread(data, 1, nbytes, file);
  if (got == nbytes) return;
  if (std::ferror(file))
    fail(path, "reading {} at file offset {}: {}", what, offset, errno_text(errno));
  fail(path, "file ended at byte {} while reading {} ({} bytes expected from offset {})",
       offset + got, what, nbytes, offset);
}

// nlohmann keeps the last of repeated keys without a word; a callback sees every key, so a
// duplicate (which would silently drop a tensor) is caught here, as is excessive nesting.
nlohmann::json parse_header(const std::string& path, const std::string& text) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> keys_per_object;
  int depth = 0;
  auto callback = [&](int, Event event, nlohmann::json& parsed) {
    switch (event) {
      case Event::object_start:
        keys_per_object.emplace_back();
        [[fallthrough]];
      case Event::array_start:
        if (++depth > kMaxJsonDepth)
          fail(path, "header nests objects and arrays deeper than {} levels", kMaxJsonDepth);
        break;
      case Event::object_end:
        keys_per_object.pop_back();
        [[fallthrough]];
      case Event::array_end:
        --depth;
        break;
      case Event::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!keys_per_object.back().insert(key).second)
          fail(path, "duplicate key \"{}\" in the header", key);
        break;
      }
      case Event::value:
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, "header is not valid JSON at header byte {} (file offset {}): {}", e.byte,
         kLengthBytes + e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {
    fail(path, "header is not valid JSON: {}", e.what());
  }
}

// A JSON integer in [0, max], or false.
bool as_count(const nlohmann::json& value, uint64_t max, uint64_t* out) {
  if (!value.is_number_unsigned()) {
    // nlohmann stores non-negative integers as unsigned; anything else here is negative or
    // not an integer.
    return false;
  }
  uint64_t v = value.get<uint64_t>();
  if (v > max) return false;
  *out = v;
  return true;
}

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& value,
                  uint64_t data_bytes, uint64_t data_start) {
  Entry entry;
  entry.name = name;
  if (!value.is_object())
    fail(path, "tensor \"{}\": expected an object with dtype, shape and data_offsets, got {}", name,
         quote(value));
  for (const auto& [key, field] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(path, "tensor \"{}\": unknown field \"{}\"", name, key);
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) fail(path, "tensor \"{}\": missing field \"{}\"", name, key);
  }

  const nlohmann::json& dtype = value["dtype"];
  if (!dtype.is_string() || !parse_safetensors_dtype(dtype.get<std::string>(), &entry.dtype))
    fail(path, "tensor \"{}\": dtype {} is not one of F32, F64, F16, BF16, I32, I64, U8, BOOL",
         name, quote(dtype));

  const nlohmann::json& shape = value["shape"];
  if (!shape.is_array())
    fail(path, "tensor \"{}\": shape must be an array, got {}", name, quote(shape));
  constexpr auto kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  // Zero sizes count as 1: kiln's contiguous strides are products of the other sizes, and they
  // must fit in int64 even when the tensor is empty.
  uint64_t stride_product = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t size = 0;
    if (!as_count(shape[i], kInt64Max, &size))
      fail(path, "tensor \"{}\": shape[{}] is {}, expected a non-negative integer", name, i,
           quote(shape[i]));
    if (size > 1 && stride_product > kInt64Max / size)
      fail(path, "tensor \"{}\": shape {} has more elements than fit in int64", name, quote(shape));
    stride_product *= std::max<uint64_t>(size, 1);
    entry.shape.push_back(static_cast<int64_t>(size));
  }
  uint64_t numel = static_cast<uint64_t>(shape_numel(entry.shape));
  uint64_t element_bytes = dtype_size(entry.dtype);
  if (numel > kInt64Max / element_bytes)
    fail(path, "tensor \"{}\": shape {} of {} needs more bytes than fit in int64", name,
         quote(shape), dtype.get<std::string>());
  uint64_t nbytes = numel * element_bytes;

  const nlohmann::json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 ||
      !as_count(offsets[0], std::numeric_limits<uint64_t>::max(), &entry.begin) ||
      !as_count(offsets[1], std::numeric_limits<uint64_t>::max(), &entry.end))
    fail(path, "tensor \"{}\": data_offsets must be two non-negative integers, got {}", name,
         quote(offsets));
  if (entry.begin > entry.end)
    fail(path, "tensor \"{}\": data_offsets [{}, {}] are reversed (begin > end)", name, entry.begin,
         entry.end);
  if (entry.end > data_bytes)
    fail(path,
         "tensor \"{}\": data_offsets [{}, {}] run past the end of the data section ({} bytes, "
         "file offsets {} to {})",
         name, entry.begin, entry.end, data_bytes, data_start, data_start + data_bytes);
  if (entry.end - entry.begin != nbytes)
    fail(path, "tensor \"{}\": data_offsets [{}, {}] span {} bytes but shape {} of {} needs {}",
         name, entry.begin, entry.end, entry.end - entry.begin, quote(shape),
         dtype.get<std::string>(), nbytes);
  return entry;
}

// The spec asks that tensors tile the data section exactly: no byte shared, none left over.
void check_layout(const std::string& path, std::vector<Entry>& entries, uint64_t data_bytes,
                  uint64_t data_start) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered)
      fail(path,
           "tensor \"{}\" (data_offsets [{}, {}]) overlaps tensor \"{}\" ([{}, {}]) at file offset "
           "{}",
           e.name, e.begin, e.end, previous->name, previous->begin, previous->end,
           data_start + e.begin);
    if (e.begin > covered)
      fail(path,
           "hole in the data section: bytes [{}, {}) (file offsets {} to {}) belong to no tensor",
           covered, e.begin, data_start + covered, data_start + e.begin);
    covered = e.end;
    previous = &e;
  }
  if (covered != data_bytes)
    fail(
        path,
        "the data section has {} bytes but tensors cover only {}: {} extra bytes at file offset {}",
        data_bytes, covered, data_bytes - covered, data_start + covered);
}

// kiln's bool is a C++ bool, for which any byte but 0 or 1 is undefined behaviour.
void check_bool_bytes(const std::string& path, const Entry& e, const Tensor& t,
                      uint64_t data_start) {
  const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (bytes[i] > 1)
      fail(path, "tensor \"{}\": BOOL byte at file offset {} is {}, expected 0 or 1", e.name,
           data_start + e.begin + static_cast<uint64_t>(i), bytes[i]);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  std::vector<std::pair<std::string, Tensor>> host;
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(name != kMetadataKey, ValueError,
               "save_safetensors: {}: \"{}\" is reserved for metadata and cannot name a tensor",
               path, name);
    KILN_CHECK(t.defined(), ValueError, "save_safetensors: {}: tensor \"{}\" is undefined", path,
               name);
    host.emplace_back(name, t.detach().to(Device::cpu()).contiguous());
  }
  std::string header = make_header(path, host, metadata);
  AtomicFile file("save_safetensors", path);
  unsigned char length[kLengthBytes];
  for (uint64_t i = 0; i < kLengthBytes; ++i)
    length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  file.write(length, kLengthBytes);
  file.write(header.data(), header.size());
  for (const auto& [name, t] : host)
    file.write(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  file.commit();
}

int remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code error;
  int removed = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    pid_t pid = 0;
    const auto [end, parsed] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (parsed != std::errc() || end != digits.data() + digits.size() || pid <= 0) continue;
    // kill(pid, 0) delivers nothing; ESRCH says no such process. A live writer (or a process we
    // may not signal, EPERM) keeps its file.
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (fs::remove(entry.path(), error)) ++removed;
  }
  return removed;
}

SafetensorsFile load_safetensors(const std::string& path, Device device) {
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (!file) fail(path, "cannot open: {}", errno_text(errno));
  struct stat info {};
  if (::fstat(::fileno(file.get()), &info) != 0) fail(path, "cannot stat: {}", errno_text(errno));
  if (!S_ISREG(info.st_mode)) fail(path, "not a regular file");
  auto file_bytes = static_cast<uint64_t>(info.st_size);

  if (file_bytes < kLengthBytes)
    fail(path, "file has {} bytes, fewer than the 8-byte header length", file_bytes);
  unsigned char length[kLengthBytes];
  read_exactly(path, file.get(), length, kLengthBytes, 0, "the header length");
  uint64_t header_bytes = 0;
  for (uint64_t i = 0; i < kLengthBytes; ++i) header_bytes |= uint64_t{length[i]} << (8 * i);
  if (header_bytes > kMaxHeaderBytes)
    fail(path, "header length {} (file offset 0) exceeds the limit of {} bytes", header_bytes,
         kMaxHeaderBytes);
  if (header_bytes > file_bytes - kLengthBytes)
    fail(path,
         "header length {} (file offset 0) runs past the end of the file ({} bytes follow it)",
         header_bytes, file_bytes - kLengthBytes);

  std::string text(header_bytes, '\0');
  read_exactly(path, file.get(), text.data(), text.size(), kLengthBytes, "the header");
  nlohmann::json header = parse_header(path, text);
  if (!header.is_object()) fail(path, "header must be a JSON object, got {}", quote(header));

  uint64_t data_start = kLengthBytes + header_bytes;
  uint64_t data_bytes = file_bytes - data_start;
  SafetensorsFile result;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name != kMetadataKey) {
      entries.push_back(parse_entry(path, name, value, data_bytes, data_start));
      continue;
    }
    if (!value.is_object())
      fail(path, "\"__metadata__\" must be an object of strings, got {}", quote(value));
    for (const auto& [key, item] : value.items()) {
      if (!item.is_string())
        fail(path, "\"__metadata__\" value of \"{}\" must be a string, got {}", key, quote(item));
      result.metadata[key] = item.get<std::string>();
    }
  }
  check_layout(path, entries, data_bytes, data_start);

  // Sorted by offset and tiling the data section, the tensors are read in one forward pass.
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, e.dtype);
    std::string what = fmt::format("tensor \"{}\"", e.name);
    read_exactly(path, file.get(), t.data_ptr(), e.end - e.begin, data_start + e.begin,
                 what.c_str());
    if (e.dtype == DType::boolean) check_bool_bytes(path, e, t, data_start);
    result.tensors.emplace(e.name, t.to(device));
  }
  return result;
}

}  // namespace kiln::nn
