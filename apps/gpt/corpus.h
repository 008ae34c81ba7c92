// kiln-gpt's text: the bytes of some files, one after another (bytes are the tokens: a vocabulary
// of 256), split into a training part and a validation part, and the batches of windows drawn from
// them by a counter-based generator that gpt_torch.py reproduces exactly, so that both programs
// see the same batches in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::apps {

// The files a Debian system always has (base-files): the common licences, in name order.
std::vector<std::string> default_corpus_files();

struct Corpus {
  std::vector<uint8_t> train, validation;  // the last tenth of the bytes validates
  std::vector<std::string> files;
};

// Reads the files (a missing or unreadable one is an error naming it and why); the text must hold
// more than (context + 1) * 10 bytes.
Corpus read_corpus(const std::vector<std::string>& files, int64_t context);

// SplitMix64 of x: the same 64-bit value in gpt_torch.py.
uint64_t splitmix64(uint64_t x);

// Inputs and targets [batch, context] (i64) of batch windows of `bytes`: window i of batch number
// `step` starts at splitmix64(seed * 2^32 + step * batch + i) mod (size - context).
struct Batch {
  Tensor inputs, targets;
};
Batch window_batch(const std::vector<uint8_t>& bytes, int64_t context, int64_t batch, int64_t step,
                   uint64_t seed);

}  // namespace kiln::apps
