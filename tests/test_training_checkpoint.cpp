// Training checkpoints (nn/checkpoint.h): a round trip of every part, and the metadata a loader
// must refuse, each with the file, the key and the text in the message.
#include <catch2/catch.hpp>
#include <string>

#include "kiln/kiln.h"
#include "temp_dir.h"

using namespace kiln;
using kiln::testing::TempDir;

namespace {

// A model with optimizer state (one momentum step), a scheduler and a generator, at a position.
struct Training {
  nn::Linear model{3, 2};
  optim::SGD sgd{model.parameters(), {0.1, 0.9}};
  optim::StepLR scheduler{sgd, 2, 0.5};
  Generator generator{7};
  nn::TrainingState state() { return {&model, &sgd, &scheduler, &generator, {2, 5, 17}}; }
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
  nn::save_training_checkpoint(path, saved.state());

  Training loaded;
  nn::TrainingState state = loaded.state();
  state.position = {};
  nn::TrainingPosition p = nn::load_training_checkpoint(path, state);
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
  nn::save_training_checkpoint(good, training.state());
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
    nn::TrainingState state = target.state();
    CHECK_THROWS_AS(nn::load_training_checkpoint(bad, state), ValueError);
    CHECK_THROWS_WITH(nn::load_training_checkpoint(bad, state),
                      Catch::Contains(bad) && Catch::Contains(c.message));
  }
}
