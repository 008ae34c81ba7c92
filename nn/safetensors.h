// Checkpoints as safetensors files, the format PyTorch and Hugging Face read and write: an 8-byte
// little-endian header length N, N bytes of JSON naming each tensor's dtype, shape and byte range,
// then the raw little-endian data of every tensor, back to back.
#pragma once

#include <map>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::nn {

using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

// Writes `tensors` (any device, any layout; copied to contiguous CPU memory first) and `metadata`
// (stored under "__metadata__") atomically: a temporary file beside `path` is written, synced and
// renamed over it, so `path` holds either its old contents or the complete new file. Throws
// kiln::Error naming the path and the system's reason on failure.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const Metadata& metadata = {});

// Removes the temporary files "<path>.tmp.<pid>" that a save_safetensors killed mid-write (by
// SIGKILL, say) left beside `path`: those whose process is no longer running. Returns how many it
// removed. save_safetensors calls it before each save; a program resuming from `path` calls it
// first thing, so nothing is left behind for good.
int remove_stale_temporaries(const std::string& path);

struct SafetensorsFile {
  TensorMap tensors;
  Metadata metadata;
};

// Reads a safetensors file onto `device`. The whole header is validated before any tensor is
// allocated; a malformed or truncated file throws ValueError naming the path, the field and the
// byte offsets involved.
SafetensorsFile load_safetensors(const std::string& path, Device device = Device::cpu());

}  // namespace kiln::nn
