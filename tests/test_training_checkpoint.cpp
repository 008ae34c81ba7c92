// Training checkpoints (nn/checkpoint.h): a round trip of every part, and the metadata a loader
// must refuse, each with the file, the key and the text in the message.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "temp_dir.h"

using namespace kiln;
using kiln::testing::TempDir;

namespace {

// A model with optimizer state (one momentum step), a scheduler and a generator, at a position.
struct Training {
  nn::Linear model{3, 2};
  optim::SGD sgd{model.parameters(), {.lr = 0.1, .momentum = 0.9}};
  optim::StepLR scheduler{sgd, 2, 0.5};
  Generator generator{7};
  train::TrainingState state() { return {&model, &sgd, &scheduler, &generator, {2, 5, 17}}; }
  void step() {
    sgd.zero_grad();
    sum(model.forward(ones({4, 3}))).backward();
    sgd.step();
    scheduler.step();
    generator.next_offset();
  }
};

}  // namespace

TEST_CASE("training checkpoint: every part survives a round trip") {
  TempDir dir("kiln_test_checkpoint");
  const std::string path = dir.file("last.safetensors");
  Training saved;
  saved.step();
  train::save_training_checkpoint(path, saved.state());

  Training loaded;
  train::TrainingState state = loaded.state();
  state.position = {};
  train::TrainingPosition p = train::load_training_checkpoint(path, state);
  CHECK(p.epoch == 2);
  CHECK(p.batch_in_epoch == 5);
  CHECK(p.global_step == 17);
  CHECK(loaded.model.weight.tolist() == saved.model.weight.tolist());
  CHECK(loaded.scheduler.last_epoch() == saved.scheduler.last_epoch());
  CHECK(loaded.generator.state().offset == saved.generator.state().offset);
  // The momentum buffers came back too: one more identical step keeps the models identical.
  saved.step(), loaded.step();
  CHECK(loaded.model.weight.tolist() == saved.model.weight.tolist());
}

TEST_CASE("training checkpoint: malformed metadata is refused with the key and the text") {
  TempDir dir("kiln_test_checkpoint");
  const std::string good = dir.file("good.safetensors");
  Training training;
  train::save_training_checkpoint(good, training.state());
  const nn::SafetensorsFile file = nn::load_safetensors(good);
  struct Case {
    const char* key;
    const char* text;  // null: the key is left out
    const char* message;
  };
  for (const Case& c :
       {Case{"epoch", "12x", "metadata 'epoch' = '12x' is not an integer"},
        Case{"epoch", "", "metadata 'epoch' = '' is not an integer"},
        Case{"epoch", "99999999999999999999", "is not an integer"},
        Case{"epoch", " 3", "is not an integer"},
        Case{"batch_in_epoch", "-4", "metadata 'batch_in_epoch' is -4, negative"},
        Case{"generator.seed", "-1", "metadata 'generator.seed' = '-1' is not an unsigned integer"},
        Case{"scheduler.last_epoch", "1.5", "is not an integer"},
        Case{"global_step", nullptr, "metadata has no 'global_step'"}}) {
    INFO(c.key << " = " << (c.text ? c.text : "(missing)"));
    nn::Metadata meta = file.metadata;
    if (c.text) {
      meta[c.key] = c.text;
    } else {
      meta.erase(c.key);
    }
    const std::string bad = dir.file("bad.safetensors");
    nn::save_safetensors(bad, file.tensors, meta);
    Training target;
    train::TrainingState state = target.state();
    CHECK_THROWS_AS(train::load_training_checkpoint(bad, state), ValueError);
    CHECK_THROWS_WITH(train::load_training_checkpoint(bad, state),
                      Catch::Contains(bad) && Catch::Contains(c.message));
  }
}

namespace {

// `path` rewritten with `edit` applied to its tensors: how a file altered after saving looks.
void rewrite(const std::string& path, const std::function<void(nn::TensorMap&)>& edit) {
  nn::SafetensorsFile file = nn::load_safetensors(path);
  edit(file.tensors);
  nn::save_safetensors(path, file.tensors, file.metadata);
}

}  // namespace

TEST_CASE("training checkpoint: resuming refuses a model tensor of another dtype or shape") {
  TempDir dir("kiln_test_checkpoint");
  const std::string path = dir.file("last.safetensors");
  Training saved;
  saved.step();
  train::save_training_checkpoint(path, saved.state());
  // The newcomer's case: a weight relabelled I32 trained on (at 10% accuracy) after resuming.
  rewrite(path, [](nn::TensorMap& t) { t["model.weight"] = t["model.weight"].to(DType::i32); });
  Training loaded;
  train::TrainingState state = loaded.state();
  const std::vector<double> before = loaded.model.weight.tolist();
  CHECK_THROWS_WITH(train::load_training_checkpoint(path, state),
                    Catch::Contains("model.weight: checkpoint i32 [2, 3], model f32 [2, 3]") &&
                        Catch::Contains("resumes only the run that wrote it"));
  CHECK(loaded.model.weight.tolist() == before);  // nothing was loaded

  train::save_training_checkpoint(path, saved.state());
  rewrite(path, [](nn::TensorMap& t) { t["model.bias"] = zeros({3}); });
  CHECK_THROWS_WITH(train::load_training_checkpoint(path, state),
                    Catch::Contains("model.bias: checkpoint f32 [3], model f32 [2]"));
}

// A run resumed with a shorter one-cycle schedule than the checkpoint's step: refused before the
// model and optimizer are touched (the schedule's check once came after both had loaded), and the
// place is readable without loading anything.
TEST_CASE("training checkpoint: a scheduler step past this run's schedule changes nothing") {
  TempDir dir("kiln_test_checkpoint");
  const std::string path = dir.file("last.safetensors");
  nn::Linear saved_model(3, 2);
  optim::SGD saved_sgd(saved_model.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::OneCycleLR saved_cycle(saved_sgd, 0.1, 20);
  for (int s = 0; s < 12; ++s) saved_cycle.step();
  train::save_training_checkpoint(path,
                                  {&saved_model, &saved_sgd, &saved_cycle, nullptr, {1, 2, 12}});
  const train::TrainingCheckpointPlace place = train::training_checkpoint_place(path);
  CHECK(place.position.epoch == 1);
  CHECK(place.position.global_step == 12);
  REQUIRE(place.scheduler_step.has_value());
  CHECK(*place.scheduler_step == 12);

  nn::Linear model(3, 2);
  optim::SGD sgd(model.parameters(), {.lr = 0.5, .momentum = 0.9});
  optim::OneCycleLR cycle(sgd, 0.5, 10);
  const std::vector<double> weight = model.weight.tolist();
  const double lr = sgd.lr(0);
  train::TrainingState state{&model, &sgd, &cycle, nullptr, {}};
  CHECK_THROWS_WITH(train::load_training_checkpoint(path, state),
                    Catch::Contains("stepped 12 times but total_steps is 10"));
  CHECK(model.weight.tolist() == weight);
  CHECK(sgd.lr(0) == lr);
  CHECK(cycle.last_epoch() == 0);
}

TEST_CASE("training checkpoint: resuming refuses optimizer state of another dtype") {
  TempDir dir("kiln_test_checkpoint");
  const std::string path = dir.file("last.safetensors");
  Training saved;
  saved.step();
  train::save_training_checkpoint(path, saved.state());
  std::string key;
  for (const auto& [name, t] : nn::load_safetensors(path).tensors)
    if (name.rfind("optimizer.state.", 0) == 0 && t.dim() > 0) key = name;
  REQUIRE_FALSE(key.empty());
  rewrite(path, [&](nn::TensorMap& t) { t[key] = t[key].to(DType::f64); });
  Training loaded;
  train::TrainingState state = loaded.state();
  CHECK_THROWS_WITH(
      train::load_training_checkpoint(path, state),
      Catch::Contains(key + ": checkpoint f64") && Catch::Contains("differs from its parameters"));
}

TEST_CASE("training checkpoint: loading weights converts dtypes as PyTorch does, and says so") {
  TempDir dir("kiln_test_checkpoint");
  const std::string path = dir.file("model.safetensors");
  nn::Linear source(3, 2);
  source.to(DType::f64);
  nn::save_state_dict(source, path);
  nn::Linear target(3, 2);
  const nn::LoadResult r = nn::load_state_dict(target, path);
  CHECK(r.converted_keys == std::vector<std::string>{"weight (f64 -> f32)", "bias (f64 -> f32)"});
  CHECK(target.weight.dtype() == DType::f32);
  CHECK(target.weight.tolist() == source.weight.to(DType::f32).tolist());
}

TEST_CASE("training checkpoint: temporaries of killed writers are removed, live ones kept") {
  TempDir dir("kiln_test_checkpoint");
  const std::string path = dir.file("last.safetensors");
  auto touch = [&](const std::string& name) { std::ofstream(dir.file(name)) << "partial"; };
  // pid_max is at most 2^22 on Linux: no process has these.
  touch("last.safetensors.tmp.2147483646");
  touch("last.safetensors.tmp.2147483645");
  const std::string live = "last.safetensors.tmp." + std::to_string(::getppid());
  touch(live);
  touch("last.safetensors.tmp.notapid");
  touch("other.safetensors.tmp.2147483646");
  CHECK(nn::remove_stale_temporaries(path) == 2);
  const std::vector<std::string> left = dir.entries();
  CHECK(left == std::vector<std::string>{live, "last.safetensors.tmp.notapid",
                                         "other.safetensors.tmp.2147483646"});
  // A save cleans up before it writes, so a run that was killed leaves nothing behind for good.
  touch("last.safetensors.tmp.2147483646");
  nn::save_state_dict(nn::Linear(2, 2), path);
  CHECK_FALSE(std::filesystem::exists(dir.file("last.safetensors.tmp.2147483646")));
}

TEST_CASE("training checkpoint: the recipe is saved beside the state and read back alone") {
  TempDir dir("kiln_test_checkpoint_recipe");
  const std::string with = dir.file("with.safetensors"), without = dir.file("without.safetensors");
  Training saved;
  train::TrainingState state = saved.state();
  train::save_training_checkpoint(without, state);
  state.recipe = {{"batch_size", "64"}, {"amp", "fp16"}};
  train::save_training_checkpoint(with, state);

  CHECK(train::training_checkpoint_recipe(with) ==
        nn::Metadata{{"amp", "fp16"}, {"batch_size", "64"}});
  CHECK(nn::load_safetensors(with).metadata.at("recipe.batch_size") == "64");
  CHECK(train::training_checkpoint_recipe(without).empty());
  // Loading the state leaves the caller's recipe alone: it is the program's to compare.
  Training loaded;
  train::TrainingState target = loaded.state();
  target.recipe = {{"batch_size", "32"}};
  train::load_training_checkpoint(with, target);
  CHECK(target.recipe == nn::Metadata{{"batch_size", "32"}});
}
