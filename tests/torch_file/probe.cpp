// kiln's side of compare_torch_file.py: loads a state dict that PyTorch saved into kiln's
// resnet20, runs it in eval mode on an input PyTorch saved, and writes the model's state dict and
// the output back as .pth files for PyTorch to read.
//   torch_file_probe MODEL_IN INPUT MODEL_OUT OUTPUT
#include <cstdio>
#include <string>

#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

int run(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: torch_file_probe MODEL_IN INPUT MODEL_OUT OUTPUT\n");
    return 2;
  }
  auto model = nn::resnet20();
  nn::load_state_dict(*model, argv[1]);
  model->eval();
  const Tensor input = nn::load_torch_file(argv[2]).at("input");
  NoGradGuard no_grad;
  const Tensor output = model->forward(input);
  nn::save_state_dict(*model, argv[3]);
  nn::save_torch_file(argv[4], {{"output", output}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::apps::run_main("torch_file_probe", [&] { return run(argc, argv); });
}
