#include "kiln/nn/resnet.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/init.h"
#include "kiln/ops/elementwise.h"

namespace kiln::nn {

namespace {
std::shared_ptr<Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride) {
  return std::make_shared<Conv2d>(in, out, 3,
                                  Conv2dOptions{.stride = stride, .padding = 1, .bias = false});
}
std::shared_ptr<Conv2d> conv1x1(int64_t in, int64_t out, int64_t stride) {
  return std::make_shared<Conv2d>(in, out, 1, Conv2dOptions{.stride = stride, .bias = false});
}
}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride,
                       std::shared_ptr<Sequential> downsample) {
  conv1_ = register_module("conv1", conv3x3(in_planes, planes, stride));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2_ = register_module("conv2", conv3x3(planes, planes, 1));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  if (downsample) downsample_ = register_module("downsample", downsample);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = bn1_->forward_relu((*conv1_)(x));
  Tensor identity = downsample_ ? (*downsample_)(x) : x;
  return bn2_->forward_add_relu((*conv2_)(out), identity);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride,
                       std::shared_ptr<Sequential> downsample) {
  conv1_ = register_module("conv1", conv1x1(in_planes, planes, 1));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2_ = register_module("conv2", conv3x3(planes, planes, stride));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  conv3_ = register_module("conv3", conv1x1(planes, planes * kExpansion, 1));
  bn3_ = register_module("bn3", std::make_shared<BatchNorm2d>(planes * kExpansion));
  if (downsample) downsample_ = register_module("downsample", downsample);
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = bn1_->forward_relu((*conv1_)(x));
  out = bn2_->forward_relu((*conv2_)(out));
  Tensor identity = downsample_ ? (*downsample_)(x) : x;
  return bn3_->forward_add_relu((*conv3_)(out), identity);
}

ResNet::ResNet(const std::string& block, std::vector<int64_t> layers, std::vector<int64_t> widths,
               ResNetOptions options)
    : bottleneck_(block == "bottleneck"),
      small_input_(options.small_input),
      in_planes_(widths.empty() ? 0 : widths[0]) {
  KILN_CHECK(block == "basic" || block == "bottleneck", ValueError,
             "ResNet: block must be \"basic\" or \"bottleneck\", got \"{}\"", block);
  KILN_CHECK(!layers.empty() && layers.size() == widths.size(), ValueError,
             "ResNet: {} stage depths for {} stage widths", layers.size(), widths.size());
  KILN_CHECK(std::all_of(layers.begin(), layers.end(), [](int64_t n) { return n > 0; }) &&
                 std::all_of(widths.begin(), widths.end(), [](int64_t w) { return w > 0; }),
             ValueError,
             "ResNet: blocks per stage and stage widths must be positive, got [{}] and [{}]",
             fmt::join(layers, ", "), fmt::join(widths, ", "));
  KILN_CHECK(options.num_classes > 0 && options.in_channels > 0, ValueError,
             "ResNet: num_classes and in_channels must be positive, got {} and {}",
             options.num_classes, options.in_channels);
  if (small_input_) {
    conv1_ = register_module("conv1", conv3x3(options.in_channels, in_planes_, 1));
  } else {
    conv1_ = register_module(
        "conv1", std::make_shared<Conv2d>(options.in_channels, in_planes_, 7,
                                          Conv2dOptions{.stride = 2, .padding = 3, .bias = false}));
  }
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(in_planes_));
  if (!small_input_)
    maxpool_ = register_module(
        "maxpool", std::make_shared<MaxPool2d>(3, MaxPool2dOptions{.stride = 2, .padding = 1}));
  for (size_t i = 0; i < layers.size(); ++i) {
    int64_t stride = i == 0 ? 1 : 2;
    stages_.push_back(
        register_module("layer" + std::to_string(i + 1), make_stage(widths[i], layers[i], stride)));
  }
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(Pair{1, 1}));
  fc_ = register_module("fc", std::make_shared<Linear>(in_planes_, options.num_classes));

  // torchvision's initialisation: He normal (fan_out) for convolutions, BN weight 1 and bias 0.
  for (auto& [n, m] : named_modules()) {
    if (auto conv = std::dynamic_pointer_cast<Conv2d>(m))
      init::kaiming_normal_(conv->weight, 0.0, "fan_out", "relu");
  }
  if (options.zero_init_residual) {
    for (auto& [n, m] : named_modules()) {
      auto last_bn = bottleneck_ ? std::string("bn3") : std::string("bn2");
      if (n.size() > last_bn.size() &&
          n.compare(n.size() - last_bn.size(), last_bn.size(), last_bn) == 0 &&
          n.find("layer") == 0) {
        if (auto bn = std::dynamic_pointer_cast<BatchNorm>(m)) init::zeros_(bn->weight);
      }
    }
  }
}

std::shared_ptr<Sequential> ResNet::make_stage(int64_t planes, int64_t blocks, int64_t stride) {
  const int64_t expansion = bottleneck_ ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  auto stage = std::make_shared<Sequential>();
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t s = b == 0 ? stride : 1;
    std::shared_ptr<Sequential> downsample;
    if (b == 0 && (s != 1 || in_planes_ != planes * expansion)) {
      downsample = std::make_shared<Sequential>();
      downsample->push_back(conv1x1(in_planes_, planes * expansion, s));
      downsample->push_back(std::make_shared<BatchNorm2d>(planes * expansion));
    }
    if (bottleneck_)
      stage->push_back(std::make_shared<Bottleneck>(in_planes_, planes, s, downsample));
    else
      stage->push_back(std::make_shared<BasicBlock>(in_planes_, planes, s, downsample));
    in_planes_ = planes * expansion;
  }
  return stage;
}

Tensor ResNet::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4, ShapeError, "ResNet: expected input [N, C, H, W], got shape {}",
             shape_str(x.shape()));
  Tensor h = bn1_->forward_relu((*conv1_)(x));
  if (maxpool_) h = (*maxpool_)(h);
  for (auto& stage : stages_) h = (*stage)(h);
  h = (*avgpool_)(h).flatten(1);
  return (*fc_)(h);
}

std::shared_ptr<ResNet> resnet18(ResNetOptions o) {
  return std::make_shared<ResNet>("basic", std::vector<int64_t>{2, 2, 2, 2},
                                  std::vector<int64_t>{64, 128, 256, 512}, o);
}
std::shared_ptr<ResNet> resnet34(ResNetOptions o) {
  return std::make_shared<ResNet>("basic", std::vector<int64_t>{3, 4, 6, 3},
                                  std::vector<int64_t>{64, 128, 256, 512}, o);
}
std::shared_ptr<ResNet> resnet50(ResNetOptions o) {
  return std::make_shared<ResNet>("bottleneck", std::vector<int64_t>{3, 4, 6, 3},
                                  std::vector<int64_t>{64, 128, 256, 512}, o);
}
std::shared_ptr<ResNet> resnet101(ResNetOptions o) {
  return std::make_shared<ResNet>("bottleneck", std::vector<int64_t>{3, 4, 23, 3},
                                  std::vector<int64_t>{64, 128, 256, 512}, o);
}
std::shared_ptr<ResNet> resnet20(ResNetOptions o) {
  o.small_input = true;
  return std::make_shared<ResNet>("basic", std::vector<int64_t>{3, 3, 3},
                                  std::vector<int64_t>{16, 32, 64}, o);
}
std::shared_ptr<ResNet> resnet32(ResNetOptions o) {
  o.small_input = true;
  return std::make_shared<ResNet>("basic", std::vector<int64_t>{5, 5, 5},
                                  std::vector<int64_t>{16, 32, 64}, o);
}
std::shared_ptr<ResNet> resnet56(ResNetOptions o) {
  o.small_input = true;
  return std::make_shared<ResNet>("basic", std::vector<int64_t>{9, 9, 9},
                                  std::vector<int64_t>{16, 32, 64}, o);
}

std::shared_ptr<ResNet> make_resnet(const std::string& name, ResNetOptions options) {
  if (name == "resnet18") return resnet18(options);
  if (name == "resnet34") return resnet34(options);
  if (name == "resnet50") return resnet50(options);
  if (name == "resnet101") return resnet101(options);
  if (name == "resnet20") return resnet20(options);
  if (name == "resnet32") return resnet32(options);
  if (name == "resnet56") return resnet56(options);
  throw ValueError(
      fmt::format("make_resnet: unknown model '{}' (expected resnet18, resnet34, resnet50, "
                  "resnet101, resnet20, resnet32 or resnet56)",
                  name));
}

}  // namespace kiln::nn
