// Conv1d and ConvTranspose2d with PyTorch's names, defaults, initialisation and state dicts
// (ops/conv.h's conv1d and conv_transpose2d); Conv2d is in nn/layers.h.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/ops/pair.h"

namespace kiln::nn {

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// weight [out_channels, in_channels / groups, kernel_size], bias [out_channels].
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
         Conv1dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  int64_t in_channels_, out_channels_, kernel_size_;
  Conv1dOptions options_;
};

struct ConvTranspose2dOptions {
  Pair stride = {1, 1};
  Pair padding = {0, 0};
  Pair output_padding = {0, 0};  // added to one side of the output, to pick among the sizes
  int64_t groups = 1;            // that the same strided convolution maps back from
  bool bias = true;
  Pair dilation = {1, 1};
};

// weight [in_channels, out_channels / groups, kH, kW] (PyTorch's layout), bias [out_channels].
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Pair kernel_size,
                  ConvTranspose2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  int64_t in_channels_, out_channels_;
  Pair kernel_size_;
  ConvTranspose2dOptions options_;
};

}  // namespace kiln::nn
