#include "resume.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/reduce.h"

namespace kiln::apps {

namespace fs = std::filesystem;

namespace {

// The recipe's fields by what a change to one does to a resumed run.
const char* const kStrictFields[] = {
    "model", "dataset",   "synthetic_size", "batch_size", "max_batches",      "world_size",
    "amp",   "optimizer", "schedule",       "seed",       "large_input_stem", "classes"};
const char* const kSafeFields[] = {
    "epochs",          "lr",      "momentum",       "nesterov",   "weight_decay",
    "label_smoothing", "augment", "random_erasing", "image_size", "data_dir"};

// Class folder names cannot hold a '/': joined by it, the list reads back unambiguously.
constexpr char kClassSeparator = '/';

std::string flag_of(const std::string& field) {
  std::string flag = "--" + field;
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}

// How a strict field is named in a refusal, and how "the same" is asked for.
std::string what_of(const std::string& field) {
  if (field == "world_size") return "the number of processes";
  if (field == "large_input_stem") return "the ImageNet stem (--stem)";
  if (field == "classes") return "the list of class folders (in label order)";
  return flag_of(field);
}

std::string same_of(const std::string& field, const std::string& saved) {
  if (field == "world_size") return saved + " processes";
  if (field == "large_input_stem") return saved == "true" ? "--stem imagenet" : "--stem small";
  if (field == "classes")
    return "the data it was trained on: a label is the index of its class folder in sorted order, "
           "so another set of class names gives the labels other meanings";
  return flag_of(field) + " " + saved;
}

std::string shown(const std::string& field, std::string value) {
  if (field != "classes") return value;
  for (char& c : value)
    if (c == kClassSeparator) c = ',';
  return "[" + value + "]";
}

std::string value_or_none(const nn::Metadata& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "(not recorded)" : it->second;
}

}  // namespace

nn::Metadata recipe_metadata(const Recipe& r, int world_size,
                             const std::vector<std::string>& class_names) {
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  std::string classes;
  for (const std::string& name : class_names)
    classes += (classes.empty() ? "" : std::string(1, kClassSeparator)) + name;
  return {
      {"model", r.model},
      {"dataset", r.dataset},
      {"synthetic_size", std::to_string(r.synthetic_size)},
      {"batch_size", std::to_string(r.batch_size)},
      {"max_batches", std::to_string(r.max_batches)},
      {"world_size", std::to_string(world_size)},
      {"amp", r.amp},
      {"optimizer", r.optimizer},
      {"schedule", r.schedule},
      {"seed", std::to_string(r.seed)},
      {"large_input_stem", flag(r.stem == "imagenet")},
      {"epochs", std::to_string(r.epochs)},
      {"lr", fmt::format("{}", r.lr)},
      {"momentum", fmt::format("{}", r.momentum)},
      {"nesterov", flag(r.nesterov)},
      {"weight_decay", fmt::format("{}", r.weight_decay)},
      {"label_smoothing", fmt::format("{}", r.label_smoothing)},
      {"augment", flag(r.augment)},
      {"random_erasing", flag(r.random_erasing)},
      {"image_size", std::to_string(r.image_size)},
      {"data_dir", r.data_dir.empty() ? "" : fs::absolute(r.data_dir).lexically_normal().string()},
      {"classes", classes}};
}

std::vector<std::string> check_resume_recipe(const std::string& path, const nn::Metadata& saved,
                                             const nn::Metadata& now) {
  if (saved.empty())
    return {
        fmt::format("--resume {}: the checkpoint records no recipe (saved by an older "
                    "kiln-train); resuming without comparing it",
                    path)};
  std::vector<std::string> notes;
  for (const char* field : kStrictFields) {
    // A checkpoint of a kiln-train that did not record the classes yet: said, not compared.
    if (std::string(field) == "classes" && !saved.count(field)) {
      if (value_or_none(now, field).empty()) continue;
      notes.push_back(fmt::format(
          "--resume {}: the checkpoint does not record its data's classes (saved by an older "
          "kiln-train); not compared",
          path));
      continue;
    }
    const std::string before = value_or_none(saved, field), after = value_or_none(now, field);
    KILN_CHECK(before == after, ValueError,
               "--resume {}: {} was {} when the checkpoint was saved and is {} now; the saved "
               "state depends on it, so resume with {}",
               path, what_of(field), shown(field, before), shown(field, after),
               same_of(field, before));
  }
  for (const char* field : kSafeFields) {
    if (!saved.count(field)) continue;  // recorded only by a newer kiln-train: nothing to compare
    const std::string before = value_or_none(saved, field), after = value_or_none(now, field);
    if (before != after)
      notes.push_back(
          fmt::format("--resume {}: {} was {}, now {}", path, flag_of(field), before, after));
  }
  return notes;
}

void check_finite_model(const std::string& path, const nn::Module& model) {
  for (const nn::NamedTensors& list : {model.named_parameters(), model.named_buffers()}) {
    for (const auto& [name, t] : list) {
      if (!is_floating(t.dtype())) continue;
      // x - x is 0 for every finite x and NaN for a NaN or an infinity.
      const Tensor x = t.detach();
      const int64_t bad = sum(isnan(sub(x, x))).item<int64_t>();
      KILN_CHECK(bad == 0, ValueError,
                 "--resume {}: model.{} holds {} NaN or infinite value(s): the checkpoint was "
                 "saved from a run that had diverged; resume from an earlier checkpoint",
                 path, name, bad);
    }
  }
}

int64_t RunLength::scheduler_step_at(const train::TrainingPosition& p) const {
  if (!per_batch_schedule) return p.epoch;
  // kiln-train steps a per-batch schedule after each batch but the run's last.
  return std::min(p.global_step, std::max<int64_t>(epochs * steps_per_epoch - 1, 0));
}

void check_resume_position(const std::string& path, const train::TrainingPosition& p,
                           std::optional<int64_t> scheduler_step, const RunLength& run) {
  const char* hint =
      "; resume with the recipe that wrote it (batch size, data, --max-batches, "
      "--epochs and --schedule)";
  KILN_CHECK(p.epoch <= run.epochs, ValueError,
             "--resume {}: the checkpoint is at epoch {}, past this run's {} epochs{}", path,
             p.epoch, run.epochs, hint);
  KILN_CHECK(p.batch_in_epoch <= run.steps_per_epoch, ValueError,
             "--resume {}: batch_in_epoch is {}, beyond the {} batches of an epoch{}", path,
             p.batch_in_epoch, run.steps_per_epoch, hint);
  KILN_CHECK(p.epoch < run.epochs || p.batch_in_epoch == 0, ValueError,
             "--resume {}: the checkpoint is {} batches into epoch {} of a {}-epoch run{}", path,
             p.batch_in_epoch, p.epoch + 1, run.epochs, hint);
  const int64_t expected_step = p.epoch * run.steps_per_epoch + p.batch_in_epoch;
  KILN_CHECK(p.global_step == expected_step, ValueError,
             "--resume {}: global_step is {}, but epoch {} batch {} of {}-batch epochs is step "
             "{}{}",
             path, p.global_step, p.epoch + 1, p.batch_in_epoch, run.steps_per_epoch, expected_step,
             hint);
  // A longer run than the one saved (more --epochs) continues a schedule that had stopped at its
  // own end, so the saved step may lag this run's; past it, the schedule would stand still.
  if (run.scheduled && scheduler_step) {
    const int64_t expected = run.scheduler_step_at(p);
    KILN_CHECK(*scheduler_step >= 0 && *scheduler_step <= expected, ValueError,
               "--resume {}: the scheduler is at step {}, but this run's schedule is at step {} "
               "there{}",
               path, *scheduler_step, expected, hint);
  }
}

}  // namespace kiln::apps
