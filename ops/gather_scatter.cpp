// Integer indexing: index_select, gather, scatter_add, index_add, one_hot and embedding. Every
// index is checked before anything is written; each backward sits under its forward and is the
// "transpose" op (select <-> add, gather <-> scatter_add).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/profiler.h"
#include "kiln/kernels/index.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"
#include "kiln/ops/pad.h"

namespace kiln {

namespace {

// The index as a contiguous i64 tensor of the same shape, once every value is in [0, size).
// `range` names what the index points into, for the error ("dim 1 of size 5").
Tensor checked_index(const char* op, const Tensor& index, int64_t size, const std::string& range) {
  Tensor idx = index.detach().to(DType::i64).contiguous();
  // A kernel cannot throw, so the indices are checked before any kernel uses them; only a
  // failure reads the offending value back.
  const int64_t bad = kernels_for<IndexKernels>(op, idx.device()).first_out_of_range(idx, size);
  KILN_CHECK(bad < 0, IndexError, "{}: index {} is out of range for {} (valid range [0, {}))", op,
             idx.reshape({-1}).select(0, bad).item<int64_t>(), range, size);
  return idx;
}

std::string dim_range(int64_t dim, int64_t size) {
  return fmt::format("dim {} of size {}", dim, size);
}

void require_at_least_1d(const char* op, const Tensor& t, const char* argument) {
  KILN_CHECK(t.dim() > 0, ShapeError,
             "{}: expected {} with at least 1 dim, got a 0-dim tensor ({})", op, argument,
             describe(t));
}

void require_same_dtype(const char* op, const Tensor& self, const Tensor& src) {
  KILN_CHECK(self.dtype() == src.dtype(), DTypeError,
             "{}: self {} and src {} must have the same dtype; convert src with .to()", op,
             describe(self), describe(src));
}

// Shared by gather and scatter_add: index has input's dims and fits in `of` outside `dim`.
void check_index_fits(const char* op, const Tensor& index, const Tensor& of, const char* of_name,
                      int64_t dim, bool including_dim) {
  KILN_CHECK(index.dim() == of.dim(), ShapeError, "{}: index {} must have as many dims as {} {}",
             op, describe(index), of_name, describe(of));
  for (int64_t k = 0; k < index.dim(); ++k) {
    if (k == dim && !including_dim) continue;
    KILN_CHECK(index.size(k) <= of.size(k), ShapeError,
               "{}: index {} is larger than {} {} in dim {} ({} > {})", op, describe(index),
               of_name, describe(of), k, index.size(k), of.size(k));
  }
}

struct IndexSelectBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor index;
  Shape input_shape;
  int64_t dim = 0;
  std::string name() const override { return "IndexSelectBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    return {index_add(zeros(input_shape, g.dtype(), g.device()), dim, index.unpack(*this), g)};
  }
  void release_saved() override { index.reset(); }
};

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  profiler::OpScope profile("index_select", {&x, &index});
  const char* op = "index_select";
  require_defined(op, x);
  require_defined(op, index, "index");
  require_index_dtype(op, index);
  const Device device = common_device(op, {&x, &index});
  require_at_least_1d(op, x, "an input");
  KILN_CHECK(index.dim() <= 1, ShapeError, "index_select: expected a 1-D index, got {}",
             describe(index));
  const int64_t d = wrap_dim(op, dim, x.dim());
  Tensor idx = checked_index(op, index, x.size(d), dim_range(d, x.size(d)));
  Shape out_shape = x.shape();
  out_shape[d] = idx.numel();
  Tensor out = empty(out_shape, x.dtype(), device);
  kernels_for<IndexKernels>(op, device).index_select(x.detach().contiguous(), d, idx, out);
  if (should_record({&x})) {
    auto node = std::make_shared<IndexSelectBackward>();
    node->index = SavedTensor(index);
    node->input_shape = x.shape();
    node->dim = d;
    record(out, node, {&x});
  }
  return out;
}

namespace {
struct GatherBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor index;
  Shape input_shape;
  int64_t dim = 0;
  std::string name() const override { return "GatherBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    return {scatter_add(zeros(input_shape, g.dtype(), g.device()), dim, index.unpack(*this), g)};
  }
  void release_saved() override { index.reset(); }
};
}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  profiler::OpScope profile("gather", {&x, &index});
  const char* op = "gather";
  require_defined(op, x);
  require_defined(op, index, "index");
  require_index_dtype(op, index);
  const Device device = common_device(op, {&x, &index});
  require_at_least_1d(op, x, "an input");
  const int64_t d = wrap_dim(op, dim, x.dim());
  check_index_fits(op, index, x, "the input", d, false);
  Tensor idx = checked_index(op, index, x.size(d), dim_range(d, x.size(d)));
  Tensor out = empty(index.shape(), x.dtype(), device);
  kernels_for<IndexKernels>("gather", device).gather(x.detach(), d, idx, out);
  if (should_record({&x})) {
    auto node = std::make_shared<GatherBackward>();
    node->index = SavedTensor(index);
    node->input_shape = x.shape();
    node->dim = d;
    record(out, node, {&x});
  }
  return out;
}

namespace {
// self's gradient passes through; src's is the gradient at the positions src was added into,
// zero where index did not reach (index may be smaller than src).
struct ScatterAddBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor index;
  Shape src_shape;
  int64_t dim = 0;
  std::string name() const override { return "ScatterAddBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor g_self = wants(0) ? g : Tensor();
    Tensor g_src;
    if (wants(1)) {
      Tensor picked = gather(g, dim, index.unpack(*this));
      if (picked.shape() == src_shape) {
        g_src = picked;
      } else {
        // Zeros after the picked part along each dim (pad's pairs run from the last dim).
        std::vector<int64_t> pads;
        for (int64_t k = picked.dim() - 1; k >= 0; --k) {
          pads.push_back(0);
          pads.push_back(src_shape[k] - picked.size(k));
        }
        g_src = pad(picked, pads);
      }
    }
    return {g_self, g_src};
  }
  void release_saved() override { index.reset(); }
  bool wants(size_t i) const { return i < next_edges.size() && next_edges[i].valid(); }
};
}  // namespace

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  profiler::OpScope profile("scatter_add", {&self, &index, &src});
  const char* op = "scatter_add";
  require_defined(op, self, "self");
  require_defined(op, index, "index");
  require_defined(op, src, "src");
  require_index_dtype(op, index);
  const Device device = common_device(op, {&self, &index, &src});
  require_same_dtype(op, self, src);
  require_at_least_1d(op, self, "self");
  const int64_t d = wrap_dim(op, dim, self.dim());
  check_index_fits(op, index, self, "self", d, false);
  check_index_fits(op, index, src, "src", d, true);
  Tensor idx = checked_index(op, index, self.size(d), dim_range(d, self.size(d)));
  Tensor out = self.detach().clone(MemoryFormat::contiguous);
  kernels_for<IndexKernels>("scatter_add_", device).scatter_add_(out, d, idx, src.detach());
  if (should_record({&self, &src})) {
    auto node = std::make_shared<ScatterAddBackward>();
    node->index = SavedTensor(index);
    node->src_shape = src.shape();
    node->dim = d;
    record(out, node, {&self, &src});
  }
  return out;
}

namespace {
struct IndexAddBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor index;
  int64_t dim = 0;
  std::string name() const override { return "IndexAddBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor g_self = wants(0) ? g : Tensor();
    Tensor g_src = wants(1) ? index_select(g, dim, index.unpack(*this)) : Tensor();
    return {g_self, g_src};
  }
  void release_saved() override { index.reset(); }
  bool wants(size_t i) const { return i < next_edges.size() && next_edges[i].valid(); }
};
}  // namespace

Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  profiler::OpScope profile("index_add", {&self, &index, &src});
  const char* op = "index_add";
  require_defined(op, self, "self");
  require_defined(op, index, "index");
  require_defined(op, src, "src");
  require_index_dtype(op, index);
  const Device device = common_device(op, {&self, &index, &src});
  require_same_dtype(op, self, src);
  require_at_least_1d(op, self, "self");
  KILN_CHECK(index.dim() <= 1, ShapeError, "index_add: expected a 1-D index, got {}",
             describe(index));
  const int64_t d = wrap_dim(op, dim, self.dim());
  Shape expected = self.shape();
  expected[d] = index.numel();
  KILN_CHECK(src.shape() == expected, ShapeError,
             "index_add: src {} must have shape {} (self {} with dim {} replaced by the {} "
             "indices)",
             describe(src), shape_str(expected), describe(self), d, index.numel());
  Tensor idx = checked_index(op, index, self.size(d), dim_range(d, self.size(d)));
  Tensor out = self.detach().clone(MemoryFormat::contiguous);
  kernels_for<IndexKernels>("index_add_", device)
      .index_add_(out, d, idx, src.detach().contiguous());
  if (should_record({&self, &src})) {
    auto node = std::make_shared<IndexAddBackward>();
    node->index = SavedTensor(index);
    node->dim = d;
    record(out, node, {&self, &src});
  }
  return out;
}

Tensor one_hot(const Tensor& labels, int64_t num_classes) {
  profiler::OpScope profile("one_hot", {&labels});
  const char* op = "one_hot";
  require_defined(op, labels, "labels");
  require_index_dtype(op, labels, "labels");
  KILN_CHECK(num_classes >= -1, ValueError,
             "one_hot: num_classes must be -1 (infer) or non-negative, got {}", num_classes);
  Tensor flat = labels.detach().to(DType::i64).contiguous();
  if (num_classes == -1) {
    KILN_CHECK(flat.numel() > 0, ValueError,
               "one_hot: cannot infer num_classes from empty labels {}; pass num_classes",
               describe(labels));
    Tensor host = flat.cpu();
    const int64_t* values = host.data<int64_t>();
    num_classes = *std::max_element(values, values + flat.numel()) + 1;
  }
  checked_index(op, flat, num_classes, fmt::format("{} classes", num_classes));
  Shape out_shape = labels.shape();
  out_shape.push_back(num_classes);
  Tensor out = zeros(out_shape, DType::i64, labels.device());
  kernels_for<IndexKernels>("one_hot", out.device()).one_hot(flat, out);
  return out;
}

namespace {
// The gradient rows add into the rows they were read from; rows read at padding_idx are zeroed
// first, so the padding row keeps its value during training.
struct EmbeddingBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor indices;
  Shape weight_shape;
  int64_t padding_idx = -1;
  std::string name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor idx = indices.unpack(*this).reshape({-1});
    Tensor rows = g.reshape({idx.numel(), weight_shape[1]});
    if (padding_idx >= 0)
      rows = masked_fill(rows, eq(idx, static_cast<double>(padding_idx)).unsqueeze(1), 0.0);
    return {index_add(zeros(weight_shape, g.dtype(), g.device()), 0, idx, rows)};
  }
  void release_saved() override { indices.reset(); }
};
}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  profiler::OpScope profile("embedding", {&weight, &indices});
  const char* op = "embedding";
  require_defined(op, weight, "weight");
  require_defined(op, indices, "indices");
  require_index_dtype(op, indices, "indices");
  const Device device = common_device(op, {&weight, &indices});
  KILN_CHECK(weight.dim() == 2, ShapeError,
             "embedding: expected a 2-D weight [num_embeddings, embedding_dim], got {}",
             describe(weight));
  const int64_t rows = weight.size(0), width = weight.size(1);
  KILN_CHECK(padding_idx == -1 || (padding_idx >= 0 && padding_idx < rows), IndexError,
             "embedding: padding_idx {} is out of range for a weight of {} rows (expected -1 for "
             "none, or 0 to {})",
             padding_idx, rows, rows - 1);
  Tensor idx = checked_index(op, indices, rows, fmt::format("a weight of {} rows", rows));
  Shape out_shape = indices.shape();
  out_shape.push_back(width);
  Tensor out = empty(out_shape, weight.dtype(), device);
  kernels_for<IndexKernels>(op, device)
      .index_select(weight.detach().contiguous(), 0, idx.reshape({idx.numel()}),
                    out.view({idx.numel(), width}));
  if (should_record({&weight})) {
    auto node = std::make_shared<EmbeddingBackward>();
    node->indices = SavedTensor(indices);
    node->weight_shape = weight.shape();
    node->padding_idx = padding_idx;
    record(out, node, {&weight});
  }
  return out;
}

}  // namespace kiln
