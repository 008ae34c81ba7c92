#include "kiln/nn/state_dict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <string>

#include "kiln/nn/safetensors.h"
#include "kiln/nn/torch_file.h"

namespace kiln::nn {

namespace {

bool has_torch_extension(const std::string& path) {
  return path.ends_with(".pt") || path.ends_with(".pth");
}

}  // namespace

void save_state_dict(const Module& module, const std::string& path) {
  TensorMap tensors;
  for (auto& [name, t] : module.state_dict()) tensors[name] = t;
  if (has_torch_extension(path))
    save_torch_file(path, tensors);
  else
    save_safetensors(path, tensors, {{"format", "pt"}});
}

LoadResult load_state_dict(Module& module, const std::string& path, bool strict) {
  // By content, not name: a PyTorch file is a zip archive whatever it is called.
  TensorMap tensors = is_torch_file(path) ? load_torch_file(path) : load_safetensors(path).tensors;
  StateDict state(tensors.begin(), tensors.end());
  LoadResult result = module.load_state_dict(state, strict);
  if (!result.converted_keys.empty())
    std::fprintf(stderr,
                 "kiln: load_state_dict %s: converted %zu tensors to the model's dtypes: %s\n",
                 path.c_str(), result.converted_keys.size(),
                 fmt::format("{}", fmt::join(result.converted_keys, ", ")).c_str());
  return result;
}

}  // namespace kiln::nn
