// What the simulator's self-tests share: device buffers, and a schedule set for one test.
#pragma once

#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/sim/grid.h"

// A device allocation of n T on the current device, filled from (or read back into) host vectors.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)) == cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<T>& values) : DeviceBuffer(values.size()) {
    REQUIRE(cudaMemcpy(data_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) ==
            cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  std::vector<T> read() const {
    std::vector<T> out(n_);
    REQUIRE(cudaMemcpy(out.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }

 private:
  std::size_t n_;
  T* data_ = nullptr;
};

// Sets the schedule for one scope and puts the previous one back.
class ScheduleScope {
 public:
  explicit ScheduleScope(const kiln::sim::Schedule& schedule) : saved_(kiln::sim::schedule()) {
    kiln::sim::set_schedule(schedule);
  }
  ~ScheduleScope() { kiln::sim::set_schedule(saved_); }
  ScheduleScope(const ScheduleScope&) = delete;
  ScheduleScope& operator=(const ScheduleScope&) = delete;

 private:
  kiln::sim::Schedule saved_;
};

// Whether KILN_SIM_DEVICES leaves the two devices a test needs; when not, the test says so as
// ctest's skip (tests/sim/CMakeLists.txt) and returns.
inline bool have_two_devices() {
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count >= 2) return true;
  WARN("SKIPPED: needs 2 simulated devices, KILN_SIM_DEVICES gives " << count);
  return false;
}

// The schedules a kernel's result must not depend on: lane order, reversed, two shuffles; one
// worker and two; fiberless fast path and fibers throughout.
inline std::vector<kiln::sim::Schedule> all_schedules() {
  std::vector<kiln::sim::Schedule> out;
  for (std::uint64_t seed : {0, 1, 2, 3})
    for (int workers : {1, 2})
      for (bool fibers : {false, true}) out.push_back({seed, workers, fibers});
  return out;
}
