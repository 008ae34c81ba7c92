#include "kiln/nn/checkpoint.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::nn {

namespace {

// The modules [begin, end) of seq as one function; it holds the modules, since backward may call
// it after the caller's references are gone.
auto run_of(const Sequential& seq, int64_t begin, int64_t end) {
  std::vector<std::shared_ptr<Module>> modules;
  for (int64_t i = begin; i < end; ++i) modules.push_back(seq[static_cast<size_t>(i)]);
  return [modules = std::move(modules)](const Tensor& x) {
    Tensor h = x;
    for (const auto& m : modules) h = (*m)(h);
    return h;
  };
}

}  // namespace

Tensor checkpoint_sequential(const Sequential& seq, int64_t segments, const Tensor& input) {
  const auto count = static_cast<int64_t>(seq.size());
  KILN_CHECK(segments >= 1 && segments <= count, ValueError,
             "checkpoint_sequential: segments must be from 1 to the number of modules ({}), got {}",
             count, segments);
  const int64_t run = count / segments;
  Tensor h = input;
  int64_t begin = 0;
  for (int64_t s = 0; s + 1 < segments; ++s, begin += run)
    h = checkpoint(run_of(seq, begin, begin + run), h);
  return run_of(seq, begin, count)(h);
}

}  // namespace kiln::nn
