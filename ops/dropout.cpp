// dropout: the keep mask comes from the Philox stream (kernels/dropout.h), so a seed gives the same
// mask on every device; the backward multiplies by the same scaled mask.

#include "kiln/kernels/dropout.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/cuda_graph.h"
#include "kiln/core/generator.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/dropout.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"

namespace kiln {

namespace {

// Why a graph cannot hold a draw: the kernels take the generator's offset as an argument, which
// a capture freezes.
constexpr const char* kRandomInGraph =
    "draws random numbers on the GPU, and a graph would repeat the same draw at every replay (the "
    "generator's offset would be frozen into it; kiln does not register generator state with "
    "graphs as PyTorch does): run dropout in eval mode or outside the graph,";

struct DropoutBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor mask;  // 0 or 1 / (1 - p), in x's dtype
  std::string name() const override { return "DropoutBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override { return {mul(g, mask.unpack(*this))}; }
  void release_saved() override { mask.reset(); }
};

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  profiler::OpScope profile("dropout", {&x});
  const char* op = "dropout";
  require_defined(op, x);
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability p must be in [0, 1], got {}",
             p);
  // As PyTorch: nothing to drop, no draw and no copy (a p = 0 layer costs nothing in training).
  if (!training || p == 0.0) return x;
  require_floating(op, x);
  Tensor mask, out;
  if (p == 1.0) {
    // Every element dropped: the scale 1 / (1 - p) would be infinite, and no draw is needed.
    mask = zeros(x.shape(), x.dtype(), x.device());
    out = mul(x.detach(), mask);
  } else {
    // One fused pass: element i is kept iff philox_uniform(seed, offset, i) >= p, on every device.
    if (x.device().is_cuda() && cuda::is_current_stream_capturing(x.device().index))
      cuda::check_not_capturing(kRandomInGraph);
    Generator& gen = generator ? *generator : default_generator();
    const uint64_t seed = gen.seed(), offset = gen.next_offset();
    mask = empty(x.shape(), x.dtype(), x.device());
    out = empty(x.shape(), x.dtype(), x.device());
    if (x.numel() > 0)
      kernels_for<DropoutKernels>(op, x.device())
          .dropout(x.detach().contiguous(), p, seed, offset, out, mask);
  }
  if (should_record({&x})) {
    auto node = std::make_shared<DropoutBackward>();
    node->mask = SavedTensor(mask);
    record(out, node, {&x});
  }
  return out;
}

Tensor dropout2d(const Tensor& x, double p, bool training, Generator* generator) {
  KILN_CHECK(x.defined() && x.dim() == 4, ShapeError,
             "dropout2d: expected an input [N, C, H, W], got {}", describe(x));
  if (!training) return x;
  const Tensor keep =
      dropout(ones({x.size(0), x.size(1), 1, 1}, x.dtype(), x.device()), p, true, generator);
  return mul(x, keep);
}

}  // namespace kiln
