// The same training run from Fashion-MNIST's IDX files and from the PNG folder that
// kiln-make-imagefolder wrote of them (tests/apps/imagefolder_vs_idx.cmake): ResNet-18 at a small
// resolution, the same transforms, seed and images, in the same order. Prints both test
// accuracies and fails unless both are well above chance and within two points of each other.
//
//   imagefolder_vs_idx FOLDER PER_CLASS [IDX_DIR]
//
// FOLDER holds train/<class>/ and val/<class>/ written with --per-class PER_CLASS; the IDX run
// takes the same images: the first PER_CLASS of each class in each split.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kClasses = 10;
// 80 steps of 25 of the 500 training images: about 70% on the test images, where chance is 10%.
constexpr int64_t kEpochs = 4;
constexpr int64_t kBatchSize = 25;
constexpr double kMaxLr = 0.05;
constexpr double kMinAccuracy = 0.5;
constexpr double kMaxGap = 0.02;

// The examples of `dataset` at `indices`, in that order.
class Subset : public data::Dataset {
 public:
  Subset(std::shared_ptr<const data::Dataset> dataset, std::vector<int64_t> indices)
      : dataset_(std::move(dataset)), indices_(std::move(indices)) {}
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  data::Example get(int64_t index) const override {
    data::check_index("Subset", index, size());
    return dataset_->get(indices_[static_cast<size_t>(index)]);
  }

 private:
  std::shared_ptr<const data::Dataset> dataset_;
  std::vector<int64_t> indices_;
};

// The first `per_class` examples of each class, class by class: the images write_image_folder
// writes with --per-class, in the order ImageFolder lists them.
std::shared_ptr<const data::Dataset> first_of_each_class(const data::MnistDataset& idx,
                                                         int64_t per_class) {
  std::vector<int64_t> indices;
  const Tensor labels = idx.labels().contiguous();
  for (int64_t c = 0; c < kClasses; ++c) {
    int64_t taken = 0;
    for (int64_t i = 0; i < idx.size() && taken < per_class; ++i)
      if (labels.data<int64_t>()[i] == c) {
        indices.push_back(i);
        ++taken;
      }
  }
  return std::make_shared<Subset>(std::make_shared<data::MnistDataset>(idx), indices);
}

// Trains ResNet-18 on `train` from seed 0 and returns its accuracy on `test`. The 28-pixel images
// meet ImageNet's stem (7x7 stride 2, max-pool): ResNet-18's stages at 7, 4, 2 and 1 pixels.
double train_and_test(std::shared_ptr<const data::Dataset> train,
                      std::shared_ptr<const data::Dataset> test) {
  manual_seed(0);
  auto model = nn::resnet18({.num_classes = kClasses, .in_channels = 1});
  const data::Transform train_transform = data::compose(
      {data::random_horizontal_flip(), data::to_float(), data::normalize({0.2860}, {0.3530})});
  const data::Transform test_transform =
      data::compose({data::to_float(), data::normalize({0.2860}, {0.3530})});
  data::DataLoader loader(train, train_transform,
                          {.batch_size = kBatchSize, .shuffle = true, .seed = 1, .num_workers = 1});
  optim::SGD sgd(model->parameters(),
                 {.lr = kMaxLr, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
  optim::OneCycleLR schedule(sgd, kMaxLr, kEpochs * loader.num_batches());
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    loader.set_epoch(epoch);
    for (data::Batch& batch : loader) {
      Tensor loss = cross_entropy(model->forward(batch[0]), batch[1]);
      sgd.zero_grad();
      loss.backward();
      sgd.step();
      schedule.step();
    }
  }
  NoGradGuard no_grad;
  model->eval();
  data::DataLoader test_loader(test, test_transform, {.batch_size = 200, .num_workers = 1});
  int64_t correct = 0;
  for (data::Batch& batch : test_loader)
    correct += sum(eq(argmax(model->forward(batch[0]), 1), batch[1])).item<int64_t>();
  return static_cast<double>(correct) / static_cast<double>(test->size());
}

int run(int argc, char** argv) {
  KILN_CHECK(argc == 3 || argc == 4, ValueError,
             "usage: imagefolder_vs_idx FOLDER PER_CLASS [IDX_DIR]");
  const fs::path folder = argv[1];
  const int64_t per_class = std::stoll(argv[2]);
  const std::string idx_dir = argc == 4 ? argv[3] : "/usr/share/datasets/fashion-mnist";

  const data::ImageFolderOptions gray{.decode = {.channels = 1}};
  auto folder_train = std::make_shared<data::ImageFolder>((folder / "train").string(), gray);
  auto folder_test = std::make_shared<data::ImageFolder>((folder / "val").string(), gray);
  auto idx_train = first_of_each_class(data::MnistDataset::fashion(idx_dir, true), per_class);
  auto idx_test = first_of_each_class(data::MnistDataset::fashion(idx_dir, false), per_class);
  KILN_CHECK(folder_train->size() == idx_train->size() && folder_test->size() == idx_test->size(),
             ValueError,
             "{} holds {} + {} images, the IDX subsets {} + {}: write it with "
             "--per-class PER_CLASS",
             folder.string(), folder_train->size(), folder_test->size(), idx_train->size(),
             idx_test->size());

  const auto start = std::chrono::steady_clock::now();
  const double from_idx = train_and_test(idx_train, idx_test);
  const auto middle = std::chrono::steady_clock::now();
  const double from_folder = train_and_test(folder_train, folder_test);
  const auto end = std::chrono::steady_clock::now();
  const auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf(
      "ResNet-18 on 28x28 images, %lld epochs of %lld training images, %lld test images, "
      "%d threads\n",
      static_cast<long long>(kEpochs), static_cast<long long>(idx_train->size()),
      static_cast<long long>(idx_test->size()), omp_get_max_threads());
  std::printf("from the IDX files: test accuracy %.2f%% (%.1f s)\n", 100 * from_idx,
              seconds(start, middle));
  std::printf("from the PNG folder: test accuracy %.2f%% (%.1f s)\n", 100 * from_folder,
              seconds(middle, end));
  KILN_CHECK(from_idx >= kMinAccuracy && from_folder >= kMinAccuracy, ValueError,
             "expected both runs above {:.0f}%", 100 * kMinAccuracy);
  KILN_CHECK(std::abs(from_idx - from_folder) <= kMaxGap, ValueError,
             "the runs differ by more than {:.0f} points", 100 * kMaxGap);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::apps::run_main("imagefolder_vs_idx", [&] { return run(argc, argv); });
}
