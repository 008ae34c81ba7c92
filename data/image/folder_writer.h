// write_image_folder: a data set of {u8 image, label} examples written as image files in one
// folder per class, the layout ImageFolder reads (kiln-make-imagefolder uses it to turn
// Fashion-MNIST, CIFAR or synthetic data into PNG or JPEG files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

struct ImageFolderWriteOptions {
  // Folder names: the label zero-padded to the width of the largest ("3", or "03" with 100
  // classes), then "_" and class_names[label] when given, so that ImageFolder's sorted classes
  // number the folders with the data set's own labels.
  std::vector<std::string> class_names = {};
  bool jpeg = false;      // PNG (lossless) or JPEG
  int jpeg_quality = 90;  // 1-100
  int64_t per_class = 0;  // write the first `per_class` examples of each class only; 0: all
  int64_t resize = 0;     // resize the shorter side to this first (data/image/ops.h); 0: as is
};

// Writes example i to root/<class>/<i zero-padded>.png (or .jpg), creating the folders of the
// classes it meets: a class none of the examples has gets no folder (ImageFolder refuses an empty
// one), and ImageFolder then numbers the classes after it one lower. Returns the number of files
// written. The labels must lie in [0, num_classes).
int64_t write_image_folder(const Dataset& dataset, const std::string& root, int64_t num_classes,
                           const ImageFolderWriteOptions& options = {});

}  // namespace kiln::data
