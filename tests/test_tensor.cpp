// Tensor basics: dtypes and promotion, devices, metadata, views (which must never copy),
// conversions, clone, item and tolist.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

std::vector<double> range_values(int64_t n, double start = 0.0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i);
  return v;
}

// Element offset of a view's first element from its base's first element.
int64_t element_distance(const Tensor& view, const Tensor& base) {
  auto bytes =
      static_cast<const char*>(view.data_ptr()) - static_cast<const char*>(base.data_ptr());
  return static_cast<int64_t>(bytes) / static_cast<int64_t>(base.element_size());
}

void check_shares(const Tensor& view, const Tensor& base) {
  CHECK(view.storage() == base.storage());
  CHECK(view.storage()->data() == base.storage()->data());
}

}  // namespace

// ---- dtypes ----

TEST_CASE("tensor: dtype sizes and names") {
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::i32) == 4);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK(dtype_size(DType::u8) == 1);
  CHECK(dtype_size(DType::boolean) == 1);
  const char* names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"};
  for (size_t i = 0; i < 8; ++i) {
    CHECK(std::string(dtype_name(kAllDTypes[i])) == names[i]);
    CHECK(dtype_from_name(names[i]) == kAllDTypes[i]);
  }
  CHECK(dtype_from_name("float32") == DType::f32);
  CHECK(dtype_from_name("bfloat16") == DType::bf16);
  CHECK_THROWS_AS(dtype_from_name("int8"), DTypeError);
  CHECK_THROWS_WITH(dtype_from_name("int8"), Catch::Contains("int8"));
}

TEST_CASE("tensor: dtype categories") {
  CHECK(is_floating(DType::f16));
  CHECK(is_floating(DType::bf16));
  CHECK_FALSE(is_floating(DType::i64));
  CHECK(is_integral(DType::u8));
  CHECK_FALSE(is_integral(DType::boolean));
  CHECK(is_integral(DType::boolean, true));
  CHECK_FALSE(is_integral(DType::f32, true));
}

TEST_CASE("tensor: promote_types follows PyTorch's table") {
  using D = DType;
  // Rows and columns in kAllDTypes order: f32 f64 f16 bf16 i32 i64 u8 bool (torch.promote_types).
  const D table[8][8] = {
      {D::f32, D::f64, D::f32, D::f32, D::f32, D::f32, D::f32, D::f32},
      {D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64},
      {D::f32, D::f64, D::f16, D::f32, D::f16, D::f16, D::f16, D::f16},
      {D::f32, D::f64, D::f32, D::bf16, D::bf16, D::bf16, D::bf16, D::bf16},
      {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::i32, D::i32},
      {D::f32, D::f64, D::f16, D::bf16, D::i64, D::i64, D::i64, D::i64},
      {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::u8, D::u8},
      {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::u8, D::boolean},
  };
  for (size_t i = 0; i < 8; ++i) {
    for (size_t j = 0; j < 8; ++j) {
      INFO(dtype_name(kAllDTypes[i]) << " + " << dtype_name(kAllDTypes[j]));
      CHECK(promote_types(kAllDTypes[i], kAllDTypes[j]) == table[i][j]);
    }
  }
}

// ---- devices ----

TEST_CASE("tensor: Device::parse accepts cpu, cuda and cuda:N") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:1") == Device::cuda(1));
  CHECK(Device::parse("cuda:1").index == 1);
  CHECK(Device::parse("cuda:1").is_cuda());
  CHECK(Device::cpu().str() == "cpu");
  CHECK(Device::cuda(2).str() == "cuda:2");
  CHECK(Device::parse(Device::cuda(3).str()) == Device::cuda(3));
}

TEST_CASE("tensor: Device::parse rejects bad strings") {
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda:1a", "cuda1",
                          "cpu:0", "cuda:99999999999"}) {
    INFO(bad);
    CHECK_THROWS_AS(Device::parse(bad), ValueError);
  }
  CHECK_THROWS_WITH(Device::parse("gpu"),
                    Catch::Contains("Device::parse") && Catch::Contains("gpu"));
}

// ---- metadata ----

TEST_CASE("tensor: metadata of a fresh tensor") {
  Tensor t = zeros({2, 3, 4});
  CHECK(t.shape() == Shape{2, 3, 4});
  CHECK(t.strides() == Shape{12, 4, 1});
  CHECK(t.offset() == 0);
  CHECK(t.numel() == 24);
  CHECK(t.dim() == 3);
  CHECK(t.size(-1) == 4);
  CHECK(t.stride(0) == 12);
  CHECK(t.is_contiguous());
  CHECK(t.dtype() == DType::f32);
  CHECK(t.element_size() == 4);
  CHECK(t.device() == Device::cpu());
  CHECK_THROWS_AS(t.size(3), IndexError);
  CHECK_THROWS_AS(t.stride(-4), IndexError);
}

TEST_CASE("tensor: metadata of 0-dim and zero-size tensors") {
  Tensor s = scalar_tensor(2.0);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.shape().empty());
  CHECK(s.is_contiguous());
  Tensor z = empty({0, 3});
  CHECK(z.numel() == 0);
  CHECK(z.strides() == Shape{3, 1});
  CHECK(z.tolist().empty());
}

TEST_CASE("tensor: undefined tensor metadata throws") {
  Tensor u;
  CHECK_FALSE(u.defined());
  CHECK_THROWS_AS(u.shape(), ValueError);
  CHECK_THROWS_AS(u.numel(), ValueError);
  CHECK(u.str() == "tensor(undefined)");
}

TEST_CASE("tensor: data<T> checks the dtype") {
  Tensor t = zeros({2}, DType::f64);
  CHECK(t.data<double>() == t.data_ptr());
  CHECK_THROWS_AS(t.data<float>(), DTypeError);
  CHECK_THROWS_WITH(t.data<float>(), Catch::Contains("f32") && Catch::Contains("f64"));
}

// ---- views ----

TEST_CASE("tensor: view shares storage and infers -1") {
  Tensor t = arange(24);
  Tensor v = t.view({2, -1, 4});
  CHECK(v.shape() == Shape{2, 3, 4});
  CHECK(v.strides() == Shape{12, 4, 1});
  check_shares(v, t);
  CHECK(v.data_ptr() == t.data_ptr());
  CHECK(v.tolist() == range_values(24));
  // Writes through the view reach the base.
  v.select(0, 1).select(0, 2).fill_(-5);
  CHECK(t.tolist()[20] == -5);
}

TEST_CASE("tensor: view errors") {
  Tensor t = arange(6).view({2, 3});
  CHECK_THROWS_AS(t.t().view({6}), ShapeError);
  CHECK_THROWS_WITH(t.t().view({6}), Catch::Contains("view"));
  CHECK_THROWS_AS(t.view({4}), ShapeError);
  CHECK_THROWS_WITH(t.view({4}), Catch::Contains("view") && Catch::Contains("[4]"));
  CHECK_THROWS_AS(t.view({-1, -1}), ShapeError);
  CHECK_THROWS_AS(t.view({5, -1}), ShapeError);
}

TEST_CASE("tensor: view of non-contiguous tensors where strides allow") {
  Tensor t = arange(12).view({3, 4});
  Tensor stepped = t.slice(1, 0, 4, 2);  // [3, 2], strides [4, 2]
  Tensor v = stepped.view({3, 2, 1});
  check_shares(v, t);
  CHECK(v.tolist() == std::vector<double>{0, 2, 4, 6, 8, 10});
  // Every other column of a 4-wide row is evenly spaced: one dim of stride 2.
  CHECK(stepped.view({6}).strides() == Shape{2});
  CHECK(stepped.view({6}).tolist() == std::vector<double>{0, 2, 4, 6, 8, 10});
  CHECK_THROWS_AS(t.slice(1, 0, 2).view({6}), ShapeError);
  // Splitting a broadcast dim keeps its zero stride.
  Tensor e = arange(3).view({3, 1}).expand({3, 4});
  Tensor split = e.view({3, 2, 2});
  CHECK(split.strides() == Shape{1, 0, 0});
  CHECK(split.tolist() == e.tolist());
  CHECK_THROWS_AS(e.view({12}), ShapeError);
  // Transposed then merged only within the contiguous run.
  Tensor p = arange(24).view({2, 3, 4}).permute({1, 2, 0});  // strides [4, 1, 12]
  Tensor merged = p.view({12, 2});
  CHECK(merged.strides() == Shape{1, 12});
  check_shares(merged, p);
}

TEST_CASE("tensor: reshape is a view when possible and a copy when not") {
  Tensor t = arange(6).view({2, 3});
  Tensor r = t.reshape({3, 2});
  check_shares(r, t);
  Tensor tt = t.t();
  Tensor c = tt.reshape({-1});
  CHECK(c.storage() != t.storage());
  CHECK(c.tolist() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(c.is_contiguous());
  CHECK_THROWS_AS(t.reshape({4, 2}), ShapeError);
  CHECK_THROWS_WITH(t.reshape({4, 2}), Catch::Contains("reshape"));
}

TEST_CASE("tensor: permute reorders shape and strides without copying") {
  Tensor t = arange(24).view({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  check_shares(p, t);
  CHECK_FALSE(p.is_contiguous());
  std::vector<double> vals = p.tolist();
  // p[k][i][j] == t[i][j][k] == 12 i + 4 j + k.
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) CHECK(vals[k * 6 + i * 3 + j] == 12 * i + 4 * j + k);
  CHECK(t.permute({-1, 0, 1}).shape() == Shape{4, 2, 3});
  CHECK_THROWS_AS(t.permute({0, 1}), ShapeError);
  CHECK_THROWS_AS(t.permute({0, 0, 1}), IndexError);
  CHECK_THROWS_WITH(t.permute({0, 0, 1}), Catch::Contains("permute"));
  CHECK_THROWS_AS(t.permute({0, 1, 3}), IndexError);
}

TEST_CASE("tensor: transpose and t") {
  Tensor t = arange(6).view({2, 3});
  Tensor tt = t.t();
  CHECK(tt.shape() == Shape{3, 2});
  CHECK(tt.strides() == Shape{1, 3});
  check_shares(tt, t);
  CHECK(tt.tolist() == std::vector<double>{0, 3, 1, 4, 2, 5});
  Tensor x = arange(24).view({2, 3, 4});
  Tensor xt = x.transpose(0, -1);
  CHECK(xt.shape() == Shape{4, 3, 2});
  CHECK(xt.strides() == Shape{1, 4, 12});
  CHECK(arange(3).t().shape() == Shape{3});
  CHECK_THROWS_AS(x.t(), ShapeError);
  CHECK_THROWS_AS(x.transpose(0, 3), IndexError);
}

TEST_CASE("tensor: slice with negative bounds, clamping and step") {
  Tensor t = arange(10);
  Tensor tail = t.slice(0, -3, 10);
  CHECK(tail.tolist() == std::vector<double>{7, 8, 9});
  CHECK(element_distance(tail, t) == 7);
  check_shares(tail, t);
  Tensor stepped = t.slice(0, 1, 8, 3);
  CHECK(stepped.tolist() == std::vector<double>{1, 4, 7});
  CHECK(stepped.strides() == Shape{3});
  CHECK(t.slice(0, 2, -2).tolist() == std::vector<double>{2, 3, 4, 5, 6, 7});
  CHECK(t.slice(0, -100, 100).numel() == 10);
  CHECK(t.slice(0, 6, 3).numel() == 0);
  CHECK(t.slice(0, 0, 10, 4).tolist() == std::vector<double>{0, 4, 8});
  CHECK_THROWS_AS(t.slice(0, 0, 5, 0), ValueError);
  CHECK_THROWS_AS(t.slice(0, 0, 5, -1), ValueError);
  CHECK_THROWS_AS(t.slice(1, 0, 5), IndexError);
  CHECK_THROWS_AS(scalar_tensor(1).slice(0, 0, 1), ShapeError);
}

TEST_CASE("tensor: slice along an inner dim") {
  Tensor t = arange(12).view({3, 4});
  Tensor s = t.slice(1, 1, 3);
  CHECK(s.shape() == Shape{3, 2});
  CHECK(s.strides() == Shape{4, 1});
  CHECK(element_distance(s, t) == 1);
  CHECK(s.tolist() == std::vector<double>{1, 2, 5, 6, 9, 10});
}

TEST_CASE("tensor: narrow") {
  Tensor t = arange(12).view({3, 4});
  Tensor n = t.narrow(1, 2, 2);
  CHECK(n.tolist() == std::vector<double>{2, 3, 6, 7, 10, 11});
  check_shares(n, t);
  CHECK(element_distance(n, t) == 2);
  CHECK(t.narrow(0, -1, 1).tolist() == std::vector<double>{8, 9, 10, 11});
  CHECK(t.narrow(0, 1, 0).numel() == 0);
  CHECK_THROWS_AS(t.narrow(1, 3, 2), IndexError);
  CHECK_THROWS_WITH(t.narrow(1, 3, 2), Catch::Contains("narrow"));
  CHECK_THROWS_AS(t.narrow(1, 0, -1), IndexError);
}

TEST_CASE("tensor: select removes a dim and wraps negative indices") {
  Tensor t = arange(12).view({3, 4});
  Tensor row = t.select(0, -1);
  CHECK(row.shape() == Shape{4});
  CHECK(row.tolist() == std::vector<double>{8, 9, 10, 11});
  CHECK(element_distance(row, t) == 8);
  check_shares(row, t);
  Tensor col = t.select(1, 2);
  CHECK(col.strides() == Shape{4});
  CHECK(col.tolist() == std::vector<double>{2, 6, 10});
  Tensor elem = t.select(0, 1).select(0, 3);
  CHECK(elem.dim() == 0);
  CHECK(elem.item<int64_t>() == 7);
}

TEST_CASE("tensor: select out of range throws IndexError") {
  Tensor t = arange(12).view({3, 4});
  CHECK_THROWS_AS(t.select(0, 3), IndexError);
  CHECK_THROWS_AS(t.select(0, -4), IndexError);
  CHECK_THROWS_AS(t.select(2, 0), IndexError);
  CHECK_THROWS_WITH(t.select(1, 4), Catch::Contains("select") && Catch::Contains("4"));
  CHECK_THROWS_AS(scalar_tensor(1.0).select(0, 0), ShapeError);
}

TEST_CASE("tensor: expand with -1 and new leading dims") {
  Tensor t = arange(3).view({3, 1});
  Tensor e = t.expand({-1, 4});
  CHECK(e.shape() == Shape{3, 4});
  CHECK(e.strides() == Shape{1, 0});
  check_shares(e, t);
  CHECK(e.tolist() == std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  Tensor lead = t.expand({2, 3, 4});
  CHECK(lead.strides() == Shape{0, 1, 0});
  CHECK(lead.numel() == 24);
  CHECK(e.expand_as(lead).shape() == Shape{2, 3, 4});
  CHECK(scalar_tensor(5).expand({2, 2}).tolist() == std::vector<double>{5, 5, 5, 5});
}

TEST_CASE("tensor: illegal expand throws ShapeError") {
  Tensor t = zeros({3, 2});
  CHECK_THROWS_AS(t.expand({3, 4}), ShapeError);
  CHECK_THROWS_WITH(t.expand({3, 4}), Catch::Contains("expand") && Catch::Contains("[3, 4]"));
  CHECK_THROWS_AS(t.expand({2}), ShapeError);
  CHECK_THROWS_AS(t.expand({-1, 3, 2}), ShapeError);
}

TEST_CASE("tensor: squeeze and unsqueeze") {
  Tensor t = arange(3).view({1, 3, 1});
  CHECK(t.squeeze().shape() == Shape{3});
  CHECK(t.squeeze(0).shape() == Shape{3, 1});
  CHECK(t.squeeze(-1).shape() == Shape{1, 3});
  CHECK(t.squeeze(1).shape() == Shape{1, 3, 1});
  check_shares(t.squeeze(), t);
  Tensor v = arange(3);
  CHECK(v.unsqueeze(0).shape() == Shape{1, 3});
  CHECK(v.unsqueeze(-1).shape() == Shape{3, 1});
  CHECK(v.unsqueeze(1).shape() == Shape{3, 1});
  check_shares(v.unsqueeze(0), v);
  CHECK_THROWS_AS(v.unsqueeze(2), IndexError);
  CHECK(scalar_tensor(1).unsqueeze(0).shape() == Shape{1});
  CHECK(zeros({1, 1}).squeeze().dim() == 0);
  // A squeeze of a transposed tensor is still a view.
  Tensor tt = arange(6).view({2, 1, 3}).transpose(0, 2);
  Tensor sq = tt.squeeze(1);
  CHECK(sq.strides() == Shape{1, 3});
  CHECK(sq.tolist() == std::vector<double>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("tensor: flatten") {
  Tensor t = arange(24).view({2, 3, 4});
  CHECK(t.flatten().shape() == Shape{24});
  CHECK(t.flatten(1).shape() == Shape{2, 12});
  CHECK(t.flatten(0, 1).shape() == Shape{6, 4});
  check_shares(t.flatten(), t);
  Tensor p = t.permute({2, 1, 0});
  Tensor f = p.flatten();
  CHECK(f.storage() != t.storage());
  CHECK(f.tolist() == p.contiguous().tolist());
  CHECK(scalar_tensor(3).flatten().shape() == Shape{1});
  CHECK_THROWS_AS(t.flatten(2, 1), ValueError);
}

TEST_CASE("tensor: as_strided") {
  Tensor t = arange(6);
  Tensor a = t.as_strided({2, 2}, {1, 2}, 1);
  check_shares(a, t);
  CHECK(element_distance(a, t) == 1);
  CHECK(a.tolist() == std::vector<double>{1, 3, 2, 4});
  Tensor overlapping = t.as_strided({3, 3}, {1, 1}, 0);
  CHECK(overlapping.tolist() == std::vector<double>{0, 1, 2, 1, 2, 3, 2, 3, 4});
  CHECK_THROWS_AS(t.as_strided({2, 3}, {3, 1}, 1), IndexError);
  CHECK_THROWS_AS(t.as_strided({2}, {1, 1}, 0), ShapeError);
  CHECK_THROWS_AS(t.as_strided({2}, {1}, -1), IndexError);
}

TEST_CASE("tensor: contiguous returns itself or a row-major copy") {
  Tensor t = arange(6).view({2, 3});
  CHECK(t.contiguous().is_same(t));
  Tensor tt = t.t();
  Tensor c = tt.contiguous();
  CHECK_FALSE(c.is_same(tt));
  CHECK(c.storage() != t.storage());
  CHECK(c.is_contiguous());
  CHECK(c.strides() == Shape{2, 1});
  CHECK(c.tolist() == tt.tolist());
  // A size-1 dim's stride does not matter for contiguity.
  Tensor col = arange(3).view({3, 1});
  CHECK(col.as_strided({3, 1}, {1, 7}, 0).is_contiguous());
}

TEST_CASE("tensor: zero-size tensors through views") {
  Tensor z = zeros({0, 3});
  CHECK(z.view({3, 0}).shape() == Shape{3, 0});
  CHECK(z.reshape({-1, 3}).shape() == Shape{0, 3});
  CHECK_THROWS_AS(z.reshape({0, -1}), ShapeError);
  CHECK(z.t().shape() == Shape{3, 0});
  CHECK(z.t().contiguous().numel() == 0);
  CHECK(z.permute({1, 0}).tolist().empty());
  CHECK(z.slice(1, 1, 3).shape() == Shape{0, 2});
  CHECK(z.expand({2, 0, 3}).shape() == Shape{2, 0, 3});
  CHECK(z.unsqueeze(1).shape() == Shape{0, 1, 3});
  CHECK(z.flatten().shape() == Shape{0});
  CHECK(z.select(1, 2).shape() == Shape{0});
  CHECK(z.clone().shape() == Shape{0, 3});
  CHECK(z.to(DType::i32).shape() == Shape{0, 3});
  CHECK_THROWS_AS(z.select(0, 0), IndexError);
}

// ---- conversions ----

TEST_CASE("tensor: to(dtype) round-trips small integers through every dtype") {
  const std::vector<double> values = {0, 1, 2, 100};
  Tensor base = tensor<double>({0, 1, 2, 100});
  for (DType from : kAllDTypes) {
    if (from == DType::boolean) continue;
    for (DType to : kAllDTypes) {
      if (to == DType::boolean) continue;
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      Tensor converted = base.to(from).to(to);
      CHECK(converted.dtype() == to);
      CHECK(converted.tolist() == values);
    }
  }
}

TEST_CASE("tensor: to(dtype) is itself when the dtype matches") {
  Tensor t = zeros({2});
  CHECK(t.to(DType::f32).is_same(t));
  CHECK_FALSE(t.to(DType::f64).is_same(t));
}

TEST_CASE("tensor: float to integer truncates toward zero") {
  Tensor t = tensor<double>({1.7, -2.7, 2.5, -0.5});
  CHECK(t.to(DType::i32).tolist() == std::vector<double>{1, -2, 2, 0});
  CHECK(t.to(DType::i64).tolist() == std::vector<double>{1, -2, 2, 0});
  CHECK(tensor<double>({0.9, 255.0, 3.2}).to(DType::u8).tolist() == std::vector<double>{0, 255, 3});
}

TEST_CASE("tensor: conversion to bool is non-zero") {
  Tensor t = tensor<float>({0.0f, 0.5f, -2.0f, -0.0f});
  Tensor b = t.to(DType::boolean);
  CHECK(b.dtype() == DType::boolean);
  CHECK(b.tolist() == std::vector<double>{0, 1, 1, 0});
  CHECK(tensor({0, 3, -1}).to(DType::boolean).tolist() == std::vector<double>{0, 1, 1});
  CHECK(b.to(DType::f32).tolist() == std::vector<double>{0, 1, 1, 0});
  CHECK(b.to(DType::i64).tolist() == std::vector<double>{0, 1, 1, 0});
}

TEST_CASE("tensor: f16 rounds to nearest even and overflows to inf") {
  Tensor t = tensor<double>({1.0 / 3.0, 2049, 2051, 65504, 65520, 1e-8, -0.1});
  std::vector<double> h = t.to(DType::f16).tolist();
  CHECK(h[0] == 0.333251953125);
  CHECK(h[1] == 2048);  // halfway between 2048 and 2050: even mantissa wins
  CHECK(h[2] == 2052);
  CHECK(h[3] == 65504);
  CHECK(std::isinf(h[4]));
  CHECK(h[5] == 0.0);
  CHECK(h[6] == Approx(-0.0999755859375).epsilon(0));
}

TEST_CASE("tensor: bf16 keeps f32's range with 8 bits of precision") {
  Tensor t = tensor<double>({1.0 / 3.0, 257, 259, 1e30, -1.5});
  std::vector<double> b = t.to(DType::bf16).tolist();
  CHECK(b[0] == 0.333984375);
  CHECK(b[1] == 256);  // halfway between 256 and 258
  CHECK(b[2] == 260);
  CHECK(b[3] == Approx(1e30).epsilon(1e-2));
  CHECK(b[4] == -1.5);
  CHECK(t.to(DType::bf16).to(DType::f16).tolist()[4] == -1.5);
}

TEST_CASE("tensor: to(dtype) of a non-contiguous tensor") {
  Tensor t = arange(6).view({2, 3}).t();
  Tensor f = t.to(DType::f32);
  CHECK(f.is_contiguous());
  CHECK(f.tolist() == std::vector<double>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("tensor: clone is a deep copy") {
  Tensor t = tensor<float>({1, 2, 3});
  Tensor c = t.clone();
  CHECK(c.storage() != t.storage());
  c.fill_(7);
  CHECK(t.tolist() == std::vector<double>{1, 2, 3});
  CHECK(c.tolist() == std::vector<double>{7, 7, 7});
  Tensor strided = arange(12).view({3, 4}).slice(1, 0, 4, 2);
  Tensor sc = strided.clone();
  CHECK(sc.is_contiguous());
  CHECK(sc.tolist() == strided.tolist());
  CHECK(sc.dtype() == DType::i64);
}

TEST_CASE("tensor: item converts the single element") {
  CHECK(scalar_tensor(3.5).item<float>() == 3.5f);
  CHECK(scalar_tensor(3.5, DType::f64).item<double>() == 3.5);
  CHECK(scalar_tensor(3.5).item<int64_t>() == 3);
  CHECK(scalar_tensor(1, DType::boolean).item<bool>());
  CHECK(tensor({7}).item<int>() == 7);
  CHECK(zeros({1, 1, 1}).item<double>() == 0.0);
  // i64 values beyond 2^53 must not go through double.
  const int64_t big = (int64_t{1} << 53) + 1;
  Tensor b = tensor<int64_t>(std::vector<int64_t>{big});
  CHECK(b.item<int64_t>() == big);
  CHECK(arange(5).select(0, 3).item<int64_t>() == 3);
  CHECK_THROWS_AS(zeros({2}).item<float>(), ValueError);
  CHECK_THROWS_AS(zeros({0}).item<int64_t>(), ValueError);
  CHECK_THROWS_WITH(zeros({2}).item<float>(), Catch::Contains("item"));
}

TEST_CASE("tensor: tolist walks row-major order of any layout") {
  Tensor t = arange(24).view({2, 3, 4}).permute({1, 0, 2}).slice(2, 1, 4, 2);
  std::vector<double> got = t.tolist();
  REQUIRE(got.size() == 12);
  size_t k = 0;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t l = 1; l < 4; l += 2) CHECK(got[k++] == 12 * j + 4 * i + l);
  CHECK(scalar_tensor(2.5).tolist() == std::vector<double>{2.5});
}

TEST_CASE("tensor: copies made by make_tensor share storage") {
  Tensor t = arange(4);
  Tensor alias = make_tensor(t.storage(), {2, 2}, {2, 1}, 0, DType::i64);
  CHECK(alias.tolist() == std::vector<double>{0, 1, 2, 3});
  Tensor handle = t;
  CHECK(handle.is_same(t));
}

TEST_CASE("tensor: == and != are elementwise, as PyTorch's; equal() is the one bool") {
  Tensor a = tensor({1.f, 2.f, 3.f}), b = tensor({1.f, 0.f, 3.f});
  Tensor same = a == b;
  CHECK(same.dtype() == DType::boolean);
  CHECK(same.tolist() == std::vector<double>{1, 0, 1});
  CHECK((a != b).tolist() == std::vector<double>{0, 1, 0});
  CHECK((a == 2.0).tolist() == std::vector<double>{0, 1, 0});
  CHECK((2.0 != a).tolist() == std::vector<double>{1, 0, 1});
  CHECK_FALSE(equal(a, b));
}

TEST_CASE("tensor: std::cout << t prints str(), and item() needs no type") {
  Tensor t = tensor({1.5, -2.0});
  std::ostringstream out;
  out << t;
  CHECK(out.str() == t.str());
  CHECK(scalar_tensor(2.5).item() == 2.5);
  CHECK(scalar_tensor(7, DType::i64).item() == 7.0);
  CHECK(scalar_tensor(int64_t{1} << 60, DType::i64).item<int64_t>() == int64_t{1} << 60);
}

TEST_CASE("tensor: indexing t(i) by subscript, compound assignment, printing dtypes and devices") {
  Tensor m = tensor({{1.f, 2.f}, {3.f, 4.f}});
  CHECK(m[1].tolist() == std::vector<double>{3, 4});
  m[0] += 10.0;  // a view: writes into m, as m[0] += 10 in PyTorch
  CHECK(m.tolist() == std::vector<double>{11, 12, 3, 4});
  Tensor v = tensor({1.f, 2.f});
  v += tensor({1.f, 1.f});
  v *= 3.0;
  v -= 1.0;
  v /= tensor({2.f, 4.f});
  CHECK(v.tolist() == std::vector<double>{2.5, 2.0});
  std::ostringstream out;
  out << DType::bf16 << " " << Device::cuda(1) << " " << Device::cpu();
  CHECK(out.str() == "bf16 cuda:1 cpu");
}
