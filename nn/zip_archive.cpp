#include "kiln/nn/zip_archive.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::nn {
namespace {

constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr uint32_t kCentralSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kEnd64Signature = 0x06064b50;
constexpr uint32_t kEnd64LocatorSignature = 0x07064b50;
constexpr size_t kLocalBytes = 30, kCentralBytes = 46, kEndBytes = 22, kEnd64Bytes = 56,
                 kEnd64LocatorBytes = 20;
constexpr uint16_t kZip64ExtraId = 0x0001;
// PyTorch's writer pads the local header's extra field with a field of its own, id "FB".
constexpr uint16_t kPaddingExtraId = 0x4246;
constexpr uint64_t kAlignment = 64;
constexpr uint32_t kMax32 = 0xffffffff;
constexpr uint16_t kMax16 = 0xffff;
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, zip's earliest date

uint64_t get(const unsigned char* p, int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void put(std::string& out, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// An entry's name as an error quotes it: bytes outside printable ASCII as \xNN.
std::string quoted(const std::string& name) {
  std::string out = "\"";
  for (unsigned char c : name) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out + "\"";
}

// The fields a zip64 extra field replaces (those whose 32-bit field holds 0xFFFFFFFF), in the
// order the spec gives them.
struct Zip64Fields {
  uint64_t* size;
  uint64_t* compressed;
  uint64_t* offset;
};

bool apply_zip64(const unsigned char* extra, size_t nbytes, const Zip64Fields& fields) {
  size_t at = 0;
  while (at + 4 <= nbytes) {
    const auto id = static_cast<uint16_t>(get(extra + at, 2));
    const auto length = static_cast<size_t>(get(extra + at + 2, 2));
    at += 4;
    if (length > nbytes - at) return false;
    if (id == kZip64ExtraId) {
      size_t used = 0;
      for (uint64_t* field : {fields.size, fields.compressed, fields.offset}) {
        if (field == nullptr || *field != kMax32) continue;
        if (used + 8 > length) return false;
        *field = get(extra + at + used, 8);
        used += 8;
      }
      return true;
    }
    at += length;
  }
  return true;
}

}  // namespace

uint32_t crc32(const void* data, size_t nbytes, uint32_t crc) {
  // zlib's, which kiln links already, is several times faster than a byte-wise table; its length
  // is 32-bit, so large entries go in chunks.
  const auto* p = static_cast<const Bytef*>(data);
  uLong value = crc;
  while (nbytes > 0) {
    const auto chunk = static_cast<uInt>(std::min<size_t>(nbytes, size_t{1} << 30));
    value = ::crc32(value, p, chunk);
    p += chunk;
    nbytes -= chunk;
  }
  return static_cast<uint32_t>(value);
}

// ---- reading ----

ZipReader::ZipReader(const char* op, const std::string& path) : op_(op), path_(path) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) fail(fmt::format("cannot open: {}", std::generic_category().message(errno)));
  struct stat info {};
  if (::fstat(::fileno(file_), &info) != 0)
    fail(fmt::format("cannot stat: {}", std::generic_category().message(errno)));
  if (!S_ISREG(info.st_mode)) fail("not a regular file");
  file_size_ = static_cast<uint64_t>(info.st_size);
  read_directory();
}

ZipReader::~ZipReader() {
  if (file_) std::fclose(file_);
}

void ZipReader::fail(const std::string& message) const {
  throw ValueError(fmt::format("{}: {}: {}", op_, path_, message));
}

void ZipReader::read_at(uint64_t offset, void* out, size_t nbytes, const std::string& what) const {
  if (offset > file_size_ || nbytes > file_size_ - offset)
    fail(fmt::format("{} ({} bytes at file offset {}) runs past the end of the file ({} bytes)",
                     what, nbytes, offset, file_size_));
  if (nbytes == 0) return;
  if (::fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0)
    fail(fmt::format("seeking to file offset {} for {}: {}", offset, what,
                     std::generic_category().message(errno)));
  size_t got = std::fread(out, 1, nbytes, file_);
  if (got != nbytes)
    fail(fmt::format("reading {} at file offset {}: {}", what, offset,
                     std::ferror(file_) ? std::generic_category().message(errno)
                                        : fmt::format("file ended after {} bytes", got)));
}

void ZipReader::read_directory() {
  // The end record is the last 22 bytes, unless a comment of up to 65535 bytes follows it.
  if (file_size_ < kEndBytes)
    fail(fmt::format("file has {} bytes, fewer than a zip's 22-byte end record", file_size_));
  const uint64_t tail_size = std::min<uint64_t>(file_size_, kEndBytes + kMax16);
  const uint64_t tail_start = file_size_ - tail_size;
  std::vector<unsigned char> tail(tail_size);
  read_at(tail_start, tail.data(), tail.size(), "the end of the file");
  uint64_t end_at = 0;
  bool found = false;
  for (uint64_t i = tail_size - kEndBytes + 1; i-- > 0;) {
    const unsigned char* p = tail.data() + i;
    if (get(p, 4) == kEndSignature && get(p + 20, 2) == tail_size - i - kEndBytes) {
      end_at = tail_start + i;
      found = true;
      break;
    }
  }
  if (!found)
    fail(
        "no zip end-of-central-directory record (signature PK\\5\\6) in the last bytes of the "
        "file: it is truncated, damaged or not a zip file");
  const unsigned char* end = tail.data() + (end_at - tail_start);
  if (get(end + 4, 2) != 0 || get(end + 6, 2) != 0)
    fail(
        fmt::format("end record at file offset {} names disk {} (a multi-part archive); "
                    "expected a single file",
                    end_at, get(end + 4, 2)));
  uint64_t count = get(end + 10, 2);
  uint64_t directory_size = get(end + 12, 4);
  uint64_t directory_offset = get(end + 16, 4);
  uint64_t directory_limit = end_at;

  // zip64: a locator just before the end record points at the 64-bit end record.
  if (end_at >= kEnd64LocatorBytes) {
    unsigned char locator[kEnd64LocatorBytes];
    read_at(end_at - kEnd64LocatorBytes, locator, sizeof locator, "the zip64 end locator");
    if (get(locator, 4) == kEnd64LocatorSignature) {
      const uint64_t end64_at = get(locator + 8, 8);
      if (end64_at > end_at - kEnd64LocatorBytes ||
          end_at - kEnd64LocatorBytes - end64_at < kEnd64Bytes)
        fail(
            fmt::format("zip64 end record offset {} (from the locator at file offset {}) does not "
                        "leave room for the 56-byte record before the locator",
                        end64_at, end_at - kEnd64LocatorBytes));
      unsigned char end64[kEnd64Bytes];
      read_at(end64_at, end64, sizeof end64, "the zip64 end record");
      if (get(end64, 4) != kEnd64Signature)
        fail(
            fmt::format("expected the zip64 end record (PK\\6\\6) at file offset {}, found bytes "
                        "{:02x} {:02x} {:02x} {:02x}",
                        end64_at, end64[0], end64[1], end64[2], end64[3]));
      count = get(end64 + 32, 8);
      directory_size = get(end64 + 40, 8);
      directory_offset = get(end64 + 48, 8);
      directory_limit = end64_at;
    } else if (count == kMax16 || directory_size == kMax32 || directory_offset == kMax32) {
      fail(
          fmt::format("end record at file offset {} defers to zip64 records, but no zip64 "
                      "locator precedes it",
                      end_at));
    }
  }
  if (directory_offset > directory_limit || directory_size > directory_limit - directory_offset)
    fail(
        fmt::format("central directory ({} bytes at file offset {}) runs past its end record at "
                    "file offset {}",
                    directory_size, directory_offset, directory_limit));
  if (count > directory_size / kCentralBytes)
    fail(fmt::format("end record claims {} entries, more than a {}-byte central directory holds",
                     count, directory_size));

  std::vector<unsigned char> directory(directory_size);
  read_at(directory_offset, directory.data(), directory.size(), "the central directory");
  std::set<std::string> names;
  size_t at = 0;
  for (uint64_t index = 0; index < count; ++index) {
    const uint64_t header_at = directory_offset + at;
    if (directory.size() - at < kCentralBytes)
      fail(fmt::format("central directory entry {} at file offset {} is cut short", index,
                       header_at));
    const unsigned char* h = directory.data() + at;
    if (get(h, 4) != kCentralSignature)
      fail(
          fmt::format("expected central directory entry {} (PK\\1\\2) at file offset {}, found "
                      "bytes {:02x} {:02x} {:02x} {:02x}",
                      index, header_at, h[0], h[1], h[2], h[3]));
    const auto flags = static_cast<uint16_t>(get(h + 8, 2));
    const auto method = static_cast<uint16_t>(get(h + 10, 2));
    ZipEntry entry;
    entry.crc = static_cast<uint32_t>(get(h + 16, 4));
    uint64_t compressed = get(h + 20, 4);
    entry.size = get(h + 24, 4);
    const size_t name_bytes = get(h + 28, 2), extra_bytes = get(h + 30, 2),
                 comment_bytes = get(h + 32, 2);
    const uint64_t disk = get(h + 34, 2);
    uint64_t local_at = get(h + 42, 4);
    if (directory.size() - at - kCentralBytes < name_bytes + extra_bytes + comment_bytes)
      fail(
          fmt::format("central directory entry {} at file offset {}: its name, extra field and "
                      "comment ({} bytes) run past the directory's end",
                      index, header_at, name_bytes + extra_bytes + comment_bytes));
    entry.name.assign(reinterpret_cast<const char*>(h + kCentralBytes), name_bytes);
    const std::string name = quoted(entry.name);
    if (!apply_zip64(h + kCentralBytes + name_bytes, extra_bytes,
                     {&entry.size, &compressed, &local_at}))
      fail(fmt::format("entry {}: its extra field (central directory, file offset {}) is malformed",
                       name, header_at));
    at += kCentralBytes + name_bytes + extra_bytes + comment_bytes;

    if (flags & 1) fail(fmt::format("entry {} is encrypted", name));
    if (method != 0)
      fail(
          fmt::format("entry {} is compressed (method {}); expected it stored (method 0), as "
                      "torch.save writes entries",
                      name, method));
    if (compressed != entry.size)
      fail(fmt::format("entry {} is stored but its compressed size {} differs from its size {}",
                       name, compressed, entry.size));
    if (disk != 0) fail(fmt::format("entry {} starts on disk {}; expected disk 0", name, disk));
    if (!names.insert(entry.name).second) fail(fmt::format("entry {} occurs twice", name));

    unsigned char local[kLocalBytes];
    if (local_at > directory_offset || directory_offset - local_at < kLocalBytes)
      fail(
          fmt::format("entry {}: local header offset {} is not before the central directory "
                      "(file offset {})",
                      name, local_at, directory_offset));
    read_at(local_at, local, sizeof local, fmt::format("the local header of entry {}", name));
    if (get(local, 4) != kLocalSignature)
      fail(
          fmt::format("entry {}: expected a local header (PK\\3\\4) at file offset {}, found "
                      "bytes {:02x} {:02x} {:02x} {:02x}",
                      name, local_at, local[0], local[1], local[2], local[3]));
    const uint64_t local_name_bytes = get(local + 26, 2), local_extra_bytes = get(local + 28, 2);
    if (local_name_bytes != name_bytes)
      fail(
          fmt::format("entry {}: the local header at file offset {} has a {}-byte name, the "
                      "central directory a {}-byte one",
                      name, local_at, local_name_bytes, name_bytes));
    std::string local_name(name_bytes, '\0');
    read_at(local_at + kLocalBytes, local_name.data(), name_bytes,
            fmt::format("the local name of entry {}", name));
    if (local_name != entry.name)
      fail(fmt::format("entry {}: the local header at file offset {} names it {}", name, local_at,
                       quoted(local_name)));
    if (get(local + 8, 2) != method)
      fail(
          fmt::format("entry {}: the local header at file offset {} gives method {}, the "
                      "central directory {}",
                      name, local_at, get(local + 8, 2), method));
    // Without a data descriptor (flag bit 3) the local header repeats the CRC and sizes.
    if (!(flags & 8)) {
      const uint64_t local_crc = get(local + 14, 4), local_size = get(local + 22, 4);
      if (local_crc != entry.crc ||
          (local_size != kMax32 && local_size != entry.size && entry.size < kMax32))
        fail(
            fmt::format("entry {}: the local header at file offset {} gives CRC {:08x} and size "
                        "{}, the central directory {:08x} and {}",
                        name, local_at, local_crc, local_size, entry.crc, entry.size));
    }
    entry.data_offset = local_at + kLocalBytes + name_bytes + local_extra_bytes;
    if (entry.data_offset > directory_offset || entry.size > directory_offset - entry.data_offset)
      fail(
          fmt::format("entry {}: its {} bytes at file offset {} run past the central directory "
                      "(file offset {})",
                      name, entry.size, entry.data_offset, directory_offset));
    entries_.push_back(std::move(entry));
  }
  if (at != directory.size())
    fail(fmt::format("central directory has {} bytes after its {} entries (file offset {})",
                     directory.size() - at, count, directory_offset + at));
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  for (const ZipEntry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void ZipReader::read(const ZipEntry& entry, void* out) const {
  const std::string name = quoted(entry.name);
  read_at(entry.data_offset, out, entry.size, fmt::format("entry {}", name));
  const uint32_t crc = crc32(out, entry.size);
  if (crc != entry.crc)
    fail(
        fmt::format("entry {} ({} bytes at file offset {}) is damaged: its CRC-32 is {:08x}, the "
                    "central directory says {:08x}",
                    name, entry.size, entry.data_offset, crc, entry.crc));
}

std::string ZipReader::read(const ZipEntry& entry) const {
  std::string out(entry.size, '\0');
  read(entry, out.data());
  return out;
}

bool starts_like_zip(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) return false;
  unsigned char magic[4] = {};
  const size_t got = std::fread(magic, 1, sizeof magic, file);
  std::fclose(file);
  return got == sizeof magic && get(magic, 4) == kLocalSignature;
}

// ---- writing ----

void ZipWriter::write(const void* data, size_t nbytes) {
  sink_(data, nbytes);
  size_ += nbytes;
}

void ZipWriter::add(const std::string& name, const void* data, size_t nbytes) {
  KILN_CHECK(name.size() < kMax16, ValueError, "ZipWriter: entry name of {} bytes is too long",
             name.size());
  const uint64_t header_offset = size_;
  const bool zip64 = nbytes >= kMax32;
  std::string extra;
  if (zip64) {
    put(extra, kZip64ExtraId, 2);
    put(extra, 16, 2);
    put(extra, nbytes, 8);
    put(extra, nbytes, 8);
  }
  const uint64_t unpadded = header_offset + kLocalBytes + name.size() + extra.size() + 4;
  const uint64_t padding = (kAlignment - unpadded % kAlignment) % kAlignment;
  put(extra, kPaddingExtraId, 2);
  put(extra, padding, 2);
  extra.append(padding, 'Z');

  const uint32_t crc = crc32(data, nbytes);
  std::string header;
  put(header, kLocalSignature, 4);
  put(header, zip64 ? 45 : 20, 2);  // version needed to extract: 4.5 for zip64, else 2.0
  put(header, 0, 2);                // flags
  put(header, 0, 2);                // stored
  put(header, 0, 2);                // time
  put(header, kDosDate, 2);
  put(header, crc, 4);
  put(header, zip64 ? kMax32 : nbytes, 4);
  put(header, zip64 ? kMax32 : nbytes, 4);
  put(header, name.size(), 2);
  put(header, extra.size(), 2);
  header += name;
  header += extra;
  write(header.data(), header.size());
  write(data, nbytes);
  written_.push_back({name, header_offset, nbytes, crc});
}

void ZipWriter::finish() {
  const uint64_t directory_offset = size_;
  bool zip64 = written_.size() >= kMax16;
  std::string directory;
  for (const Written& w : written_) {
    std::string extra;
    const bool big = w.size >= kMax32, far = w.header_offset >= kMax32;
    if (big || far) {
      put(extra, kZip64ExtraId, 2);
      put(extra, (big ? 16 : 0) + (far ? 8 : 0), 2);
      if (big) {
        put(extra, w.size, 8);
        put(extra, w.size, 8);
      }
      if (far) put(extra, w.header_offset, 8);
      zip64 = true;
    }
    put(directory, kCentralSignature, 4);
    put(directory, big || far ? 45 : 20, 2);  // version made by
    put(directory, big || far ? 45 : 20, 2);  // version needed
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, kDosDate, 2);
    put(directory, w.crc, 4);
    put(directory, big ? kMax32 : w.size, 4);
    put(directory, big ? kMax32 : w.size, 4);
    put(directory, w.name.size(), 2);
    put(directory, extra.size(), 2);
    put(directory, 0, 2);  // comment
    put(directory, 0, 2);  // disk
    put(directory, 0, 2);  // internal attributes
    put(directory, 0, 4);  // external attributes
    put(directory, far ? kMax32 : w.header_offset, 4);
    directory += w.name;
    directory += extra;
  }
  const uint64_t directory_size = directory.size();
  zip64 = zip64 || directory_offset >= kMax32 || directory_size >= kMax32;
  if (zip64) {
    const uint64_t end64_at = directory_offset + directory_size;
    put(directory, kEnd64Signature, 4);
    put(directory, kEnd64Bytes - 12, 8);  // the record's size, less the 12 bytes before it ends
    put(directory, 45, 2);
    put(directory, 45, 2);
    put(directory, 0, 4);
    put(directory, 0, 4);
    put(directory, written_.size(), 8);
    put(directory, written_.size(), 8);
    put(directory, directory_size, 8);
    put(directory, directory_offset, 8);
    put(directory, kEnd64LocatorSignature, 4);
    put(directory, 0, 4);
    put(directory, end64_at, 8);
    put(directory, 1, 4);
  }
  put(directory, kEndSignature, 4);
  put(directory, 0, 2);
  put(directory, 0, 2);
  put(directory, std::min<uint64_t>(written_.size(), kMax16), 2);
  put(directory, std::min<uint64_t>(written_.size(), kMax16), 2);
  put(directory, std::min<uint64_t>(directory_size, kMax32), 4);
  put(directory, std::min<uint64_t>(directory_offset, kMax32), 4);
  put(directory, 0, 2);
  write(directory.data(), directory.size());
}

}  // namespace kiln::nn
