// GPU checks of the runtime: device queries, copies both ways, and the Philox stream matching the
// CPU's. The executable exits 77 (ctest's skip code) when no GPU is visible.
#include <catch2/catch.hpp>

#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::kExact;

TEST_CASE("cuda runtime: a visible device has a name") {
  REQUIRE(cuda::device_count() >= 1);
  CHECK_FALSE(cuda::device_name(0).empty());
}

TEST_CASE("cuda runtime: cpu -> cuda -> cpu copy round trip") {
  Tensor host = arange(0.0, 1000.0, 1.0, DType::f32);
  Tensor back = host.to(Device::cuda(0)).to(Device::cpu());
  check_close(back, host, kExact);
}

TEST_CASE("cuda runtime: rand on cuda equals rand on cpu for one seed (Philox)") {
  Generator g_cpu(42), g_gpu(42);
  Tensor on_cpu = rand({4097}, DType::f32, Device::cpu(), &g_cpu);
  Tensor on_gpu = rand({4097}, DType::f32, Device::cuda(0), &g_gpu).to(Device::cpu());
  check_close(on_gpu, on_cpu, kExact);
}

TEST_CASE("cuda runtime: the cuda allocator counts allocations") {
  MemoryStats before = memory_stats(Device::cuda(0));
  Tensor t = empty({1024}, DType::f32, Device::cuda(0));
  CHECK(memory_stats(Device::cuda(0)).allocations >= before.allocations + 1);
}
