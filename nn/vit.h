// A Vision Transformer (Dosovitskiy et al. 2021) from kiln's layers: the image cut into patches by
// a strided convolution, a class token in front, learned position embeddings, a pre-norm
// TransformerEncoder with GELU, and a linear head on the class token's final state.
//
//   auto vit = nn::make_vit("vit-mini", {.num_classes = 10, .in_channels = 1, .image_size = 28});
//   Tensor logits = (*vit)(images);  // [N, 1, 28, 28] -> [N, 10]
//
// Parameter names: conv_proj.{weight,bias}, class_token, pos_embedding, encoder.layers.N....
// (TransformerEncoderLayer's), encoder.norm, head.{weight,bias}; a PyTorch model built the same way
// from torch.nn (tests/reference/make_vit.py) loads kiln's state dict and the reverse.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct VisionTransformerOptions {
  int64_t image_size = 224;  // square images of this side
  int64_t patch_size = 16;   // must divide image_size
  int64_t in_channels = 3;
  int64_t num_classes = 1000;
  int64_t dim = 192;  // the tokens' width
  int64_t depth = 12;
  int64_t heads = 3;
  int64_t mlp_dim = 768;
  double dropout = 0.0;
};

class VisionTransformer : public Module {
 public:
  explicit VisionTransformer(VisionTransformerOptions options);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "VisionTransformer"; }
  const VisionTransformerOptions& options() const { return options_; }

  std::shared_ptr<Conv2d> conv_proj;
  Tensor class_token;    // [1, 1, dim]
  Tensor pos_embedding;  // [1, patches + 1, dim]
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<Linear> head;

 private:
  VisionTransformerOptions options_;
};

struct VitShape {
  int64_t num_classes = 10;
  int64_t in_channels = 3;
  int64_t image_size = 224;
};

// By name, with patches of 4 pixels for images of up to 64 pixels a side and 16 beyond:
//   vit-mini   dim 64,  depth 4,  heads 4,  mlp 128  (small enough to train on a CPU)
//   vit-tiny   dim 192, depth 12, heads 3,  mlp 768  (DeiT-Tiny)
//   vit-small  dim 384, depth 12, heads 6,  mlp 1536 (DeiT-Small)
//   vit-base   dim 768, depth 12, heads 12, mlp 3072 (ViT-B)
std::shared_ptr<VisionTransformer> make_vit(const std::string& name, VitShape shape);
bool is_vit_name(const std::string& name);

}  // namespace kiln::nn
