#include "kiln/nn/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "kiln/core/error.h"
#include "kiln/nn/safetensors.h"

namespace kiln::nn {

AtomicFile::AtomicFile(const char* op, const std::string& path) : op_(op), path_(path) {
  remove_stale_temporaries(path);
  temp_path_ = fmt::format("{}.tmp.{}", path, ::getpid());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) fail(fmt::format("creating {}", temp_path_), errno);
}

AtomicFile::~AtomicFile() {
  if (file_) std::fclose(file_);
  if (!renamed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) const {
  throw Error(
      fmt::format("{}: {}: {}: {}", op_, path_, what, std::generic_category().message(err)));
}

void AtomicFile::write(const void* data, size_t nbytes) {
  if (nbytes == 0) return;
  if (std::fwrite(data, 1, nbytes, file_) != nbytes)
    fail(fmt::format("writing {}", temp_path_), errno);
  size_ += nbytes;
}

void AtomicFile::commit() {
  if (std::fflush(file_) != 0) fail(fmt::format("flushing {}", temp_path_), errno);
  if (::fsync(::fileno(file_)) != 0) fail(fmt::format("syncing {}", temp_path_), errno);
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) fail(fmt::format("closing {}", temp_path_), errno);
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail(fmt::format("renaming {} over it", temp_path_), errno);
  renamed_ = true;
  // The rename is durable only once the directory entry itself reaches the disk.
  std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::string dir = parent.empty() ? std::string(".") : parent.string();
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(fmt::format("opening directory {} to sync it", dir), errno);
  rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) fail(fmt::format("syncing directory {}", dir), err);
}

}  // namespace kiln::nn
