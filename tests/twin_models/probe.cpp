// kiln's side of compare_twin_models.py: trains the segmenter and the sequence classifier of
// models.h from the initial weights and data PyTorch saved, with the settings its twins use, and
// writes each step's loss for PyTorch to compare.
//   twin_models_probe WORK_DIR   (reads segmenter_init.pth, classifier_init.pth, data.pth there;
//                                 writes losses.pth)
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "main_guard.h"
#include "models.h"

using namespace kiln;

namespace {

// Steps through the data in fixed batches, in order, `steps` times; returns each step's loss.
template <class Loss>
Tensor train(nn::Module& model, optim::Optimizer& optimizer, const Tensor& x, const Tensor& y,
             int64_t batch, int64_t steps, Loss loss_of) {
  std::vector<double> losses;
  const int64_t batches = x.size(0) / batch;
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t b = step % batches;
    optimizer.zero_grad();
    Tensor loss =
        loss_of(model.forward(x.narrow(0, b * batch, batch)), y.narrow(0, b * batch, batch));
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  return tensor(losses, {steps});
}

int run(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: twin_models_probe WORK_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const nn::TensorMap data = nn::load_torch_file(dir + "/data.pth");

  twin::Segmenter segmenter;
  nn::load_state_dict(segmenter, dir + "/segmenter_init.pth");
  optim::SGD sgd(segmenter.parameters(), {.lr = 0.05, .momentum = 0.9});
  const Tensor segmenter_losses = train(segmenter, sgd, data.at("images"), data.at("masks"), 16,
                                        200, [](const Tensor& logits, const Tensor& masks) {
                                          return binary_cross_entropy_with_logits(logits, masks);
                                        });

  twin::SequenceClassifier classifier;
  nn::load_state_dict(classifier, dir + "/classifier_init.pth");
  optim::Adam adam(classifier.parameters(), {.lr = 0.01});
  const Tensor classifier_losses = train(
      classifier, adam, data.at("sequences"), data.at("labels"), 32, 200,
      [](const Tensor& logits, const Tensor& labels) { return cross_entropy(logits, labels); });

  nn::save_torch_file(dir + "/losses.pth",
                      {{"segmenter", segmenter_losses}, {"classifier", classifier_losses}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::apps::run_main("twin_models_probe", [&] { return run(argc, argv); });
}
