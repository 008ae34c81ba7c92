// Why a file could not be opened, in words a user can act on: "permission denied", "a symbolic
// link to 'x', which does not exist", "a loop of symbolic links", "a folder, not a file". The
// readers of user files (images, IDX, CIFAR, checkpoints) put it after "cannot open <path>".
#pragma once

#include <string>

namespace kiln {

// The reason for errno `err` from opening `path`, with what the file system says of the path
// (a dangling link names its target).
std::string open_failure_reason(const std::string& path, int err);
// Why `path` is not a regular file that can be read, found by trying to open it; "not a regular
// file" for a device or pipe that opens.
std::string unreadable_file_reason(const std::string& path);

}  // namespace kiln
