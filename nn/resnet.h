// ResNets with torchvision's structure and parameter names (conv1.weight, layer1.0.bn1.running_var,
// layer2.0.downsample.0.weight, fc.bias), so weights move between kiln and torchvision both ways.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"

namespace kiln::nn {

// Two 3x3 convolutions; expansion 1.
class BasicBlock : public Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride,
             std::shared_ptr<Sequential> downsample);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BasicBlock"; }

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<Sequential> downsample_;
};

// 1x1, 3x3 (carrying the stride, as torchvision's "ResNet v1.5"), 1x1; expansion 4.
class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride,
             std::shared_ptr<Sequential> downsample);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Bottleneck"; }

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<Sequential> downsample_;
};

struct ResNetOptions {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  // Small inputs (CIFAR, MNIST): a 3x3 stride-1 stem and no max-pool, instead of 7x7/2 + max-pool.
  bool small_input = false;
  // Start each block's last BatchNorm at zero, so every residual block begins as the identity.
  bool zero_init_residual = false;
};

class ResNet : public Module {
 public:
  // block: "basic" or "bottleneck"; layers: blocks per stage; widths: channels per stage
  // ({64, 128, 256, 512} for ImageNet ResNets, {16, 32, 64} for CIFAR ResNets).
  ResNet(const std::string& block, std::vector<int64_t> layers, std::vector<int64_t> widths,
         ResNetOptions options);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ResNet"; }

 private:
  std::shared_ptr<Sequential> make_stage(int64_t planes, int64_t blocks, int64_t stride);

  bool bottleneck_;
  bool small_input_;
  int64_t in_planes_;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::shared_ptr<MaxPool2d> maxpool_;
  std::vector<std::shared_ptr<Sequential>> stages_;
  std::shared_ptr<AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<Linear> fc_;
};

std::shared_ptr<ResNet> resnet18(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet34(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet50(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet101(ResNetOptions options = {});
// He et al.'s CIFAR ResNets (6n+2 layers, 16/32/64 channels), with 1x1-conv shortcuts where the
// shape changes (option B) so they share BasicBlock's names. They always have the 3x3 stem
// (small_input is forced on). Default options: 10 classes, 3 channels.
std::shared_ptr<ResNet> resnet20(ResNetOptions options = {.num_classes = 10, .small_input = true});
std::shared_ptr<ResNet> resnet32(ResNetOptions options = {.num_classes = 10, .small_input = true});
std::shared_ptr<ResNet> resnet56(ResNetOptions options = {.num_classes = 10, .small_input = true});
// By name: "resnet18", ..., "resnet56".
std::shared_ptr<ResNet> make_resnet(const std::string& name, ResNetOptions options);

}  // namespace kiln::nn
