#include "kiln/nn/checkpoint.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <map>
#include <string>
#include <system_error>
#include <type_traits>

#include "kiln/nn/safetensors.h"

namespace kiln::nn {

namespace {

const char* kFormat = "kiln.training_checkpoint.v1";

// Metadata `key` as a whole number of type T (int64_t or uint64_t); missing, empty, signed where
// T is unsigned, out of range or followed by anything else, it is an error naming the file, the
// key and the text.
template <class T>
T metadata_number(const Metadata& meta, const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  KILN_CHECK(it != meta.end(), ValueError, "load_training_checkpoint: {}: metadata has no '{}'",
             path, key);
  const std::string& text = it->second;
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  KILN_CHECK(!text.empty() && error == std::errc() && end == text.data() + text.size(), ValueError,
             "load_training_checkpoint: {}: metadata '{}' = '{}' is not {}", path, key, text,
             std::is_signed_v<T> ? "an integer" : "an unsigned integer");
  return value;
}

int64_t metadata_int(const Metadata& meta, const std::string& key, const std::string& path) {
  return metadata_number<int64_t>(meta, key, path);
}

// A position: a whole number that cannot be negative.
int64_t metadata_count(const Metadata& meta, const std::string& key, const std::string& path) {
  const int64_t value = metadata_number<int64_t>(meta, key, path);
  KILN_CHECK(value >= 0, ValueError, "load_training_checkpoint: {}: metadata '{}' is {}, negative",
             path, key, value);
  return value;
}

uint64_t metadata_u64(const Metadata& meta, const std::string& key, const std::string& path) {
  return metadata_number<uint64_t>(meta, key, path);
}

// The entries of `tensors` under "<prefix>.", with the prefix removed.
std::map<std::string, Tensor> with_prefix(const TensorMap& tensors, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  const std::string p = prefix + ".";
  for (auto it = tensors.lower_bound(p); it != tensors.end() && it->first.rfind(p, 0) == 0; ++it)
    out[it->first.substr(p.size())] = it->second;
  return out;
}

}  // namespace

void save_state_dict(const Module& module, const std::string& path) {
  TensorMap tensors;
  for (auto& [name, t] : module.state_dict()) tensors[name] = t;
  save_safetensors(path, tensors, {{"format", "pt"}});
}

LoadResult load_state_dict(Module& module, const std::string& path, bool strict) {
  SafetensorsFile file = load_safetensors(path);
  StateDict state(file.tensors.begin(), file.tensors.end());
  return module.load_state_dict(state, strict);
}

void save_training_checkpoint(const std::string& path, const TrainingState& state) {
  KILN_CHECK(state.model != nullptr, ValueError, "save_training_checkpoint: {}: no model given",
             path);
  TensorMap tensors;
  for (auto& [name, t] : state.model->state_dict()) tensors["model." + name] = t;
  if (state.optimizer)
    for (auto& [name, t] : state.optimizer->state_dict()) tensors["optimizer." + name] = t;
  Metadata meta = {{"format", kFormat},
                   {"epoch", std::to_string(state.position.epoch)},
                   {"batch_in_epoch", std::to_string(state.position.batch_in_epoch)},
                   {"global_step", std::to_string(state.position.global_step)}};
  if (state.optimizer) meta["optimizer"] = state.optimizer->name();
  if (state.scheduler) meta["scheduler.last_epoch"] = std::to_string(state.scheduler->last_epoch());
  if (state.generator) {
    GeneratorState g = state.generator->state();
    meta["generator.seed"] = std::to_string(g.seed);
    meta["generator.offset"] = std::to_string(g.offset);
  }
  save_safetensors(path, tensors, meta);
}

TrainingPosition load_training_checkpoint(const std::string& path, TrainingState& state) {
  SafetensorsFile file = load_safetensors(path);
  const Metadata& meta = file.metadata;
  auto format = meta.find("format");
  KILN_CHECK(
      format != meta.end() && format->second == kFormat, ValueError,
      "load_training_checkpoint: {}: not a kiln training checkpoint (metadata 'format' is '{}', "
      "expected '{}'); a model-only file loads with load_state_dict",
      path, format == meta.end() ? "" : format->second, kFormat);
  TrainingPosition position;
  position.epoch = metadata_count(meta, "epoch", path);
  position.batch_in_epoch = metadata_count(meta, "batch_in_epoch", path);
  position.global_step = metadata_count(meta, "global_step", path);

  if (state.model) {
    auto model = with_prefix(file.tensors, "model");
    state.model->load_state_dict(StateDict(model.begin(), model.end()), true);
  }
  if (state.optimizer) {
    auto name = meta.find("optimizer");
    KILN_CHECK(name != meta.end() && name->second == state.optimizer->name(), ValueError,
               "load_training_checkpoint: {}: saved optimizer is '{}', resuming with '{}'", path,
               name == meta.end() ? "none" : name->second, state.optimizer->name());
    state.optimizer->load_state_dict(with_prefix(file.tensors, "optimizer"));
  }
  if (state.scheduler)
    state.scheduler->set_last_epoch(metadata_int(meta, "scheduler.last_epoch", path));
  if (state.generator)
    state.generator->set_state(
        {metadata_u64(meta, "generator.seed", path), metadata_u64(meta, "generator.offset", path)});
  state.position = position;
  return position;
}

}  // namespace kiln::nn
