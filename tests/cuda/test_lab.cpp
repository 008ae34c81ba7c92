// The kernel lab's checks on the GPU (kernels/cuda/lab/): for each family, version 0 (the library)
// against the family's CPU reference, then every other version against version 0, on sizes that
// include ragged ones (not multiples of any tile, rows not whole float4s, pointers off 16 bytes),
// with the tolerances of kiln-bench lab. Each version's outputs, and the partials it leaves in its
// workspace for a later pass or block, are filled with NaN before every run, so an element or a
// partial it leaves unwritten fails (the version before it would otherwise have left the same
// partial in the same place).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/kernels/cuda/lab/gemm/reference.h"
#include "kiln/kernels/cuda/lab/gemm/versions.h"
#include "kiln/kernels/cuda/lab/gemm_tc/versions.h"
#include "kiln/kernels/cuda/lab/layernorm/reference.h"
#include "kiln/kernels/cuda/lab/layernorm/versions.h"
#include "kiln/kernels/cuda/lab/reduction/reference.h"
#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/versions.h"
#include "kiln/kernels/cuda/lab/softmax/reference.h"
#include "kiln/kernels/cuda/lab/softmax/versions.h"
#include "kiln/kernels/cuda/lab_routes.h"
#include "kiln/kiln.h"
#include "lab_checks.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::host_floats;
using kiln::testing::require_close;

namespace {

const Device kGpu = Device::cuda(0);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void poison(Tensor t) {
  t.fill_(kNaN);
}

// Every byte 0xFF, so every float of a workspace region reads as a NaN.
void poison_bytes(Tensor bytes) {
  bytes.fill_(0xFF);
}

// A tensor of `count` floats whose first element sits 4 bytes past a 16-byte boundary when
// `misaligned`, so the versions must take their scalar paths.
Tensor floats(int64_t count, bool misaligned) {
  if (!misaligned) return empty({count}, DType::f32, kGpu);
  return empty({count + 1}, DType::f32, kGpu).slice(0, 1, count + 1);
}

}  // namespace

namespace {

struct ReductionShape {
  int64_t rows, cols;
  bool misaligned;
};

void check_reduction(const ReductionShape& s) {
  INFO("rows " << s.rows << ", cols " << s.cols << (s.misaligned ? ", misaligned" : ""));
  // Integers in {-1, 0, 1}: every order of addition is exact.
  Tensor x = floats(s.rows * s.cols, s.misaligned);
  x.copy_(randint(-1, 2, {s.rows * s.cols}, DType::i32, kGpu));
  const Tensor out = empty({s.rows}, DType::f32, kGpu);
  const Tensor workspace = zeros(
      {static_cast<int64_t>(lab::reduction_workspace_bytes(s.rows, s.cols))}, DType::u8, kGpu);
  const lab::ReductionArgs args{x.data<float>(), out.data<float>(), s.rows, s.cols,
                                workspace.data_ptr()};
  // The partials, past v5's counters (which must stay as v5 leaves them, at zero).
  const lab::reduction::WorkspaceLayout layout = lab::reduction::workspace_layout(s.rows, s.cols);
  const Tensor partials = workspace.slice(0, static_cast<int64_t>(layout.first_offset),
                                          static_cast<int64_t>(layout.bytes));
  const std::vector<float> host_x = host_floats(x);
  std::vector<float> expected(static_cast<size_t>(s.rows));
  lab::reduction::row_sums_reference(host_x.data(), expected.data(), s.rows, s.cols);
  for (const lab::ReductionVersion& version : lab::reduction_versions()) {
    // Twice: v5's counters must be back at zero after the first run.
    for (int run = 0; run < 2; ++run) {
      poison(out);
      poison_bytes(partials);
      version.run(args);
      require_close(host_floats(out), expected, 0.0, 0.0, version.name);
    }
  }
}

}  // namespace

TEST_CASE("lab reduction: every version sums as CUB does, bit for bit") {
  // {2100, 5}: more (row, split) pairs than v4's and v5's grid of kTargetBlocks, so their blocks
  // loop over several.
  const ReductionShape shapes[] = {{1, 1, false},    {1, 1000, false},  {1, 70001, false},
                                   {3, 4099, false}, {1000, 33, false}, {257, 1024, false},
                                   {9, 4096, true},  {2100, 5, false}};
  for (const ReductionShape& s : shapes) check_reduction(s);
}

// Millions of elements, each length near the least that gives its tiling (tiling.h): past 1024^2,
// v3's three passes with a ragged block at each (2^20 + 5: 1025, 2, 1 partials; v1 and v2: 4097,
// 17, 1); 2^21, three passes of whole blocks in v1-v3 (8192, 32, 1 and 2048, 2, 1) and 512 splits
// in v4 and v5; past 17 x 4096 columns, several rows each split 18 ways by v4 and v5, in three
// passes per row by v1 and v2. Left out of the compute-sanitizer runs (scripts/gpu-check.sh filters
// [heavy]); the cases above reach every kernel too.
TEST_CASE("lab reduction: long vectors and rows", "[heavy]") {
  const ReductionShape shapes[] = {
      {1, (1 << 20) + 5, false}, {1, 1 << 21, false}, {9, 70000, false}};
  for (const ReductionShape& s : shapes) check_reduction(s);
}

TEST_CASE("lab softmax: every version matches kiln's kernel") {
  struct Shape {
    int64_t rows, cols;
    bool misaligned;
  };
  const Shape shapes[] = {{1, 1, false},       {7, 33, false},    {128, 1000, false},
                          {64, 4096, false},   {5, 16385, false}, {3, 20001, false},
                          {1000, 1023, false}, {33, 4096, true}};
  for (const Shape& s : shapes) {
    INFO("rows " << s.rows << ", cols " << s.cols << (s.misaligned ? ", misaligned" : ""));
    Tensor x = floats(s.rows * s.cols, s.misaligned);
    x.copy_(uniform({s.rows * s.cols}, -5, 5, DType::f32, kGpu));
    const Tensor y = floats(s.rows * s.cols, s.misaligned);
    const lab::SoftmaxArgs args{x.data<float>(), y.data<float>(), s.rows, s.cols};
    const std::vector<float> host_x = host_floats(x);
    std::vector<float> expected(host_x.size());
    lab::softmax::softmax_reference(host_x.data(), expected.data(), s.rows, s.cols);
    std::vector<float> v0;
    const double rtol = 2e-6 * std::sqrt(static_cast<double>(s.cols));
    for (const lab::SoftmaxVersion& version : lab::softmax_versions()) {
      poison(y);
      version.run(args);
      if (v0.empty()) {
        v0 = host_floats(y);
        require_close(v0, expected, 1e-10, 1e-5, "v0 against the CPU reference");
      } else {
        require_close(host_floats(y), v0, 1e-10, rtol, version.name);
      }
    }
  }
}

// Masked elements (-inf), as attention masks make them: the first 300 of each row, so that every
// thread's and every lane's first element is masked in v2-v4 (the online update once took
// expf(-inf - -inf) = NaN there), and every seventh element after. Rows of 1000, 4096 (v4 in
// registers) and 20001 (v4 streaming).
TEST_CASE("lab softmax: masked elements (-inf), leading ones included, give exact zeros") {
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape& s : {Shape{8, 1000}, Shape{4, 4096}, Shape{3, 20001}}) {
    INFO("rows " << s.rows << ", cols " << s.cols);
    std::vector<float> host_x = host_floats(uniform({s.rows * s.cols}, -5, 5, DType::f32, kGpu));
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c)
        if (c < 300 || c % 7 == 0) host_x[static_cast<size_t>(r * s.cols + c)] = -INFINITY;
    const Tensor x = tensor(host_x, {s.rows * s.cols}).to(kGpu);
    const Tensor y = empty({s.rows * s.cols}, DType::f32, kGpu);
    const lab::SoftmaxArgs args{x.data<float>(), y.data<float>(), s.rows, s.cols};
    std::vector<float> expected(host_x.size());
    lab::softmax::softmax_reference(host_x.data(), expected.data(), s.rows, s.cols);
    // v0's tolerance against the reference, and the others' against v0, together.
    const double rtol = 1e-5 + 2e-6 * std::sqrt(static_cast<double>(s.cols));
    for (const lab::SoftmaxVersion& version : lab::softmax_versions()) {
      poison(y);
      version.run(args);
      require_close(host_floats(y), expected, 1e-10, rtol, version.name);
    }
  }
}

TEST_CASE("lab layernorm: every version matches kiln's kernel and the reference backward") {
  struct Shape {
    int64_t rows, cols;
    bool misaligned;
  };
  const Shape shapes[] = {{1, 1, false},      {7, 33, false},    {64, 4096, false},
                          {100, 1000, false}, {3, 16385, false}, {5, 8193, false},
                          {300, 1023, false}, {40, 2048, true}};
  for (const Shape& s : shapes) {
    INFO("rows " << s.rows << ", cols " << s.cols << (s.misaligned ? ", misaligned" : ""));
    const int64_t count = s.rows * s.cols;
    Tensor x = floats(count, s.misaligned), dy = floats(count, s.misaligned);
    x.copy_(uniform({count}, -2, 3, DType::f32, kGpu));
    dy.copy_(uniform({count}, -1, 1, DType::f32, kGpu));
    const Tensor weight = uniform({s.cols}, 0.5, 1.5, DType::f32, kGpu);
    const Tensor bias = uniform({s.cols}, -0.5, 0.5, DType::f32, kGpu);
    const Tensor y = floats(count, s.misaligned), dx = floats(count, s.misaligned);
    const Tensor mean = empty({s.rows}, DType::f32, kGpu), rstd = empty({s.rows}, DType::f32, kGpu);
    const Tensor dweight = empty({s.cols}, DType::f32, kGpu),
                 dbias = empty({s.cols}, DType::f32, kGpu);
    const Tensor workspace =
        empty({static_cast<int64_t>(lab::layernorm_backward_workspace_bytes(s.rows, s.cols))},
              DType::u8, kGpu);
    const lab::LayerNormForwardArgs forward{x.data<float>(),
                                            weight.data<float>(),
                                            bias.data<float>(),
                                            y.data<float>(),
                                            mean.data<float>(),
                                            rstd.data<float>(),
                                            s.rows,
                                            s.cols};
    const lab::LayerNormBackwardArgs backward{x.data<float>(),
                                              weight.data<float>(),
                                              mean.data<float>(),
                                              rstd.data<float>(),
                                              dy.data<float>(),
                                              dx.data<float>(),
                                              dweight.data<float>(),
                                              dbias.data<float>(),
                                              s.rows,
                                              s.cols,
                                              workspace.data_ptr()};

    const std::vector<float> hx = host_floats(x), hw = host_floats(weight), hb = host_floats(bias),
                             hdy = host_floats(dy);
    std::vector<float> ry(hx.size()), rmean(s.rows), rrstd(s.rows);
    lab::layernorm::forward_reference(hx.data(), hw.data(), hb.data(), forward.eps, ry.data(),
                                      rmean.data(), rrstd.data(), s.rows, s.cols);
    const double row_tol = 2e-6 * std::sqrt(static_cast<double>(s.cols));
    std::vector<float> v0_y, v0_mean, v0_rstd;
    for (const lab::LayerNormForwardVersion& version : lab::layernorm_forward_versions()) {
      poison(y);
      poison(mean);
      poison(rstd);
      version.run(forward);
      if (v0_y.empty()) {
        v0_y = host_floats(y);
        v0_mean = host_floats(mean);
        v0_rstd = host_floats(rstd);
        require_close(v0_y, ry, 1e-5, 1e-5, "forward v0 y against the CPU reference");
        require_close(v0_mean, rmean, 1e-6, 1e-6, "forward v0 mean against the CPU reference");
        require_close(v0_rstd, rrstd, 1e-6, 1e-6, "forward v0 rstd against the CPU reference");
      } else {
        require_close(host_floats(y), v0_y, row_tol, row_tol, std::string(version.name) + " y");
        require_close(host_floats(mean), v0_mean, row_tol, row_tol,
                      std::string(version.name) + " mean");
        require_close(host_floats(rstd), v0_rstd, row_tol, row_tol,
                      std::string(version.name) + " rstd");
      }
    }

    // The backward from version 0's statistics, which the reference reads too.
    lab::layernorm::v0_kiln(forward);
    const std::vector<float> hmean = host_floats(mean), hrstd = host_floats(rstd);
    std::vector<float> rdx(hx.size()), rdw(s.cols), rdb(s.cols);
    lab::layernorm::backward_reference(hx.data(), hw.data(), hmean.data(), hrstd.data(), hdy.data(),
                                       rdx.data(), rdw.data(), rdb.data(), s.rows, s.cols);
    const double dx_tol = 5e-6 * std::sqrt(static_cast<double>(s.cols));
    const double column_tol = 1e-5 * std::sqrt(static_cast<double>(s.rows));
    std::vector<float> v0_dx, v0_dw, v0_db;
    for (const lab::LayerNormBackwardVersion& version : lab::layernorm_backward_versions()) {
      poison(dx);
      poison(dweight);
      poison(dbias);
      poison_bytes(workspace);
      version.run(backward);
      if (v0_dx.empty()) {
        v0_dx = host_floats(dx);
        v0_dw = host_floats(dweight);
        v0_db = host_floats(dbias);
        require_close(v0_dx, rdx, 1e-5, 1e-5, "backward v0 dx against the CPU reference");
        require_close(v0_dw, rdw, 1e-5, 1e-5, "backward v0 dweight against the CPU reference");
        require_close(v0_db, rdb, 1e-5, 1e-5, "backward v0 dbias against the CPU reference");
      } else {
        require_close(host_floats(dx), v0_dx, dx_tol, dx_tol, std::string(version.name) + " dx");
        require_close(host_floats(dweight), v0_dw, column_tol, column_tol,
                      std::string(version.name) + " dweight");
        require_close(host_floats(dbias), v0_db, column_tol, column_tol,
                      std::string(version.name) + " dbias");
      }
    }
  }
}

TEST_CASE("lab gemm: every version matches cuBLAS") {
  struct Shape {
    int64_t m, n, k;
    bool misaligned;
  };
  // Whole tiles; ragged everything (the scalar paths); n and k multiples of 4 with ragged tiles
  // (the float4 paths at the edges), m a multiple of the tile and not; and A off 16 bytes.
  const Shape shapes[] = {{1, 1, 1, false},       {33, 65, 17, false},    {128, 128, 128, false},
                          {129, 127, 131, false}, {256, 260, 100, false}, {130, 260, 100, false},
                          {300, 301, 302, false}, {200, 136, 64, true}};
  for (const Shape& s : shapes) {
    INFO("m " << s.m << ", n " << s.n << ", k " << s.k << (s.misaligned ? ", A misaligned" : ""));
    Tensor a = floats(s.m * s.k, s.misaligned);
    a.copy_(uniform({s.m * s.k}, -1, 1, DType::f32, kGpu));
    const Tensor b = uniform({s.k * s.n}, -1, 1, DType::f32, kGpu);
    const Tensor c = empty({s.m * s.n}, DType::f32, kGpu);
    const lab::GemmArgs args{a.data<float>(), b.data<float>(), c.data<float>(), s.m, s.n, s.k};
    const std::vector<float> ha = host_floats(a), hb = host_floats(b);
    std::vector<float> expected(static_cast<size_t>(s.m * s.n));
    lab::gemm::gemm_reference(ha.data(), hb.data(), expected.data(), s.m, s.n, s.k);
    const double tol = 1e-5 * std::sqrt(static_cast<double>(s.k));
    std::vector<float> v0;
    for (const lab::GemmVersion& version : lab::gemm_versions()) {
      poison(c);
      version.run(args);
      if (v0.empty()) {
        v0 = host_floats(c);
        require_close(v0, expected, tol, tol, "v0 against the CPU reference");
      } else {
        require_close(host_floats(c), v0, tol, tol, version.name);
      }
    }
  }
}

TEST_CASE("lab gemm_tc: every version matches cuBLASLt, bf16 and f16") {
  struct Shape {
    int64_t m, n, k;
  };
  // n and k must be multiples of 8 (16-byte rows); m anything.
  const Shape shapes[] = {{16, 8, 16},      {128, 128, 32}, {200, 264, 96}, {129, 136, 40},
                          {256, 256, 1024}, {1, 8, 8},      {300, 520, 200}};
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (const Shape& s : shapes) {
      INFO(dtype_name(dtype) << ", m " << s.m << ", n " << s.n << ", k " << s.k);
      const Tensor a = uniform({s.m, s.k}, -1, 1, dtype, kGpu);
      const Tensor b = uniform({s.k, s.n}, -1, 1, dtype, kGpu);
      const Tensor c = empty({s.m, s.n}, DType::f32, kGpu);
      const lab::GemmTcArgs args{a.data_ptr(), b.data_ptr(), c.data<float>(), s.m, s.n, s.k, dtype};
      // The inputs as the floats they hold: the products are exact in f32.
      const std::vector<float> ha = host_floats(a), hb = host_floats(b);
      std::vector<float> expected(static_cast<size_t>(s.m * s.n));
      lab::gemm::gemm_reference(ha.data(), hb.data(), expected.data(), s.m, s.n, s.k);
      const double tol = 5e-5 * std::sqrt(static_cast<double>(s.k));
      std::vector<float> v0;
      for (const lab::GemmTcVersion& version : lab::gemm_tc_versions()) {
        poison(c);
        version.run(args);
        if (v0.empty()) {
          v0 = host_floats(c);
          require_close(v0, expected, tol, tol, "v0 against the CPU reference");
        } else {
          require_close(host_floats(c), v0, tol, tol, version.name);
        }
      }
    }
  }
}

TEST_CASE("lab gemm_tc: a problem the hand-written versions cannot take is refused") {
  const Tensor a = zeros({16, 12}, DType::bf16, kGpu), b = zeros({12, 8}, DType::bf16, kGpu);
  const Tensor c = empty({16, 8}, DType::f32, kGpu);
  const lab::GemmTcArgs args{a.data_ptr(), b.data_ptr(), c.data<float>(), 16, 8, 12, DType::bf16};
  CHECK_THROWS_AS(lab::gemm_tc::v1_mma_ldmatrix(args), ShapeError);
  CHECK_THROWS_AS(lab::gemm_tc::v2_cp_async_pipeline(args), ShapeError);
}

namespace {

// Puts the routes back to the (empty) built-in table at the end of a test.
struct RoutesGuard {
  ~RoutesGuard() { cuda::set_lab_routes({}); }
};

}  // namespace

TEST_CASE("lab routes: the built-in table routes nothing, and a route runs its version") {
  RoutesGuard guard;
  REQUIRE(cuda::lab_routes().empty());
  const Tensor x = testing::random_f64({5, 300}, 41).to(DType::f32).to(kGpu);
  const Tensor want_softmax = softmax(x.cpu(), 1), want_sum = sum(x.cpu(), {1});
  const uint64_t before = cuda::lab_routed_calls();
  softmax(x, 1);
  sum(x, {1});
  CHECK(cuda::lab_routed_calls() == before);

  cuda::set_lab_routes(
      cuda::parse_lab_routes("softmax:200-400:v4_block_vectorized,sum:256-:v5_one_pass"));
  REQUIRE(cuda::lab_routes().size() == 2);
  const Tensor routed_softmax = softmax(x, 1);
  const Tensor routed_sum = sum(x, {1});
  CHECK(cuda::lab_routed_calls() == before + 2);
  testing::check_close(routed_softmax.cpu(), want_softmax, testing::tolerance(DType::f32));
  testing::check_close(routed_sum.cpu(), want_sum, testing::sum_tolerance(DType::f32, 300));
  // Outside the ranges, or not the lab's problem (log_softmax, a mean, f64), the op's own kernel.
  softmax(testing::random_f64({5, 100}, 42).to(DType::f32).to(kGpu), 1);
  log_softmax(x, 1);
  mean(x, {1});
  sum(x.to(DType::f64), {1});
  sum(x, {0});
  CHECK(cuda::lab_routed_calls() == before + 2);
}

TEST_CASE("lab routes: a route to a version the lab lacks, or to version 0, is refused") {
  RoutesGuard guard;
  CHECK_THROWS_WITH(cuda::set_lab_routes(cuda::parse_lab_routes("softmax:1-:v9_imaginary")),
                    Catch::Contains("v9_imaginary") && Catch::Contains("softmax lab"));
  CHECK_THROWS_WITH(cuda::set_lab_routes(cuda::parse_lab_routes("sum:1-:v0_cub")),
                    Catch::Contains("version 0"));
  CHECK_THROWS_WITH(cuda::parse_lab_routes("softmax:abc-:v2_online"), Catch::Contains("abc"));
  CHECK_THROWS_WITH(cuda::parse_lab_routes("gemm:1-2:v2"), Catch::Contains("not a routed op"));
  CHECK_THROWS_WITH(cuda::set_lab_routes(cuda::parse_lab_routes("softmax:9-3:v2_online")),
                    Catch::Contains("empty range"));
  CHECK(cuda::lab_routes().empty());
}
