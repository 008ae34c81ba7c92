#include "corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/ops/factories.h"

namespace kiln::apps {

namespace fs = std::filesystem;

std::vector<std::string> default_corpus_files() {
  const fs::path folder = "/usr/share/common-licenses";
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error))
    if (entry.is_regular_file(error)) files.push_back(entry.path().string());
  KILN_CHECK(!files.empty(), ValueError,
             "kiln-gpt: no text given and {} has no files (Debian's base-files puts the common "
             "licences there); give --text FILE",
             folder.string());
  std::sort(files.begin(), files.end());
  return files;
}

Corpus read_corpus(const std::vector<std::string>& files, int64_t context) {
  std::vector<uint8_t> bytes;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    KILN_CHECK(in.good(), ValueError, "kiln-gpt: cannot open {}: {}", file, std::strerror(errno));
    bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    KILN_CHECK(!in.bad(), ValueError, "kiln-gpt: cannot read {}: {}", file, std::strerror(errno));
  }
  const auto needed = static_cast<size_t>((context + 1) * 10);
  KILN_CHECK(bytes.size() > needed, ValueError,
             "kiln-gpt: the text holds {} bytes; a context of {} needs more than {}", bytes.size(),
             context, needed);
  const size_t split = bytes.size() - bytes.size() / 10;
  Corpus corpus;
  corpus.train.assign(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(split));
  corpus.validation.assign(bytes.begin() + static_cast<std::ptrdiff_t>(split), bytes.end());
  corpus.files = files;
  return corpus;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Batch window_batch(const std::vector<uint8_t>& bytes, int64_t context, int64_t batch, int64_t step,
                   uint64_t seed) {
  const auto starts = static_cast<uint64_t>(bytes.size()) - static_cast<uint64_t>(context);
  std::vector<int64_t> inputs(static_cast<size_t>(batch * context));
  std::vector<int64_t> targets(inputs.size());
  for (int64_t i = 0; i < batch; ++i) {
    const uint64_t key = (seed << 32) + static_cast<uint64_t>(step * batch + i);
    const uint64_t start = splitmix64(key) % starts;
    for (int64_t t = 0; t < context; ++t) {
      inputs[static_cast<size_t>(i * context + t)] = bytes[start + static_cast<uint64_t>(t)];
      targets[static_cast<size_t>(i * context + t)] = bytes[start + static_cast<uint64_t>(t) + 1];
    }
  }
  return {tensor(inputs, {batch, context}), tensor(targets, {batch, context})};
}

}  // namespace kiln::apps
