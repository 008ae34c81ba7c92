// Each rank encodes its model as integers, the ranks all-gather the encodings, and every rank
// compares them all against rank 0's, so either every rank goes on or every rank throws.
#include "kiln/dist/same_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include "kiln/core/memory_format.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/factories.h"

namespace kiln::dist {

namespace {

// How a tensor's elements lie in memory. DDP's collectives move the elements as the flat array
// they fill, so a parameter must lie in the same order on every rank: contiguous wins a tie (a
// tensor that is both lies in the same order as either).
enum class Layout : int64_t { contiguous, channels_last, strided };

Layout layout_of(const Tensor& t) {
  if (t.is_contiguous()) return Layout::contiguous;
  if (t.is_contiguous(MemoryFormat::channels_last)) return Layout::channels_last;
  return Layout::strided;
}

struct Entry {
  DType dtype = DType::f32;
  bool requires_grad = false;
  Layout layout = Layout::contiguous;
  Shape shape;
  bool operator==(const Entry&) const = default;
};

struct ModelSummary {
  std::vector<Entry> params, buffers;
  bool operator==(const ModelSummary&) const = default;
};

std::string describe_entry(const Entry& e, bool is_param) {
  std::string out = shape_str(e.shape) + " " + dtype_name(e.dtype);
  if (e.layout == Layout::channels_last) out += " channels-last";
  if (e.layout == Layout::strided) out += " strided (neither contiguous nor channels-last)";
  if (is_param && !e.requires_grad) out += " (frozen)";
  return out;
}

// [parameter count, buffer count, then per tensor: dtype, requires_grad, layout, ndim, dims...]
std::vector<int64_t> encode(const nn::Module& module) {
  const auto params = module.named_parameters(), buffers = module.named_buffers();
  std::vector<int64_t> out = {static_cast<int64_t>(params.size()),
                              static_cast<int64_t>(buffers.size())};
  for (const auto* list : {&params, &buffers}) {
    for (const auto& [name, t] : *list) {
      out.push_back(static_cast<int64_t>(t.dtype()));
      out.push_back(t.requires_grad() ? 1 : 0);
      out.push_back(static_cast<int64_t>(layout_of(t)));
      out.push_back(t.dim());
      for (int64_t d : t.shape()) out.push_back(d);
    }
  }
  return out;
}

ModelSummary decode(const int64_t* data) {
  ModelSummary summary;
  size_t at = 2;
  for (int list = 0; list < 2; ++list) {
    for (int64_t k = 0; k < data[list]; ++k) {
      Entry e;
      e.dtype = static_cast<DType>(data[at]);
      e.requires_grad = data[at + 1] != 0;
      e.layout = static_cast<Layout>(data[at + 2]);
      const int64_t ndim = data[at + 3];
      e.shape.assign(data + at + 4, data + at + 4 + ndim);
      at += 4 + static_cast<size_t>(ndim);
      (list == 0 ? summary.params : summary.buffers).push_back(std::move(e));
    }
  }
  return summary;
}

// Every rank's encoding, gathered: first the lengths, then each padded to the longest.
std::vector<ModelSummary> gather(const std::vector<int64_t>& mine, ProcessGroup& group) {
  const Device device =
      group.backend() == "nccl" ? Device::cuda(cuda::current_device()) : Device::cpu();
  const int n = group.size();
  std::vector<Tensor> lengths(n);
  for (Tensor& t : lengths) t = empty({1}, DType::i64, device);
  group.all_gather(lengths, full({1}, static_cast<double>(mine.size()), DType::i64, device));
  int64_t longest = 0;
  for (const Tensor& t : lengths) longest = std::max(longest, t.to(Device::cpu()).item<int64_t>());
  std::vector<int64_t> padded = mine;
  padded.resize(static_cast<size_t>(longest), 0);
  Tensor input = empty({longest}, DType::i64);
  std::copy(padded.begin(), padded.end(), static_cast<int64_t*>(input.data_ptr()));
  std::vector<Tensor> all(n);
  for (Tensor& t : all) t = empty({longest}, DType::i64, device);
  group.all_gather(all, input.to(device));
  std::vector<ModelSummary> out;
  for (const Tensor& t : all) {
    const Tensor host = t.to(Device::cpu());
    out.push_back(decode(static_cast<const int64_t*>(host.data_ptr())));
  }
  return out;
}

}  // namespace

void check_same_model(const nn::Module& module, ProcessGroup& group) {
  if (group.size() == 1) return;
  const std::vector<ModelSummary> all = gather(encode(module), group);
  int differing = 0;
  for (int r = 1; r < group.size() && differing == 0; ++r)
    if (!(all[r] == all[0])) differing = r;
  if (differing == 0) return;
  const int other = group.rank() == differing ? 0 : differing;
  const ModelSummary& here = all[group.rank()];
  const ModelSummary& there = all[other];
  const nn::NamedTensors names[2] = {module.named_parameters(), module.named_buffers()};
  const std::string counts = fmt::format(
      "this rank has {} parameters and {} buffers, rank {} has {} and {}", here.params.size(),
      here.buffers.size(), other, there.params.size(), there.buffers.size());
  std::string difference;
  for (int list = 0; list < 2 && difference.empty(); ++list) {
    const bool is_param = list == 0;
    const char* kind = is_param ? "parameter" : "buffer";
    const std::vector<Entry>& a = is_param ? here.params : here.buffers;
    const std::vector<Entry>& b = is_param ? there.params : there.buffers;
    for (size_t i = 0; i < std::max(a.size(), b.size()) && difference.empty(); ++i) {
      if (i < a.size() && i < b.size() && a[i] == b[i]) continue;
      if (i < a.size() && i < b.size())
        difference = fmt::format("{} {} '{}' is {} on this rank and {} on rank {}", kind, i,
                                 names[list][i].first, describe_entry(a[i], is_param),
                                 describe_entry(b[i], is_param), other);
      else if (i < a.size())
        difference = fmt::format("{}; {} {} '{}' ({}) has no counterpart on rank {}", counts, kind,
                                 i, names[list][i].first, describe_entry(a[i], is_param), other);
      else
        difference = fmt::format("{}; rank {}'s {} {} ({}) has no counterpart on this rank", counts,
                                 other, kind, i, describe_entry(b[i], is_param));
    }
  }
  throw DistError(fmt::format(
      "DistributedDataParallel (rank {} of {}): the ranks hold different models: {}. Build the "
      "same model (layers, shapes, dtypes, memory format, frozen parameters) on every rank before "
      "wrapping it; rank 0's values are then broadcast to all",
      group.rank(), group.size(), difference));
}

}  // namespace kiln::dist
