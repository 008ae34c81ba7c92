// kiln-make-imagefolder: writes a data set kiln reads from its own files (Fashion-MNIST, MNIST,
// CIFAR) or makes up (synthetic) as PNG or JPEG files in the layout ImageFolder and torchvision's
// ImageFolder read, with the training and test splits as train/ and val/:
//   OUT/train/<label>_<class name>/<index>.png, OUT/val/...
//
//   kiln-make-imagefolder --dataset fashion-mnist --out fmnist-png
//   kiln-make-imagefolder --dataset cifar10 --data-dir cifar --format jpeg --resize 64 --out c64
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "command_line.h"
#include "kiln/kiln.h"
#include "main_guard.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

struct Options {
  std::string dataset = "fashion-mnist";
  std::string data_dir;
  std::string out;
  std::string format = "png";
  int quality = 90;
  int64_t per_class = 0;
  int64_t resize = 0;
  int64_t synthetic_size = 1000;
};

struct Source {
  std::shared_ptr<const data::Dataset> train, val;
  int64_t classes = 0;
  std::vector<std::string> names;
};

Source open_source(const Options& o) {
  if (o.dataset == "fashion-mnist" || o.dataset == "mnist") {
    const bool fashion = o.dataset == "fashion-mnist";
    const std::string root = !o.data_dir.empty() ? o.data_dir
                             : fashion           ? "/usr/share/datasets/fashion-mnist"
                                                 : "/usr/share/datasets/mnist";
    auto make = [&](bool train) {
      return std::make_shared<data::MnistDataset>(fashion ? data::MnistDataset::fashion(root, train)
                                                          : data::MnistDataset::mnist(root, train));
    };
    // torchvision's FashionMNIST.classes, with '/' and ' ' made safe for folder names.
    std::vector<std::string> names;
    if (fashion)
      names = {"T-shirt-top", "Trouser", "Pullover", "Dress", "Coat",
               "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle-boot"};
    return {make(true), make(false), 10, names};
  }
  if (o.dataset == "cifar10" || o.dataset == "cifar100") {
    const int variant = o.dataset == "cifar10" ? 10 : 100;
    KILN_CHECK(!o.data_dir.empty(), ValueError, "--data-dir is required for {}", o.dataset);
    auto make = [&](bool train) {
      return std::make_shared<data::CifarDataset>(
          data::CifarDataset::from_root(o.data_dir, train, variant));
    };
    std::vector<std::string> names;
    if (variant == 10)
      names = {"airplane", "automobile", "bird",  "cat",  "deer",
               "dog",      "frog",       "horse", "ship", "truck"};
    return {make(true), make(false), variant, names};
  }
  if (o.dataset == "synthetic") {
    KILN_CHECK(o.synthetic_size >= 1, ValueError, "--synthetic-size must be at least 1, got {}",
               o.synthetic_size);
    return {std::make_shared<data::SyntheticDataset>(o.synthetic_size, Shape{3, 32, 32}, 10, 1),
            std::make_shared<data::SyntheticDataset>(std::max<int64_t>(o.synthetic_size / 4, 1),
                                                     Shape{3, 32, 32}, 10, 2),
            10,
            {}};
  }
  throw ValueError(fmt::format(
      "unknown dataset '{}' (expected fashion-mnist, mnist, cifar10, cifar100 or synthetic)",
      o.dataset));
}

int run(const Options& o) {
  std::error_code error;
  KILN_CHECK(!fs::exists(o.out, error) || fs::is_empty(o.out, error), ValueError,
             "{} exists and is not empty: give a new folder", o.out);
  const Source source = open_source(o);
  const data::ImageFolderWriteOptions write{.class_names = source.names,
                                            .jpeg = o.format == "jpeg",
                                            .jpeg_quality = o.quality,
                                            .per_class = o.per_class,
                                            .resize = o.resize};
  for (const auto& [split, dataset] :
       {std::pair{"train", source.train}, std::pair{"val", source.val}}) {
    const std::string folder = (fs::path(o.out) / split).string();
    const int64_t written = data::write_image_folder(*dataset, folder, source.classes, write);
    std::printf("%s: %lld %s files in %lld class folders\n", folder.c_str(),
                static_cast<long long>(written), o.format.c_str(),
                static_cast<long long>(source.classes));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-make-imagefolder: write a data set as PNG or JPEG files in class folders"};
  Options o;
  app.add_option("--dataset", o.dataset, "fashion-mnist, mnist, cifar10, cifar100 or synthetic")
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir,
                 "where the data set's files are (default for (fashion-)mnist: Debian's)");
  app.add_option("--out", o.out, "the folder to write: OUT/train/<class>/, OUT/val/<class>/")
      ->required();
  app.add_option("--format", o.format, "png or jpeg")
      ->check(CLI::IsMember({"png", "jpeg"}))
      ->capture_default_str();
  app.add_option("--quality", o.quality, "JPEG quality, 1-100")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--per-class", o.per_class,
                 "write the first N images of each class in each split (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--resize", o.resize, "resize the shorter side to N pixels first (0: as stored)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--synthetic-size", o.synthetic_size, "training images of --dataset synthetic")
      ->capture_default_str();
  if (auto status = apps::parse_command_line(app, "kiln-make-imagefolder", argc, argv))
    return *status;
  return apps::run_main("kiln-make-imagefolder", [&] { return run(o); });
}
