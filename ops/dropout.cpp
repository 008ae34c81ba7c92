// dropout: the keep mask comes from the Philox stream through uniform(), so a seed gives the same
// mask on every device; the backward multiplies by the same scaled mask.
#include "kiln/kernels/cuda/dropout.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ops/autograd/record.h"
#include "kiln/ops/factories.h"
#include "kiln/core/generator.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/nn.h"

namespace kiln {

namespace {

struct DropoutBackward : Node {
  SavedTensor mask;  // 0 or 1 / (1 - p), in x's dtype
  std::string name() const override { return "DropoutBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override { return {mul(g, mask.unpack(*this))}; }
  void release_saved() override { mask.reset(); }
};

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  const char* op = "dropout";
  require_defined(op, x);
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability p must be in [0, 1], got {}",
             p);
  if (!training) return x;
  require_floating(op, x);
  Tensor mask, out;
  if (p == 1.0) {
    // Every element dropped: the scale 1 / (1 - p) would be infinite, and no draw is needed.
    mask = zeros(x.shape(), x.dtype(), x.device());
    out = mul(x.detach(), mask);
  } else if (x.device().is_cuda()) {
    // One fused pass drawing the same stream, from the same offset, as uniform() below.
    Generator& gen = generator ? *generator : default_generator();
    const uint64_t seed = gen.seed(), offset = gen.next_offset();
    mask = empty(x.shape(), x.dtype(), x.device());
    out = empty(x.shape(), x.dtype(), x.device());
    gpu::dropout(x.detach().contiguous(), p, seed, offset, out, mask);
  } else {
    // f64 holds philox_uniform's float exactly, so `u >= p` compares the same numbers as the
    // rule "element i is kept iff philox_uniform(seed, offset, i) >= p".
    Tensor u = uniform(x.shape(), 0.0, 1.0, DType::f64, x.device(), generator);
    mask = mul(ge(u, p).to(x.dtype()), 1.0 / (1.0 - p));
    out = mul(x.detach(), mask);
  }
  if (should_record({&x})) {
    auto node = std::make_shared<DropoutBackward>();
    node->mask = SavedTensor(mask);
    record(out, node, {&x});
  }
  return out;
}

}  // namespace kiln
