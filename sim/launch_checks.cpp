// What a launch is checked for before it runs: CUDA's launch-time errors, which cudaGetLastError
// then reports, and the pointer arguments a GPU would fault on, which throw.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "kiln/sim/grid.h"
#include "kiln/sim/runtime/state.h"

namespace kiln::sim {

namespace {

std::string dims(dim3 d) {
  std::ostringstream text;
  text << "(" << d.x << "," << d.y << "," << d.z << ")";
  return text.str();
}

}  // namespace

cudaError_t check_launch(const GridLaunch& launch) {
  runtime::use_context();  // a launch works on the current device
  const auto fail = [&](cudaError_t error, const char* text, const std::string& why) {
    return runtime::fail(
        error, std::string(text) + " (kiln-sim: kernel " + launch.kernel + ": " + why + ")");
  };
  const dim3 b = launch.block, g = launch.grid;
  const std::uint64_t threads = static_cast<std::uint64_t>(b.x) * b.y * b.z;
  if (threads == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024)
    return fail(cudaErrorInvalidConfiguration, "invalid configuration argument",
                "block " + dims(b) + " of " + std::to_string(threads) +
                    " threads; at most 1024 threads, and 1024 x 1024 x 64");
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    return fail(cudaErrorInvalidConfiguration, "invalid configuration argument",
                "grid " + dims(g) + "; at most 2147483647 x 65535 x 65535, none empty");
  const int device = runtime::current_device();
  const std::size_t limit = runtime::dynamic_shared_limit(device);
  if (launch.shared_bytes > limit)
    return fail(cudaErrorInvalidValue, "invalid argument",
                std::to_string(launch.shared_bytes) + " bytes of dynamic shared memory, at most " +
                    std::to_string(limit) + " on device " + std::to_string(device) +
                    (limit < runtime::kMaxSharedBytes
                         ? " unless cudaFuncSetAttribute raises it (to 232448 at most)"
                         : ""));
  if (launch.argument_bytes > 4096)
    return fail(cudaErrorInvalidValue, "invalid argument",
                std::to_string(launch.argument_bytes) + " bytes of arguments, at most 4096");
  const int stream_device = runtime::stream_device(launch.stream);
  if (stream_device != device)
    return fail(cudaErrorInvalidResourceHandle, "invalid resource handle",
                "a stream of device " + std::to_string(stream_device) + " while device " +
                    std::to_string(device) + " is current");
  return cudaSuccess;
}

void check_pointer_argument(const char* kernel, int index, const void* pointer) {
  if (pointer == nullptr) return;
  const int owner = runtime::device_of(pointer);
  const int device = runtime::current_device();
  if (owner == device) return;
  std::ostringstream text;
  text << "kiln-sim: kernel " << kernel << ", argument " << index << ": " << pointer;
  if (owner >= 0) {
    text << " is device " << owner << "'s memory, and the kernel runs on device " << device
         << ": a GPU faults on it";
    throw KernelError(text.str());
  }
  if (runtime::is_pinned(pointer)) return;  // cudaHostAlloc memory is mapped into every device
  text << " is host memory, not device memory: a GPU faults on it";
  throw KernelError(text.str());
}

}  // namespace kiln::sim
