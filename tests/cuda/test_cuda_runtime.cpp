// GPU checks of the runtime: device queries, copies both ways, and the Philox stream matching the
// CPU's. Exits 77 (ctest's skip code) when no GPU is visible.
#include <cstdio>
#include <exception>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "pass" : "FAIL", what);
  if (!ok) ++failures;
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("no GPU visible: skipped\n");
    return 77;
  }
  try {
    check(cuda::device_count() >= 1, "device_count >= 1");
    std::printf("device 0: %s\n", cuda::device_name(0).c_str());

    Tensor host = arange(0.0, 1000.0, 1.0, DType::f32);
    Tensor back = host.to(Device::cuda(0)).to(Device::cpu());
    check(equal(host, back), "cpu -> cuda -> cpu copy round trip");

    Generator g_cpu(42), g_gpu(42);
    Tensor on_cpu = rand({4097}, DType::f32, Device::cpu(), &g_cpu);
    Tensor on_gpu = rand({4097}, DType::f32, Device::cuda(0), &g_gpu).to(Device::cpu());
    check(equal(on_cpu, on_gpu), "rand on cuda equals rand on cpu for one seed (Philox)");

    MemoryStats stats = memory_stats(Device::cuda(0));
    check(stats.allocations >= 2, "cuda allocator counts allocations");
  } catch (const std::exception& e) {
    std::printf("FAIL: exception: %s\n", e.what());
    return 1;
  }
  std::printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
