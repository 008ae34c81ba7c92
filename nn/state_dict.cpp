#include "kiln/nn/state_dict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <string>

#include "kiln/nn/safetensors.h"

namespace kiln::nn {

void save_state_dict(const Module& module, const std::string& path) {
  TensorMap tensors;
  for (auto& [name, t] : module.state_dict()) tensors[name] = t;
  save_safetensors(path, tensors, {{"format", "pt"}});
}

LoadResult load_state_dict(Module& module, const std::string& path, bool strict) {
  SafetensorsFile file = load_safetensors(path);
  StateDict state(file.tensors.begin(), file.tensors.end());
  LoadResult result = module.load_state_dict(state, strict);
  if (!result.converted_keys.empty())
    std::fprintf(stderr,
                 "kiln: load_state_dict %s: converted %zu tensors to the model's dtypes: %s\n",
                 path.c_str(), result.converted_keys.size(),
                 fmt::format("{}", fmt::join(result.converted_keys, ", ")).c_str());
  return result;
}

}  // namespace kiln::nn
