// One entry of Tensor::index and Tensor::index_put_, as libtorch's torch::indexing::TensorIndex:
// an integer (selects, dropping the dim), a Slice (a strided range, keeping it), None (a new dim of
// size one), Ellipsis (as many full dims as the others leave), or a tensor: a bool mask over the
// dims it covers, or integer indices (advanced indexing, broadcast against the other index
// tensors). t.index({Slice(1, None), 0, mask}) is t[1:, 0, mask] in Python.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln::indexing {

struct NoneIndex {};
struct EllipsisIndex {};
inline constexpr NoneIndex None{};
inline constexpr EllipsisIndex Ellipsis{};

// start:stop:step; an unset (None) bound is the start or end of the dim, negative ones count from
// the end and clamp to the dim, as Python's.
struct Slice {
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step) {}
  Slice(std::optional<int64_t> start, NoneIndex, std::optional<int64_t> step = std::nullopt)
      : start(start), step(step) {}
  Slice(NoneIndex, std::optional<int64_t> stop, std::optional<int64_t> step = std::nullopt)
      : stop(stop), step(step) {}
  Slice(NoneIndex, NoneIndex, std::optional<int64_t> step = std::nullopt) : step(step) {}
  std::optional<int64_t> start, stop, step;
};

class TensorIndex {
 public:
  enum class Kind { integer, slice, none, ellipsis, tensor };
  TensorIndex(int64_t i) : kind_(Kind::integer), integer_(i) {}  // NOLINT: implicit, as libtorch's
  TensorIndex(int i) : kind_(Kind::integer), integer_(i) {}      // NOLINT
  TensorIndex(Slice s) : kind_(Kind::slice), slice_(s) {}        // NOLINT
  TensorIndex(NoneIndex) : kind_(Kind::none) {}                  // NOLINT
  TensorIndex(EllipsisIndex) : kind_(Kind::ellipsis) {}          // NOLINT
  TensorIndex(Tensor t) : kind_(Kind::tensor), tensor_(std::move(t)) {}  // NOLINT

  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }
  // As Python writes it: "1", "1:", "::2", "None", "...", "tensor(bool [3, 4])".
  std::string str() const;

 private:
  Kind kind_;
  int64_t integer_ = 0;
  Slice slice_;
  Tensor tensor_;
};

}  // namespace kiln::indexing
