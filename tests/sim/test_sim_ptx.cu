// The tensor-core PTX of the kernel lab, through the lab's own wrappers (gemm_tc/mma.cuh) on the
// simulator's emulation (sim/ptx.h): a warp's 16 x 16 x 16 product with ldmatrix (plain for A,
// .trans for B, as warp_mma.cuh loads them) and two mma.m16n8k16, against a scalar GEMM; and the
// cp.async groups, whose destination holds NaN until the wait that lands them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/kernels/cuda/lab/gemm_tc/mma.cuh"
#include "sim_test_support.h"

namespace {

namespace tc = kiln::lab::gemm_tc;

constexpr int kTile = 16;

// One warp: C (16 x 16, f32, row-major) = A (16 x 16, row-major) . B (16 x 16, stored [k][n]).
// The lanes address the four 8 x 8 matrices as warp_mma.cuh does: lanes 0-15 rows 0-15 at column
// 0, lanes 16-31 the same rows at column 8.
template <class T>
__global__ void warp_tile_product(const T* a, const T* b, float* c) {
  __shared__ T a_tile[kTile * kTile];
  __shared__ T b_tile[kTile * kTile];
  const int lane = threadIdx.x;
  for (int i = lane; i < kTile * kTile; i += 32) a_tile[i] = a[i], b_tile[i] = b[i];
  __syncwarp();
  unsigned a_frag[4], r[4];
  tc::ldmatrix_x4(a_frag, tc::shared_address(&a_tile[(lane % 16) * kTile + lane / 16 * 8]));
  tc::ldmatrix_x4_trans(r, tc::shared_address(&b_tile[(lane % 16) * kTile + lane / 16 * 8]));
  const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
  float acc0[4] = {}, acc1[4] = {1, 1, 1, 1};  // the second tile starts from C = 1
  tc::mma_m16n8k16<T>(acc0, a_frag, b0);
  tc::mma_m16n8k16<T>(acc1, a_frag, b1);
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    c[row * kTile + col] = acc0[i];
    c[row * kTile + 8 + col] = acc1[i];
  }
}

// Small integers: every product and sum is exact in f32, and in f16 and bf16, so the emulation
// must match the scalar product exactly, whatever order it sums in.
template <class T>
void check_tile_product() {
  std::vector<T> a(kTile * kTile), b(kTile * kTile);
  std::vector<float> want(kTile * kTile);
  auto value = [](int i, int mod) { return static_cast<float>(i * 5 % mod) - (mod - 1) / 2.0f; };
  for (int i = 0; i < kTile * kTile; ++i) a[i] = T(value(i, 7)), b[i] = T(value(i, 11));
  for (int m = 0; m < kTile; ++m)
    for (int n = 0; n < kTile; ++n) {
      float sum = n >= 8 ? 1.0f : 0.0f;
      for (int k = 0; k < kTile; ++k) sum += value(m * kTile + k, 7) * value(k * kTile + n, 11);
      want[m * kTile + n] = sum;
    }
  DeviceBuffer<T> da(a), db(b);
  DeviceBuffer<float> dc(kTile * kTile);
  for (const kiln::sim::Schedule& schedule : all_schedules()) {
    ScheduleScope scope(schedule);
    KILN_LAUNCH(1, 32, 0, nullptr, warp_tile_product<T>)(da.get(), db.get(), dc.get());
    REQUIRE(cudaGetLastError() == cudaSuccess);
    INFO("seed " << schedule.seed << ", fibers " << schedule.fibers);
    CHECK(dc.read() == want);
  }
}

// Each thread copies 4 floats (16 bytes) in two groups: its first half-row, then (only even
// threads; odd ones zero-fill) a second. It reads the destination before any wait, after
// waiting for all but the newest group, and after waiting for all.
__global__ void cp_async_groups(const float* src, float* before, float* middle, float* after) {
  __shared__ float first[32 * 4];
  __shared__ float second[32 * 4];
  const int t = threadIdx.x;
  tc::cp_async_16(tc::shared_address(&first[4 * t]), &src[4 * t], true);
  tc::cp_async_commit();
  tc::cp_async_16(tc::shared_address(&second[4 * t]), &src[128 + 4 * t], t % 2 == 0);
  tc::cp_async_commit();
  before[t] = first[4 * t];
  tc::cp_async_wait<1>();
  middle[2 * t] = first[4 * t], middle[2 * t + 1] = second[4 * t];
  tc::cp_async_wait<0>();
  for (int i = 0; i < 4; ++i) after[4 * t + i] = second[4 * t + i];
}

}  // namespace

TEST_CASE("ldmatrix (plain and .trans) and mma.m16n8k16 give a warp's f16 tile product exactly") {
  check_tile_product<__half>();
}

TEST_CASE("ldmatrix (plain and .trans) and mma.m16n8k16 give a warp's bf16 tile product exactly") {
  check_tile_product<__nv_bfloat16>();
}

TEST_CASE("cp.async lands a group only at its wait_group, and zero-fills a copy of 0 bytes") {
  std::vector<float> host(256);
  for (int i = 0; i < 256; ++i) host[i] = static_cast<float>(i + 1);
  DeviceBuffer<float> src(host), before(32), middle(64), after(128);
  KILN_LAUNCH(1, 32, 0, nullptr, cp_async_groups)
  (src.get(), before.get(), middle.get(), after.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (float v : before.read()) CHECK(std::isnan(v));  // read before its wait: not landed
  const std::vector<float> mid = middle.read(), end = after.read();
  for (int t = 0; t < 32; ++t) {
    CHECK(mid[2 * t] == host[4 * t]);   // the older group landed at wait_group 1
    CHECK(std::isnan(mid[2 * t + 1]));  // the newest had not
    for (int i = 0; i < 4; ++i)
      CHECK(end[4 * t + i] == (t % 2 == 0 ? host[128 + 4 * t + i] : 0.0f));
  }
}
