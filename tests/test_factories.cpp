// Factories: constant fills, ranges, random streams, host buffers and the CPU allocator's
// statistics.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::tolerance;

namespace {

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double variance_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size() - 1);
}

bool all_of_values(const Tensor& t, double value) {
  for (double v : t.tolist())
    if (v != value) return false;
  return true;
}

}  // namespace

// ---- constant fills ----

TEST_CASE("factories: zeros, ones and full in every dtype") {
  for (DType d : kAllDTypes) {
    INFO(dtype_name(d));
    Tensor z = zeros({2, 3}, d);
    CHECK(z.shape() == Shape{2, 3});
    CHECK(z.dtype() == d);
    CHECK(z.is_contiguous());
    CHECK(all_of_values(z, 0));
    CHECK(all_of_values(ones({4}, d), 1));
  }
  CHECK(all_of_values(full({3, 2}, -2.5), -2.5));
  CHECK(all_of_values(full({3}, 7, DType::u8), 7));
  CHECK(all_of_values(full({3}, 2, DType::boolean), 1));
  CHECK(full({0, 4}, 1.0).numel() == 0);
  CHECK_THROWS_AS(zeros({2, -1}), ValueError);
  CHECK_THROWS_AS(full({-3}, 1.0), ValueError);
}

TEST_CASE("factories: scalar_tensor is 0-dim") {
  Tensor s = scalar_tensor(4.25, DType::f64);
  CHECK(s.dim() == 0);
  CHECK(s.dtype() == DType::f64);
  CHECK(s.item<double>() == 4.25);
  CHECK(scalar_tensor(3).dtype() == DType::f32);
  CHECK(scalar_tensor(-3, DType::i32).item<int>() == -3);
}

// ---- ranges ----

TEST_CASE("factories: arange with an integer end is i64") {
  Tensor a = arange(5);
  CHECK(a.dtype() == DType::i64);
  CHECK(a.tolist() == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(arange(0).numel() == 0);
  CHECK(arange(3, DType::f64).dtype() == DType::f64);
  CHECK_THROWS_AS(arange(-2), ValueError);
}

TEST_CASE("factories: arange with start, end and step") {
  CHECK(arange(0, 1, 0.25).tolist() == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(arange(0, 1, 0.25).dtype() == DType::f32);
  CHECK(arange(2, 7, 2, DType::i32).tolist() == std::vector<double>{2, 4, 6});
  CHECK(arange(1, 4, 1, DType::f64).tolist() == std::vector<double>{1, 2, 3});
  CHECK(arange(3, 3).numel() == 0);
}

TEST_CASE("factories: arange with a negative step counts down") {
  CHECK(arange(5, 0, -1.5).tolist() == std::vector<double>{5, 3.5, 2, 0.5});
  CHECK(arange(3, -1, -1, DType::i64).tolist() == std::vector<double>{3, 2, 1, 0});
}

TEST_CASE("factories: arange rejects bad steps") {
  CHECK_THROWS_AS(arange(0, 5, 0), ValueError);
  CHECK_THROWS_WITH(arange(0, 5, 0), Catch::Contains("arange") && Catch::Contains("step"));
  CHECK_THROWS_AS(arange(0, 5, -1), ValueError);
  CHECK_THROWS_AS(arange(5, 0, 1), ValueError);
  CHECK_THROWS_AS(arange(0, 5, std::nan("")), ValueError);
  CHECK_THROWS_AS(arange(0, 5, INFINITY), ValueError);
}

TEST_CASE("factories: linspace hits both endpoints exactly") {
  const double start = -1.3, end = 2.7;
  std::vector<double> v = linspace(start, end, 11, DType::f64).tolist();
  REQUIRE(v.size() == 11);
  CHECK(v.front() == start);
  CHECK(v.back() == end);
  std::vector<double> want;
  for (int i = 0; i < 11; ++i) want.push_back(start + 0.4 * i);
  check_close(v, want, tolerance(DType::f64));
  std::vector<float> expected = {0.0f, 1.0f / 6, 2.0f / 6, 0.5f, 4.0f / 6, 5.0f / 6, 1.0f};
  std::vector<double> f = linspace(0, 1, 7).tolist();
  CHECK(f.front() == 0.0);
  CHECK(f.back() == 1.0);
  check_close(f, std::vector<double>(expected.begin(), expected.end()), tolerance(DType::f32));
}

TEST_CASE("factories: linspace with few steps") {
  CHECK(linspace(2, 5, 1).tolist() == std::vector<double>{2});
  CHECK(linspace(2, 5, 2).tolist() == std::vector<double>{2, 5});
  CHECK(linspace(2, 5, 0).numel() == 0);
  CHECK(linspace(3, -3, 3).tolist() == std::vector<double>{3, 0, -3});
  CHECK_THROWS_AS(linspace(0, 1, -1), ValueError);
}

TEST_CASE("factories: eye, square and rectangular") {
  CHECK(eye(3).tolist() == std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  Tensor r = eye(2, 3);
  CHECK(r.shape() == Shape{2, 3});
  CHECK(r.tolist() == std::vector<double>{1, 0, 0, 0, 1, 0});
  CHECK(eye(3, 2).tolist() == std::vector<double>{1, 0, 0, 1, 0, 0});
  CHECK(eye(2, 2, DType::i32).dtype() == DType::i32);
  CHECK(eye(0).shape() == Shape{0, 0});
  CHECK(eye(2, 0).numel() == 0);
  CHECK_THROWS_AS(eye(-1), ValueError);
}

// ---- random ----

TEST_CASE("factories: rand is uniform on 0 <= x < 1") {
  Generator gen(11);
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(d));
    Tensor r = rand({20000}, d, Device::cpu(), &gen);
    CHECK(r.dtype() == d);
    std::vector<double> v = r.tolist();
    for (double x : v) {
      if (!(x >= 0.0 && x < 1.0)) {
        FAIL_CHECK("value " << x << " outside [0, 1)");
        break;
      }
    }
    CHECK(mean_of(v) == Approx(0.5).margin(0.02));
    CHECK(variance_of(v) == Approx(1.0 / 12).margin(0.01));
  }
}

TEST_CASE("factories: randn has mean 0 and variance 1") {
  Generator gen(5);
  std::vector<double> v = randn({20000}, DType::f64, Device::cpu(), &gen).tolist();
  CHECK(mean_of(v) == Approx(0.0).margin(0.05));
  CHECK(variance_of(v) == Approx(1.0).margin(0.05));
  for (double x : v) REQUIRE(std::isfinite(x));
  CHECK_THROWS_AS(randn({2}, DType::i64), DTypeError);
  CHECK_THROWS_AS(rand({2}, DType::i32), DTypeError);
}

TEST_CASE("factories: uniform stays within low <= x < high") {
  Generator gen(3);
  std::vector<double> v = uniform({10000}, -2.0, 3.0, DType::f64, Device::cpu(), &gen).tolist();
  for (double x : v) REQUIRE((x >= -2.0 && x < 3.0));
  CHECK(mean_of(v) == Approx(0.5).margin(0.1));
  CHECK(variance_of(v) == Approx(25.0 / 12).margin(0.15));
  CHECK(all_of_values(uniform({5}, 1.5, 1.5), 1.5));
  CHECK_THROWS_AS(uniform({2}, 1.0, 0.0), ValueError);
  CHECK_THROWS_WITH(uniform({2}, 1.0, 0.0), Catch::Contains("uniform"));
  CHECK_THROWS_AS(uniform({2}, 0.0, 1.0, DType::u8), DTypeError);
}

TEST_CASE("factories: randint covers low <= x < high in the asked dtype") {
  Generator gen(9);
  for (DType d : {DType::i64, DType::i32, DType::u8, DType::f32}) {
    INFO(dtype_name(d));
    Tensor r = randint(2, 8, {6000}, d, Device::cpu(), &gen);
    CHECK(r.dtype() == d);
    std::vector<double> v = r.tolist();
    std::vector<int> counts(6, 0);
    for (double x : v) {
      REQUIRE((x >= 2 && x < 8 && x == std::floor(x)));
      counts[static_cast<int>(x) - 2]++;
    }
    for (int c : counts) CHECK(c > 800);  // 1000 expected per value
    CHECK(mean_of(v) == Approx(4.5).margin(0.1));
  }
  Tensor neg = randint(-3, -1, {100}, DType::i64, Device::cpu(), &gen);
  for (double x : neg.tolist()) CHECK((x == -3 || x == -2));
  CHECK_THROWS_AS(randint(3, 3, {2}), ValueError);
  CHECK_THROWS_WITH(randint(4, 1, {2}), Catch::Contains("randint"));
}

TEST_CASE("factories: a seeded Generator is deterministic") {
  Generator a(42), b(42);
  CHECK(
      equal(rand({64}, DType::f32, Device::cpu(), &a), rand({64}, DType::f32, Device::cpu(), &b)));
  CHECK(equal(randn({64}, DType::f64, Device::cpu(), &a),
              randn({64}, DType::f64, Device::cpu(), &b)));
  CHECK(equal(randint(0, 100, {64}, DType::i64, Device::cpu(), &a),
              randint(0, 100, {64}, DType::i64, Device::cpu(), &b)));
  Generator c(43);
  CHECK_FALSE(
      equal(rand({64}, DType::f32, Device::cpu(), &a), rand({64}, DType::f32, Device::cpu(), &c)));
}

TEST_CASE("factories: each random op takes the next offset") {
  Generator gen(1);
  CHECK(gen.state().offset == 0);
  Tensor first = rand({32}, DType::f32, Device::cpu(), &gen);
  CHECK(gen.state().offset == 1);
  Tensor second = rand({32}, DType::f32, Device::cpu(), &gen);
  CHECK_FALSE(equal(first, second));
  gen.set_state({1, 1});
  CHECK(equal(rand({32}, DType::f32, Device::cpu(), &gen), second));
  gen.manual_seed(1);
  CHECK(equal(rand({32}, DType::f32, Device::cpu(), &gen), first));
}

TEST_CASE("factories: manual_seed makes the default generator repeat") {
  manual_seed(123);
  Tensor a = rand({50});
  Tensor an = randn({50});
  manual_seed(123);
  Tensor b = rand({50});
  Tensor bn = randn({50});
  CHECK(equal(a, b));
  CHECK(equal(an, bn));
  CHECK_FALSE(equal(a, rand({50})));
  CHECK(default_generator().seed() == 123);
}

TEST_CASE("factories: element i depends only on seed, offset and i") {
  Generator a(77), b(77);
  Tensor small = rand({10}, DType::f32, Device::cpu(), &a);
  Tensor large = rand({2, 40000}, DType::f32, Device::cpu(), &b);
  std::vector<double> s = small.tolist(), l = large.tolist();
  for (size_t i = 0; i < s.size(); ++i) CHECK(s[i] == l[i]);
}

// ---- _like ----

TEST_CASE("factories: _like variants keep shape and dtype") {
  Tensor t = zeros({2, 3}, DType::f64).t();
  for (const Tensor& like : {empty_like(t), zeros_like(t), ones_like(t), full_like(t, 3.0),
                             rand_like(t), randn_like(t)}) {
    CHECK(like.shape() == Shape{3, 2});
    CHECK(like.dtype() == DType::f64);
    CHECK(like.is_contiguous());
    CHECK(like.storage() != t.storage());
  }
  CHECK(all_of_values(zeros_like(t), 0));
  CHECK(all_of_values(ones_like(t), 1));
  CHECK(all_of_values(full_like(t, 3.0), 3));
  Generator a(8), b(8);
  CHECK(equal(rand_like(t, &a), rand_like(t, &b)));
  CHECK(zeros_like(arange(4)).dtype() == DType::i64);
}

// ---- host data ----

TEST_CASE("factories: from_blob copies the buffer") {
  std::vector<int32_t> host = {1, 2, 3, 4, 5, 6};
  Tensor t = from_blob(host.data(), {2, 3}, DType::i32);
  CHECK(t.dtype() == DType::i32);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.data_ptr() != host.data());
  host[0] = 100;
  CHECK(t.tolist() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(from_blob(nullptr, {0}, DType::f32).numel() == 0);
}

TEST_CASE("factories: tensor() picks the dtype from the C++ type") {
  CHECK(tensor({1.f, 2.f}).dtype() == DType::f32);
  CHECK(tensor({1.0, 2.0}).dtype() == DType::f64);
  CHECK(tensor({1, 2}).dtype() == DType::i64);
  CHECK(tensor({1L, 2L}).dtype() == DType::i64);
  CHECK(tensor({true, false}).dtype() == DType::boolean);
  CHECK(tensor<uint8_t>({1, 255}).dtype() == DType::u8);
  CHECK(tensor({Half(1.5f)}).dtype() == DType::f16);
  CHECK(tensor({BFloat16(1.5f)}).dtype() == DType::bf16);
  CHECK(tensor({1, -2, 3}).tolist() == std::vector<double>{1, -2, 3});
  CHECK(tensor({true, false}).tolist() == std::vector<double>{1, 0});
  CHECK(tensor({Half(1.5f)}).item<float>() == 1.5f);
  CHECK(tensor<uint8_t>({1, 255}).tolist() == std::vector<double>{1, 255});
}

TEST_CASE("factories: tensor() with a shape or rows") {
  Tensor t = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.tolist() == std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor rows = tensor({{1.f, 2.f}, {3.f, 4.f}, {5.f, 6.f}});
  CHECK(rows.shape() == Shape{3, 2});
  CHECK(rows.dtype() == DType::f32);
  CHECK(rows.tolist() == std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor ints = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(ints.dtype() == DType::i64);
  CHECK(ints.shape() == Shape{2, 3});
  CHECK_THROWS_AS(tensor({{1.f, 2.f}, {3.f}}), ShapeError);
  CHECK_THROWS_AS(tensor(std::vector<float>{1, 2, 3}, {2, 2}), ShapeError);
  CHECK_THROWS_WITH(tensor(std::vector<float>{1, 2, 3}, {2, 2}), Catch::Contains("tensor"));
}

// ---- CPU allocator ----

TEST_CASE("factories: memory_stats follow tensors being created and freed") {
  MemoryStats before = memory_stats();
  {
    Tensor t = empty({1000}, DType::f32);
    MemoryStats during = memory_stats();
    CHECK(during.current_bytes == before.current_bytes + 4000);
    CHECK(during.allocations == before.allocations + 1);
    CHECK(during.live_allocations == before.live_allocations + 1);
    CHECK(during.peak_bytes >= during.current_bytes);
    // A view allocates nothing.
    Tensor v = t.view({10, 100}).t();
    CHECK(memory_stats().allocations == during.allocations);
  }
  MemoryStats after = memory_stats();
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.live_allocations == before.live_allocations);
  CHECK(after.allocations == before.allocations + 1);
}

TEST_CASE("factories: peak memory and its reset") {
  reset_peak_memory_stats();
  MemoryStats start = memory_stats();
  CHECK(start.peak_bytes == start.current_bytes);
  {
    Tensor big = zeros({1 << 16}, DType::f64);
    Tensor small = zeros({16}, DType::f64);
  }
  MemoryStats after = memory_stats();
  CHECK(after.current_bytes == start.current_bytes);
  CHECK(after.peak_bytes == start.current_bytes + (8 << 16) + 128);
  reset_peak_memory_stats();
  CHECK(memory_stats().peak_bytes == memory_stats().current_bytes);
}

TEST_CASE("factories: zero-size tensors hold no bytes but a real pointer") {
  MemoryStats before = memory_stats();
  Tensor z = zeros({0, 8});
  // A non-null data pointer keeps memcpy(dst, src, 0) and friends free of undefined behaviour.
  CHECK(z.data_ptr() != nullptr);
  CHECK(memory_stats().allocations == before.allocations + 1);
  CHECK(memory_stats().current_bytes == before.current_bytes);
}

TEST_CASE("factories: fresh tensors are 64-byte aligned") {
  for (int64_t n : {1, 3, 17, 64, 1000, 4097}) {
    for (DType d : {DType::u8, DType::f16, DType::f32, DType::f64}) {
      Tensor t = empty({n}, d);
      INFO(n << " " << dtype_name(d));
      CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64 == 0);
    }
  }
}

// Blocks of 32 MiB and more, which glibc would map and unmap anew each time (every page faulted
// in again), are kept when freed and handed to the next tensor of their size (rounded up to a
// MiB); the block kept counts as reserved, not as current; smaller sizes never get it.
TEST_CASE("factories: a freed large tensor's block serves the next one of its size") {
  const int64_t large = (int64_t{40} << 20) / 4;  // 40 MiB of f32
  void* first = nullptr;
  {
    Tensor t = empty({large});
    first = t.data_ptr();
  }
  const MemoryStats freed = memory_stats();
  CHECK(freed.reserved_bytes >= freed.current_bytes + (int64_t{40} << 20));
  {
    Tensor small = empty({large / 2});
    CHECK(small.data_ptr() != first);
  }
  Tensor again = empty({large - 3});  // 12 bytes short: the same MiB-rounded block
  CHECK(again.data_ptr() == first);
  CHECK(reinterpret_cast<uintptr_t>(again.data_ptr()) % 64 == 0);
  CHECK(memory_stats().current_bytes == freed.current_bytes + (large - 3) * 4);
}

TEST_CASE("factories: cuda devices throw DeviceError without CUDA") {
  if (cuda::is_available()) return;
  CHECK_THROWS_AS(zeros({2}, DType::f32, Device::cuda()), DeviceError);
  CHECK_THROWS_AS(memory_stats(Device::cuda()), DeviceError);
}

TEST_CASE("factories: sizes whose element count or byte size overflows are a clear ShapeError") {
  // 2^62 f64 elements need 2^65 bytes: the byte count wrapped to 0 and randn wrote past it.
  CHECK_THROWS_AS(randn({int64_t{1} << 62}, DType::f64), ShapeError);
  CHECK_THROWS_WITH(randn({int64_t{1} << 62}, DType::f64),
                    Catch::Contains("empty") && Catch::Contains("byte size"));
  // 2^32 x 2^32 elements: numel() wrapped to 0.
  CHECK_THROWS_WITH(zeros({int64_t{1} << 32, int64_t{1} << 32}),
                    Catch::Contains("[4294967296, 4294967296]") &&
                        Catch::Contains("more elements than an int64 can count"));
  CHECK_THROWS_AS(ones({int64_t{1} << 40, int64_t{1} << 40, 2}), ShapeError);
  CHECK_THROWS_AS(empty({int64_t{1} << 61, 8}, DType::u8), ShapeError);
  CHECK_THROWS_AS(full({3, int64_t{1} << 62}, 1.0, DType::f32), ShapeError);
}

TEST_CASE("factories: views that would overflow the element count are refused") {
  Tensor x = zeros({1, 1});
  CHECK_THROWS_WITH(x.expand({int64_t{1} << 32, int64_t{1} << 32}),
                    Catch::Contains("expand") && Catch::Contains("more elements"));
  Tensor row = zeros({4});
  CHECK_THROWS_WITH(row.reshape({int64_t{1} << 40, int64_t{1} << 40, -1}),
                    Catch::Contains("reshape") && Catch::Contains("overflows"));
  CHECK_THROWS_AS(row.view({int64_t{1} << 62, 4, 0}), ShapeError);
  CHECK_THROWS_AS(row.as_strided({int64_t{1} << 40, 2}, {int64_t{1} << 40, 1}, 0), ShapeError);
  // An empty tensor may have any sizes whose product fits.
  CHECK(zeros({0, int64_t{1} << 40}).numel() == 0);
}
