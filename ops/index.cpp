// Joining and splitting: cat and stack copy into a new tensor and record a node that hands each
// input its window of the gradient; split and chunk return narrow() views, which record their own
// backward.
#include "kiln/ops/index.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/profiler.h"
#include "kiln/kernels/index.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/factories.h"

namespace kiln {

namespace {

bool any_requires_grad(const std::vector<Tensor>& tensors) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : tensors)
    if (t.requires_grad()) return true;
  return false;
}

// Checks a list input is non-empty, defined and on one device; returns the promoted dtype.
DType check_list(const char* op, const std::vector<Tensor>& tensors) {
  KILN_CHECK(!tensors.empty(), ValueError, "{}: expected a non-empty list of tensors", op);
  DType dtype = DType::boolean;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KILN_CHECK(t.defined(), ValueError, "{}: input {} is an undefined tensor", op, i);
    KILN_CHECK(t.device() == tensors[0].device(), DeviceError,
               "{}: expected all tensors on one device, got input 0 {} and input {} {}", op,
               describe(tensors[0]), i, describe(t));
    dtype = i == 0 ? t.dtype() : promote_types(dtype, t.dtype());
  }
  return dtype;
}

// PyTorch still accepts 1-D empty tensors (shape [0]) next to tensors of any shape in cat and
// skips them, for code written before empty tensors had a shape.
bool is_legacy_empty(const Tensor& t) {
  return t.dim() == 1 && t.numel() == 0;
}

// One window of the output per input: cat narrows it along dim, stack selects index i.
struct JoinBackward : Node {
  bool differentiable_backward() const override { return true; }
  struct Part {
    Shape shape;
    DType dtype;
    int64_t start = 0, length = 0;
    bool skipped = false;
  };
  int64_t dim = 0;
  bool is_stack = false;
  std::vector<Part> parts;
  std::string name() const override { return is_stack ? "StackBackward" : "CatBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    std::vector<Tensor> grads(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i >= next_edges.size() || !next_edges[i].valid()) continue;
      const Part& p = parts[i];
      if (p.skipped) {
        grads[i] = zeros(p.shape, p.dtype, g.device());
        continue;
      }
      Tensor window = is_stack ? g.select(dim, p.start) : g.narrow(dim, p.start, p.length);
      grads[i] = window.to(p.dtype);
    }
    return grads;
  }
};

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  profiler::OpScope profile("cat", {});
  const char* op = "cat";
  const DType dtype = check_list(op, tensors);
  size_t ref = 0;
  while (ref < tensors.size() && is_legacy_empty(tensors[ref])) ++ref;
  if (ref == tensors.size()) ref = 0;  // all legacy empties: the result is one of them
  const Tensor& first = tensors[ref];
  KILN_CHECK(first.dim() > 0, ShapeError,
             "cat: input {} is 0-dim ({}); zero-dimensional tensors cannot be concatenated, use "
             "stack or unsqueeze(0) first",
             ref, describe(first));
  const int64_t d = wrap_dim(op, dim, first.dim());

  Shape out_shape = first.shape();
  out_shape[d] = 0;
  auto node = std::make_shared<JoinBackward>();
  node->dim = d;
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    JoinBackward::Part part{t.shape(), t.dtype(), out_shape[d], 0, false};
    if (i != ref && is_legacy_empty(t) && first.dim() != 1) {
      part.skipped = true;
      node->parts.push_back(part);
      continue;
    }
    KILN_CHECK(t.dim() == first.dim(), ShapeError,
               "cat: input {} has {} dims (shape {}) but input {} has {} dims (shape {}); all "
               "inputs need the same number of dims",
               i, t.dim(), shape_str(t.shape()), ref, first.dim(), shape_str(first.shape()));
    for (int64_t k = 0; k < t.dim(); ++k) {
      KILN_CHECK(k == d || t.size(k) == first.size(k), ShapeError,
                 "cat: input {} has shape {} but input {} has shape {}; sizes must match except in "
                 "the cat dim {} (dim {}: {} vs {})",
                 i, shape_str(t.shape()), ref, shape_str(first.shape()), d, k, t.size(k),
                 first.size(k));
    }
    part.length = t.size(d);
    out_shape[d] += part.length;
    node->parts.push_back(part);
    parts.push_back(t.detach());
  }

  Tensor out = empty(out_shape, dtype, first.device());
  kernels_for<IndexKernels>("cat", out.device()).cat(parts, d, out);
  if (any_requires_grad(tensors)) record(out, node, tensors);
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  const char* op = "stack";
  const DType dtype = check_list(op, tensors);
  const Shape& shape = tensors[0].shape();
  const int64_t d = wrap_dim(op, dim, static_cast<int64_t>(shape.size()) + 1);
  auto node = std::make_shared<JoinBackward>();
  node->dim = d;
  node->is_stack = true;
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KILN_CHECK(t.shape() == shape, ShapeError,
               "stack: input {} has shape {} but input 0 has shape {}; stack needs equal shapes", i,
               shape_str(t.shape()), shape_str(shape));
    node->parts.push_back({t.shape(), t.dtype(), static_cast<int64_t>(i), 1, false});
    parts.push_back(t.detach().unsqueeze(d));
  }
  Shape out_shape = shape;
  out_shape.insert(out_shape.begin() + d, static_cast<int64_t>(tensors.size()));
  Tensor out = empty(out_shape, dtype, tensors[0].device());
  kernels_for<IndexKernels>("cat", out.device()).cat(parts, d, out);
  if (any_requires_grad(tensors)) record(out, node, tensors);
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  require_defined("split", x);
  KILN_CHECK(x.dim() > 0, ShapeError, "split: cannot split a 0-dim tensor ({})", describe(x));
  const int64_t d = wrap_dim("split", dim, x.dim());
  const int64_t n = x.size(d);
  KILN_CHECK(split_size > 0 || (split_size == 0 && n == 0), ValueError,
             "split: split_size must be positive (0 only for an empty dim), got {} for dim {} of "
             "size {}",
             split_size, d, n);
  std::vector<Tensor> pieces;
  if (n == 0) {
    pieces.push_back(x.narrow(d, 0, 0));
    return pieces;
  }
  for (int64_t start = 0; start < n; start += split_size)
    pieces.push_back(x.narrow(d, start, std::min(split_size, n - start)));
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  require_defined("split", x);
  KILN_CHECK(x.dim() > 0, ShapeError, "split: cannot split a 0-dim tensor ({})", describe(x));
  const int64_t d = wrap_dim("split", dim, x.dim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, ValueError, "split: sizes must be non-negative, got {}", shape_str(sizes));
    total += s;
  }
  KILN_CHECK(total == x.size(d), ShapeError,
             "split: sizes {} sum to {} but dim {} of the input {} has size {}", shape_str(sizes),
             total, d, describe(x), x.size(d));
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(x.narrow(d, start, s));
    start += s;
  }
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  require_defined("chunk", x);
  KILN_CHECK(chunks > 0, ValueError, "chunk: the number of chunks must be positive, got {}",
             chunks);
  KILN_CHECK(x.dim() > 0, ShapeError, "chunk: cannot chunk a 0-dim tensor ({})", describe(x));
  const int64_t d = wrap_dim("chunk", dim, x.dim());
  const int64_t n = x.size(d);
  // An empty dim still gives `chunks` (empty) pieces, as PyTorch.
  if (n == 0) return split(x, std::vector<int64_t>(chunks, 0), d);
  // Equal pieces of ceil(n / chunks); there may be fewer than `chunks` of them, as PyTorch.
  return split(x, (n + chunks - 1) / chunks, d);
}

}  // namespace kiln
