#include "kiln/nn/vit.h"

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/core/error.h"
#include "kiln/nn/init.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"

namespace kiln::nn {

VisionTransformer::VisionTransformer(VisionTransformerOptions options) : options_(options) {
  const VisionTransformerOptions& o = options;
  KILN_CHECK(o.image_size > 0 && o.patch_size > 0 && o.image_size % o.patch_size == 0, ValueError,
             "VisionTransformer: patch_size must divide image_size, got patch_size {} and "
             "image_size {}",
             o.patch_size, o.image_size);
  KILN_CHECK(o.in_channels > 0 && o.num_classes > 0 && o.depth > 0, ValueError,
             "VisionTransformer: in_channels, num_classes and depth must be positive, got {}, {} "
             "and {}",
             o.in_channels, o.num_classes, o.depth);
  const int64_t side = o.image_size / o.patch_size;
  conv_proj =
      register_module("conv_proj", std::make_shared<Conv2d>(o.in_channels, o.dim, o.patch_size,
                                                            Conv2dOptions{.stride = o.patch_size}));
  class_token = register_parameter("class_token", zeros({1, 1, o.dim}));
  pos_embedding = register_parameter("pos_embedding", empty({1, side * side + 1, o.dim}));
  init::normal_(pos_embedding, 0.0, 0.02);
  encoder =
      register_module("encoder", std::make_shared<TransformerEncoder>(
                                     o.dim, o.heads, o.depth,
                                     TransformerEncoderLayerOptions{.dim_feedforward = o.mlp_dim,
                                                                    .dropout = o.dropout,
                                                                    .activation = "gelu",
                                                                    .layer_norm_eps = 1e-6,
                                                                    .batch_first = true,
                                                                    .norm_first = true},
                                     /*final_norm=*/true));
  head = register_module("head", std::make_shared<Linear>(o.dim, o.num_classes));
}

Tensor VisionTransformer::forward(const Tensor& x) {
  const VisionTransformerOptions& o = options_;
  KILN_CHECK(x.dim() == 4 && x.size(1) == o.in_channels && x.size(2) == o.image_size &&
                 x.size(3) == o.image_size,
             ShapeError, "VisionTransformer: expected images [N, {}, {}, {}], got {}",
             o.in_channels, o.image_size, o.image_size, shape_str(x.shape()));
  const int64_t n = x.size(0);
  const Tensor patches = (*conv_proj)(x).flatten(2).transpose(1, 2);  // [N, patches, dim]
  const Tensor tokens = add(cat({class_token.expand({n, 1, o.dim}), patches}, 1), pos_embedding);
  return (*head)((*encoder)(tokens).select(1, 0));
}

namespace {

struct VitSize {
  const char* name;
  int64_t dim, depth, heads, mlp_dim;
};

constexpr VitSize kSizes[] = {{"vit-mini", 64, 4, 4, 128},
                              {"vit-tiny", 192, 12, 3, 768},
                              {"vit-small", 384, 12, 6, 1536},
                              {"vit-base", 768, 12, 12, 3072}};

}  // namespace

bool is_vit_name(const std::string& name) {
  for (const VitSize& s : kSizes)
    if (name == s.name) return true;
  return false;
}

std::shared_ptr<VisionTransformer> make_vit(const std::string& name, VitShape shape) {
  for (const VitSize& s : kSizes) {
    if (name != s.name) continue;
    const int64_t patch = shape.image_size <= 64 ? 4 : 16;
    KILN_CHECK(shape.image_size % patch == 0, ValueError,
               "make_vit: {} cuts images into patches of {} pixels, which must divide the image "
               "side {}",
               name, patch, shape.image_size);
    return std::make_shared<VisionTransformer>(
        VisionTransformerOptions{.image_size = shape.image_size,
                                 .patch_size = patch,
                                 .in_channels = shape.in_channels,
                                 .num_classes = shape.num_classes,
                                 .dim = s.dim,
                                 .depth = s.depth,
                                 .heads = s.heads,
                                 .mlp_dim = s.mlp_dim});
  }
  throw ValueError(fmt::format(
      "make_vit: unknown model '{}' (expected vit-mini, vit-tiny, vit-small or vit-base)", name));
}

}  // namespace kiln::nn
