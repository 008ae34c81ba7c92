// A file written whole or not at all: the bytes go to a temporary file beside the target, which is
// synced and renamed over it, so the target holds either its old contents or the complete new file.
// Shared by the checkpoint writers (safetensors, PyTorch's zip format).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kiln::nn {

class AtomicFile {
 public:
  // Creates "<path>.tmp.<pid>" (after removing stale ones, remove_stale_temporaries). `op` names
  // the caller in errors: "<op>: <path>: <what failed>: <the system's reason>".
  AtomicFile(const char* op, const std::string& path);
  // Without commit(), the temporary file is closed and deleted: a failed save leaves the
  // directory as it found it.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t nbytes);
  // Bytes written so far.
  uint64_t size() const { return size_; }
  // Flushes, syncs, renames over the target and syncs its directory.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what, int err) const;

  const char* op_;
  std::string path_, temp_path_;
  FILE* file_ = nullptr;
  uint64_t size_ = 0;
  bool renamed_ = false;
};

}  // namespace kiln::nn
