// The profiler on the GPU: ops on CUDA tensors get GPU intervals from events on the current
// stream, inside the profile's span and nested like their host events; the table gains the GPU
// columns and the trace a GPU lane.
#include <catch2/catch.hpp>
#include <string>

#include "kiln/kiln.h"

using namespace kiln;

TEST_CASE("gpu profiler: ops on CUDA tensors have GPU times") {
  const Device gpu = Device::cuda(0);
  const Tensor a = randn({2048, 2048}).to(gpu), b = randn({2048, 2048}).to(gpu);
  matmul(a, b);  // warm-up: cuBLAS's handle and workspace
  cuda::synchronize();
  profiler::Profile prof;
  Tensor c = matmul(a, b);
  Tensor d = relu(c);
  prof.stop();
  int timed = 0;
  double matmul_ms = 0, relu_ms = 0;
  for (const profiler::Event& e : prof.events()) {
    INFO(e.name);
    CHECK(e.device == gpu);
    REQUIRE(e.gpu_ms >= 0);
    CHECK(e.gpu_start_ms >= 0);
    if (e.name == "matmul") CHECK(e.gpu_ms > 0.1);  // 17 GFLOP: well over 0.1 ms on any GPU
    if (e.name == "matmul") matmul_ms += e.gpu_ms;
    if (e.name == "relu") relu_ms += e.gpu_ms;
    ++timed;
  }
  CHECK(timed >= 2);
  const profiler::KeyAverages averages = prof.key_averages();
  CHECK(averages.has_gpu);
  const std::string table = averages.table({.sort_by = "self_gpu_ms"});
  CHECK(table.find("GPU ms") != std::string::npos);
  // Sorted by GPU time: on a GPU the product comes first; on the simulator, whose matmul is the
  // CPU's sgemm and whose relu is simulated thread by thread, it may come second.
  INFO("matmul " << matmul_ms << " ms, relu " << relu_ms << " ms");
  CHECK((table.find("matmul") < table.find("relu")) == (matmul_ms > relu_ms));
  const std::string trace = prof.chrome_trace_json();
  CHECK(trace.find("\"GPU 0\"") != std::string::npos);
  CHECK(trace.find("\"stream\": \"0x0\"") != std::string::npos);  // the default stream
}

TEST_CASE("gpu profiler: memory from the caching allocator is attributed to the op") {
  const Device gpu = Device::cuda(0);
  const Tensor a = randn({1024}).to(gpu);
  profiler::Profile prof;
  Tensor b = relu(a);
  prof.stop();
  REQUIRE(prof.events().size() == 1);
  CHECK(prof.events()[0].allocated_bytes >= 1024 * 4);  // a whole block of the caching allocator
  CHECK(prof.events()[0].allocations == 1);
}
