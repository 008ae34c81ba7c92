#include "kiln/data/image/folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool has_extension(const std::string& name, const std::vector<std::string>& extensions) {
  const std::string low = lower(name);
  return std::any_of(extensions.begin(), extensions.end(), [&](const std::string& e) {
    return low.size() >= e.size() && low.compare(low.size() - e.size(), e.size(), e) == 0;
  });
}

// torchvision's make_dataset for one class: sorted(os.walk(folder, followlinks=True)), then each
// folder's files sorted by name. Python sorts str by code point, which is the byte order of UTF-8.
std::vector<std::string> class_files(const fs::path& folder,
                                     const std::vector<std::string>& extensions) {
  std::map<std::string, std::vector<std::string>> by_folder;
  by_folder[folder.string()];
  std::error_code error;
  const auto options = fs::directory_options::follow_directory_symlink;
  for (fs::recursive_directory_iterator it(folder, options, error), end; !error && it != end;
       it.increment(error)) {
    const fs::path& path = it->path();
    std::error_code status;
    if (it->is_directory(status)) {
      by_folder[path.string()];
    } else if (has_extension(path.filename().string(), extensions)) {
      by_folder[path.parent_path().string()].push_back(path.filename().string());
    }
  }
  KILN_CHECK(!error, ValueError, "ImageFolder: cannot list {}: {}", folder.string(),
             error.message());
  std::vector<std::string> files;
  for (auto& [dir, names] : by_folder) {
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) files.push_back((fs::path(dir) / name).string());
  }
  return files;
}

// One warning per bad file, whichever worker meets it first.
void warn_once(const std::string& path, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (warned.insert(path).second)
    std::fprintf(stderr, "ImageFolder: skipping %s: %s\n", path.c_str(), why.c_str());
}

}  // namespace

ImageFolder::ImageFolder(std::string root, ImageFolderOptions options)
    : root_(std::move(root)), options_(std::move(options)) {
  KILN_CHECK(!options_.extensions.empty(), ValueError,
             "ImageFolder: expected at least one file extension, got none");
  for (std::string& e : options_.extensions) e = lower(e);
  std::error_code error;
  KILN_CHECK(fs::is_directory(root_, error), ValueError, "ImageFolder: {} is not a folder", root_);
  for (const fs::directory_entry& entry : fs::directory_iterator(root_, error)) {
    std::error_code status;
    if (entry.is_directory(status)) classes_.push_back(entry.path().filename().string());
  }
  KILN_CHECK(!error, ValueError, "ImageFolder: cannot list {}: {}", root_, error.message());
  std::sort(classes_.begin(), classes_.end());
  KILN_CHECK(!classes_.empty(), ValueError,
             "ImageFolder: {} holds no class folder (expected root/<class>/<file>)", root_);
  std::vector<std::string> empty_classes;
  for (size_t c = 0; c < classes_.size(); ++c) {
    class_to_idx_[classes_[c]] = static_cast<int64_t>(c);
    const std::vector<std::string> files =
        class_files(fs::path(root_) / classes_[c], options_.extensions);
    if (files.empty()) empty_classes.push_back(classes_[c]);
    for (const std::string& file : files) samples_.emplace_back(file, static_cast<int64_t>(c));
  }
  KILN_CHECK(empty_classes.empty(), ValueError,
             "ImageFolder: {}: no file with an extension in [{}] for the classes {}", root_,
             fmt::join(options_.extensions, ", "), fmt::join(empty_classes, ", "));
}

int64_t ImageFolder::size() const {
  return static_cast<int64_t>(samples_.size());
}

std::string ImageFolder::describe(int64_t index) const {
  if (index < 0 || index >= size()) return Dataset::describe(index);
  return fmt::format("{} (example {})", samples_[static_cast<size_t>(index)].first, index);
}

Example ImageFolder::get(int64_t index) const {
  check_index("ImageFolder", index, size());
  const int64_t count = size();
  for (int64_t k = 0; k < count; ++k) {
    const auto& [path, label] = samples_[static_cast<size_t>((index + k) % count)];
    try {
      Tensor image = read_image(path, options_.decode);
      Tensor target = empty({}, DType::i64);
      *target.data<int64_t>() = label;
      return {image, target};
    } catch (const ImageDecodeError& e) {
      if (!options_.skip_bad_files) throw;
      warn_once(path, e.what());
    }
  }
  throw ImageDecodeError(
      fmt::format("ImageFolder: {}: none of its {} files decodes", root_, count));
}

}  // namespace kiln::data
