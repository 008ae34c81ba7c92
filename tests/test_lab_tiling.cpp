// The kernel lab's host-side arithmetic (kernels/cuda/lab/<family>/tiling.h), checked on the CPU:
// the tile parameters each version's kernels are instantiated with satisfy the constraints the
// kernels rely on, the grids cover every problem, ragged ones included, every element of a tile
// belongs to exactly one thread, and the reduction's passes, played on the CPU, add every element
// exactly once. The kernels themselves run in tests/cuda/test_lab.cpp and test_lab_attention.cpp,
// on a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/philox.h"
#include "kiln/kernels/cuda/lab/attention/mask_dropout.h"
#include "kiln/kernels/cuda/lab/attention/problem.h"
#include "kiln/kernels/cuda/lab/attention/tiling.h"
#include "kiln/kernels/cuda/lab/gemm/problem.h"
#include "kiln/kernels/cuda/lab/gemm/tiling.h"
#include "kiln/kernels/cuda/lab/gemm_tc/problem.h"
#include "kiln/kernels/cuda/lab/gemm_tc/tiling.h"
#include "kiln/kernels/cuda/lab/layernorm/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/reference.h"
#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/softmax/online.h"
#include "kiln/kernels/cuda/lab/softmax/tiling.h"

namespace {

namespace red = kiln::lab::reduction;

// The passes as the kernels run them, on the CPU: block (r, s) of a pass adds row r's elements
// [s * chunk, (s + 1) * chunk).
std::vector<float> play_passes(const std::vector<float>& x, int64_t rows,
                               const std::vector<red::Pass>& passes) {
  std::vector<float> in = x;
  for (const red::Pass& pass : passes) {
    std::vector<float> out(static_cast<size_t>(rows * pass.splits), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t s = 0; s < pass.splits; ++s)
        for (int64_t c = s * pass.chunk; c < (s + 1) * pass.chunk && c < pass.cols; ++c)
          out[static_cast<size_t>(r * pass.splits + s)] +=
              in[static_cast<size_t>(r * pass.cols + c)];
    in = out;
  }
  return in;
}

// Integers in {-1, 0, 1}: every partial sum is exact in f32, so any order gives the same bits.
std::vector<float> small_integers(int64_t count) {
  std::vector<float> x(static_cast<size_t>(count));
  uint64_t state = 12345;
  for (float& v : x) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int>((state >> 33) % 3) - 1);
  }
  return x;
}

void check_chain(const std::vector<red::Pass>& passes, int64_t cols) {
  REQUIRE(!passes.empty());
  CHECK(passes.front().cols == cols);
  for (size_t i = 0; i < passes.size(); ++i) {
    const red::Pass& p = passes[i];
    CHECK(p.splits >= 1);
    CHECK(p.splits * p.chunk >= p.cols);                             // every element in some chunk
    CHECK((p.splits - 1) * p.chunk < std::max<int64_t>(p.cols, 1));  // no empty chunk past one
    if (i + 1 < passes.size()) CHECK(passes[i + 1].cols == p.splits);
  }
  CHECK(passes.back().splits == 1);
}

// Each pass but the last writes rows * splits partials into buffer i % 2: they must fit.
void check_workspace(int64_t rows, const std::vector<red::Pass>& passes,
                     const red::WorkspaceLayout& layout) {
  const size_t capacity[2] = {(layout.second_offset - layout.first_offset) / sizeof(float),
                              (layout.bytes - layout.second_offset) / sizeof(float)};
  for (size_t i = 0; i + 1 < passes.size(); ++i)
    CHECK(static_cast<size_t>(rows * passes[i].splits) <= capacity[i % 2]);
}

}  // namespace

TEST_CASE("lab reduction: every version's passes add each element once") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1},   {1, 255},   {1, 257}, {1, 1025}, {1, (1 << 16) + 3}, {3, 1000}, {5, 4096},
      {64, 33}, {2, 70001}, {1, 0},   {4, 0}};
  for (const auto& [rows, cols] : shapes) {
    INFO("rows " << rows << ", cols " << cols);
    const std::vector<float> x = small_integers(rows * cols);
    std::vector<float> expected(static_cast<size_t>(rows));
    red::row_sums_reference(x.data(), expected.data(), rows, cols);
    const red::WorkspaceLayout layout = red::workspace_layout(rows, cols);
    CHECK(layout.first_offset % red::kWorkspaceAlignment == 0);
    CHECK(layout.second_offset % red::kWorkspaceAlignment == 0);
    CHECK(layout.first_offset >= static_cast<size_t>(rows) * sizeof(unsigned));
    const std::vector<std::vector<red::Pass>> versions = {
        red::chunked_passes(cols, red::kChunkV1), red::chunked_passes(cols, red::kChunkV2),
        red::chunked_passes(cols, red::kChunkV3), red::grid_stride_passes(rows, cols)};
    for (const auto& passes : versions) {
      check_chain(passes, cols);
      check_workspace(rows, passes, layout);
      CHECK(play_passes(x, rows, passes) == expected);
    }
    // v5: one pass whose partials (where it splits rows) sit in the first buffer.
    const red::Pass first = red::grid_stride_passes(rows, cols).front();
    if (first.splits > 1)
      CHECK(static_cast<size_t>(rows * first.splits) * sizeof(float) <=
            layout.second_offset - layout.first_offset);
  }
}

TEST_CASE("lab reduction: the passes of a 2^28-element vector") {
  const int64_t n = int64_t{1} << 28;
  std::vector<int64_t> splits;
  for (const red::Pass& p : red::chunked_passes(n, red::kChunkV1)) splits.push_back(p.splits);
  CHECK(splits == std::vector<int64_t>{1 << 20, 1 << 12, 16, 1});
  const std::vector<red::Pass> v4 = red::grid_stride_passes(1, n);
  REQUIRE(v4.size() == 2);
  CHECK(v4[0].splits == red::kTargetBlocks);
  CHECK(v4[0].chunk % red::kStepV4 == 0);
  CHECK(v4[1].splits == 1);
  // Many short rows: one split a row, one pass, and a grid of kTargetBlocks blocks looping rows.
  const std::vector<red::Pass> rows = red::grid_stride_passes(65536, 4096);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].splits == 1);
  CHECK(red::pass_blocks(65536, rows[0], red::kTargetBlocks) == red::kTargetBlocks);
}

TEST_CASE("lab softmax and layernorm: a row fits the threads that hold it in registers") {
  namespace sm = kiln::lab::softmax;
  namespace ln = kiln::lab::layernorm;
  for (int64_t cols = 1; cols <= 20000; cols += cols < 100 ? 1 : 97) {
    INFO("cols " << cols);
    if (sm::v4_cached(cols)) {
      const int threads = sm::v4_threads(cols);
      CHECK(threads % sm::kWarpSize == 0);
      CHECK(threads <= sm::kMaxThreads);
      CHECK(int64_t{threads} * sm::kElementsPerThread >= cols);
    }
    CHECK(sm::v4_width(cols, true) == (cols % 4 == 0 ? 4 : 1));
    CHECK(sm::v4_width(cols, false) == 1);
    if (ln::v3_cached(cols)) {
      const int threads = ln::v3_threads(cols);
      CHECK(threads % ln::kWarpSize == 0);
      CHECK(threads <= ln::kMaxThreads);
      CHECK(int64_t{threads} * ln::kElementsPerThread >= cols);
    }
    if (ln::v3_backward_cached(cols)) CHECK(ln::v3_threads(cols) <= ln::kBackwardMaxThreads);
  }
  CHECK(sm::v4_threads(4096) == 256);
  CHECK_FALSE(sm::v4_cached(16385));
  for (int64_t rows : {1, 7, 8, 9, 65536, 100001}) {
    CHECK(sm::v3_blocks(rows) * sm::kWarpsPerBlock >= rows);
    CHECK(ln::v1_blocks(rows) * ln::kThreads >= rows);
    CHECK(ln::v2_blocks(rows) * ln::kWarpsPerBlock >= rows);
    CHECK(ln::v2_backward_blocks(rows) * ln::kRowsPerBlock >= rows);
    for (int64_t cols : {1, 1000, 4096}) {
      const int64_t blocks = std::max(ln::v2_backward_blocks(rows), ln::v3_backward_blocks(rows));
      CHECK(ln::backward_workspace_bytes(rows, cols) >= size_t(2 * blocks * cols) * sizeof(float));
    }
  }
}

namespace {

namespace gm = kiln::lab::gemm;

// Every element of the block's bm x bn tile is computed by exactly one (thread, i, j).
template <gm::Tiling kT>
void check_tile_coverage() {
  std::vector<int> owners(static_cast<size_t>(kT.bm * kT.bn), 0);
  const int rows = (kT.wm ? gm::wm_iter(kT) : 1) * kT.tm;
  const int cols = kT.wn_iter * kT.tn;
  const int sub_m = kT.wm ? gm::wsub_m(kT) : kT.tm, sub_n = kT.wm ? gm::wsub_n(kT) : kT.tn;
  for (int tid = 0; tid < kT.threads; ++tid) {
    const gm::Origin o = gm::thread_origin<kT>(tid);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) {
        const int row = o.row + i / kT.tm * sub_m + i % kT.tm;
        const int col = o.col + j / kT.tn * sub_n + j % kT.tn;
        REQUIRE(row >= 0);
        REQUIRE(row < kT.bm);
        REQUIRE(col >= 0);
        REQUIRE(col < kT.bn);
        ++owners[static_cast<size_t>(row * kT.bn + col)];
      }
  }
  for (int owner_count : owners) REQUIRE(owner_count == 1);
}

}  // namespace

TEST_CASE("lab gemm: every version's tiling is valid and gives each element one thread") {
  CHECK(gm::valid(gm::kV1Naive));
  CHECK(gm::valid(gm::kV2Coalesced));
  CHECK(gm::valid(gm::kV3SharedTiling));
  CHECK(gm::valid(gm::kV4Blocktiling1d));
  CHECK(gm::valid(gm::kV5Blocktiling2d));
  CHECK(gm::valid(gm::kV6Vectorized));
  CHECK(gm::valid(gm::kV7Warptiling));
  CHECK(gm::valid(gm::kV8DoubleBuffering));
  check_tile_coverage<gm::kV4Blocktiling1d>();
  check_tile_coverage<gm::kV5Blocktiling2d>();
  check_tile_coverage<gm::kV6Vectorized>();
  check_tile_coverage<gm::kV7Warptiling>();
  check_tile_coverage<gm::kV8DoubleBuffering>();

  // v7's warp tile: one 64 x 16 sub-tile along m, four along n, 8 x 4 a lane.
  CHECK(gm::wm_iter(gm::kV7Warptiling) == 1);
  CHECK(gm::wsub_m(gm::kV7Warptiling) == 64);
  CHECK(gm::wsub_n(gm::kV7Warptiling) == 16);
  CHECK(gm::a_loads_per_thread(gm::kV7Warptiling) == 4);  // float4s
  CHECK(gm::shared_bytes(gm::kV8DoubleBuffering) == 32 * 1024);

  // What valid() refuses.
  gm::Tiling t = gm::kV5Blocktiling2d;
  t.threads = 128;  // 16 x 16 threads' worth of 8 x 8 pieces, with half the threads
  CHECK_FALSE(gm::valid(t));
  t = gm::kV7Warptiling;
  t.wn_iter = 3;
  CHECK_FALSE(gm::valid(t));
  t = gm::kV8DoubleBuffering;
  t.bk = 64;  // 2 x (128 x 64 + 64 x 128) floats: 128 KiB of shared memory
  CHECK_FALSE(gm::valid(t));
  t = gm::kV6Vectorized;
  t.bk = 6;  // not whole float4s
  CHECK_FALSE(gm::valid(t));
}

TEST_CASE("lab gemm: the grids cover ragged problems") {
  const gm::Tiling tilings[] = {gm::kV2Coalesced, gm::kV3SharedTiling, gm::kV4Blocktiling1d,
                                gm::kV5Blocktiling2d, gm::kV7Warptiling};
  for (const gm::Tiling& t : tilings)
    for (int64_t m : {1, 31, 33, 127, 129, 1000, 4096, 4097})
      for (int64_t n : {1, 63, 65, 128, 1000, 8192}) {
        const gm::Grid g = gm::grid(t, m, n);
        CHECK(int64_t{g.x} * t.bn >= n);
        CHECK((int64_t{g.x} - 1) * t.bn < n);
        CHECK(int64_t{g.y} * t.bm >= m);
        CHECK((int64_t{g.y} - 1) * t.bm < m);
        CHECK(gm::fits(g));
      }
  const gm::Grid naive = gm::v1_grid(1000, 33);
  CHECK(naive.x == 32);  // rows on x in v1
  CHECK(naive.y == 2);
  CHECK_FALSE(gm::fits(gm::grid(gm::kV3SharedTiling, int64_t{32} * 65536, 32)));
  CHECK(gm::flops(4096, 4096, 4096) == Approx(137438953472.0));
}

namespace {

namespace tc = kiln::lab::gemm_tc;

// Every element of the block's tile of C is held by exactly one accumulator of one lane.
template <tc::TcTiling kT>
void check_accumulator_coverage() {
  std::vector<int> owners(static_cast<size_t>(kT.bm * kT.bn), 0);
  for (int warp = 0; warp < kT.warps_m * kT.warps_n; ++warp)
    for (int lane = 0; lane < tc::kWarpSize; ++lane)
      for (int i = 0; i < tc::mma_tiles_m(kT); ++i)
        for (int j = 0; j < tc::mma_tiles_n(kT); ++j)
          for (int r = 0; r < 4; ++r) {
            const tc::Position p = tc::accumulator_position<kT>(warp, lane, i, j, r);
            REQUIRE(p.row >= 0);
            REQUIRE(p.row < kT.bm);
            REQUIRE(p.col >= 0);
            REQUIRE(p.col < kT.bn);
            ++owners[static_cast<size_t>(p.row * kT.bn + p.col)];
          }
  for (int owner_count : owners) REQUIRE(owner_count == 1);
}

}  // namespace

TEST_CASE("lab gemm_tc: the tilings are valid, and each element of C has one accumulator") {
  CHECK(tc::valid(tc::kV1MmaLdmatrix));
  CHECK(tc::valid(tc::kV2CpAsyncPipeline));
  check_accumulator_coverage<tc::kV1MmaLdmatrix>();
  check_accumulator_coverage<tc::kV2CpAsyncPipeline>();

  CHECK(tc::threads(tc::kV1MmaLdmatrix) == 256);
  CHECK(tc::mma_tiles_m(tc::kV1MmaLdmatrix) == 4);  // a warp's 64 x 32: 4 x 4 tiles of 16 x 8
  CHECK(tc::mma_tiles_n(tc::kV1MmaLdmatrix) == 4);
  CHECK(tc::a_chunks_per_thread(tc::kV1MmaLdmatrix) == 2);
  CHECK(tc::b_chunks_per_thread(tc::kV1MmaLdmatrix) == 2);
  CHECK(tc::shared_bytes(tc::kV1MmaLdmatrix) == 18944);
  CHECK(tc::shared_bytes(tc::kV2CpAsyncPipeline) == 4 * 18944);

  // Padded rows of 40 and 136 elements: 5 and 17 units of 16 bytes, odd, so the 8 rows an
  // ldmatrix reads land on disjoint banks; unpadded 32 and 128 are even and collide.
  CHECK(tc::ldmatrix_conflict_free(40));
  CHECK(tc::ldmatrix_conflict_free(136));
  CHECK_FALSE(tc::ldmatrix_conflict_free(32));
  CHECK_FALSE(tc::ldmatrix_conflict_free(128));

  tc::TcTiling t = tc::kV1MmaLdmatrix;
  t.pad = 0;
  CHECK_FALSE(tc::valid(t));
  t = tc::kV2CpAsyncPipeline;
  t.stages = 6;  // 6 x 18.5 KiB = 111 KiB: within sm_80's and sm_90's limits, past sm_86's 99
  CHECK_FALSE(tc::valid(t));
  t = tc::kV1MmaLdmatrix;
  t.bk = 24;  // not whole k16 steps
  CHECK_FALSE(tc::valid(t));
  t = tc::kV1MmaLdmatrix;
  t.stages = 2;  // 37 KiB of dynamic shared memory: allowed
  CHECK(tc::valid(t));

  CHECK(tc::supported(8192, 8192));
  CHECK_FALSE(tc::supported(8190, 8192));
  CHECK_FALSE(tc::supported(8192, 12));
  for (int64_t m : {1, 127, 129, 8192})
    for (int64_t n : {8, 120, 136, 8192}) {
      const tc::Grid g = tc::grid(tc::kV2CpAsyncPipeline, m, n);
      CHECK(int64_t{g.x} * 128 >= n);
      CHECK(int64_t{g.y} * 128 >= m);
      CHECK(tc::fits(g));
    }
}

// The kernels' int loop counters step a tile past k (`t += bk`): a k within a tile of 2^31 - 1
// would wrap them negative, so every version refuses it, and takes the largest k that cannot.
TEST_CASE("lab gemm and gemm_tc: k, m and n within a tile of 2^31 are refused") {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  const int64_t largest = kIntMax - 128;
  const gm::Grid one_block{1, 1};
  CHECK_NOTHROW(gm::check_problem("v8_double_buffering", 1, 8, largest, one_block));
  CHECK_THROWS_AS(gm::check_problem("v8_double_buffering", 1, 8, largest + 1, one_block),
                  kiln::ShapeError);
  CHECK_THROWS_AS(gm::check_problem("v8_double_buffering", 1, kIntMax - 3, 8, one_block),
                  kiln::ShapeError);
  CHECK_THROWS_AS(gm::check_problem("v8_double_buffering", 1, 8, kIntMax, one_block),
                  kiln::ShapeError);
  CHECK_THROWS_AS(gm::check_problem("v8_double_buffering", 1, 8, -1, one_block), kiln::ShapeError);
  CHECK_THROWS_AS(gm::check_problem("v1_naive", 8, 8, 8, gm::Grid{1, 65536}), kiln::ShapeError);

  // The review's trigger: m = 1, n = 8, k = 2147483640 (a multiple of 8, so otherwise accepted).
  const tc::Grid tc_block{1, 1};
  alignas(16) static const unsigned char buffer[16] = {};
  const float* c = reinterpret_cast<const float*>(buffer);
  CHECK_THROWS_AS(tc::check_problem("v2_cp_async_pipeline", buffer, buffer, c, kiln::DType::bf16, 1,
                                    8, 2147483640, tc_block),
                  kiln::ShapeError);
  CHECK_NOTHROW(tc::check_problem("v2_cp_async_pipeline", buffer, buffer, c, kiln::DType::bf16, 1,
                                  8, largest / 8 * 8, tc_block));
  CHECK_THROWS_AS(tc::check_problem("v1_mma_ldmatrix", buffer, buffer, c, kiln::DType::f16,
                                    kIntMax - 7, 8, 8, tc_block),
                  kiln::ShapeError);
}

namespace {

kiln::lab::softmax::MaxSum online_row(const std::vector<float>& row) {
  kiln::lab::softmax::MaxSum state = kiln::lab::softmax::empty_max_sum();
  for (float v : row) kiln::lab::softmax::online_update(state, v);
  return state;
}

}  // namespace

// The online softmax's state (v2-v4), played on the CPU: a masked element (-inf) adds nothing
// wherever it sits, the first place included, where the max is still -inf and exp(v - max)
// would be exp(-inf - -inf) = NaN.
TEST_CASE("lab softmax: the online state ignores -inf elements, leading ones included") {
  namespace sm = kiln::lab::softmax;
  const float inf = std::numeric_limits<float>::infinity();
  const sm::MaxSum masked_first = online_row({-inf, 0.0f, 1.0f});
  CHECK(masked_first.max == 1.0f);
  CHECK(masked_first.sum == Approx(1.0 + std::exp(-1.0)));
  const sm::MaxSum masked_middle = online_row({0.0f, -inf, -inf, 1.0f, -inf});
  CHECK(masked_middle.max == 1.0f);
  CHECK(masked_middle.sum == Approx(1.0 + std::exp(-1.0)));

  // A lane that saw only masked elements is the empty state, which the combine ignores.
  const sm::MaxSum all_masked = online_row({-inf, -inf});
  CHECK(all_masked.max == -inf);
  CHECK(all_masked.sum == 0.0f);
  const sm::MaxSum combined = sm::CombineMaxSum{}(all_masked, online_row({2.0f, 0.0f}));
  CHECK(combined.max == 2.0f);
  CHECK(combined.sum == Approx(1.0 + std::exp(-2.0)));

  // A NaN still poisons the row, as in kiln's kernel.
  CHECK(std::isnan(online_row({0.0f, std::nanf(""), 1.0f}).sum));
}

TEST_CASE("lab attention: the mask's pairs, every row's keys, the tiles and the refusals") {
  namespace att = kiln::lab::attention;
  for (int64_t l_len : {1, 7, 33, 129})
    for (int64_t s_len : {1, 7, 33, 129})
      for (bool causal : {false, true}) {
        INFO("L " << l_len << ", S " << s_len << (causal ? ", causal" : ""));
        int64_t pairs = 0;
        for (int64_t l = 0; l < l_len; ++l) {
          int64_t keys = 0;
          for (int64_t s = 0; s < s_len; ++s) keys += att::attends(causal, l, s) ? 1 : 0;
          // The keys a query attends are a prefix, never empty (top-left alignment: key 0).
          CHECK(keys == att::keys_for(causal, l, s_len));
          CHECK(keys >= 1);
          pairs += keys;
        }
        CHECK(att::attended_pairs(l_len, s_len, causal) == static_cast<double>(pairs));
        CHECK(att::workspace_bytes(3, l_len, s_len) >= static_cast<size_t>(4 * 3 * l_len * s_len));
        CHECK(att::workspace_bytes(3, l_len, s_len) >= static_cast<size_t>(8 * 3 * l_len));
        CHECK(att::row_workspace_bytes(3, l_len) >= static_cast<size_t>(8 * 3 * l_len));
        CHECK(att::row_workspace_bytes(3, l_len) <= att::workspace_bytes(3, l_len, s_len));
      }
  CHECK(att::v3_shared_bytes() <= 48 * 1024);
  CHECK(att::v5_shared_bytes() <= 48 * 1024);
  CHECK(att::v5_blocks(3, 33) == 6);
  for (int d : att::kV4HeadDims) {
    CHECK(att::v4_head_dim_supported(d));
    CHECK(att::v4_conflict_free(d));
    CHECK(att::v4_shared_bytes(d) <= 48 * 1024);
  }
  CHECK_FALSE(att::v4_head_dim_supported(48));
  CHECK_NOTHROW(att::check_shape("v1", 2, 7, 9, 128));
  CHECK_NOTHROW(att::check_shape("v1", 0, 0, 0, 1));
  CHECK_THROWS_AS(att::check_shape("v1", 2, 7, 9, 0), kiln::ShapeError);
  CHECK_THROWS_AS(att::check_shape("v1", 2, 7, 9, 129), kiln::ShapeError);
  CHECK_THROWS_AS(att::check_shape("v1", 2, 7, 0, 64), kiln::ShapeError);
  CHECK_THROWS_AS(att::check_shape("v1", 2, int64_t{1} << 31, 9, 64), kiln::ShapeError);
  CHECK_THROWS_AS(att::check_f32("v2", kiln::DType::bf16), kiln::DTypeError);
}

// The kernels' dropout (an integer comparison with ceil(p 2^24)) keeps exactly what kiln's
// dropout keeps (philox_uniform(seed, offset, i) >= p in double), at the index (h L + l) S + s.
TEST_CASE("lab attention: the kernels' dropout keeps what kiln's dropout keeps") {
  namespace att = kiln::lab::attention;
  const int64_t heads = 2, l_len = 5, s_len = 7;
  // 0.5 and 3 * 2^-24 lie on the uniforms' grid; 0.1 and 1 / 3 do not; 1e-9 drops only u = 0.
  for (const double p : {0.5, 0.1, 1.0 / 3.0, 3.0 / 16777216.0, 1e-9}) {
    INFO("p " << p);
    const att::Dropout d = att::dropout_of({.p = p, .seed = 1234, .offset = 17}, l_len, s_len);
    CHECK(d.scale == static_cast<float>(1.0 / (1.0 - p)));
    int64_t kept = 0;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t l = 0; l < l_len; ++l)
        for (int64_t s = 0; s < s_len; ++s) {
          const auto index = static_cast<uint64_t>((h * l_len + l) * s_len + s);
          const bool want = static_cast<double>(kiln::philox_uniform(1234, 17, index)) >= p;
          CHECK((d.factor(h, l, s) != 0.0f) == want);
          kept += want ? 1 : 0;
        }
    if (p == 0.5) CHECK((kept > 20 && kept < 50));  // of 70: the draw is not degenerate
  }
  // The words' own grid: u = k 2^-24 is kept at p = k 2^-24, dropped just above it.
  for (uint32_t k : {1u, 77u, 8388608u}) {
    const double on_grid = k / 16777216.0;
    CHECK(att::dropout_of({.p = on_grid}, 1, 1).threshold == k);
    CHECK(att::dropout_of({.p = std::nextafter(on_grid, 1.0)}, 1, 1).threshold == k + 1);
  }
  CHECK(att::dropout_of({}, 1, 1).factor(0, 0, 0) == 1.0f);
}
