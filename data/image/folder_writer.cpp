#include "kiln/data/image/folder_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/data/image/encode.h"
#include "kiln/data/image/ops.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

int digits(int64_t n) {
  int d = 1;
  for (; n >= 10; n /= 10) ++d;
  return d;
}

}  // namespace

int64_t write_image_folder(const Dataset& dataset, const std::string& root, int64_t num_classes,
                           const ImageFolderWriteOptions& options) {
  KILN_CHECK(num_classes >= 1, ValueError,
             "write_image_folder: num_classes must be at least 1, got {}", num_classes);
  KILN_CHECK(options.class_names.empty() ||
                 static_cast<int64_t>(options.class_names.size()) == num_classes,
             ValueError, "write_image_folder: {} class names for {} classes",
             options.class_names.size(), num_classes);
  KILN_CHECK(options.per_class >= 0 && options.resize >= 0, ValueError,
             "write_image_folder: per_class and resize must be non-negative, got {} and {}",
             options.per_class, options.resize);
  const int64_t count = dataset.size();
  const int class_width = digits(num_classes - 1);
  const int file_width = digits(std::max<int64_t>(count - 1, 0));
  std::vector<fs::path> folders;
  for (int64_t c = 0; c < num_classes; ++c) {
    std::string name = fmt::format("{:0{}}", c, class_width);
    if (!options.class_names.empty()) name += "_" + options.class_names[static_cast<size_t>(c)];
    folders.push_back(fs::path(root) / name);
  }
  const std::string extension = options.jpeg ? ".jpg" : ".png";
  std::vector<int64_t> per_class(static_cast<size_t>(num_classes), 0);
  int64_t written = 0, full_classes = 0;
  for (int64_t i = 0; i < count && (options.per_class == 0 || full_classes < num_classes); ++i) {
    const Example example = dataset.get(i);
    KILN_CHECK(example.size() >= 2, ValueError,
               "write_image_folder: example {} has {} fields, expected {{image, label}}", i,
               example.size());
    const auto label = example[1].item<int64_t>();
    KILN_CHECK(label >= 0 && label < num_classes, ValueError,
               "write_image_folder: example {} has label {}, outside [0, {})", i, label,
               num_classes);
    int64_t& written_of_class = per_class[static_cast<size_t>(label)];
    if (options.per_class > 0 && written_of_class == options.per_class) continue;
    Tensor image = example[0];
    if (options.resize > 0)
      image = functional::resize(
          image, functional::resized_shape(image.size(1), image.size(2), options.resize));
    fs::create_directories(folders[static_cast<size_t>(label)]);
    const fs::path file =
        folders[static_cast<size_t>(label)] / (fmt::format("{:0{}}", i, file_width) + extension);
    write_image(file.string(), image, options.jpeg_quality);
    ++written;
    if (++written_of_class == options.per_class) ++full_classes;
  }
  return written;
}

}  // namespace kiln::data
