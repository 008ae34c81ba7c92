// The simulated devices as cudart describes them: "kiln-sim", compute capability 9.0 with sm_90's
// limits, warp 32, one multiprocessor per worker thread; where a number has no meaning on a CPU
// (clocks, bus width, L2) an H100 SXM's.
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "kiln/sim/grid.h"
#include "kiln/sim/runtime/capture.h"
#include "kiln/sim/runtime/lazy_streams.h"
#include "kiln/sim/runtime/state.h"

namespace {

using kiln::sim::runtime::fail;

cudaError_t invalid_device(const char* function, int device) {
  return fail(cudaErrorInvalidDevice, std::string("invalid device ordinal (kiln-sim: ") + function +
                                          ": device " + std::to_string(device) + ", there are " +
                                          std::to_string(kiln::sim::runtime::device_count()) +
                                          "; KILN_SIM_DEVICES sets how many)");
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = kiln::sim::runtime::device_count();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  if (!kiln::sim::runtime::valid_device(device)) return invalid_device("cudaSetDevice", device);
  kiln::sim::runtime::current_device() = device;
  kiln::sim::runtime::use_context();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = kiln::sim::runtime::current_device();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  kiln::sim::runtime::use_context();
  const int device = kiln::sim::runtime::current_device();
  if (const cudaError_t error =
          kiln::sim::runtime::check_device_wait("cudaDeviceSynchronize", device))
    return error;
  kiln::sim::runtime::run_deferred_on_device(device, false);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (!kiln::sim::runtime::valid_device(device))
    return invalid_device("cudaDeviceGetAttribute", device);
  switch (attribute) {
    case cudaDevAttrMaxThreadsPerBlock:
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY:
      *value = 1024;
      break;
    case cudaDevAttrMaxBlockDimZ:
      *value = 64;
      break;
    case cudaDevAttrMaxGridDimX:
      *value = 2147483647;
      break;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ:
      *value = 65535;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(kiln::sim::runtime::kDefaultSharedBytes);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(kiln::sim::runtime::kMaxSharedBytes);
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = 228 * 1024;
      break;
    case cudaDevAttrTotalConstantMemory:
      *value = 65536;
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    case cudaDevAttrMaxRegistersPerBlock:
    case cudaDevAttrMaxRegistersPerMultiprocessor:
      *value = 65536;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = kiln::sim::reported_sm_count();
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = 2048;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = kiln::sim::schedule().compute_capability / 10;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = kiln::sim::schedule().compute_capability % 10;
      break;
    case cudaDevAttrClockRate:
      *value = 1980000;  // kHz
      break;
    case cudaDevAttrMemoryClockRate:
      *value = 2619000;  // kHz
      break;
    case cudaDevAttrGlobalMemoryBusWidth:
      *value = 5120;
      break;
    case cudaDevAttrL2CacheSize:
      *value = 50 * 1024 * 1024;
      break;
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrCanMapHostMemory:
    case cudaDevAttrConcurrentKernels:
      *value = 1;
      break;
    case cudaDevAttrPciBusId:
      *value = device;
      break;
    case cudaDevAttrIntegrated:
    case cudaDevAttrComputeMode:
      *value = 0;
      break;
    default:
      return fail(cudaErrorInvalidValue,
                  "invalid argument (kiln-sim: cudaDeviceGetAttribute: "
                  "attribute " +
                      std::to_string(static_cast<int>(attribute)) + " is not simulated)");
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!kiln::sim::runtime::valid_device(device))
    return invalid_device("cudaGetDeviceProperties", device);
  std::memset(prop, 0, sizeof *prop);
  std::strncpy(prop->name, "kiln-sim", sizeof prop->name - 1);
  prop->totalGlobalMem = kiln::sim::runtime::kDeviceMemoryBytes;
  prop->sharedMemPerBlock = kiln::sim::runtime::kDefaultSharedBytes;
  prop->sharedMemPerBlockOptin = kiln::sim::runtime::kMaxSharedBytes;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->totalConstMem = 65536;
  prop->major = kiln::sim::schedule().compute_capability / 10;
  prop->minor = kiln::sim::schedule().compute_capability % 10;
  prop->multiProcessorCount = kiln::sim::reported_sm_count();
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->memoryBusWidth = 5120;
  prop->unifiedAddressing = 1;
  prop->canMapHostMemory = 1;
  prop->concurrentKernels = 1;
  prop->pciBusID = device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFuncSetAttribute(const void* func, cudaFuncAttribute attribute,
                                           int value) {
  kiln::sim::runtime::use_context();
  if (func == nullptr)
    return fail(cudaErrorInvalidDeviceFunction,
                "invalid device function (kiln-sim: "
                "cudaFuncSetAttribute: a null function)");
  if (attribute == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize)
    return fail(cudaErrorInvalidValue,
                "invalid argument (kiln-sim: cudaFuncSetAttribute: "
                "attribute " +
                    std::to_string(static_cast<int>(attribute)) + " is not simulated)");
  if (value < 0 || static_cast<std::size_t>(value) > kiln::sim::runtime::kMaxSharedBytes)
    return fail(cudaErrorInvalidValue,
                "invalid argument (kiln-sim: cudaFuncSetAttribute: " + std::to_string(value) +
                    " bytes of dynamic shared memory, at most 232448)");
  kiln::sim::runtime::raise_dynamic_shared_limit(kiln::sim::runtime::current_device(),
                                                 static_cast<std::size_t>(value));
  return cudaSuccess;
}

}  // extern "C"
