#include "kiln/train/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/nn/safetensors.h"

namespace kiln::train {

using nn::load_safetensors;
using nn::Metadata;
using nn::Module;
using nn::SafetensorsFile;
using nn::save_safetensors;
using nn::StateDict;
using nn::TensorMap;

namespace {

const char* kFormat = "kiln.training_checkpoint.v1";
const char* kRecipe = "recipe.";  // TrainingState::recipe's keys in the metadata

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

// Resuming must continue the very run that was saved: a tensor of another dtype or shape means the
// file is not that run's (or was altered), and converting it would train on something else.
void require_exact_model(const std::string& path, const std::map<std::string, Tensor>& saved,
                         const Module& model) {
  std::vector<std::string> wrong;
  for (const auto& [name, t] : model.state_dict()) {
    auto it = saved.find(name);
    if (it == saved.end()) continue;  // missing keys: load_state_dict's strict check names them
    const Tensor& s = it->second;
    if (s.dtype() != t.dtype() || s.shape() != t.shape())
      wrong.push_back(fmt::format("model.{}: checkpoint {} {}, model {} {}", name,
                                  dtype_name(s.dtype()), shape_str(s.shape()),
                                  dtype_name(t.dtype()), shape_str(t.shape())));
  }
  KILN_CHECK(wrong.empty(), ValueError,
             "load_training_checkpoint: {}: {} model tensors differ from the model being resumed "
             "({}); a training checkpoint resumes only the run that wrote it (load_state_dict "
             "loads weights into another model, converting dtypes)",
             path, wrong.size(), fmt::join(wrong, "; "));
}

// Per-element optimizer state ("state.<i>.<name>" of one or more dims) has parameter i's dtype
// and shape when the run that saved it is the one resuming.
void require_exact_optimizer(const std::string& path, const std::map<std::string, Tensor>& saved,
                             const optim::Optimizer& optimizer) {
  const std::vector<Tensor> params = optimizer.all_params();
  std::vector<std::string> wrong;
  for (const auto& [key, t] : saved) {
    if (key.rfind("state.", 0) != 0 || t.dim() == 0) continue;
    const size_t dot = key.find('.', 6);
    size_t index = 0;
    const auto [end, error] = std::from_chars(key.data() + 6, key.data() + dot, index);
    if (error != std::errc() || end != key.data() + dot || index >= params.size()) continue;
    const Tensor& p = params[index];
    if (t.dtype() != p.dtype() || t.shape() != p.shape())
      wrong.push_back(fmt::format("optimizer.{}: checkpoint {} {}, parameter {} {}", key,
                                  dtype_name(t.dtype()), shape_str(t.shape()),
                                  dtype_name(p.dtype()), shape_str(p.shape())));
  }
  KILN_CHECK(wrong.empty(), ValueError,
             "load_training_checkpoint: {}: optimizer state differs from its parameters ({})", path,
             fmt::join(wrong, "; "));
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

void save_training_checkpoint(const std::string& path, const TrainingState& state) {
  KILN_CHECK(state.model != nullptr, ValueError, "save_training_checkpoint: {}: no model given",
             path);
  TensorMap tensors;
  for (auto& [name, t] : state.model->state_dict()) tensors["model." + name] = t;
  if (state.optimizer)
    for (auto& [name, t] : state.optimizer->state_dict()) tensors["optimizer." + name] = t;
  if (state.scaler)
    for (auto& [name, t] : state.scaler->state_dict()) tensors["scaler." + name] = t;
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
  for (const auto& [key, value] : state.recipe) meta[std::string(kRecipe) + key] = value;
  save_safetensors(path, tensors, meta);
}

Metadata training_checkpoint_recipe(const std::string& path) {
  Metadata recipe;
  const std::string prefix = kRecipe;
  for (const auto& [key, value] : load_safetensors(path).metadata)
    if (key.rfind(prefix, 0) == 0) recipe[key.substr(prefix.size())] = value;
  return recipe;
}

namespace {

void require_training_format(const Metadata& meta, const std::string& path) {
  auto format = meta.find("format");
  KILN_CHECK(
      format != meta.end() && format->second == kFormat, ValueError,
      "load_training_checkpoint: {}: not a kiln training checkpoint (metadata 'format' is '{}', "
      "expected '{}'); a model-only file loads with load_state_dict",
      path, format == meta.end() ? "" : format->second, kFormat);
}

TrainingPosition position_of(const Metadata& meta, const std::string& path) {
  TrainingPosition position;
  position.epoch = metadata_count(meta, "epoch", path);
  position.batch_in_epoch = metadata_count(meta, "batch_in_epoch", path);
  position.global_step = metadata_count(meta, "global_step", path);
  return position;
}

}  // namespace

TrainingCheckpointPlace training_checkpoint_place(const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  require_training_format(file.metadata, path);
  TrainingCheckpointPlace place{position_of(file.metadata, path), std::nullopt};
  if (file.metadata.count("scheduler.last_epoch"))
    place.scheduler_step = metadata_int(file.metadata, "scheduler.last_epoch", path);
  return place;
}

TrainingPosition load_training_checkpoint(const std::string& path, TrainingState& state) {
  SafetensorsFile file = load_safetensors(path);
  const Metadata& meta = file.metadata;
  require_training_format(meta, path);
  const TrainingPosition position = position_of(meta, path);

  const auto model = with_prefix(file.tensors, "model");
  const auto optimizer = with_prefix(file.tensors, "optimizer");
  if (state.model) require_exact_model(path, model, *state.model);
  if (state.optimizer) {
    auto name = meta.find("optimizer");
    KILN_CHECK(name != meta.end() && name->second == state.optimizer->name(), ValueError,
               "load_training_checkpoint: {}: saved optimizer is '{}', resuming with '{}'", path,
               name == meta.end() ? "none" : name->second, state.optimizer->name());
    require_exact_optimizer(path, optimizer, *state.optimizer);
  }
  // The scaler's state is checked by loading it into a copy, before anything is touched.
  std::optional<optim::GradScaler> scaler;
  if (state.scaler && state.scaler->is_enabled()) {
    const auto saved = with_prefix(file.tensors, "scaler");
    KILN_CHECK(!saved.empty(), ValueError,
               "load_training_checkpoint: {}: the file has no GradScaler state ('scaler.*'), "
               "resuming with an enabled GradScaler",
               path);
    scaler = *state.scaler;
    scaler->load_state_dict(saved);
  }
  // The scheduler's step too, against this run's schedule (a one-cycle schedule ends).
  std::optional<int64_t> scheduler_step;
  if (state.scheduler) {
    scheduler_step = metadata_int(meta, "scheduler.last_epoch", path);
    state.scheduler->check_last_epoch(*scheduler_step);
  }
  if (state.model) state.model->load_state_dict(StateDict(model.begin(), model.end()), true);
  if (state.optimizer) state.optimizer->load_state_dict(optimizer);
  if (scaler) *state.scaler = std::move(*scaler);
  if (state.scheduler) state.scheduler->set_last_epoch(*scheduler_step);
  if (state.generator)
    state.generator->set_state(
        {metadata_u64(meta, "generator.seed", path), metadata_u64(meta, "generator.offset", path)});
  state.position = position;
  return position;
}

}  // namespace kiln::train
