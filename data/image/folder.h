// ImageFolder: torchvision's data set of image files sorted into one folder per class,
//   root/<class>/<file>   (files may sit in subfolders of their class folder)
// Classes are the class folders' names sorted, numbered from 0; files are those whose names end
// in one of `extensions` (ignoring case), in the order torchvision lists them (folders sorted by
// path, files sorted by name within a folder). get(i) reads and decodes file i in the calling
// thread, so a DataLoader decodes in its workers.
//
//   data::ImageFolder train("photos/train");
//   data::DataLoader loader(std::make_shared<data::ImageFolder>(std::move(train)),
//                           data::compose({data::random_resized_crop(224),
//                                          data::random_horizontal_flip(), data::to_float()}),
//                           {.batch_size = 64, .shuffle = true, .num_workers = 4});
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/image/decode.h"

namespace kiln::data {

struct ImageFolderOptions {
  // Channels and reduced-scale JPEG decoding (data/image/decode.h). torchvision's loader
  // converts every image to RGB, as channels = 3 does.
  DecodeOptions decode = {};
  // The file names kept, compared in lower case. The formats kiln decodes; a file whose name
  // says JPEG but holds something else fails when it is read.
  std::vector<std::string> extensions = {".jpg", ".jpeg", ".png"};
  // A file that does not decode: false throws ImageDecodeError naming it; true prints a warning
  // naming it (once per file) and returns the next file that decodes (index + 1, + 2, ... around
  // the end) in its place, with that file's label.
  bool skip_bad_files = false;
};

// get(i) returns {u8 image [channels, H, W], i64 0-dim label}.
class ImageFolder : public Dataset {
 public:
  // Lists the files; throws ValueError when root is not a folder, has no class folder, or a class
  // folder holds no file with one of the extensions (as torchvision's FileNotFoundError).
  explicit ImageFolder(std::string root, ImageFolderOptions options = {});

  int64_t size() const override;
  Example get(int64_t index) const override;
  // The file's path (and its index), for error messages.
  std::string describe(int64_t index) const override;

  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::map<std::string, int64_t>& class_to_idx() const { return class_to_idx_; }
  // {path, class index} of every file, in index order (torchvision's `samples`).
  const std::vector<std::pair<std::string, int64_t>>& samples() const { return samples_; }
  const ImageFolderOptions& options() const { return options_; }

 private:
  std::string root_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::map<std::string, int64_t> class_to_idx_;
  std::vector<std::pair<std::string, int64_t>> samples_;
};

}  // namespace kiln::data
