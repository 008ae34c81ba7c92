// nonzero, masked_select and unique (also along a dim): the values torch 1.13 gives for the same
// inputs (noted beside each), gradients of masked_select, empty results, broadcasting, the
// refusals.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;
using Catch::Contains;

TEST_CASE("nonzero and masked_select equal PyTorch's; masked_select is differentiable") {
  const Tensor x = tensor({{0.0, 1.5, 0.0}, {2.0, 0.0, -1.0}});
  // torch.nonzero(x).tolist() == [[0, 1], [1, 0], [1, 2]]
  CHECK(equal(nonzero(x), tensor({{0, 1}, {1, 0}, {1, 2}})));
  CHECK(nonzero(zeros({2, 3})).shape() == Shape{0, 2});
  CHECK(nonzero(full({}, 3.0)).shape() == Shape{1, 0});
  // torch.masked_select(x, x > 0).tolist() == [1.5, 2.0]
  Tensor leaf = x.detach().requires_grad_(true);
  const Tensor picked = masked_select(leaf, gt(x, 0.0));
  CHECK(equal(picked, tensor({1.5, 2.0})));
  mul(picked, tensor({3.0, 5.0})).sum().backward();
  CHECK(equal(leaf.grad(), tensor({{0.0, 3.0, 0.0}, {5.0, 0.0, 0.0}})));
  // A [3] mask broadcast over the rows: torch gives [0., 2., 0., -1.].
  CHECK(equal(masked_select(x, tensor(std::vector<int64_t>{1, 0, 1}, {3}).to(DType::boolean)),
              tensor({0.0, 0.0, 2.0, -1.0})));
  CHECK_THROWS_WITH(masked_select(x, x), Contains("masked_select: expected a bool mask"));
}

TEST_CASE("unique equals PyTorch's sorted values, inverse and counts") {
  // torch.unique(torch.tensor([3, 1, 3, 2, 1, 3]), return_inverse=True, return_counts=True)
  // == ([1, 2, 3], [2, 0, 2, 1, 0, 2], [2, 1, 3])
  const UniqueResult u = unique(tensor(std::vector<int64_t>{3, 1, 3, 2, 1, 3}, {2, 3}));
  CHECK(equal(u.values, tensor(std::vector<int64_t>{1, 2, 3}, {3})));
  CHECK(equal(u.inverse, tensor(std::vector<int64_t>{2, 0, 2, 1, 0, 2}, {2, 3})));
  CHECK(equal(u.counts, tensor(std::vector<int64_t>{2, 1, 3}, {3})));
  const UniqueResult f = unique(tensor({0.5, -1.0, 0.5}));
  CHECK(equal(f.values, tensor({-1.0, 0.5})));
  CHECK(equal(index_select(f.values, 0, f.inverse.reshape({-1})), tensor({0.5, -1.0, 0.5})));
  CHECK(unique(zeros({0})).values.numel() == 0);
}

TEST_CASE("unique along a dim equals PyTorch's: slices in lexicographic order") {
  const Tensor x = tensor(std::vector<int64_t>{1, 2, 1, 3, 0, 5, 0, 5, 1, 2, 1, 3}, {3, 4});
  // torch.unique(x, dim=0, return_inverse=True, return_counts=True)
  // == ([[0, 5, 0, 5], [1, 2, 1, 3]], [1, 0, 1], [1, 2])
  const UniqueResult rows = unique(x, 0);
  CHECK(equal(rows.values, tensor(std::vector<int64_t>{0, 5, 0, 5, 1, 2, 1, 3}, {2, 4})));
  CHECK(equal(rows.inverse, tensor(std::vector<int64_t>{1, 0, 1})));
  CHECK(equal(rows.counts, tensor(std::vector<int64_t>{1, 2})));
  // dim=1 == ([[1, 2, 3], [0, 5, 5], [1, 2, 3]], [0, 1, 0, 2], [2, 1, 1])
  const UniqueResult cols = unique(x, -1);
  CHECK(equal(cols.values, tensor(std::vector<int64_t>{1, 2, 3, 0, 5, 5, 1, 2, 3}, {3, 3})));
  CHECK(equal(cols.inverse, tensor(std::vector<int64_t>{0, 1, 0, 2})));
  CHECK(equal(cols.counts, tensor(std::vector<int64_t>{2, 1, 1})));
  // Random slices with repeats: the values and inverse give x back, the values are distinct.
  manual_seed(5);
  const Tensor base = randint(0, 3, {4, 5, 2}).to(DType::f32);
  const Tensor y = index_select(base, 0, tensor({2, 0, 2, 1, 3, 0, 0}));
  for (int64_t d = 0; d < 3; ++d) {
    INFO("dim " << d);
    const UniqueResult u = unique(y, d);
    CHECK(equal(index_select(u.values, d, u.inverse), y));
    CHECK(u.counts.sum().item<int64_t>() == y.size(d));
    CHECK(unique(u.values, d).values.size(d) == u.values.size(d));
  }
  CHECK(unique(y, 0).values.size(0) == 4);
  CHECK(unique(zeros({0, 3}), 0).values.shape() == Shape{0, 3});
  CHECK_THROWS_AS(unique(zeros({}), 0), ShapeError);
}
