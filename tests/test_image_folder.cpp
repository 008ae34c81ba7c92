// ImageFolder: torchvision's class and file order, the extension filter, decoding in the
// DataLoader's workers (into pinned batches for a GPU), and bad files: an ImageDecodeError naming
// the file, or skipped when asked.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "temp_dir.h"

using namespace kiln;
using Catch::Contains;
using data::ImageFolder;
using kiln::testing::TempDir;

namespace fs = std::filesystem;

namespace {

// An 8x8 RGB image whose pixels all equal `value`, so a decoded image says which file it was.
Tensor flat(int value) {
  return full({3, 8, 8}, static_cast<double>(value)).to(DType::u8);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// root/<class>/...: files named for the value of their pixels, in the order torchvision lists them
// (folders by path as Python sorts them: "b" before "b x" before "b/deep", since ' ' < '/'; files
// by name; ".PNG" counts, ".txt" not).
struct Folder {
  TempDir dir{"kiln_imagefolder"};
  std::vector<std::pair<std::string, int64_t>> expected;  // {path relative to root, label}

  Folder() {
    const std::vector<std::pair<std::string, int64_t>> files = {
        {"ant/10.png", 0},     {"ant/11.PNG", 0}, {"bee/b/20.png", 1}, {"bee/b/deep/21.png", 1},
        {"bee/b x/22.png", 1}, {"bee/23.jpg", 1}, {"cat/30.png", 2}};
    for (const auto& [name, label] : files) {
      const fs::path path = dir.path / name;
      fs::create_directories(path.parent_path());
      data::write_image(path.string(), flat(std::stoi(path.stem().string())), 100);
    }
    write_text(dir.path / "ant" / "notes.txt", "not an image");
    write_text(dir.path / "README", "a file beside the class folders is no class");
    expected = {{"ant/10.png", 0},   {"ant/11.PNG", 0},     {"bee/23.jpg", 1},
                {"bee/b/20.png", 1}, {"bee/b x/22.png", 1}, {"bee/b/deep/21.png", 1},
                {"cat/30.png", 2}};
  }
  std::string root() const { return dir.path.string(); }
};

}  // namespace

TEST_CASE("ImageFolder lists classes and files in torchvision's order") {
  Folder folder;
  ImageFolder images(folder.root());
  CHECK(images.classes() == std::vector<std::string>{"ant", "bee", "cat"});
  CHECK(images.class_to_idx() ==
        std::map<std::string, int64_t>{{"ant", 0}, {"bee", 1}, {"cat", 2}});
  REQUIRE(images.size() == static_cast<int64_t>(folder.expected.size()));
  for (size_t i = 0; i < folder.expected.size(); ++i) {
    const auto& [name, label] = folder.expected[i];
    INFO("sample " << i);
    CHECK(images.samples()[i].first == (folder.dir.path / name).string());
    CHECK(images.samples()[i].second == label);
    data::Example example = images.get(static_cast<int64_t>(i));
    CHECK(example[1].item<int64_t>() == label);
    CHECK(example[0].shape() == Shape{3, 8, 8});
    // A flat image survives JPEG exactly enough to name its file.
    const int value = std::stoi(fs::path(name).stem().string());
    CHECK(example[0].to(DType::f32).mean().item() == Approx(value).margin(1.0));
  }
  CHECK_THROWS_AS(images.get(7), IndexError);

  ImageFolder png_only(folder.root(), {.extensions = {".PNG"}});
  CHECK(png_only.size() == 6);
  ImageFolder gray(folder.root(), {.decode = {.channels = 1}});
  CHECK(gray.get(0)[0].shape() == Shape{1, 8, 8});
}

TEST_CASE("ImageFolder refuses a root without classes or with an empty class") {
  TempDir dir("kiln_imagefolder_bad");
  CHECK_THROWS_WITH(ImageFolder((dir.path / "missing").string()), Contains("is not a folder"));
  CHECK_THROWS_WITH(ImageFolder(dir.path.string()), Contains("holds no class folder"));
  fs::create_directories(dir.path / "full");
  data::write_image((dir.path / "full" / "a.png").string(), flat(1));
  fs::create_directories(dir.path / "hollow");
  write_text(dir.path / "hollow" / "a.txt", "text");
  CHECK_THROWS_WITH(ImageFolder(dir.path.string()),
                    Contains("for the classes hollow") && Contains(".jpg"));
}

TEST_CASE("ImageFolder decodes in the DataLoader's workers, the same batches as inline") {
  Folder folder;
  auto images = std::make_shared<ImageFolder>(folder.root());
  // The ImageNet training recipe's transforms, at a small size.
  const data::Transform train =
      data::compose({data::random_resized_crop(6), data::random_horizontal_flip(),
                     data::color_jitter(0.4, 0.4, 0.4), data::to_float(),
                     data::normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})});
  data::DataLoader workers(images, train,
                           {.batch_size = 3, .shuffle = true, .seed = 4, .num_workers = 2});
  data::DataLoader inline_loader(images, train, {.batch_size = 3, .shuffle = true, .seed = 4});
  int64_t seen = 0;
  while (auto batch = workers.next()) {
    data::Batch same = *inline_loader.next();
    CHECK(equal((*batch)[0], same[0]));
    CHECK(equal((*batch)[1], same[1]));
    CHECK((*batch)[0].shape() == Shape{(*batch)[0].size(0), 3, 6, 6});
    seen += (*batch)[0].size(0);
  }
  CHECK(seen == 7);
}

TEST_CASE("ImageFolder batches for a GPU are collated into pinned memory by the workers",
          "[may_skip]") {
  if (!cuda::is_available()) {
    WARN("SKIPPED: no GPU (or simulated one) visible: batches are pinned only for a GPU");
    return;
  }
  Folder folder;
  auto images = std::make_shared<ImageFolder>(folder.root());
  const data::Transform eval =
      data::compose({data::resize(7), data::center_crop(6), data::to_float()});
  data::DataLoader pinned(images, eval, {.batch_size = 4, .num_workers = 2, .pin_memory = true});
  data::DataLoader pageable(images, eval, {.batch_size = 4, .num_workers = 2});
  int64_t batches = 0;
  while (auto batch = pinned.next()) {
    data::Batch same = *pageable.next();
    for (size_t field = 0; field < 2; ++field) {
      CHECK((*batch)[field].is_pinned());
      CHECK_FALSE(same[field].is_pinned());
      // From pinned memory the copy is queued without waiting; reading it back waits.
      const Tensor on_gpu = (*batch)[field].to(Device::cuda(0), /*non_blocking=*/true);
      CHECK(equal(on_gpu.cpu(), same[field]));
    }
    ++batches;
  }
  CHECK(batches == 2);
}

TEST_CASE("a corrupt file fails naming it, or is skipped with a warning when asked") {
  Folder folder;
  const fs::path bad = folder.dir.path / "bee" / "b" / "20.png";
  write_text(bad, "\x89PNG\r\n\x1a\n and then nothing a PNG needs");
  ImageFolder strict(folder.root());
  CHECK_THROWS_WITH(strict.get(3), Contains(bad.string()));
  data::DataLoader loader(std::make_shared<ImageFolder>(folder.root()), data::Transform(),
                          {.batch_size = 2, .num_workers = 2});
  CHECK(loader.next());
  CHECK_THROWS_AS(loader.next(), data::ImageDecodeError);  // batch 1 holds samples 2 and 3

  ImageFolder lenient(folder.root(), {.skip_bad_files = true});
  data::Example example = lenient.get(3);  // sample 4 in its place: bee/b x/22.png
  CHECK(example[0].to(DType::f32).mean().item() == Approx(22).margin(1.0));
  CHECK(example[1].item<int64_t>() == 1);
  CHECK(lenient.get(2)[0].to(DType::f32).mean().item() == Approx(23).margin(1.0));
}

TEST_CASE("images of two sizes in a batch are named, with the transform that cures it") {
  Folder folder;
  const fs::path wide = folder.dir.path / "ant" / "11.PNG";
  data::write_image(wide.string(), full({3, 8, 12}, 11.0).to(DType::u8));
  data::DataLoader loader(std::make_shared<ImageFolder>(folder.root()), data::Transform(),
                          {.batch_size = 2});
  CHECK_THROWS_WITH(loader.next(), Contains(wide.string() + " (example 1) ([3, 8, 12])") &&
                                       Contains((folder.dir.path / "ant" / "10.png").string()) &&
                                       Contains("random_resized_crop"));
  data::DataLoader cured(std::make_shared<ImageFolder>(folder.root()),
                         data::compose({data::resize(8), data::center_crop(8)}), {.batch_size = 2});
  CHECK(cured.next()->at(0).shape() == Shape{2, 3, 8, 8});
}

TEST_CASE("write_image_folder writes a data set that ImageFolder reads back") {
  TempDir dir("kiln_imagefolder_write");
  const data::SyntheticDataset synthetic(25, Shape{3, 6, 5}, 4, 7);
  const int64_t written = data::write_image_folder(synthetic, dir.path.string(), 4,
                                                   {.class_names = {"a", "b", "c", "d"}});
  CHECK(written == 25);
  ImageFolder images(dir.path.string());
  CHECK(images.classes() == std::vector<std::string>{"0_a", "1_b", "2_c", "3_d"});
  REQUIRE(images.size() == 25);
  for (int64_t i = 0; i < images.size(); ++i) {
    // The file's name is the example's index in the data set (PNG keeps its pixels exactly).
    const int64_t source =
        std::stoll(fs::path(images.samples()[static_cast<size_t>(i)].first).stem().string());
    const data::Example want = synthetic.get(source), got = images.get(i);
    CHECK(equal(got[0], want[0]));
    CHECK(got[1].item<int64_t>() == want[1].item<int64_t>());
  }
  TempDir resized("kiln_imagefolder_resized");
  CHECK(data::write_image_folder(synthetic, resized.path.string(), 4,
                                 {.jpeg = true, .per_class = 2, .resize = 12}) == 8);
  const ImageFolder small(resized.path.string());
  REQUIRE(small.size() == 8);
  for (int64_t c = 0; c < 4; ++c) CHECK(small.samples()[static_cast<size_t>(2 * c)].second == c);
  CHECK(small.get(0)[0].shape() == Shape{3, 14, 12});
  CHECK_THROWS_AS(data::write_image_folder(synthetic, resized.path.string(), 3), ValueError);
}
