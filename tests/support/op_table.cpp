// The entries of the parity harness (op_table.h), family by family. Shapes are small (the harness
// runs under AddressSanitizer in CI) but odd-sized, and value ranges keep each op away from its
// poles and kinks: logs and roots of [0.1, 3], divisors in [0.5, 2], exponents of [-3, 3].
#include "op_table.h"

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"

namespace kiln::testing {

namespace {

using Inputs = std::vector<OpInput>;
using Outputs = std::vector<Tensor>;
using Args = std::vector<Tensor>;
using UnaryFn = std::function<Tensor(const Tensor&)>;
using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;

constexpr double kInf = std::numeric_limits<double>::infinity();

OpInput uniform(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  return {random_f64(shape, seed, low, high)};
}

// An input that is read but not differentiated (running statistics, class weights).
OpInput fixed(OpInput in) {
  in.differentiable = false;
  return in;
}

// Floating values that are small integers: ties for comparisons and maxima, exact in every dtype.
OpInput integer_valued(const Shape& shape, uint64_t seed, int64_t low, int64_t high) {
  Generator gen(seed);
  return {randint(low, high, shape, DType::i64, Device::cpu(), &gen).to(DType::f64)};
}

OpInput indices(const Shape& shape, int64_t high, uint64_t seed) {
  Generator gen(seed);
  return {randint(0, high, shape, DType::i64, Device::cpu(), &gen), false};
}

OpInput mask(const Shape& shape, uint64_t seed) {
  return {gt(random_f64(shape, seed), 0.0), false};
}

// The channels-last entries run an op on NHWC operands (the conversion is differentiable, so the
// gradients reach the NCHW leaves) and fail when its result lost the layout.
Tensor nhwc(const Tensor& x) {
  return x.to(MemoryFormat::channels_last);
}
Tensor kept_nhwc(const char* op, const Tensor& out) {
  if (out.suggest_memory_format() != MemoryFormat::channels_last)
    throw std::runtime_error(std::string(op) + ": the result lost the channels-last layout");
  return out;
}

OpEntry with(OpEntry entry, Allowance allowance) {
  entry.allowances.push_back(allowance);
  return entry;
}

OpEntry not_differentiable(OpEntry entry) {
  entry.differentiable = false;
  return entry;
}

// f of one [5, 7] input in [low, high).
OpEntry unary(std::string name, UnaryFn f, double low = -2.0, double high = 2.0) {
  return {std::move(name), OpFamily::unary,
          [low, high](uint64_t seed) {
            return Inputs{uniform({5, 7}, seed, low, high)};
          },
          [f](const Args& in) { return Outputs{f(in[0])}; }};
}

struct Range {
  double low = -2.0, high = 2.0;
};

// f of two inputs of the given shapes (broadcasting when they differ).
OpEntry binary(std::string name, BinaryFn f, Shape a = {4, 6}, Shape b = {4, 6}, Range ra = {},
               Range rb = {}) {
  return {std::move(name), OpFamily::binary,
          [=](uint64_t seed) {
            return Inputs{uniform(a, seed, ra.low, ra.high), uniform(b, seed + 1, rb.low, rb.high)};
          },
          [f](const Args& in) { return Outputs{f(in[0], in[1])}; }};
}

// A comparison of integer-valued operands, [4, 1] against [6]: ties and broadcasting.
OpEntry comparison(std::string name, BinaryFn f) {
  return not_differentiable(
      {std::move(name), OpFamily::selection,
       [](uint64_t seed) {
         return Inputs{integer_valued({4, 1}, seed, -2, 3), integer_valued({6}, seed + 1, -2, 3)};
       },
       [f](const Args& in) { return Outputs{f(in[0], in[1])}; }});
}

// f of one [3, 4, 5] input in [-1, 1).
OpEntry reduction(std::string name, UnaryFn f) {
  return {std::move(name), OpFamily::reduction,
          [](uint64_t seed) {
            return Inputs{uniform({3, 4, 5}, seed)};
          },
          [f](const Args& in) { return Outputs{f(in[0])}; }};
}

// f of one [3, 4, 5] input holding the integers 0..4: ties inside every row.
OpEntry tied_reduction(std::string name, UnaryFn f) {
  return {std::move(name), OpFamily::reduction,
          [](uint64_t seed) {
            return Inputs{integer_valued({3, 4, 5}, seed, 0, 5)};
          },
          [f](const Args& in) { return Outputs{f(in[0])}; }};
}

// A view (or copy) of one [4, 6, 5] input.
OpEntry view(std::string name, UnaryFn f) {
  return {std::move(name), OpFamily::view,
          [](uint64_t seed) {
            return Inputs{uniform({4, 6, 5}, seed)};
          },
          [f](const Args& in) { return Outputs{f(in[0])}; }};
}

std::vector<OpEntry> unary_entries() {
  return {
      unary("neg", [](const Tensor& x) { return neg(x); }),
      unary("abs", [](const Tensor& x) { return abs(x); }),
      unary("sign", [](const Tensor& x) { return sign(x); }),
      // Steps: their zero gradient is checked in tests/test_sort.cpp, not by finite differences
      // that would straddle a step.
      not_differentiable(unary("floor", [](const Tensor& x) { return floor(x); })),
      not_differentiable(unary("ceil", [](const Tensor& x) { return ceil(x); })),
      not_differentiable(unary("round", [](const Tensor& x) { return round(mul(x, 4.0)); })),
      not_differentiable(unary("trunc", [](const Tensor& x) { return trunc(x); })),
      unary(
          "exp", [](const Tensor& x) { return exp(x); }, -3.0, 3.0),
      unary(
          "log", [](const Tensor& x) { return log(x); }, 0.1, 3.0),
      unary(
          "sqrt", [](const Tensor& x) { return sqrt(x); }, 0.1, 3.0),
      unary(
          "rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.1, 3.0),
      unary("square", [](const Tensor& x) { return square(x); }),
      unary(
          "reciprocal", [](const Tensor& x) { return reciprocal(x); }, 0.2, 2.0),
      unary("erf", [](const Tensor& x) { return erf(x); }),
      unary(
          "sin", [](const Tensor& x) { return sin(x); }, -4.0, 4.0),
      unary(
          "cos", [](const Tensor& x) { return cos(x); }, -4.0, 4.0),
      unary("relu", [](const Tensor& x) { return relu(x); }),
      unary("leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }),
      unary(
          "sigmoid", [](const Tensor& x) { return sigmoid(x); }, -5.0, 5.0),
      unary(
          "tanh", [](const Tensor& x) { return tanh(x); }, -3.0, 3.0),
      unary(
          "gelu", [](const Tensor& x) { return gelu(x); }, -4.0, 4.0),
      unary(
          "gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, -4.0, 4.0),
      unary(
          "silu", [](const Tensor& x) { return silu(x); }, -4.0, 4.0),
      unary("clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.75); }),
      unary("clamp min", [](const Tensor& x) { return clamp(x, -0.5, std::nullopt); }),
      unary("clamp max", [](const Tensor& x) { return clamp(x, std::nullopt, 0.75); }),
      unary(
          "pow 2.5", [](const Tensor& x) { return pow(x, 2.5); }, 0.1, 2.0),
      unary("pow 3", [](const Tensor& x) { return pow(x, 3.0); }),
      unary(
          "pow 0.5", [](const Tensor& x) { return pow(x, 0.5); }, 0.1, 3.0),
      unary(
          "pow -1", [](const Tensor& x) { return pow(x, -1.0); }, 0.2, 2.0),
      unary("pow 0", [](const Tensor& x) { return pow(x, 0.0); }),
      unary("add scalar", [](const Tensor& x) { return add(x, 1.5); }),
      unary("sub scalar", [](const Tensor& x) { return sub(x, 0.25); }),
      unary("rsub scalar", [](const Tensor& x) { return rsub(2.0, x); }),
      unary("mul scalar", [](const Tensor& x) { return mul(x, -3.0); }),
      unary("div scalar", [](const Tensor& x) { return div(x, 4.0); }),
      unary(
          "rdiv scalar", [](const Tensor& x) { return rdiv(2.0, x); }, 0.2, 2.0),
      // The mask comes from the Philox stream by element index, the same in every dtype and on
      // every device; only the scaling by 1/(1-p) rounds.
      unary("dropout p 0.3",
            [](const Tensor& x) {
              Generator gen(77);
              return dropout(x, 0.3, true, &gen);
            }),
      {"dropout2d p 0.4", OpFamily::unary,
       [](uint64_t seed) {
         return Inputs{uniform({4, 5, 2, 3}, seed)};
       },
       [](const Args& in) {
         Generator gen(78);
         return Outputs{dropout2d(in[0], 0.4, true, &gen)};
       }},
  };
}

std::vector<OpEntry> binary_entries() {
  const Range positive{0.5, 2.0};
  return {
      binary("add", [](const Tensor& a, const Tensor& b) { return add(a, b); }),
      binary("add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); }),
      binary("sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }),
      binary("sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, 2.0); }),
      binary("mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }),
      binary(
          "div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, {4, 6}, {4, 6}, {},
          positive),
      binary(
          "pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, {4, 6}, {4, 6},
          positive),
      binary("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }),
      binary("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }),
      // Broadcast operands sum their gradients back to their shapes (sum_to).
      binary("add broadcast column and row",
             [](const Tensor& a, const Tensor& b) { return add(a, b); }, {4, 1}, {6}),
      binary("mul broadcast 3-d", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
             {2, 1, 5}, {3, 1}),
      binary(
          "div by a 0-dim tensor", [](const Tensor& a, const Tensor& b) { return div(a, b); },
          {4, 6}, {}, {}, positive),
      binary("sub of transposed operands",
             [](const Tensor& a, const Tensor& b) { return sub(a.t(), b); }, {6, 4}, {4, 6}),
      binary(
          "mul channels-last",
          [](const Tensor& a, const Tensor& b) { return kept_nhwc("mul", mul(nhwc(a), nhwc(b))); },
          {2, 3, 4, 5}, {2, 3, 4, 5}),
      binary("add channels-last and NCHW",
             [](const Tensor& a, const Tensor& b) { return kept_nhwc("add", add(nhwc(a), b)); },
             {2, 3, 4, 5}, {2, 3, 4, 5}),
  };
}

std::vector<OpEntry> selection_entries() {
  return {
      comparison("eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }),
      comparison("ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }),
      comparison("lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }),
      comparison("le", [](const Tensor& a, const Tensor& b) { return le(a, b); }),
      comparison("gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }),
      comparison("ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }),
      comparison("eq scalar", [](const Tensor& a, const Tensor&) { return eq(a, 1.0); }),
      comparison("ge scalar", [](const Tensor& a, const Tensor&) { return ge(a, 0.0); }),
      comparison("logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }),
      comparison("logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }),
      comparison("logical_not", [](const Tensor& a, const Tensor&) { return logical_not(a); }),
      not_differentiable({"isnan", OpFamily::selection,
                          [](uint64_t seed) {
                            Tensor u = random_f64({5, 7}, seed);
                            Tensor nan =
                                full({}, std::numeric_limits<double>::quiet_NaN(), DType::f64);
                            return Inputs{{where(lt(u, -0.5), nan, u)}};
                          },
                          [](const Args& in) { return Outputs{isnan(in[0])}; }}),
      // Differentiable in a and b, broadcasting all three.
      {"where", OpFamily::selection,
       [](uint64_t seed) {
         return Inputs{mask({4, 1}, seed), uniform({6}, seed + 1), uniform({4, 6}, seed + 2)};
       },
       [](const Args& in) { return Outputs{where(in[0], in[1], in[2])}; }},
      {"masked_fill", OpFamily::selection,
       [](uint64_t seed) {
         return Inputs{uniform({4, 6}, seed), mask({4, 6}, seed + 1)};
       },
       [](const Args& in) { return Outputs{masked_fill(in[0], in[1], -7.0)}; }},
  };
}

std::vector<OpEntry> reduction_entries() {
  return {
      reduction("sum", [](const Tensor& x) { return sum(x); }),
      // kiln-bench ops times these two on a matrix's rows and columns.
      reduction("sum dim 1", [](const Tensor& x) { return sum(x, {1}); }),
      reduction("sum dim 0", [](const Tensor& x) { return sum(x, {0}); }),
      reduction("sum dims 0 2 keepdim",
                [](const Tensor& x) {
                  return sum(x, {0, 2}, true);
                }),
      reduction("sum of a transposed input",
                [](const Tensor& x) { return sum(x.transpose(0, 2), {1}); }),
      reduction("mean", [](const Tensor& x) { return mean(x); }),
      reduction("mean dim 1", [](const Tensor& x) { return mean(x, {1}); }),
      reduction("var dim 1", [](const Tensor& x) { return var(x, {1}); }),
      reduction("var correction 0", [](const Tensor& x) { return var(x, {}, 0); }),
      reduction("std_dev dims 0 2",
                [](const Tensor& x) {
                  return std_dev(x, {0, 2});
                }),
      reduction("norm p 2 dim 1", [](const Tensor& x) { return norm(x, 2.0, {1}); }),
      reduction("norm p 1", [](const Tensor& x) { return norm(x, 1.0); }),
      reduction("norm p 3 dim 2 keepdim", [](const Tensor& x) { return norm(x, 3.0, {2}, true); }),
      reduction("norm p inf dim 2", [](const Tensor& x) { return norm(x, kInf, {2}); }),
      reduction("cumsum dim 1", [](const Tensor& x) { return cumsum(x, 1); }),
      reduction("cumsum dim 0", [](const Tensor& x) { return cumsum(x, 0); }),
      reduction("cumprod dim 2", [](const Tensor& x) { return cumprod(x, 2); }),
      reduction("cumprod of a transposed input",
                [](const Tensor& x) { return cumprod(x.transpose(0, 1), 0); }),
      reduction("prod dim 1", [](const Tensor& x) { return prod(x, {1}); }),
      reduction("prod dims 0 2 keepdim",
                [](const Tensor& x) {
                  return prod(x, {0, 2}, true);
                }),
      reduction("sum_to [4, 1]",
                [](const Tensor& x) {
                  return sum_to(x, {4, 1});
                }),
      // Maxima and minima over tied values: the first index wins and the gradient goes to it
      // (max/min along a dim) or is shared between the ties (amax/amin and the global max/min).
      {"max dim 1", OpFamily::reduction,
       [](uint64_t seed) {
         return Inputs{integer_valued({3, 4, 5}, seed, 0, 5)};
       },
       [](const Args& in) {
         ValuesIndices r = max(in[0], 1);
         return Outputs{r.values, r.indices};
       }},
      {"min dim -1 keepdim", OpFamily::reduction,
       [](uint64_t seed) {
         return Inputs{integer_valued({3, 4, 5}, seed, 0, 5)};
       },
       [](const Args& in) {
         ValuesIndices r = min(in[0], -1, true);
         return Outputs{r.values, r.indices};
       }},
      tied_reduction("max", [](const Tensor& x) { return max(x); }),
      tied_reduction("min", [](const Tensor& x) { return min(x); }),
      tied_reduction("amax dims 0 2",
                     [](const Tensor& x) {
                       return amax(x, {0, 2});
                     }),
      tied_reduction("amin dim 1 keepdim", [](const Tensor& x) { return amin(x, {1}, true); }),
      // A 16-bit rounding may tie two values: both sides see the same rounded values, so the
      // first of them wins on both.
      not_differentiable(reduction("argmax dim 1", [](const Tensor& x) { return argmax(x, 1); })),
      not_differentiable(
          reduction("argmin dim 0 keepdim", [](const Tensor& x) { return argmin(x, 0, true); })),
      not_differentiable(reduction("argmax", [](const Tensor& x) { return argmax(x); })),
      // Sorting tied values: the sort is stable, so every device orders the ties alike.
      {"sort dim 1", OpFamily::reduction,
       [](uint64_t seed) {
         return Inputs{integer_valued({3, 4, 5}, seed, 0, 5)};
       },
       [](const Args& in) {
         ValuesIndices r = sort(in[0], 1);
         return Outputs{r.values, r.indices};
       }},
      {"sort descending dim -1", OpFamily::reduction,
       [](uint64_t seed) {
         return Inputs{integer_valued({3, 4, 5}, seed, 0, 5)};
       },
       [](const Args& in) {
         ValuesIndices r = sort(in[0], -1, true);
         return Outputs{r.values, r.indices};
       }},
      {"topk 2 dim 0 smallest", OpFamily::reduction,
       [](uint64_t seed) {
         return Inputs{integer_valued({3, 4, 5}, seed, 0, 5)};
       },
       [](const Args& in) {
         ValuesIndices r = topk(in[0], 2, 0, false);
         return Outputs{r.values, r.indices};
       }},
      {"topk 3 of a transposed input", OpFamily::reduction,
       [](uint64_t seed) {
         return Inputs{uniform({3, 4, 5}, seed)};
       },
       [](const Args& in) {
         ValuesIndices r = topk(in[0].transpose(0, 2), 3, 1);
         return Outputs{r.values, r.indices};
       }},
      not_differentiable(tied_reduction("argsort dim 2 descending",
                                        [](const Tensor& x) { return argsort(x, 2, true); })),
  };
}

std::vector<OpEntry> softmax_entries() {
  auto entry = [](std::string name, UnaryFn f) {
    return OpEntry{std::move(name), OpFamily::softmax,
                   [](uint64_t seed) {
                     return Inputs{uniform({4, 5, 6}, seed, -3.0, 3.0)};
                   },
                   [f](const Args& in) { return Outputs{f(in[0])}; }};
  };
  return {
      entry("softmax dim 1", [](const Tensor& x) { return softmax(x, 1); }),
      entry("softmax dim 0", [](const Tensor& x) { return softmax(x, 0); }),
      entry("log_softmax dim -1", [](const Tensor& x) { return log_softmax(x, -1); }),
      entry("log_softmax dim 1", [](const Tensor& x) { return log_softmax(x, 1); }),
  };
}

// Log-probabilities of [n, classes] (or [n, classes, d]) in f64, class weights in [0.5, 2), and
// targets with every fourth one set to ignore_index 2 (a valid class, so ignoring matters).
Inputs loss_inputs(const Shape& shape, uint64_t seed, bool log_probs) {
  Tensor x = random_f64(shape, seed, -3.0, 3.0);
  Shape target_shape = shape;
  target_shape.erase(target_shape.begin() + 1);
  Generator gen(seed + 1);
  Tensor target = randint(0, shape[1], target_shape, DType::i64, Device::cpu(), &gen);
  Tensor flat = target.view({-1});
  for (int64_t i = 1; i < flat.numel(); i += 4) flat.select(0, i).fill_(2);
  return {{log_probs ? log_softmax(x, 1) : x},
          {target, false},
          fixed(uniform({shape[1]}, seed + 2, 0.5, 2.0))};
}

std::vector<OpEntry> loss_entries() {
  return {
      {"nll_loss mean", OpFamily::loss,
       [](uint64_t seed) {
         return loss_inputs({9, 5}, seed, true);
       },
       [](const Args& in) { return Outputs{nll_loss(in[0], in[1])}; }},
      {"nll_loss weighted sum, ignore_index", OpFamily::loss,
       [](uint64_t seed) {
         return loss_inputs({9, 5}, seed, true);
       },
       [](const Args& in) { return Outputs{nll_loss(in[0], in[1], in[2], 2, Reduction::sum)}; }},
      {"nll_loss 3-d none", OpFamily::loss,
       [](uint64_t seed) {
         return loss_inputs({3, 5, 4}, seed, true);
       },
       [](const Args& in) {
         return Outputs{nll_loss(in[0], in[1], Tensor(), -100, Reduction::none)};
       }},
      {"cross_entropy mean", OpFamily::loss,
       [](uint64_t seed) {
         return loss_inputs({9, 5}, seed, false);
       },
       [](const Args& in) { return Outputs{cross_entropy(in[0], in[1])}; }},
      {"cross_entropy weighted, ignore_index, smoothing 0.1", OpFamily::loss,
       [](uint64_t seed) {
         return loss_inputs({9, 5}, seed, false);
       },
       [](const Args& in) {
         return Outputs{cross_entropy(in[0], in[1], in[2], 2, Reduction::mean, 0.1)};
       }},
      {"cross_entropy 3-d none, smoothing 0.2", OpFamily::loss,
       [](uint64_t seed) {
         return loss_inputs({3, 5, 4}, seed, false);
       },
       [](const Args& in) {
         return Outputs{cross_entropy(in[0], in[1], Tensor(), -100, Reduction::none, 0.2)};
       }},
      {"mse_loss mean", OpFamily::loss,
       [](uint64_t seed) {
         return Inputs{uniform({6, 5}, seed), uniform({6, 5}, seed + 1)};
       },
       [](const Args& in) { return Outputs{mse_loss(in[0], in[1])}; }},
      {"mse_loss none", OpFamily::loss,
       [](uint64_t seed) {
         return Inputs{uniform({6, 5}, seed), uniform({6, 5}, seed + 1)};
       },
       [](const Args& in) { return Outputs{mse_loss(in[0], in[1], Reduction::none)}; }},
      {"mse_loss sum", OpFamily::loss,
       [](uint64_t seed) {
         return Inputs{uniform({6, 5}, seed), uniform({6, 5}, seed + 1)};
       },
       [](const Args& in) { return Outputs{mse_loss(in[0], in[1], Reduction::sum)}; }},
  };
}

OpEntry product(std::string name, BinaryFn f, Shape a, Shape b) {
  return {std::move(name), OpFamily::linalg,
          [=](uint64_t seed) {
            return Inputs{uniform(a, seed), uniform(b, seed + 1)};
          },
          [f](const Args& in) { return Outputs{f(in[0], in[1])}; }};
}

std::vector<OpEntry> linalg_entries() {
  return {
      product("einsum attention scores",
              [](const Tensor& q, const Tensor& k) {
                return einsum("bhqd,bhkd->bhqk", {q, k});
              },
              {2, 2, 3, 4}, {2, 2, 5, 4}),
      {"scaled_dot_product_attention L 7 S 5", OpFamily::linalg,
       [](uint64_t seed) {
         return Inputs{uniform({2, 3, 7, 8}, seed), uniform({2, 3, 5, 8}, seed + 1),
                       uniform({2, 3, 5, 6}, seed + 2)};
       },
       [](const Args& in) { return Outputs{scaled_dot_product_attention(in[0], in[1], in[2])}; }},
      {"scaled_dot_product_attention causal, length 1 and 9", OpFamily::linalg,
       [](uint64_t seed) {
         return Inputs{uniform({2, 9, 4}, seed),     uniform({2, 9, 4}, seed + 1),
                       uniform({2, 9, 3}, seed + 2), uniform({1, 1, 4}, seed + 3),
                       uniform({1, 9, 4}, seed + 4), uniform({1, 9, 3}, seed + 5)};
       },
       [](const Args& in) {
         return Outputs{scaled_dot_product_attention(in[0], in[1], in[2], {.is_causal = true}),
                        scaled_dot_product_attention(in[3], in[4], in[5], {.is_causal = true})};
       }},
      {"scaled_dot_product_attention bool and float masks, scale", OpFamily::linalg,
       [](uint64_t seed) {
         return Inputs{uniform({3, 6, 5}, seed), uniform({3, 4, 5}, seed + 1),
                       uniform({3, 4, 2}, seed + 2), mask({6, 4}, seed + 3),
                       fixed(uniform({3, 1, 4}, seed + 4))};
       },
       [](const Args& in) {
         // Every row keeps its first key, so no row is fully masked.
         const Tensor keep =
             logical_or(in[3], eq(arange(4, DType::i64, in[3].device()).unsqueeze(0), 0));
         return Outputs{
             scaled_dot_product_attention(in[0], in[1], in[2], {.attn_mask = keep}),
             scaled_dot_product_attention(in[0], in[1], in[2], {.attn_mask = in[4], .scale = 0.3})};
       }},
      {"scaled_dot_product_attention causal, L 129 S 33", OpFamily::linalg,
       [](uint64_t seed) {
         return Inputs{uniform({1, 129, 4}, seed), uniform({1, 33, 4}, seed + 1),
                       uniform({1, 33, 3}, seed + 2)};
       },
       [](const Args& in) {
         return Outputs{scaled_dot_product_attention(in[0], in[1], in[2], {.is_causal = true})};
       }},
      // Training's dropout (its mask from the Philox stream by the weight's index, the same on
      // every device for one seed, fused or composed: the CPU's fused kernels and a GPU's
      // composition draw one mask) and evaluation's p = 0.
      {"scaled_dot_product_attention dropout 0.25 and evaluation", OpFamily::linalg,
       [](uint64_t seed) {
         return Inputs{uniform({2, 5, 4}, seed), uniform({2, 6, 4}, seed + 1),
                       uniform({2, 6, 3}, seed + 2)};
       },
       [](const Args& in) {
         manual_seed(79);
         return Outputs{scaled_dot_product_attention(in[0], in[1], in[2], {.dropout_p = 0.25}),
                        scaled_dot_product_attention(in[0], in[1], in[2], {.dropout_p = 0.0})};
       }},
      {"scaled_dot_product_attention dropout with a mask and causal, lengths 1 7 129",
       OpFamily::linalg,
       [](uint64_t seed) {
         return Inputs{uniform({2, 7, 4}, seed),       uniform({2, 129, 4}, seed + 1),
                       uniform({2, 129, 3}, seed + 2), mask({7, 129}, seed + 3),
                       uniform({1, 129, 4}, seed + 4), uniform({1, 33, 4}, seed + 5),
                       uniform({1, 33, 3}, seed + 6),  uniform({1, 1, 4}, seed + 7),
                       uniform({1, 1, 4}, seed + 8),   uniform({1, 1, 2}, seed + 9)};
       },
       [](const Args& in) {
         manual_seed(81);
         // Every row keeps its first key, so no row is fully masked.
         const Tensor keep =
             logical_or(in[3], eq(arange(129, DType::i64, in[3].device()).unsqueeze(0), 0));
         return Outputs{scaled_dot_product_attention(in[0], in[1], in[2],
                                                     {.attn_mask = keep, .dropout_p = 0.2}),
                        scaled_dot_product_attention(in[4], in[5], in[6],
                                                     {.dropout_p = 0.3, .is_causal = true}),
                        scaled_dot_product_attention(in[7], in[8], in[9], {.dropout_p = 0.5})};
       }},
      product("einsum diagonal ii, then a product",
              [](const Tensor& a, const Tensor& b) {
                return einsum("bii,ij->bj", {a, b});
              },
              {2, 3, 3}, {3, 4}),
      product("einsum ellipsis with broadcasting",
              [](const Tensor& a, const Tensor& b) {
                return einsum("...ij,...jk", {a, b});
              },
              {2, 3, 4, 5}, {3, 5, 2}),
      product("mm", [](const Tensor& a, const Tensor& b) { return mm(a, b); }, {5, 7}, {7, 3}),
      product("mm of transposed operands",
              [](const Tensor& a, const Tensor& b) { return mm(a.t(), b.t()); }, {7, 5}, {3, 7}),
      product("bmm", [](const Tensor& a, const Tensor& b) { return bmm(a, b); }, {3, 4, 5},
              {3, 5, 2}),
      product("matmul broadcast batch",
              [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, {2, 1, 3, 4},
              {3, 4, 5}),
      product("matmul matrix-vector", [](const Tensor& a, const Tensor& b) { return matmul(a, b); },
              {4, 6}, {6}),
      product("matmul vector-vector", [](const Tensor& a, const Tensor& b) { return matmul(a, b); },
              {6}, {6}),
      {"linear with bias", OpFamily::linalg,
       [](uint64_t seed) {
         return Inputs{uniform({2, 3, 8}, seed), uniform({5, 8}, seed + 1), uniform({5}, seed + 2)};
       },
       [](const Args& in) { return Outputs{linear(in[0], in[1], in[2])}; }},
      product("linear without bias", [](const Tensor& x, const Tensor& w) { return linear(x, w); },
              {4, 8}, {5, 8}),
  };
}

struct ConvGeometry {
  Shape x, w;
  Pair stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

std::vector<OpEntry> convolution_entries() {
  // cuDNN's f16 algorithms (Winograd, FFT) may round transformed operands to f16 before their f32
  // sums: five times the table's f16 value (tests/cuda/test_conv2d.cpp finds the same).
  const Allowance cudnn_f16{DType::f16, 5.0, 5.0,
                            "cuDNN's f16 algorithms round transformed operands to f16", true};
  auto conv = [&](std::string name, ConvGeometry g, bool bias, bool channels_last = false) {
    return with(
        {std::move(name), OpFamily::convolution,
         [g, bias](uint64_t seed) {
           Inputs in{uniform(g.x, seed), uniform(g.w, seed + 1)};
           if (bias) in.push_back(uniform({g.w[0]}, seed + 2));
           return in;
         },
         [g, channels_last](const Args& in) {
           const Tensor b = in.size() > 2 ? in[2] : Tensor();
           if (channels_last)
             return Outputs{kept_nhwc("conv2d", conv2d(nhwc(in[0]), nhwc(in[1]), b, g.stride,
                                                       g.padding, g.dilation, g.groups))};
           return Outputs{conv2d(in[0], in[1], b, g.stride, g.padding, g.dilation, g.groups)};
         }},
        cudnn_f16);
  };
  const ConvGeometry strided{{1, 4, 9, 9}, {4, 2, 3, 3}, {2, 2}, {1, 1}, {2, 2}, 2};
  return {
      conv("conv2d 3x3 padding 1 with bias", {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}}, true),
      conv("conv2d stride 2 dilation 2 groups 2", strided, true),
      conv("conv2d 1x1 without bias", {{2, 3, 5, 5}, {2, 3, 1, 1}}, false),
      conv("conv2d channels-last 3x3 padding 1 with bias",
           {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}}, true, true),
      conv("conv2d channels-last stride 2 dilation 2 groups 2", strided, false, true),
      conv("conv2d channels-last 1x1 on a single channel", {{2, 1, 5, 5}, {3, 1, 1, 1}}, false,
           true),
      with({"conv2d_backward_input", OpFamily::convolution,
            [=](uint64_t seed) {
              return Inputs{uniform({1, 4, 4, 4}, seed), uniform(strided.w, seed + 1)};
            },
            [=](const Args& in) {
              return Outputs{conv2d_backward_input(in[0], in[1], strided.x, strided.stride,
                                                   strided.padding, strided.dilation,
                                                   strided.groups)};
            }},
           cudnn_f16),
      with({"conv2d_backward_weight", OpFamily::convolution,
            [=](uint64_t seed) {
              return Inputs{uniform({1, 4, 4, 4}, seed), uniform(strided.x, seed + 1)};
            },
            [=](const Args& in) {
              return Outputs{conv2d_backward_weight(in[0], in[1], strided.w, strided.stride,
                                                    strided.padding, strided.dilation,
                                                    strided.groups)};
            }},
           cudnn_f16),
      with({"conv_transpose2d stride 2 output_padding 1 groups 2 with bias", OpFamily::convolution,
            [](uint64_t seed) {
              return Inputs{uniform({2, 4, 4, 5}, seed), uniform({4, 3, 3, 3}, seed + 1),
                            uniform({6}, seed + 2)};
            },
            [](const Args& in) {
              return Outputs{conv_transpose2d(in[0], in[1], in[2], 2, 1, 1, 2)};
            }},
           cudnn_f16),
      with({"conv1d padding 2 dilation 2", OpFamily::convolution,
            [](uint64_t seed) {
              return Inputs{uniform({2, 3, 9}, seed), uniform({4, 3, 3}, seed + 1)};
            },
            [](const Args& in) { return Outputs{conv1d(in[0], in[1], Tensor(), 1, 2, 2)}; }},
           cudnn_f16),
  };
}

std::vector<OpEntry> pooling_entries() {
  auto pool = [](std::string name, UnaryFn f) {
    return OpEntry{std::move(name), OpFamily::pooling,
                   [](uint64_t seed) {
                     return Inputs{uniform({2, 3, 9, 8}, seed)};
                   },
                   [f](const Args& in) { return Outputs{f(in[0])}; }};
  };
  const Shape input{2, 3, 9, 8};
  return {
      pool("max_pool2d 3x3 stride 2 padding 1",
           [](const Tensor& x) {
             return max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
           }),
      pool("max_pool2d dilation 2 ceil_mode",
           [](const Tensor& x) {
             return max_pool2d(x, {2, 3}, {1, 2}, {1, 0}, {2, 1}, true);
           }),
      {"max_pool2d_with_indices", OpFamily::pooling,
       [](uint64_t seed) {
         return Inputs{integer_valued({2, 3, 9, 8}, seed, 0, 4)};
       },
       [](const Args& in) {
         MaxPool2dResult r = max_pool2d_with_indices(in[0], {3, 3}, {1, 1}, {1, 1});
         return Outputs{r.values, r.indices};
       }},
      pool("avg_pool2d 3x3 stride 2 padding 1",
           [](const Tensor& x) {
             return avg_pool2d(x, {3, 3}, {2, 2}, {1, 1});
           }),
      pool("avg_pool2d ceil_mode without the padding",
           [](const Tensor& x) {
             return avg_pool2d(x, {3, 2}, {2, 1}, {1, 1}, true, false);
           }),
      pool("adaptive_avg_pool2d 4x3",
           [](const Tensor& x) {
             return adaptive_avg_pool2d(x, {4, 3});
           }),
      pool("adaptive_avg_pool2d 1x1",
           [](const Tensor& x) {
             return adaptive_avg_pool2d(x, {1, 1});
           }),
      pool("adaptive_max_pool2d 4x3 (overlapping windows)",
           [](const Tensor& x) {
             return adaptive_max_pool2d(x, {4, 3});
           }),
      pool("max_pool2d channels-last 3x3 stride 2 padding 1",
           [](const Tensor& x) {
             return kept_nhwc("max_pool2d", max_pool2d(nhwc(x), {3, 3}, {2, 2}, {1, 1}));
           }),
      pool("avg_pool2d channels-last ceil_mode without the padding",
           [](const Tensor& x) {
             return kept_nhwc("avg_pool2d",
                              avg_pool2d(nhwc(x), {3, 2}, {2, 1}, {1, 1}, true, false));
           }),
      pool("adaptive_avg_pool2d channels-last 4x3",
           [](const Tensor& x) {
             return kept_nhwc("adaptive_avg_pool2d", adaptive_avg_pool2d(nhwc(x), {4, 3}));
           }),
      not_differentiable(
          {"max_pool2d_backward", OpFamily::pooling,
           [=](uint64_t seed) {
             Tensor x = random_f64(input, seed + 1);
             return Inputs{uniform({2, 3, 9, 8}, seed),
                           {max_pool2d_with_indices(x, {3, 3}, {1, 1}, {1, 1}).indices, false}};
           },
           [=](const Args& in) { return Outputs{max_pool2d_backward(in[0], in[1], input)}; }}),
      not_differentiable(
          {"avg_pool2d_backward", OpFamily::pooling,
           [](uint64_t seed) {
             return Inputs{uniform({2, 3, 5, 4}, seed)};
           },
           [=](const Args& in) {
             return Outputs{avg_pool2d_backward(in[0], input, {3, 3}, {2, 2}, {1, 1})};
           }}),
      not_differentiable(
          {"adaptive_avg_pool2d_backward", OpFamily::pooling,
           [](uint64_t seed) {
             return Inputs{uniform({2, 3, 4, 3}, seed)};
           },
           [=](const Args& in) { return Outputs{adaptive_avg_pool2d_backward(in[0], input)}; }}),
  };
}

// x of `shape` ([4, 3, 5, 6] unless said) with a mean far from zero (a one-pass variance would
// show), running statistics, weight and bias.
Inputs batch_norm_inputs_of(const Shape& shape, uint64_t seed) {
  const int64_t channels = shape[1];
  return {{add(random_f64(shape, seed, -2.0, 2.0), 3.0)},
          fixed(uniform({channels}, seed + 1)),
          fixed(uniform({channels}, seed + 2, 0.5, 2.0)),
          uniform({channels}, seed + 3, 0.5, 1.5),
          uniform({channels}, seed + 4)};
}

Inputs batch_norm_inputs(uint64_t seed) {
  return batch_norm_inputs_of({4, 3, 5, 6}, seed);
}

// batch_norm_add_relu's: batch norm's, then a residual of x's shape.
OpEntry::InputsFn batch_norm_add_relu_inputs(Shape shape) {
  return [shape](uint64_t seed) {
    Inputs in = batch_norm_inputs_of(shape, seed);
    in.push_back(uniform(shape, seed + 5, -1.5, 1.5));
    return in;
  };
}

// relu(batch_norm(x) + residual) in training, with the running statistics compared as outputs.
OpEntry batch_norm_add_relu_training(std::string name, Shape shape) {
  return {std::move(name), OpFamily::normalization, batch_norm_add_relu_inputs(std::move(shape)),
          [](const Args& in) {
            Tensor y =
                batch_norm_add_relu(in[0], in[5], in[1], in[2], in[3], in[4], true, 0.1, 1e-5);
            return Outputs{y, in[1], in[2]};
          }};
}

std::vector<OpEntry> normalization_entries() {
  return {
      // The running statistics are updated in place: they are compared as outputs.
      {"batch_norm training", OpFamily::normalization, batch_norm_inputs,
       [](const Args& in) {
         Tensor y = batch_norm(in[0], in[1], in[2], in[3], in[4], true, 0.1, 1e-5);
         return Outputs{y, in[1], in[2]};
       }},
      {"batch_norm inference", OpFamily::normalization, batch_norm_inputs,
       [](const Args& in) {
         return Outputs{batch_norm(in[0], in[1], in[2], in[3], in[4], false, 0.1, 1e-5)};
       }},
      {"batch_norm training without affine or running stats", OpFamily::normalization,
       [](uint64_t seed) {
         return Inputs{uniform({6, 4}, seed, -2.0, 3.0)};
       },
       [](const Args& in) {
         return Outputs{batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true)};
       }},
      {"batch_norm_relu training", OpFamily::normalization, batch_norm_inputs,
       [](const Args& in) {
         Tensor y = batch_norm_relu(in[0], in[1], in[2], in[3], in[4], true, 0.1, 1e-5);
         return Outputs{y, in[1], in[2]};
       }},
      {"batch_norm_relu inference", OpFamily::normalization, batch_norm_inputs,
       [](const Args& in) {
         return Outputs{batch_norm_relu(in[0], in[1], in[2], in[3], in[4], false, 0.1, 1e-5)};
       }},
      // The GPU splits a channel over several blocks when there are few channels: one channel
      // of 4 x 320 values, and 130 rows of [N, C] (walked channels-last), on the simulator too.
      {"batch_norm training, one channel over several blocks", OpFamily::normalization,
       [](uint64_t seed) {
         return batch_norm_inputs_of({4, 1, 16, 20}, seed);
       },
       [](const Args& in) {
         Tensor y = batch_norm(in[0], in[1], in[2], in[3], in[4], true, 0.1, 1e-5);
         return Outputs{y, in[1], in[2]};
       }},
      {"batch_norm_relu training on [N, C]", OpFamily::normalization,
       [](uint64_t seed) {
         return batch_norm_inputs_of({130, 3}, seed);
       },
       [](const Args& in) {
         Tensor y = batch_norm_relu(in[0], in[1], in[2], in[3], in[4], true, 0.1, 1e-5);
         return Outputs{y, in[1], in[2]};
       }},
      batch_norm_add_relu_training("batch_norm_add_relu training", {4, 3, 5, 6}),
      {"batch_norm_add_relu inference", OpFamily::normalization,
       batch_norm_add_relu_inputs({4, 3, 5, 6}),
       [](const Args& in) {
         return Outputs{
             batch_norm_add_relu(in[0], in[5], in[1], in[2], in[3], in[4], false, 0.1, 1e-5)};
       }},
      batch_norm_add_relu_training("batch_norm_add_relu training, odd shape", {7, 5, 9, 11}),
      batch_norm_add_relu_training("batch_norm_add_relu training, one channel", {4, 1, 16, 20}),
      batch_norm_add_relu_training("batch_norm_add_relu training, 1x1 spatial", {130, 3, 1, 1}),
      // Channels-last x: the GPU's passes walk [N * H * W, C] (40 channels: two tiles of the
      // kernels' channel blocks, the second ragged); the result keeps the layout everywhere.
      {"batch_norm training, channels-last", OpFamily::normalization,
       [](uint64_t seed) {
         return batch_norm_inputs_of({3, 40, 5, 7}, seed);
       },
       [](const Args& in) {
         Tensor y = batch_norm(nhwc(in[0]), in[1], in[2], in[3], in[4], true, 0.1, 1e-5);
         return Outputs{kept_nhwc("batch_norm", y), in[1], in[2]};
       }},
      {"batch_norm_relu inference, channels-last", OpFamily::normalization, batch_norm_inputs,
       [](const Args& in) {
         return Outputs{
             kept_nhwc("batch_norm_relu",
                       batch_norm_relu(nhwc(in[0]), in[1], in[2], in[3], in[4], false, 0.1, 1e-5))};
       }},
      {"batch_norm_add_relu training, channels-last", OpFamily::normalization,
       batch_norm_add_relu_inputs({7, 5, 9, 11}),
       [](const Args& in) {
         Tensor y = batch_norm_add_relu(nhwc(in[0]), nhwc(in[5]), in[1], in[2], in[3], in[4], true,
                                        0.1, 1e-5);
         return Outputs{kept_nhwc("batch_norm_add_relu", y), in[1], in[2]};
       }},
      {"layer_norm last dim, affine", OpFamily::normalization,
       [](uint64_t seed) {
         return Inputs{{add(random_f64({4, 5, 6}, seed), 2.0)},
                       uniform({6}, seed + 1, 0.5, 1.5),
                       uniform({6}, seed + 2)};
       },
       [](const Args& in) { return Outputs{layer_norm(in[0], {6}, in[1], in[2])}; }},
      {"layer_norm last two dims", OpFamily::normalization,
       [](uint64_t seed) {
         return Inputs{uniform({4, 3, 4}, seed)};
       },
       [](const Args& in) {
         return Outputs{layer_norm(in[0], {3, 4})};
       }},
      {"group_norm 2 groups, affine", OpFamily::normalization,
       [](uint64_t seed) {
         return Inputs{uniform({3, 4, 3, 5}, seed), uniform({4}, seed + 1, 0.5, 1.5),
                       uniform({4}, seed + 2)};
       },
       [](const Args& in) { return Outputs{group_norm(in[0], 2, in[1], in[2])}; }},
      // Running statistics are updated in place: compared after the step, as batch_norm's.
      {"instance_norm with running statistics", OpFamily::normalization,
       [](uint64_t seed) {
         return Inputs{uniform({3, 4, 3, 5}, seed), fixed(uniform({4}, seed + 1)),
                       fixed(uniform({4}, seed + 2, 0.5, 1.5)), uniform({4}, seed + 3, 0.5, 1.5),
                       uniform({4}, seed + 4)};
       },
       [](const Args& in) {
         Tensor y = instance_norm(in[0], in[1], in[2], in[3], in[4], true, 0.2, 1e-5);
         return Outputs{y, in[1], in[2]};
       }},
  };
}

std::vector<OpEntry> indexing_entries() {
  const auto image = [](uint64_t seed) { return Inputs{uniform({2, 3, 5, 4}, seed)}; };
  return {
      {"masked_select with a broadcast mask", OpFamily::indexing,
       [](uint64_t seed) {
         return Inputs{uniform({4, 6}, seed), mask({6}, seed + 1)};
       },
       [](const Args& in) { return Outputs{masked_select(in[0], in[1])}; }},
      not_differentiable({"nonzero and unique", OpFamily::indexing,
                          [](uint64_t seed) {
                            return Inputs{integer_valued({4, 5}, seed, -2, 3)};
                          },
                          [](const Args& in) {
                            const UniqueResult u = unique(in[0]);
                            return Outputs{nonzero(in[0]), u.values, u.inverse, u.counts};
                          }}),
      // pad and interpolate gather with index_select: they sit with the index ops.
      {"pad reflect and constant", OpFamily::indexing, image,
       [](const Args& in) {
         return Outputs{
             pad(pad(in[0], {2, 1, 0, 3}, PadMode::reflect), {1, -1}, PadMode::constant, 0.5)};
       }},
      {"pad replicate", OpFamily::indexing, image,
       [](const Args& in) {
         return Outputs{pad(in[0], {1, 2, 3, 0}, PadMode::replicate)};
       }},
      {"interpolate bilinear", OpFamily::indexing, image,
       [](const Args& in) {
         return Outputs{interpolate(
             in[0], {.size = std::array<int64_t, 2>{7, 3}, .mode = InterpolateMode::bilinear})};
       }},
      {"interpolate nearest, channels-last", OpFamily::indexing, image,
       [](const Args& in) {
         return Outputs{interpolate(nhwc(in[0]), {.scale_factor = std::array<double, 2>{1.5, 2}})};
       }},
      {"index_select dim 1", OpFamily::indexing,
       [](uint64_t seed) {
         return Inputs{uniform({4, 6, 3}, seed), indices({8}, 6, seed + 1)};
       },
       [](const Args& in) { return Outputs{index_select(in[0], 1, in[1])}; }},
      {"gather dim 1", OpFamily::indexing,
       [](uint64_t seed) {
         return Inputs{uniform({4, 6}, seed), indices({4, 9}, 6, seed + 1)};
       },
       [](const Args& in) { return Outputs{gather(in[0], 1, in[1])}; }},
      // Nine sources into six slots per row: colliding indices add up.
      {"scatter_add dim 1", OpFamily::indexing,
       [](uint64_t seed) {
         return Inputs{uniform({4, 6}, seed), indices({4, 9}, 6, seed + 1),
                       uniform({4, 9}, seed + 2)};
       },
       [](const Args& in) { return Outputs{scatter_add(in[0], 1, in[1], in[2])}; }},
      {"index_add dim 0", OpFamily::indexing,
       [](uint64_t seed) {
         return Inputs{uniform({5, 3}, seed), indices({8}, 5, seed + 1), uniform({8, 3}, seed + 2)};
       },
       [](const Args& in) { return Outputs{index_add(in[0], 0, in[1], in[2])}; }},
      {"embedding with padding_idx", OpFamily::indexing,
       [](uint64_t seed) {
         return Inputs{uniform({7, 4}, seed), indices({3, 5}, 7, seed + 1)};
       },
       [](const Args& in) { return Outputs{embedding(in[0], in[1], 1)}; }},
      // Integer in, integer out: one run per device, exact.
      {"one_hot",
       OpFamily::indexing,
       [](uint64_t seed) {
         return Inputs{indices({3, 4}, 6, seed)};
       },
       [](const Args& in) { return Outputs{one_hot(in[0], 6)}; },
       false,
       {DType::i64}},
  };
}

std::vector<OpEntry> joining_entries() {
  auto three = [](uint64_t seed) {
    return Inputs{uniform({2, 4}, seed), uniform({3, 4}, seed + 1), uniform({1, 4}, seed + 2)};
  };
  auto same = [](uint64_t seed) {
    return Inputs{uniform({3, 4}, seed), uniform({3, 4}, seed + 1), uniform({3, 4}, seed + 2)};
  };
  return {
      {"cat dim 0", OpFamily::joining, three,
       [](const Args& in) {
         return Outputs{cat({in[0], in[1], in[2]}, 0)};
       }},
      {"cat dim 1 of transposed parts", OpFamily::joining, three,
       [](const Args& in) {
         return Outputs{cat({in[0].t(), in[1].t(), in[2].t()}, 1)};
       }},
      {"stack dim 1", OpFamily::joining, same,
       [](const Args& in) {
         return Outputs{stack({in[0], in[1], in[2]}, 1)};
       }},
      {"split sizes 1 3 2 dim 1", OpFamily::joining,
       [](uint64_t seed) {
         return Inputs{uniform({4, 6}, seed)};
       },
       [](const Args& in) {
         return split(in[0], std::vector<int64_t>{1, 3, 2}, 1);
       }},
      {"chunk 3 dim 0", OpFamily::joining,
       [](uint64_t seed) {
         return Inputs{uniform({7, 3}, seed)};
       },
       [](const Args& in) { return chunk(in[0], 3, 0); }},
  };
}

std::vector<OpEntry> view_entries() {
  return {
      view("reshape",
           [](const Tensor& x) {
             return x.reshape({6, 20});
           }),
      view("view",
           [](const Tensor& x) {
             return x.view({24, 5});
           }),
      view("transpose", [](const Tensor& x) { return x.transpose(0, 2); }),
      view("permute",
           [](const Tensor& x) {
             return x.permute({1, 2, 0});
           }),
      view("slice with step", [](const Tensor& x) { return x.slice(1, 1, 6, 2); }),
      view("narrow", [](const Tensor& x) { return x.narrow(2, 1, 3); }),
      view("select", [](const Tensor& x) { return x.select(1, 4); }),
      view("unsqueeze", [](const Tensor& x) { return x.unsqueeze(1); }),
      view("squeeze", [](const Tensor& x) { return x.narrow(1, 2, 1).squeeze(1); }),
      view("flatten", [](const Tensor& x) { return x.flatten(1); }),
      view("expand",
           [](const Tensor& x) {
             return x.narrow(1, 0, 1).expand({4, 3, 5});
           }),
      view("contiguous of a transpose",
           [](const Tensor& x) { return x.transpose(0, 1).contiguous(); }),
      view("clone", [](const Tensor& x) { return x.clone(); }),
      // In place on a copy: each op rounds to the dtype, and the backward runs through them.
      {"in-place chain", OpFamily::view,
       [](uint64_t seed) {
         return Inputs{uniform({4, 6}, seed), uniform({6}, seed + 1)};
       },
       [](const Args& in) {
         Tensor y = in[0].clone();
         y.add_(in[1], 0.5).mul_(in[1]).relu_().clamp_(-0.25, 1.5).sub_(0.125);
         return Outputs{y};
       }},
  };
}

// The fused cells, N 3 and H 5, gates in [-2, 2): each activation away from saturation. The
// strided entry hands the kernels transposed gates and a state view (the op makes them contiguous).
std::vector<OpEntry> recurrent_entries() {
  return {
      {"fused_lstm_cell", OpFamily::recurrent,
       [](uint64_t seed) {
         return Inputs{uniform({3, 20}, seed, -2.0, 2.0), uniform({3, 20}, seed + 1, -2.0, 2.0),
                       uniform({3, 5}, seed + 2)};
       },
       [](const Args& in) {
         const LstmCellState s = fused_lstm_cell(in[0], in[1], in[2]);
         return Outputs{s.h, s.c};
       }},
      {"fused_lstm_cell of strided operands", OpFamily::recurrent,
       [](uint64_t seed) {
         return Inputs{uniform({8, 2}, seed, -2.0, 2.0), uniform({2, 8}, seed + 1, -2.0, 2.0),
                       uniform({2, 3}, seed + 2)};
       },
       [](const Args& in) {
         const LstmCellState s = fused_lstm_cell(in[0].t(), in[1], in[2].narrow(1, 1, 2));
         return Outputs{s.h, s.c};
       }},
      {"fused_gru_cell", OpFamily::recurrent,
       [](uint64_t seed) {
         return Inputs{uniform({3, 15}, seed, -2.0, 2.0), uniform({3, 15}, seed + 1, -2.0, 2.0),
                       uniform({3, 5}, seed + 2)};
       },
       [](const Args& in) { return Outputs{fused_gru_cell(in[0], in[1], in[2])}; }},
      // Only h' goes on: c's gradient reaches the node as SelectBackward's zeros.
      {"fused_lstm_cell h alone", OpFamily::recurrent,
       [](uint64_t seed) {
         return Inputs{uniform({2, 12}, seed, -2.0, 2.0), uniform({2, 12}, seed + 1, -2.0, 2.0),
                       uniform({2, 3}, seed + 2)};
       },
       [](const Args& in) { return Outputs{fused_lstm_cell(in[0], in[1], in[2]).h}; }},
  };
}

}  // namespace

const std::vector<OpEntry>& op_table() {
  static const std::vector<OpEntry> table = [] {
    std::vector<OpEntry> all;
    for (auto entries :
         {unary_entries, binary_entries, selection_entries, reduction_entries, softmax_entries,
          loss_entries, linalg_entries, convolution_entries, pooling_entries, normalization_entries,
          indexing_entries, joining_entries, recurrent_entries, view_entries})
      for (OpEntry& e : entries()) all.push_back(std::move(e));
    return all;
  }();
  return table;
}

}  // namespace kiln::testing
