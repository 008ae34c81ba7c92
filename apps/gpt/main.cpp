// kiln-gpt: trains a small GPT (nn/gpt.h) on the bytes of text files, prints the loss curve, and
// samples text from it. Batches are windows drawn by a counter-based generator, so gpt_torch.py
// (the same model in PyTorch) can train on exactly the same batches from the same initial weights
// (--save-init writes them as a .pth file) and the two loss curves can be compared.
//
//   kiln-gpt                                   # Debian's licence texts, 600 steps, then a sample
//   kiln-gpt --text book.txt --steps 2000 --dim 192 --depth 6 --heads 6 --context 128
//   kiln-gpt --save-init init.pth --loss-csv kiln.csv
//   python3 apps/gpt/gpt_torch.py --init init.pth --loss-csv torch.csv
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "corpus.h"
#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

struct Settings {
  std::vector<std::string> text;
  int64_t steps = 600, batch_size = 32, context = 64, dim = 128, depth = 4, heads = 4;
  double lr = 2e-3, weight_decay = 0.1, clip = 1.0;
  uint64_t seed = 0;
  std::string device = "auto", amp = "off";
  int threads = 2;
  int64_t log_every = 50, eval_batches = 8, sample = 300;
  double temperature = 0.8;
  int64_t top_k = 0;
  std::string prompt = "The ", loss_csv, save_init, save;
};

// The mean loss over eval_batches fixed windows of the validation text.
double validation_loss(nn::GPT& model, const apps::Corpus& corpus, const Settings& s,
                       Device device) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0.0;
  for (int64_t b = 0; b < s.eval_batches; ++b) {
    const apps::Batch batch =
        apps::window_batch(corpus.validation, s.context, s.batch_size, b, s.seed + 1);
    const Tensor logits = model(batch.inputs.to(device));
    total += cross_entropy(logits.reshape({-1, logits.size(-1)}).to(DType::f32),
                           batch.targets.to(device).reshape({-1}))
                 .item();
  }
  model.train();
  return total / static_cast<double>(s.eval_batches);
}

std::string printable(const Tensor& tokens) {
  const Tensor host = tokens.to(Device::cpu()).contiguous();
  std::string text;
  for (int64_t i = 0; i < host.numel(); ++i) {
    const auto c = static_cast<unsigned char>(host.data<int64_t>()[i]);
    text += (c == '\n' || c == '\t' || (c >= 32 && c < 127)) ? static_cast<char>(c) : '?';
  }
  return text;
}

int train_and_sample(const Settings& s) {
  KILN_CHECK(s.dim % s.heads == 0, ValueError, "kiln-gpt: --dim {} is not a multiple of --heads {}",
             s.dim, s.heads);
  omp_set_num_threads(s.threads);
  const Device device = s.device == "auto"
                            ? (cuda::is_available() ? Device::cuda(0) : Device::cpu())
                            : Device::parse(s.device);
  const std::vector<std::string> files = s.text.empty() ? apps::default_corpus_files() : s.text;
  const apps::Corpus corpus = apps::read_corpus(files, s.context);
  manual_seed(s.seed);
  nn::GPT model(
      {.vocab_size = 256, .context = s.context, .dim = s.dim, .depth = s.depth, .heads = s.heads});
  if (!s.save_init.empty()) nn::save_state_dict(model, s.save_init);
  model.to(device);
  optim::AdamW optimizer(model.parameters(),
                         {.lr = s.lr, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = s.weight_decay});
  optim::CosineAnnealingLR schedule(optimizer, s.steps);
  std::printf(
      "kiln-gpt: %lld parameters (dim %lld, depth %lld, heads %lld, context %lld) on %s; %zu "
      "bytes of text from %zu files (%zu to train, %zu to validate); AdamW lr %g, cosine, %lld "
      "steps of %lld windows, amp %s\n",
      static_cast<long long>(model.parameter_count()), static_cast<long long>(s.dim),
      static_cast<long long>(s.depth), static_cast<long long>(s.heads),
      static_cast<long long>(s.context), device.str().c_str(),
      corpus.train.size() + corpus.validation.size(), corpus.files.size(), corpus.train.size(),
      corpus.validation.size(), s.lr, static_cast<long long>(s.steps),
      static_cast<long long>(s.batch_size), s.amp.c_str());
  std::ofstream csv;
  if (!s.loss_csv.empty()) {
    csv.open(s.loss_csv);
    KILN_CHECK(csv.good(), ValueError, "kiln-gpt: cannot write {}", s.loss_csv);
    csv << "step,train_loss,validation_loss\n";
  }
  double running = 0.0;
  int64_t counted = 0;
  for (int64_t step = 0; step < s.steps; ++step) {
    const apps::Batch batch =
        apps::window_batch(corpus.train, s.context, s.batch_size, step, s.seed);
    Tensor loss;
    {
      autocast mixed(DType::bf16, s.amp == "bf16");
      const Tensor logits = model(batch.inputs.to(device));
      loss = cross_entropy(logits.reshape({-1, 256}), batch.targets.to(device).reshape({-1}));
    }
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), s.clip);
    optimizer.step();
    schedule.step();
    const double value = loss.item();
    KILN_CHECK(std::isfinite(value), ValueError,
               "kiln-gpt: the loss is {} at step {}: lower --lr (now {})", value, step + 1, s.lr);
    running += value;
    ++counted;
    if ((step + 1) % s.log_every == 0 || step + 1 == s.steps) {
      const double validation = validation_loss(model, corpus, s, device);
      std::printf("step %5lld: train loss %.4f, validation loss %.4f\n",
                  static_cast<long long>(step + 1), running / static_cast<double>(counted),
                  validation);
      std::fflush(stdout);
      if (csv.is_open())
        csv << step + 1 << ',' << running / static_cast<double>(counted) << ',' << validation
            << '\n';
      running = 0.0;
      counted = 0;
    }
  }
  if (!s.save.empty()) nn::save_state_dict(model, s.save);
  if (s.sample > 0) {
    std::vector<int64_t> prompt;
    for (unsigned char c : s.prompt) prompt.push_back(c);
    if (prompt.empty()) prompt.push_back('\n');
    Generator generator(s.seed);
    const Tensor text =
        nn::generate(model, tensor(prompt).to(device), s.sample,
                     {.temperature = s.temperature, .top_k = s.top_k, .generator = &generator});
    std::printf("--- sampled (temperature %g%s) ---\n%s\n---\n", s.temperature,
                s.top_k > 0 ? fmt::format(", top-k {}", s.top_k).c_str() : "",
                printable(text).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains a small GPT on the bytes of text files and samples from it"};
  Settings s;
  app.add_option("--text", s.text,
                 "text files to train on, in this order (default: /usr/share/common-licenses/*)")
      ->check(CLI::ExistingFile);
  app.add_option("--steps", s.steps)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch-size", s.batch_size)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--context", s.context, "tokens (bytes) per window")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--dim", s.dim)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--depth", s.depth, "transformer layers")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--heads", s.heads)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--lr", s.lr, "AdamW's peak rate, annealed to 0 over the steps (cosine)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--weight-decay", s.weight_decay)
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--clip", s.clip, "the gradients' largest norm")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", s.seed, "the initial weights, the batches and the sample")
      ->capture_default_str();
  app.add_option("--device", s.device, "auto|cpu|cuda|cuda:N")->capture_default_str();
  app.add_option("--amp", s.amp, "off|bf16: the forward under bf16 autocast")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "bf16"}));
  app.add_option("--threads", s.threads)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--log-every", s.log_every, "steps between lines of the loss curve")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-batches", s.eval_batches, "validation batches per line")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--sample", s.sample, "bytes to generate after training (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prompt", s.prompt)->capture_default_str();
  app.add_option("--temperature", s.temperature)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--top-k", s.top_k, "sample among the k likeliest bytes (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--loss-csv", s.loss_csv, "write the loss curve here (step, train, validation)");
  app.add_option("--save-init", s.save_init,
                 "write the initial weights here (.pth for gpt_torch.py, or .safetensors)");
  app.add_option("--save", s.save, "write the trained weights here");
  CLI11_PARSE(app, argc, argv);
  return apps::run_main("kiln-gpt", [&] { return train_and_sample(s); });
}
