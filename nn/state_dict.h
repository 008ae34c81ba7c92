// A module's state_dict as a safetensors file (nn/safetensors.h) or PyTorch's own .pt/.pth format
// (nn/torch_file.h): the weights and buffers alone, under PyTorch's names, so the file moves
// between kiln and PyTorch both ways. A whole training state (optimizer, schedule, position) is
// train/checkpoint.h's.
#pragma once

#include <string>

#include "kiln/nn/module.h"

namespace kiln::nn {

// Writes module.state_dict() atomically (temporary file, fsync, rename): in PyTorch's format when
// `path` ends in .pt or .pth, as safetensors otherwise.
void save_state_dict(const Module& module, const std::string& path);
// Loads a file written by save_state_dict, by torch.save(model.state_dict()) (recognised by its
// content, a zip archive) or by PyTorch's safetensors.torch.save_file into module, strictly unless
// strict is false; tensors go to each parameter's own device. A tensor of another dtype is
// converted, as PyTorch's load_state_dict does, and said so on stderr (and in the result's
// converted_keys). A BatchNorm's num_batches_tracked missing from the file is set to 0, as
// PyTorch does, and not counted missing.
LoadResult load_state_dict(Module& module, const std::string& path, bool strict = true);

}  // namespace kiln::nn
