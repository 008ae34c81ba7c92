// The zip container of PyTorch's checkpoints: a reader of stored (uncompressed) entries that
// validates every offset and size against the file and checks each entry's CRC-32, and a writer
// that stores entries with their data 64-byte aligned, as PyTorch's own writer does, using zip64
// records where a size or offset passes 4 GiB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::nn {

// The CRC-32 of zip (and gzip, PNG): polynomial 0xEDB88320, reflected. Chains: pass the previous
// result as `crc` to continue over more bytes.
uint32_t crc32(const void* data, size_t nbytes, uint32_t crc = 0);

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // file offset of the entry's first byte
  uint64_t size = 0;
  uint32_t crc = 0;
};

class ZipReader {
 public:
  // Opens `path` and reads its central directory; errors throw ValueError "<op>: <path>: ...".
  ZipReader(const char* op, const std::string& path);
  ~ZipReader();
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  // In the central directory's order.
  const std::vector<ZipEntry>& entries() const { return entries_; }
  // nullptr when there is no such entry.
  const ZipEntry* find(const std::string& name) const;
  // The entry's bytes, into `out` (entry.size bytes); throws if they do not match its CRC-32.
  void read(const ZipEntry& entry, void* out) const;
  std::string read(const ZipEntry& entry) const;

  // Throws ValueError "<op>: <path>: <message>".
  [[noreturn]] void fail(const std::string& message) const;

 private:
  void read_at(uint64_t offset, void* out, size_t nbytes, const std::string& what) const;
  void read_directory();

  const char* op_;
  std::string path_;
  FILE* file_ = nullptr;
  uint64_t file_size_ = 0;
  std::vector<ZipEntry> entries_;
};

// Whether the first bytes of a file are a zip's local file header ("PK\3\4"); `path` unreadable or
// shorter reads as false.
bool starts_like_zip(const std::string& path);

class ZipWriter {
 public:
  // Receives the archive's bytes in order (an AtomicFile's write, say).
  using Sink = std::function<void(const void* data, size_t nbytes)>;
  explicit ZipWriter(Sink sink) : sink_(std::move(sink)) {}
  // Stores `nbytes` at `data` as the next entry, its data starting at a multiple of 64 bytes.
  void add(const std::string& name, const void* data, size_t nbytes);
  // Writes the central directory (and the zip64 end records where needed). Call once, last.
  void finish();

 private:
  struct Written {
    std::string name;
    uint64_t header_offset, size;
    uint32_t crc;
  };
  void write(const void* data, size_t nbytes);

  Sink sink_;
  uint64_t size_ = 0;
  std::vector<Written> written_;
};

}  // namespace kiln::nn
