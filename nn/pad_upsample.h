// Padding and upsampling modules with PyTorch's names: ZeroPad2d, ConstantPad2d, ReflectionPad2d,
// ReplicationPad2d (ops/pad.h) and Upsample (ops/interpolate.h). None has parameters.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/ops/interpolate.h"
#include "kiln/ops/pad.h"

namespace kiln::nn {

// Pads the last two dims by (left, right, top, bottom); one number pads all four alike.
class Pad2d : public Module {
 public:
  Pad2d(std::array<int64_t, 4> padding, PadMode mode, double value, std::string name);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return name_; }
  std::string extra_repr() const override;

 private:
  std::array<int64_t, 4> padding_;
  PadMode mode_;
  double value_;
  std::string name_;
};

class ZeroPad2d : public Pad2d {
 public:
  explicit ZeroPad2d(std::array<int64_t, 4> padding)
      : Pad2d(padding, PadMode::constant, 0.0, "ZeroPad2d") {}
  explicit ZeroPad2d(int64_t padding) : ZeroPad2d({padding, padding, padding, padding}) {}
};

class ConstantPad2d : public Pad2d {
 public:
  ConstantPad2d(std::array<int64_t, 4> padding, double value)
      : Pad2d(padding, PadMode::constant, value, "ConstantPad2d") {}
  ConstantPad2d(int64_t padding, double value)
      : ConstantPad2d({padding, padding, padding, padding}, value) {}
};

class ReflectionPad2d : public Pad2d {
 public:
  explicit ReflectionPad2d(std::array<int64_t, 4> padding)
      : Pad2d(padding, PadMode::reflect, 0.0, "ReflectionPad2d") {}
  explicit ReflectionPad2d(int64_t padding)
      : ReflectionPad2d({padding, padding, padding, padding}) {}
};

class ReplicationPad2d : public Pad2d {
 public:
  explicit ReplicationPad2d(std::array<int64_t, 4> padding)
      : Pad2d(padding, PadMode::replicate, 0.0, "ReplicationPad2d") {}
  explicit ReplicationPad2d(int64_t padding)
      : ReplicationPad2d({padding, padding, padding, padding}) {}
};

// interpolate(x, options) as a module: nn::Upsample({.scale_factor = {{2, 2}}}).
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions options) : options_(options) {}
  Tensor forward(const Tensor& x) override { return interpolate(x, options_); }
  std::string name() const override { return "Upsample"; }
  std::string extra_repr() const override;

 private:
  InterpolateOptions options_;
};

}  // namespace kiln::nn
