// The image-folder input pipeline's throughput: ImageFolder (JPEG/PNG decoding) with the ImageNet
// training transforms (random_resized_crop, flip, to_float, normalize), batched by the DataLoader
// with 1, 2, 4, ... worker threads; images per second over whole epochs. Its peer is
// imagefolder_loader_torch.py (torchvision's ImageFolder and DataLoader on the same folder).
//
//   build/apps/kiln-make-imagefolder --dataset synthetic --synthetic-size 2000
//       --per-class 100 --resize 256 --format jpeg --out /tmp/loader-bench
//   build/benchmarks/imagefolder_loader --data-dir /tmp/loader-bench/train --workers 1,2,4
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command_line.h"
#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

struct Options {
  std::string data_dir;
  std::vector<int> workers = {1, 2, 4};
  int64_t batch_size = 64;
  int64_t image_size = 224;
  int64_t min_short_side = 0;
  int epochs = 1;
};

int run(const Options& o) {
  auto folder = std::make_shared<data::ImageFolder>(
      o.data_dir, data::ImageFolderOptions{.decode = {.min_short_side = o.min_short_side}});
  const data::Transform train = data::compose(
      {data::random_resized_crop(o.image_size), data::random_horizontal_flip(), data::to_float(),
       data::normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})});
  std::printf("imagefolder_loader: %lld images in %zu classes, batch %lld, %lld-pixel crops\n",
              static_cast<long long>(folder->size()), folder->classes().size(),
              static_cast<long long>(o.batch_size), static_cast<long long>(o.image_size));
  for (const int w : o.workers) {
    data::DataLoader loader(
        folder, train, {.batch_size = o.batch_size, .shuffle = true, .seed = 1, .num_workers = w});
    int64_t images = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int e = 0; e < o.epochs; ++e)
      for (data::Batch& batch : loader) images += batch[0].size(0);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("workers %d: %.0f images/s (%lld images in %.2f s)\n", w,
                static_cast<double>(images) / seconds, static_cast<long long>(images), seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"imagefolder_loader: ImageFolder + DataLoader throughput"};
  Options o;
  app.add_option("--data-dir", o.data_dir, "an ImageFolder root (<class>/<file>)")->required();
  app.add_option("--workers", o.workers, "worker counts to time")->delimiter(',');
  app.add_option("--batch-size", o.batch_size)->capture_default_str();
  app.add_option("--image-size", o.image_size, "random_resized_crop's size")->capture_default_str();
  app.add_option("--min-short-side", o.min_short_side,
                 "decode JPEGs at a reduced scale down to this shorter side (0: full size)")
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "epochs per worker count")->capture_default_str();
  if (auto status = apps::parse_command_line(app, "imagefolder_loader", argc, argv)) return *status;
  return apps::run_main("imagefolder_loader", [&] { return run(o); });
}
