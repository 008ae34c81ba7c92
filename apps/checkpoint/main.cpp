// kiln-checkpoint: what a checkpoint holds, without Python. `show` prints a safetensors header's
// metadata (a training checkpoint's position, optimizer, scheduler step and random state) and
// every tensor's name, dtype, shape and size; the data is read and checked as a loader would. A
// PyTorch .pt/.pth state dict (a zip archive, recognised by its content) is shown the same way.
//
//   kiln-checkpoint show runs/default/last.safetensors
//   kiln-checkpoint show resnet18.pth
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "command_line.h"
#include "kiln/nn/safetensors.h"
#include "kiln/nn/torch_file.h"
#include "main_guard.h"

using namespace kiln;

namespace {

int show(const std::string& path) {
  nn::SafetensorsFile file;
  if (nn::is_torch_file(path))
    file.tensors = nn::load_torch_file(path);
  else
    file = nn::load_safetensors(path);
  int64_t elements = 0, bytes = 0;
  size_t name_width = 4;
  for (const auto& [name, t] : file.tensors) {
    elements += t.numel();
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
    name_width = std::max(name_width, name.size());
  }
  std::printf("%s: %lld bytes on disk, %zu tensors, %lld elements (%lld bytes of data)\n",
              path.c_str(), static_cast<long long>(std::filesystem::file_size(path)),
              file.tensors.size(), static_cast<long long>(elements), static_cast<long long>(bytes));
  if (!file.metadata.empty()) {
    std::printf("metadata:\n");
    for (const auto& [key, value] : file.metadata)
      std::printf("  %s = %s\n", key.c_str(), value.c_str());
  }
  std::printf("tensors:\n");
  std::printf("%s\n", fmt::format("  {:<{}}  {:<5}  {:<20}  {:>12}", "name", name_width, "dtype",
                                  "shape", "bytes")
                          .c_str());
  for (const auto& [name, t] : file.tensors)
    std::printf("%s\n", fmt::format("  {:<{}}  {:<5}  {:<20}  {:>12}", name, name_width,
                                    dtype_name(t.dtype()), shape_str(t.shape()),
                                    t.numel() * static_cast<int64_t>(t.element_size()))
                            .c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-checkpoint: inspect safetensors checkpoints and PyTorch .pt/.pth files"};
  app.require_subcommand(1);
  std::string path;
  CLI::App* show_command =
      app.add_subcommand("show", "metadata and each tensor's name, dtype, shape and size");
  show_command->add_option("file", path, "a .safetensors, .pt or .pth file")->required();
  if (auto status = apps::parse_command_line(app, "kiln-checkpoint", argc, argv)) return *status;
  return apps::run_main("kiln-checkpoint", [&] { return show(path); });
}
