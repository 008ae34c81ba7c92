#include "kiln/kernels/cpu/conv2d/choice_file.h"

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::cpu {

namespace {

constexpr const char* kTag = "conv2d";
// pass, dtype, bias, ISA level, oneDNN on, then geometry_key's 14 sizes.
constexpr size_t kKeySize = 5 + 14;

bool parse_impl(const std::string& name, Conv2dImpl& impl) {
  for (Conv2dImpl i :
       {Conv2dImpl::onednn, Conv2dImpl::direct, Conv2dImpl::im2col, Conv2dImpl::through_f32})
    if (name == conv2d_impl_name(i)) {
      impl = i;
      return true;
    }
  return false;
}

}  // namespace

std::vector<std::pair<Conv2dChoiceKey, Conv2dImpl>> read_conv2d_choice_file(
    const std::string& path) {
  std::vector<std::pair<Conv2dChoiceKey, Conv2dImpl>> choices;
  std::ifstream in(path);
  if (!in) return choices;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string tag, impl_name, rest;
    Conv2dChoiceKey key(kKeySize);
    words >> tag;
    for (int64_t& k : key) words >> k;
    words >> impl_name;
    Conv2dImpl impl{};
    const bool read = !words.fail() && !(words >> rest);
    KILN_CHECK(read && tag == kTag && parse_impl(impl_name, impl), ValueError,
               "{}:{}: not a conv2d choice (\"conv2d\", {} numbers, and onednn, direct, im2col "
               "or through_f32): '{}'",
               path, number, kKeySize, line);
    choices.emplace_back(std::move(key), impl);
  }
  return choices;
}

void append_conv2d_choice(const std::string& path, const Conv2dChoiceKey& key, Conv2dImpl impl) {
  std::ostringstream line;
  line << kTag;
  for (int64_t k : key) line << ' ' << k;
  line << ' ' << conv2d_impl_name(impl) << '\n';
  std::ofstream out(path, std::ios::app);
  out << line.str();
  out.flush();
  KILN_CHECK(out.good(), ValueError, "KILN_CPU_CONV_CACHE: cannot write to '{}'", path);
}

}  // namespace kiln::cpu
