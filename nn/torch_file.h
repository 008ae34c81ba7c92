// State dicts in PyTorch's own checkpoint format, the zip archive that torch.save writes
// (`torch.save(model.state_dict(), "model.pth")`) and torch.load reads: data.pkl, a pickle of an
// OrderedDict whose tensors point into storages, and data/<key>, each storage's raw bytes.
//
// Reading executes nothing: a restricted unpickler (nn/pickle_reader.h) accepts only the globals
// a state dict uses, so a file that pickles anything else (a whole model, say) is refused.
#pragma once

#include <string>

#include "kiln/core/device.h"
#include "kiln/nn/safetensors.h"

namespace kiln::nn {

// Reads the tensors of a state dict saved by torch.save (PyTorch 1.6 or later, the zip format)
// onto `device`. Each tensor is copied out of its storage, so views and tied weights that shared a
// storage in PyTorch come back as separate tensors with the same values. A file that is not such a
// state dict, or is damaged or truncated, throws ValueError naming the path and what was wrong.
TensorMap load_torch_file(const std::string& path, Device device = Device::cpu());

// Writes `tensors` (any device, any layout; each copied to its own contiguous storage) in the
// format torch.load reads (PyTorch 1.13 and later), atomically like save_safetensors.
void save_torch_file(const std::string& path, const TensorMap& tensors);

// Whether `path` starts like a zip archive, as torch.save's files do (and safetensors files never
// do: they start with a little-endian header length).
bool is_torch_file(const std::string& path);

}  // namespace kiln::nn
