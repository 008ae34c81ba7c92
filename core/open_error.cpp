#include "kiln/core/open_error.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

namespace kiln {

std::string open_failure_reason(const std::string& path, int err) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (err == ELOOP) return "a loop of symbolic links (each points on to the next)";
  if (err == EISDIR) return "a folder, not a file";
  if (err == ENOENT && fs::is_symlink(fs::symlink_status(path, ec))) {
    const fs::path target = fs::read_symlink(path, ec);
    return fmt::format("a symbolic link to '{}', which does not exist", target.string());
  }
  if (err == ENOENT) return "no such file";
  if (err == EACCES)
    return "permission denied (the file, or a folder on its path, is not readable by this user)";
  return std::generic_category().message(err);
}

std::string unreadable_file_reason(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return open_failure_reason(path, errno);
  struct stat info {};
  const bool folder = ::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode);
  ::close(fd);
  return folder ? open_failure_reason(path, EISDIR) : "not a regular file";
}

}  // namespace kiln
