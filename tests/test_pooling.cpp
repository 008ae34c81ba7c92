// Pooling: max_pool2d (with indices), avg_pool2d and adaptive_avg_pool2d against plain-loop
// references, PyTorch's output-size and divisor rules checked by hand, the backward ops, gradchecks
// and error cases.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/ops/pooling.h"
#include "parity.h"

using namespace kiln;
using testing::check_close;
using testing::kExact;
using testing::random_f64;
using testing::tolerance;

namespace {

struct PoolParams {
  Pair kernel{2, 2}, stride{0, 0}, padding{0, 0}, dilation{1, 1};
  bool ceil_mode = false;
  bool count_include_pad = true;
};

struct Reference {
  Shape shape;
  std::vector<double> values;
  std::vector<int64_t> indices;  // max pooling only
};

// PyTorch's documented rule, written out with floating-point floor/ceil.
int64_t reference_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  double span = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

Pair effective_stride(const PoolParams& p) {
  return p.stride[0] == 0 ? p.kernel : p.stride;
}

// x as [N, C, H, W] (a 3-D x is one batch); each output scans every kernel tap.
Reference reference_pool(const Tensor& x, const PoolParams& p, bool is_max) {
  Shape s = x.shape();
  if (s.size() == 3) s.insert(s.begin(), 1);
  const int64_t planes = s[0] * s[1], H = s[2], W = s[3];
  Pair st = effective_stride(p);
  const int64_t OH =
      reference_size(H, p.kernel[0], st[0], p.padding[0], p.dilation[0], p.ceil_mode);
  const int64_t OW =
      reference_size(W, p.kernel[1], st[1], p.padding[1], p.dilation[1], p.ceil_mode);
  std::vector<double> v = x.tolist();
  Reference r;
  r.shape = x.shape();
  r.shape[r.shape.size() - 2] = OH;
  r.shape[r.shape.size() - 1] = OW;
  for (int64_t pl = 0; pl < planes; ++pl) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -std::numeric_limits<double>::infinity(), total = 0.0;
        int64_t best_index = -1, inside = 0, padded = 0;
        for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
          for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
            int64_t ih = oh * st[0] - p.padding[0] + kh * p.dilation[0];
            int64_t iw = ow * st[1] - p.padding[1] + kw * p.dilation[1];
            bool in_padded = ih < H + p.padding[0] && iw < W + p.padding[1];
            if (in_padded) ++padded;
            if (ih < 0 || iw < 0 || ih >= H || iw >= W) continue;
            double value = v[pl * H * W + ih * W + iw];
            ++inside;
            total += value;
            if (value > best) best = value, best_index = ih * W + iw;
          }
        }
        if (is_max) {
          r.values.push_back(best);
          r.indices.push_back(best_index);
        } else {
          int64_t divisor = p.count_include_pad ? padded : inside;
          r.values.push_back(inside == 0 ? 0.0 : total / static_cast<double>(divisor));
        }
      }
    }
  }
  return r;
}

Reference reference_adaptive(const Tensor& x, Pair out_size) {
  Shape s = x.shape();
  if (s.size() == 3) s.insert(s.begin(), 1);
  const int64_t planes = s[0] * s[1], H = s[2], W = s[3];
  std::vector<double> v = x.tolist();
  Reference r;
  r.shape = x.shape();
  r.shape[r.shape.size() - 2] = out_size[0];
  r.shape[r.shape.size() - 1] = out_size[1];
  auto start = [](int64_t i, int64_t in, int64_t out) {
    return static_cast<int64_t>(std::floor(static_cast<double>(i * in) / static_cast<double>(out)));
  };
  auto stop = [](int64_t i, int64_t in, int64_t out) {
    return static_cast<int64_t>(
        std::ceil(static_cast<double>((i + 1) * in) / static_cast<double>(out)));
  };
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < out_size[0]; ++oh)
      for (int64_t ow = 0; ow < out_size[1]; ++ow) {
        double total = 0.0;
        int64_t count = 0;
        for (int64_t ih = start(oh, H, out_size[0]); ih < stop(oh, H, out_size[0]); ++ih)
          for (int64_t iw = start(ow, W, out_size[1]); iw < stop(ow, W, out_size[1]); ++iw) {
            total += v[pl * H * W + ih * W + iw];
            ++count;
          }
        r.values.push_back(total / static_cast<double>(count));
      }
  return r;
}

// The loops' values as an f64 tensor of their shape, for check_close.
Tensor as_tensor(const Reference& r) {
  return tensor(r.values, r.shape);
}

// Values that are all different, with gaps far larger than gradcheck's step, so a max never ties.
Tensor distinct_values(const Shape& shape) {
  const int64_t n = shape_numel(shape);
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<double>((i * 7919) % n) / static_cast<double>(n) - 0.5;
  return tensor<double>(v, shape);
}

std::vector<PoolParams> max_pool_combos() {
  std::vector<PoolParams> combos;
  for (Pair kernel : {Pair{2, 2}, Pair{3, 2}, Pair{3, 3}})
    for (Pair stride : {Pair{0, 0}, Pair{1, 1}, Pair{2, 1}})
      for (Pair padding : {Pair{0, 0}, Pair{1, 1}, Pair{1, 0}})
        for (Pair dilation : {Pair{1, 1}, Pair{2, 1}, Pair{1, 2}})
          for (bool ceil_mode : {false, true}) {
            PoolParams p;
            p.kernel = kernel, p.stride = stride, p.padding = padding, p.dilation = dilation;
            p.ceil_mode = ceil_mode;
            combos.push_back(p);
          }
  return combos;
}

std::string describe_params(const PoolParams& p) {
  return fmt::format(
      "kernel ({}, {}) stride ({}, {}) padding ({}, {}) dilation ({}, {}) ceil {} "
      "count_include_pad {}",
      p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0],
      p.dilation[1], p.ceil_mode, p.count_include_pad);
}

}  // namespace

// ---- output sizes ----

TEST_CASE("pooling: output sizes follow PyTorch's ceil_mode rule") {
  Tensor x = zeros({1, 1, 4, 5});
  // floor((4 - 3) / 2) + 1 = 1 rows; ceil gives 2. Width 5: 2 either way.
  CHECK(max_pool2d(x, {3, 3}, {2, 2}).shape() == Shape{1, 1, 1, 2});
  CHECK(max_pool2d(x, {3, 3}, {2, 2}, {0, 0}, {1, 1}, true).shape() == Shape{1, 1, 2, 2});
  // Width 5, kernel 2, stride 2, padding 1: ceil would give 4 windows, but the 4th would start at
  // 5 = W + padding - 1 + 1, past the input and its left padding, so it is dropped.
  Tensor y = zeros({1, 1, 5, 5});
  CHECK(max_pool2d(y, {2, 2}, {2, 2}, {1, 1}, {1, 1}, true).shape() == Shape{1, 1, 3, 3});
  CHECK(avg_pool2d(y, {2, 2}, {2, 2}, {1, 1}, true).shape() == Shape{1, 1, 3, 3});
  // Width 6, kernel 2, stride 2, padding 1, ceil: windows start at -1, 1, 3, 5; all kept.
  CHECK(max_pool2d(zeros({1, 1, 6, 6}), {2, 2}, {2, 2}, {1, 1}, {1, 1}, true).shape() ==
        Shape{1, 1, 4, 4});
  // Dilation 2 stretches a 3-tap kernel to 5.
  CHECK(max_pool2d(zeros({1, 1, 7, 7}), {3, 3}, {1, 1}, {0, 0}, {2, 2}).shape() ==
        Shape{1, 1, 3, 3});
  // stride (0, 0) means stride = kernel_size.
  CHECK(avg_pool2d(zeros({2, 3, 8, 6}), {2, 3}).shape() == Shape{2, 3, 4, 2});
}

// ---- max_pool2d ----

TEST_CASE("pooling: max_pool2d matches a loop reference over padding, dilation and ceil_mode") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = random_f64({2, 3, 7, 8}, 11).to(dtype);
    for (const PoolParams& p : max_pool_combos()) {
      INFO(describe_params(p) << " " << dtype_name(dtype));
      MaxPool2dResult r =
          max_pool2d_with_indices(x, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
      Reference want = reference_pool(x, p, true);
      check_close(r.values, as_tensor(want), kExact);
      CHECK(r.values.dtype() == dtype);
      CHECK(r.indices.dtype() == DType::i64);
      std::vector<double> idx = r.indices.tolist();
      for (size_t i = 0; i < idx.size(); ++i)
        CHECK(static_cast<int64_t>(idx[i]) == want.indices[i]);
    }
  }
}

TEST_CASE("pooling: max_pool2d on non-contiguous and 3-D inputs") {
  Tensor base = random_f64({2, 3, 9, 8}, 12);
  PoolParams p;
  p.kernel = {3, 2}, p.stride = {2, 2}, p.padding = {1, 1}, p.ceil_mode = true;
  Tensor transposed = base.transpose(2, 3);  // [2, 3, 8, 9]
  Tensor sliced = base.slice(3, 1, 8, 2);    // [2, 3, 9, 4]
  Tensor expanded = random_f64({1, 3, 6, 6}, 13).expand({2, 3, 6, 6});
  for (const Tensor& x : {transposed, sliced, expanded, base.select(0, 1)}) {
    INFO(shape_str(x.shape()));
    check_close(max_pool2d(x, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode),
                as_tensor(reference_pool(x, p, true)), kExact);
  }
}

TEST_CASE("pooling: max_pool2d propagates NaN and keeps the first of tied maxima") {
  // Windows {1, 5, NaN, 0} and {5, 2, 5, 3}: NaN wins the first, the first 5 the second.
  Tensor x = tensor<double>({1, 5, 5, 2, std::nan(""), 0, 5, 3}, {1, 1, 2, 4});
  MaxPool2dResult r = max_pool2d_with_indices(x, {2, 2});
  std::vector<double> v = r.values.tolist();
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == 5.0);
  CHECK(r.indices.tolist() == std::vector<double>{4, 2});
}

TEST_CASE("pooling: max_pool2d on wide rows with tied maxima equals the loop reference") {
  // Wide enough that most windows lie inside the row (the kernel's tap-by-tap blocks of 64 cells,
  // one block and a part of one at 37, three at 150) and a few values only, so most windows hold
  // ties: the first maximum must win there as at the edges. bf16 goes into the kernel as it is.
  for (const Shape& shape : {Shape{2, 2, 9, 37}, Shape{1, 2, 5, 150}}) {
    Tensor x = floor(mul(random_f64(shape, 15), 3.0));
    for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
      for (const PoolParams& p : max_pool_combos()) {
        INFO(describe_params(p) << " " << dtype_name(dtype) << " " << shape_str(shape));
        MaxPool2dResult r = max_pool2d_with_indices(x.to(dtype), p.kernel, p.stride, p.padding,
                                                    p.dilation, p.ceil_mode);
        Reference want = reference_pool(x, p, true);
        CHECK(r.values.dtype() == dtype);
        check_close(r.values.to(DType::f64), as_tensor(want), kExact);
        std::vector<double> idx = r.indices.tolist();
        REQUIRE(idx.size() == want.indices.size());
        for (size_t i = 0; i < idx.size(); ++i)
          CHECK(static_cast<int64_t>(idx[i]) == want.indices[i]);
      }
    }
  }
  // A NaN inside the row wins its windows, and of two NaNs in one window the later one.
  std::vector<double> row(12, 1.0);
  row[5] = std::nan(""), row[6] = 9.0, row[7] = std::nan("");
  for (DType dtype : {DType::f64, DType::bf16}) {
    INFO(dtype_name(dtype));
    const Tensor x = tensor<double>(row, {1, 1, 1, 12}).to(dtype);
    MaxPool2dResult r = max_pool2d_with_indices(x, {1, 3}, {1, 1});
    const std::vector<double> idx = r.indices.tolist();
    CHECK(idx == std::vector<double>{0, 1, 2, 5, 5, 7, 7, 7, 8, 9});
    const std::vector<double> v = r.values.tolist();
    CHECK(v[2] == 1.0);
    CHECK(std::isnan(v[3]));
    CHECK(std::isnan(v[6]));
    CHECK(v[8] == 1.0);
  }
}

TEST_CASE("pooling: max_pool2d in f16 and bf16 picks the same values as in f32") {
  Tensor x = random_f64({2, 2, 6, 7}, 14).to(DType::f32);
  Tensor want = max_pool2d(x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
  for (DType dtype : {DType::f16, DType::bf16}) {
    Tensor got = max_pool2d(x.to(dtype), {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
    CHECK(got.dtype() == dtype);
    CHECK(got.tolist() == want.to(dtype).tolist());
  }
}

TEST_CASE("pooling: max_pool2d with an empty batch") {
  Tensor x = zeros({0, 3, 5, 5}).requires_grad_();
  Tensor y = max_pool2d(x, {2, 2});
  CHECK(y.shape() == Shape{0, 3, 2, 2});
  sum(y).backward();
  CHECK(x.grad().shape() == Shape{0, 3, 5, 5});
}

TEST_CASE("pooling: max_pool2d_backward adds the gradients of overlapping windows") {
  // Stride 1 over [[0, 1, 2], [3, 9, 5], [6, 7, 8]]: the centre 9 is the max of all four windows.
  Tensor x = tensor<double>({0, 1, 2, 3, 9, 5, 6, 7, 8}, {1, 1, 3, 3});
  MaxPool2dResult r = max_pool2d_with_indices(x, {2, 2}, {1, 1});
  Tensor g = tensor<double>({1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor gx = max_pool2d_backward(g, r.indices, x.shape());
  CHECK(gx.tolist() == std::vector<double>{0, 0, 0, 0, 10, 0, 0, 0, 0});
}

TEST_CASE("pooling: max_pool2d_backward in bf16 is the f32 sums rounded once") {
  // Few distinct values, so that overlapping windows share maxima and their gradients add; a NaN
  // gradient reaches its input; the 3-D form too.
  Tensor x = floor(mul(random_f64({2, 3, 9, 11}, 16), 3.0)).to(DType::bf16);
  Tensor g_values = random_f64({2, 3, 12, 14}, 17);
  for (const PoolParams& p : max_pool_combos()) {
    INFO(describe_params(p));
    MaxPool2dResult r =
        max_pool2d_with_indices(x, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
    const Shape out = r.values.shape();
    Tensor g = g_values.slice(2, 0, out[2]).slice(3, 0, out[3]).to(DType::bf16).contiguous();
    if (out[2] * out[3] > 1) g.view({-1}).select(0, 1).fill_(std::nan(""));
    const Tensor got = max_pool2d_backward(g, r.indices, x.shape());
    CHECK(got.dtype() == DType::bf16);
    const Tensor want = max_pool2d_backward(g.to(DType::f32), r.indices, x.shape());
    const std::vector<double> a = got.tolist(), b = want.to(DType::bf16).tolist();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i)
      CHECK(((std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i]));
  }
  MaxPool2dResult r = max_pool2d_with_indices(x.select(0, 0), {3, 3}, {2, 2}, {1, 1});
  const Tensor g = ones(r.values.shape(), DType::bf16);
  CHECK(max_pool2d_backward(g, r.indices, x.select(0, 0).shape()).tolist() ==
        max_pool2d_backward(g.to(DType::f32), r.indices, x.select(0, 0).shape())
            .to(DType::bf16)
            .tolist());
}

TEST_CASE("pooling: max_pool2d gradcheck") {
  for (const PoolParams& p : max_pool_combos()) {
    if (p.kernel[0] != 3 || p.dilation[0] != 2 || p.stride[0] == 1) continue;
    INFO(describe_params(p));
    CHECK_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          return max_pool2d(in[0], p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
        },
        {distinct_values({2, 2, 7, 6})});
  }
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return max_pool2d(in[0], {2, 2}, {1, 1});
      },
      {distinct_values({3, 5, 4})});
}

// ---- avg_pool2d ----

TEST_CASE("pooling: avg_pool2d divisors by hand") {
  // One row [1, 2, 3, 4], kernel width 3, stride 2, padding 1, ceil_mode: windows [-1, 2),
  // [1, 4), [3, 5). The last overhangs the padded input (which ends at 5) by nothing, but its
  // padded length is 2, not 3: PyTorch clips the divisor to the padded input.
  Tensor x = tensor<double>({1, 2, 3, 4}, {1, 1, 1, 4});
  CHECK(avg_pool2d(x, {1, 3}, {1, 2}, {0, 1}, true, true).tolist() ==
        std::vector<double>{1.0, 3.0, 2.0});
  CHECK(avg_pool2d(x, {1, 3}, {1, 2}, {0, 1}, true, false).tolist() ==
        std::vector<double>{1.5, 3.0, 4.0});
  CHECK(avg_pool2d(x, {1, 3}, {1, 2}, {0, 1}, false, true).tolist() ==
        std::vector<double>{1.0, 3.0});
  // Without padding, a ceil_mode window past the input divides by what it covers: [3, 4) / 1.
  Tensor row3 = tensor<double>({1, 2, 3}, {1, 1, 1, 3});
  CHECK(avg_pool2d(row3, {1, 2}, {1, 2}, {0, 0}, true, true).tolist() ==
        std::vector<double>{1.5, 3.0});
}

TEST_CASE("pooling: avg_pool2d matches a loop reference") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = random_f64({2, 3, 7, 8}, 21).to(dtype);
    for (PoolParams p : max_pool_combos()) {
      if (p.dilation != Pair{1, 1}) continue;
      for (bool include : {true, false}) {
        p.count_include_pad = include;
        INFO(describe_params(p) << " " << dtype_name(dtype));
        Tensor y = avg_pool2d(x, p.kernel, p.stride, p.padding, p.ceil_mode, p.count_include_pad);
        CHECK(y.dtype() == dtype);
        check_close(y, as_tensor(reference_pool(x, p, false)), tolerance(dtype));
      }
    }
  }
}

TEST_CASE("pooling: avg_pool2d on non-contiguous, 3-D and 16-bit inputs") {
  Tensor base = random_f64({2, 3, 9, 8}, 22);
  PoolParams p;
  p.kernel = {3, 3}, p.stride = {2, 1}, p.padding = {1, 1}, p.ceil_mode = true;
  p.count_include_pad = false;
  for (const Tensor& x : {base.transpose(2, 3), base.slice(2, 0, 9, 2), base.select(0, 0),
                          random_f64({1, 3, 5, 5}, 23).expand({4, 3, 5, 5})}) {
    INFO(shape_str(x.shape()));
    check_close(avg_pool2d(x, p.kernel, p.stride, p.padding, p.ceil_mode, p.count_include_pad),
                as_tensor(reference_pool(x, p, false)), tolerance(DType::f64));
  }
  for (DType dtype : {DType::f16, DType::bf16}) {
    Tensor x = base.to(dtype);
    Tensor y = avg_pool2d(x, p.kernel, p.stride, p.padding, p.ceil_mode, p.count_include_pad);
    CHECK(y.dtype() == dtype);
    check_close(y, as_tensor(reference_pool(x, p, false)), tolerance(dtype));
  }
}

TEST_CASE("pooling: avg_pool2d gradcheck") {
  for (PoolParams p : max_pool_combos()) {
    if (p.dilation != Pair{1, 1} || p.kernel[0] != 3 || p.stride[0] == 1) continue;
    for (bool include : {true, false}) {
      p.count_include_pad = include;
      INFO(describe_params(p));
      CHECK_GRADCHECK(
          [&](const std::vector<Tensor>& in) {
            return avg_pool2d(in[0], p.kernel, p.stride, p.padding, p.ceil_mode,
                              p.count_include_pad);
          },
          {random_f64({2, 2, 7, 6}, 24)});
    }
  }
}

TEST_CASE("pooling: avg_pool2d_backward spreads the gradient with the forward's divisors") {
  Tensor g = tensor<double>({6, 6, 6}, {1, 1, 1, 3});
  Tensor gx = avg_pool2d_backward(g, {1, 1, 1, 4}, {1, 3}, {1, 2}, {0, 1}, true, true);
  // Windows [0, 2) / 3, [1, 4) / 3, [3, 4) / 2.
  CHECK(gx.tolist() == std::vector<double>{2, 4, 2, 5});
}

// ---- adaptive_avg_pool2d ----

TEST_CASE("pooling: adaptive_avg_pool2d matches a loop reference") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = random_f64({2, 3, 7, 10}, 31).to(dtype);
    for (Pair out : {Pair{1, 1}, Pair{3, 4}, Pair{7, 10}, Pair{5, 3}, Pair{9, 13}, Pair{2, 7}}) {
      INFO(out[0] << "x" << out[1] << " " << dtype_name(dtype));
      Tensor y = adaptive_avg_pool2d(x, out);
      CHECK(y.dtype() == dtype);
      check_close(y, as_tensor(reference_adaptive(x, out)), tolerance(dtype));
    }
  }
}

TEST_CASE("pooling: adaptive_avg_pool2d windows by hand") {
  // Width 5 into 3: [0, 2), [1, 4), [3, 5).
  Tensor x = tensor<double>({1, 2, 3, 4, 5}, {1, 1, 5});
  CHECK(adaptive_avg_pool2d(x, {1, 3}).tolist() == std::vector<double>{1.5, 3.0, 4.5});
  // A global average pool.
  CHECK(adaptive_avg_pool2d(x, {1, 1}).tolist() == std::vector<double>{3.0});
}

TEST_CASE("pooling: adaptive_avg_pool2d on non-contiguous, empty-batch and 16-bit inputs") {
  Tensor base = random_f64({2, 3, 9, 8}, 32);
  for (const Tensor& x : {base.transpose(2, 3), base.slice(3, 1, 8, 3), base.select(0, 1)}) {
    INFO(shape_str(x.shape()));
    check_close(adaptive_avg_pool2d(x, {4, 3}), as_tensor(reference_adaptive(x, {4, 3})),
                tolerance(DType::f64));
  }
  CHECK(adaptive_avg_pool2d(zeros({0, 3, 4, 4}), {2, 2}).shape() == Shape{0, 3, 2, 2});
  Tensor h = base.to(DType::bf16);
  Tensor y = adaptive_avg_pool2d(h, {4, 3});
  CHECK(y.dtype() == DType::bf16);
  check_close(y, as_tensor(reference_adaptive(h, {4, 3})), tolerance(DType::bf16));
}

TEST_CASE("pooling: adaptive_avg_pool2d gradcheck") {
  for (Pair out : {Pair{3, 4}, Pair{1, 1}, Pair{8, 5}}) {
    INFO(out[0] << "x" << out[1]);
    CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], out); },
                    {random_f64({2, 2, 5, 7}, 33)});
  }
}

// ---- errors ----

TEST_CASE("pooling: padding over half the kernel is a ValueError") {
  Tensor x = zeros({1, 1, 6, 6});
  CHECK_THROWS_AS(max_pool2d(x, {2, 2}, {2, 2}, {2, 0}), ValueError);
  CHECK_THROWS_WITH(max_pool2d(x, {2, 2}, {2, 2}, {2, 0}),
                    Catch::Contains("max_pool2d") && Catch::Contains("half of kernel_size"));
  CHECK_THROWS_AS(avg_pool2d(x, {3, 3}, {1, 1}, {0, 2}), ValueError);
  CHECK_THROWS_WITH(avg_pool2d(x, {3, 3}, {1, 1}, {0, 2}), Catch::Contains("avg_pool2d"));
  CHECK_THROWS_AS(max_pool2d(x, {2, 2}, {2, 2}, {-1, 0}), ValueError);
}

TEST_CASE("pooling: bad kernel, stride and dilation are ValueErrors") {
  Tensor x = zeros({1, 1, 6, 6});
  CHECK_THROWS_AS(max_pool2d(x, {0, 2}), ValueError);
  CHECK_THROWS_WITH(max_pool2d(x, {0, 2}),
                    Catch::Contains("max_pool2d") && Catch::Contains("kernel_size"));
  CHECK_THROWS_AS(max_pool2d(x, {2, 2}, {-1, 1}), ValueError);
  CHECK_THROWS_AS(max_pool2d(x, {2, 2}, {0, 1}), ValueError);
  CHECK_THROWS_WITH(max_pool2d(x, {2, 2}, {0, 1}), Catch::Contains("stride"));
  CHECK_THROWS_AS(max_pool2d(x, {2, 2}, {1, 1}, {0, 0}, {0, 1}), ValueError);
  CHECK_THROWS_WITH(max_pool2d(x, {2, 2}, {1, 1}, {0, 0}, {0, 1}), Catch::Contains("dilation"));
  CHECK_THROWS_AS(adaptive_avg_pool2d(x, {-1, 2}), ValueError);
  CHECK_THROWS_WITH(adaptive_avg_pool2d(x, {-1, 2}), Catch::Contains("adaptive_avg_pool2d"));
}

TEST_CASE("pooling: wrong ranks, empty planes and too-small inputs are ShapeErrors") {
  CHECK_THROWS_AS(max_pool2d(zeros({6, 6}), {2, 2}), ShapeError);
  CHECK_THROWS_WITH(max_pool2d(zeros({6, 6}), {2, 2}),
                    Catch::Contains("max_pool2d") && Catch::Contains("[6, 6]"));
  CHECK_THROWS_AS(avg_pool2d(zeros({1, 1, 1, 6, 6}), {2, 2}), ShapeError);
  CHECK_THROWS_AS(adaptive_avg_pool2d(zeros({1, 0, 4, 4}), {2, 2}), ShapeError);
  CHECK_THROWS_WITH(adaptive_avg_pool2d(zeros({1, 0, 4, 4}), {2, 2}),
                    Catch::Contains("adaptive_avg_pool2d") && Catch::Contains("non-zero"));
  CHECK_THROWS_AS(max_pool2d(zeros({1, 1, 2, 2}), {3, 3}, {1, 1}, {1, 1}, {2, 2}), ShapeError);
  CHECK_THROWS_WITH(max_pool2d(zeros({1, 1, 2, 2}), {3, 3}), Catch::Contains("too small"));
}

TEST_CASE("pooling: integer inputs are DTypeErrors") {
  CHECK_THROWS_AS(max_pool2d(zeros({1, 1, 4, 4}, DType::i64), {2, 2}), DTypeError);
  CHECK_THROWS_WITH(avg_pool2d(zeros({1, 1, 4, 4}, DType::i32), {2, 2}),
                    Catch::Contains("avg_pool2d") && Catch::Contains("i32"));
}

TEST_CASE("pooling: backward ops reject mismatched shapes") {
  Tensor g = zeros({1, 1, 2, 2}, DType::f64);
  Tensor idx = zeros({1, 1, 2, 2}, DType::i64);
  CHECK_THROWS_AS(max_pool2d_backward(g, zeros({1, 1, 3, 2}, DType::i64), {1, 1, 4, 4}),
                  ShapeError);
  CHECK_THROWS_WITH(max_pool2d_backward(g, zeros({1, 1, 3, 2}, DType::i64), {1, 1, 4, 4}),
                    Catch::Contains("max_pool2d_backward") && Catch::Contains("indices"));
  CHECK_THROWS_AS(max_pool2d_backward(g, idx.to(DType::i32), {1, 1, 4, 4}), DTypeError);
  CHECK_THROWS_AS(max_pool2d_backward(g, idx, {1, 2, 4, 4}), ShapeError);
  CHECK_THROWS_AS(avg_pool2d_backward(g, {1, 1, 6, 6}, {2, 2}), ShapeError);
  CHECK_THROWS_WITH(avg_pool2d_backward(g, {1, 1, 6, 6}, {2, 2}),
                    Catch::Contains("avg_pool2d_backward") && Catch::Contains("[1, 1, 3, 3]"));
  CHECK_THROWS_AS(adaptive_avg_pool2d_backward(g, {1, 4, 4}), ShapeError);
  CHECK_THROWS_WITH(adaptive_avg_pool2d_backward(g, {1, 4, 4}),
                    Catch::Contains("adaptive_avg_pool2d_backward"));
}
