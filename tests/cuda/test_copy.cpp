// GPU copies and casts: host <-> device of strided tensors, device-side gathers and casts between
// every dtype pair against the CPU's casts, copy_ into strided and broadcast destinations, fills,
// and the gradients of to(device) and to(dtype).
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using testing::check_close;
using testing::check_gpu_parity;
using testing::kExact;
using testing::random_f64;

namespace {

const Device kCuda = Device::cuda(0);
constexpr DType kAllTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                               DType::i32, DType::i64, DType::u8,  DType::boolean};

// Values every cast handles without undefined behaviour: fractions in [0, 200) for a u8 target
// (a float below 0 or past 255 cast to u8 is undefined in C++), signed values otherwise; integer
// sources wrap the same way on both devices.
Tensor cast_source(const Shape& shape, DType source, DType target, uint64_t seed) {
  const bool unsigned_target = target == DType::u8;
  Tensor values = random_f64(shape, seed, unsigned_target ? 0.0 : -100.0, 200.0);
  if (source == DType::boolean) {
    // Some zeros, so the cast to bool sees both values.
    values = mul(values, gt(random_f64(shape, seed + 1), 0.0).to(DType::f64));
  }
  return values.to(source);
}

using View = Tensor (*)(const Tensor&);

struct Layout {
  std::string name;
  Shape base;
  View view;
};

std::vector<Layout> layouts() {
  return {
      {"contiguous (vectorised, odd tail)", {37, 53}, [](const Tensor& t) { return t; }},
      {"transposed", {53, 37}, [](const Tensor& t) { return t.t(); }},
      {"sliced with step", {37, 106}, [](const Tensor& t) { return t.slice(1, 1, 106, 2); }},
      {"permuted 4-d",
       {3, 4, 5, 6},
       [](const Tensor& t) {
         return t.permute({3, 1, 0, 2});
       }},
      {"offset 1 (misaligned)", {2049}, [](const Tensor& t) { return t.slice(0, 1, 2049); }},
      {"expanded",
       {37, 1},
       [](const Tensor& t) {
         return t.expand({37, 53});
       }},
      {"selected column", {37, 53}, [](const Tensor& t) { return t.select(1, 5); }},
      {"zero-size", {0, 5}, [](const Tensor& t) { return t; }},
      {"0-dim", {}, [](const Tensor& t) { return t; }},
  };
}

}  // namespace

TEST_CASE("cuda copy: cpu -> cuda -> cpu round trips strided tensors of every dtype") {
  uint64_t seed = 1;
  for (DType dtype : kAllTypes)
    for (const Layout& layout : layouts()) {
      INFO(dtype_name(dtype) << ", " << layout.name);
      Tensor base = cast_source(layout.base, DType::f64, dtype, seed++).to(dtype);
      Tensor host = layout.view(base);
      // A strided host view: gathered on the CPU, lands contiguous.
      Tensor device = host.to(kCuda);
      CHECK(device.device() == kCuda);
      CHECK(device.is_contiguous());
      check_gpu_parity(device, host, kExact);
      // A strided view of a cuda tensor back to the host: gathered on the GPU first.
      check_gpu_parity(layout.view(base.to(kCuda)), host, kExact);
    }
}

TEST_CASE("cuda copy: strided cuda views gather on the device (contiguous, clone)") {
  uint64_t seed = 100;
  for (DType dtype : kAllTypes)
    for (const Layout& layout : layouts()) {
      INFO(dtype_name(dtype) << ", " << layout.name);
      Tensor base = cast_source(layout.base, DType::f64, dtype, seed++).to(dtype);
      Tensor view_gpu = layout.view(base.to(kCuda));
      Tensor gathered = view_gpu.contiguous();
      CHECK(gathered.device() == kCuda);
      CHECK(gathered.is_contiguous());
      check_gpu_parity(gathered, layout.view(base).contiguous(), kExact);
      check_gpu_parity(view_gpu.clone(), layout.view(base).clone(), kExact);
      check_gpu_parity(view_gpu, layout.view(base), kExact);
    }
}

TEST_CASE("cuda copy: casts between every dtype pair on cuda match the cpu's casts") {
  uint64_t seed = 200;
  for (DType source : kAllTypes)
    for (DType target : kAllTypes)
      for (const Layout& layout : layouts()) {
        INFO(dtype_name(source) << " -> " << dtype_name(target) << ", " << layout.name);
        Tensor base = cast_source(layout.base, source, target, seed++);
        Tensor on_cpu = layout.view(base).to(target);
        Tensor on_gpu = layout.view(base.to(kCuda)).to(target);
        CHECK(on_gpu.device() == kCuda);
        check_gpu_parity(on_gpu, on_cpu, kExact);
      }
}

TEST_CASE("cuda copy: casts across devices convert on the destination side") {
  uint64_t seed = 300;
  for (DType source : kAllTypes)
    for (DType target : kAllTypes) {
      INFO(dtype_name(source) << " -> " << dtype_name(target));
      Tensor host = cast_source({53, 37}, source, target, seed++).t();
      Tensor expected = host.to(target);
      // host -> device with a cast: into a contiguous and into a strided cuda destination
      Tensor dst = empty({37, 53}, target, kCuda);
      dst.copy_(host);
      check_gpu_parity(dst, expected, kExact);
      Tensor wide = zeros({37, 106}, target, kCuda);
      wide.slice(1, 0, 106, 2).copy_(host);
      check_gpu_parity(wide.slice(1, 0, 106, 2), expected, kExact);
      check_gpu_parity(wide.slice(1, 1, 106, 2), zeros({37, 53}, target), kExact);
      // device -> host with a cast, from a strided cuda source into a strided host destination
      Tensor device_view = host.t().to(kCuda).t();
      Tensor back = zeros({53, 37}, target).t();
      back.copy_(device_view);
      check_close(back, expected, kExact);
    }
}

TEST_CASE("cuda copy: copy_ into a non-contiguous cuda destination") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::i64}) {
    INFO(dtype_name(dtype));
    Tensor src = cast_source({8, 5}, DType::f64, dtype, 400).to(dtype);
    Tensor dst_cpu = cast_source({10, 8}, DType::f64, dtype, 401).to(dtype);
    Tensor dst_gpu = dst_cpu.to(kCuda);
    // Every other column of a transposed destination: strided in both dims.
    dst_cpu.t().slice(1, 0, 10, 2).copy_(src);
    dst_gpu.t().slice(1, 0, 10, 2).copy_(src.to(kCuda));
    check_gpu_parity(dst_gpu, dst_cpu, kExact);
    // From a strided cuda source, and from a strided CPU source, into a strided cuda destination.
    Tensor dst2_cpu = zeros({10, 8}, dtype), dst2_gpu = zeros({10, 8}, dtype, kCuda);
    dst2_cpu.slice(0, 1, 10, 2).copy_(src.t());
    dst2_gpu.slice(0, 1, 10, 2).copy_(src.to(kCuda).t());
    dst2_cpu.slice(0, 0, 10, 2).copy_(src.t());
    dst2_gpu.slice(0, 0, 10, 2).copy_(src.t());
    check_gpu_parity(dst2_gpu, dst2_cpu, kExact);
  }
}

TEST_CASE("cuda copy: copy_ broadcasts its source, on one device and across devices") {
  for (DType dtype : {DType::f32, DType::bf16, DType::i32, DType::boolean}) {
    INFO(dtype_name(dtype));
    Tensor row = cast_source({6}, DType::f64, dtype, 500).to(dtype);
    Tensor column = cast_source({5, 1}, DType::f64, DType::f32, 501);  // cast to dtype on copy
    Tensor expect_row = zeros({4, 5, 6}, dtype), expect_col = zeros({4, 5, 6}, dtype);
    expect_row.copy_(row);
    expect_col.copy_(column);
    Tensor a = zeros({4, 5, 6}, dtype, kCuda), b = zeros({4, 5, 6}, dtype, kCuda);
    a.copy_(row.to(kCuda));  // cuda -> cuda
    b.copy_(column);         // cpu -> cuda, with a cast
    check_gpu_parity(a, expect_row, kExact);
    check_gpu_parity(b, expect_col, kExact);
    Tensor c = zeros({4, 5, 6}, dtype, kCuda);
    c.copy_(full({}, 3.0, DType::f64));  // a 0-dim host scalar
    check_gpu_parity(c, full({4, 5, 6}, 3.0, dtype), kExact);
  }
}

TEST_CASE("cuda copy: copy_ between overlapping views of one cuda tensor") {
  Tensor host = arange(0.0, 20.0, 1.0, DType::f32);
  Tensor device = host.to(kCuda);
  host.slice(0, 1, 20).copy_(host.slice(0, 0, 19));
  device.slice(0, 1, 20).copy_(device.slice(0, 0, 19));
  check_gpu_parity(device, host, kExact);
}

TEST_CASE("cuda copy: fill_, zeros, ones, full and arange on cuda in every dtype") {
  for (DType dtype : kAllTypes) {
    INFO(dtype_name(dtype));
    check_gpu_parity(zeros({37, 53}, dtype, kCuda), zeros({37, 53}, dtype), kExact);
    check_gpu_parity(ones({2049}, dtype, kCuda), ones({2049}, dtype), kExact);
    check_gpu_parity(full({7, 3}, 2.5, dtype, kCuda), full({7, 3}, 2.5, dtype), kExact);
    check_gpu_parity(full({}, 1.0, dtype, kCuda), full({}, 1.0, dtype), kExact);
    check_gpu_parity(zeros({0, 3}, dtype, kCuda), zeros({0, 3}, dtype), kExact);
    check_gpu_parity(arange(0.0, 100.0, 1.0, dtype == DType::boolean ? DType::u8 : dtype, kCuda),
                     arange(0.0, 100.0, 1.0, dtype == DType::boolean ? DType::u8 : dtype), kExact);
    // fill_ through strided and misaligned views changes only the viewed elements.
    Tensor host = zeros({8, 12}, dtype), device = zeros({8, 12}, dtype, kCuda);
    host.t().slice(0, 1, 12, 3).fill_(1.0);
    device.t().slice(0, 1, 12, 3).fill_(1.0);
    host.view({96}).slice(0, 1, 6).fill_(1.0);
    device.view({96}).slice(0, 1, 6).fill_(1.0);
    check_gpu_parity(device, host, kExact);
  }
}

TEST_CASE("cuda copy: large copies take the vector path with an odd tail") {
  const int64_t n = (int64_t{1} << 20) + 3;
  Tensor host = random_f64({n}, 600, -100.0, 100.0);
  Tensor device = host.to(kCuda);
  for (DType target : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::f64}) {
    INFO(dtype_name(target));
    check_gpu_parity(device.to(target), host.to(target), kExact);
    check_gpu_parity(device.slice(0, 1, n).to(target), host.slice(0, 1, n).to(target), kExact);
    check_gpu_parity(device.slice(0, 0, n, 3).to(target), host.slice(0, 0, n, 3).to(target),
                     kExact);
  }
  Tensor f16 = host.to(DType::f16);
  check_gpu_parity(f16.to(kCuda).to(DType::f32), f16.to(DType::f32), kExact);
}

TEST_CASE("cuda copy: to(device) and to(dtype) are differentiable across devices") {
  Tensor x = random_f64({4, 6}, 700).to(DType::f32).requires_grad_();
  Tensor w = random_f64({6, 4}, 701).to(DType::f32);
  // cpu leaf -> cuda -> cast to f64 on cuda -> back to the cpu
  Tensor y = mul(x.to(kCuda).t().to(DType::f64), 3.0).cpu();
  y.backward(w.to(DType::f64));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device().is_cpu());
  CHECK(x.grad().dtype() == DType::f32);
  check_close(x.grad(), mul(w.t(), 3.0), kExact);

  Tensor xg = random_f64({4, 6}, 702).to(kCuda).requires_grad_();
  Tensor yg = mul(xg.to(DType::f32).cpu(), 2.0);
  yg.backward(ones({4, 6}, DType::f32));
  REQUIRE(xg.grad().defined());
  CHECK(xg.grad().device() == kCuda);
  check_gpu_parity(xg.grad(), full({4, 6}, 2.0, DType::f64), kExact);

  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return mul(in[0].to(kCuda).t(), 0.5).cpu(); },
                  {random_f64({3, 4}, 703)});
}

TEST_CASE("cuda copy: copies between two GPUs") {
  if (cuda::device_count() < 2) {
    WARN("one GPU visible: the cuda:0 <-> cuda:1 copies are not exercised");
    return;
  }
  const Device second = Device::cuda(1);
  Tensor host = random_f64({37, 53}, 800, -50.0, 50.0);
  Tensor on_first = host.to(kCuda);
  check_gpu_parity(on_first.t().to(second), host.t(), kExact);
  Tensor dst = zeros({53, 37}, DType::f16, second);
  dst.copy_(on_first.t());
  check_gpu_parity(dst, host.t().to(DType::f16), kExact);
  check_gpu_parity(dst.to(DType::f32), host.t().to(DType::f16).to(DType::f32), kExact);
}
