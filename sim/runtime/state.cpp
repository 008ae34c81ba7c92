#include "kiln/sim/runtime/state.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/sim/runtime/device_memory.h"

namespace kiln::sim::runtime {

namespace {

// Up to 16 devices (KILN_SIM_DEVICES).
constexpr int kMaxDevices = 16;

struct Devices {
  std::vector<std::unique_ptr<DeviceMemory>> memory;
  std::vector<std::size_t> shared_limit;
  std::mutex mutex;  // shared_limit
  std::array<std::atomic<bool>, kMaxDevices> context{};
};

int devices_from_environment() {
  const char* text = std::getenv("KILN_SIM_DEVICES");
  if (!text || !*text) return 2;
  char* end = nullptr;
  const long count = std::strtol(text, &end, 10);
  if (*end != '\0' || count < 1 || count > kMaxDevices)
    throw std::invalid_argument(
        std::string("KILN_SIM_DEVICES: expected a device count from 1 to 16, got '") + text + "'");
  return static_cast<int>(count);
}

// Never destroyed: kiln's caching allocators give memory back from their own static destructors,
// which may run after this file's.
Devices& devices() {
  static Devices* state = [] {
    auto* d = new Devices;
    const int count = devices_from_environment();
    for (int i = 0; i < count; ++i)
      d->memory.push_back(std::make_unique<DeviceMemory>(kDeviceMemoryBytes));
    d->shared_limit.assign(static_cast<std::size_t>(count), kDefaultSharedBytes);
    return d;
  }();
  return *state;
}

struct Pinned {
  std::mutex mutex;
  std::map<const char*, std::size_t> live;  // address -> bytes
};
Pinned& pinned() {
  static Pinned* state = new Pinned;
  return *state;
}

constexpr std::align_val_t kPinnedAlignment{256};

struct ErrorState {
  cudaError_t last = cudaSuccess;
  cudaError_t detail_code = cudaSuccess;
  std::string detail;
};
ErrorState& error_state() {
  thread_local ErrorState state;
  return state;
}

}  // namespace

int device_count() {
  return static_cast<int>(devices().memory.size());
}

int& current_device() {
  thread_local int device = 0;
  return device;
}

void use_context() {
  const int device = current_device();
  Devices& d = devices();
  if (d.context[static_cast<std::size_t>(device)].exchange(true)) return;
  // A rank of a job must use its own GPU alone: KILN_SIM_ONE_DEVICE_PER_PROCESS=1 makes a second
  // device's context the end of the process, saying which (the tests of kiln-train under kiln-run).
  const char* one = std::getenv("KILN_SIM_ONE_DEVICE_PER_PROCESS");
  if (one == nullptr || std::string(one) != "1") return;
  for (int other = 0; other < device_count(); ++other)
    if (other != device && d.context[static_cast<std::size_t>(other)].load()) {
      std::fprintf(stderr,
                   "kiln-sim: a CUDA context on device %d in a process that has one on device %d "
                   "(KILN_SIM_ONE_DEVICE_PER_PROCESS=1)\n",
                   device, other);
      std::_Exit(EXIT_FAILURE);
    }
}

bool has_context(int device) {
  return valid_device(device) && devices().context[static_cast<std::size_t>(device)].load();
}

bool valid_device(int device) {
  return device >= 0 && device < device_count();
}

int device_of(const void* pointer) {
  const auto& memory = devices().memory;
  for (std::size_t d = 0; d < memory.size(); ++d)
    if (memory[d]->contains(pointer)) return static_cast<int>(d);
  return -1;
}

bool within_allocation(int device, const void* pointer, std::size_t bytes) {
  return valid_device(device) &&
         devices().memory[static_cast<std::size_t>(device)]->within_allocation(pointer, bytes);
}

void* allocate(int device, std::size_t bytes) {
  return devices().memory[static_cast<std::size_t>(device)]->allocate(bytes);
}

bool release(const void* pointer) {
  const int device = device_of(pointer);
  return device >= 0 && devices().memory[static_cast<std::size_t>(device)]->release(pointer);
}

std::size_t used_bytes(int device) {
  return devices().memory[static_cast<std::size_t>(device)]->used();
}

void* allocate_pinned(std::size_t bytes) {
  char* p = static_cast<char*>(::operator new(std::max<std::size_t>(bytes, 1), kPinnedAlignment));
  std::lock_guard<std::mutex> lock(pinned().mutex);
  pinned().live[p] = bytes;
  return p;
}

bool release_pinned(void* pointer) {
  {
    std::lock_guard<std::mutex> lock(pinned().mutex);
    if (pinned().live.erase(static_cast<const char*>(pointer)) == 0) return false;
  }
  ::operator delete(pointer, kPinnedAlignment);
  return true;
}

bool is_pinned(const void* pointer) {
  const char* p = static_cast<const char*>(pointer);
  std::lock_guard<std::mutex> lock(pinned().mutex);
  auto it = pinned().live.upper_bound(p);
  if (it == pinned().live.begin()) return false;
  --it;
  return p < it->first + std::max<std::size_t>(it->second, 1);
}

int stream_device(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return current_device();
  return stream->device;
}

cudaError_t fail(cudaError_t error, const std::string& detail) {
  ErrorState& state = error_state();
  state.last = error;
  state.detail_code = error;
  state.detail = detail;
  return error;
}

cudaError_t& last_error() {
  return error_state().last;
}

const char* error_detail(cudaError_t error) {
  const ErrorState& state = error_state();
  return state.detail_code == error && !state.detail.empty() ? state.detail.c_str() : nullptr;
}

std::size_t dynamic_shared_limit(int device) {
  Devices& d = devices();
  std::lock_guard<std::mutex> lock(d.mutex);
  return d.shared_limit[static_cast<std::size_t>(device)];
}

void raise_dynamic_shared_limit(int device, std::size_t bytes) {
  Devices& d = devices();
  std::lock_guard<std::mutex> lock(d.mutex);
  auto& limit = d.shared_limit[static_cast<std::size_t>(device)];
  limit = std::max(limit, bytes);
}

}  // namespace kiln::sim::runtime
