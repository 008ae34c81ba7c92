// Uniform random numbers from the Philox stream on the GPU, one thread per element (grid-stride,
// kThreads a block): element i is philox_uniform_in(seed, offset, i) as on the CPU
// (kernels/cpu/random.cpp), a function of i alone, so any launch shape gives the CPU's values. The
// 16-bit floats round through float, as kiln::convert does on the host, so they match bit for
// bit too.
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/core/cuda_check.h"
#include "kiln/core/philox.h"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/random.h"

namespace kiln::cuda {

namespace {

// philox_uniform_in for a device element type D: the draw scaled to [low, high) in double, stored
// as D, and a value that rounded up to `high` replaced by `low`, as on the host.
template <class D>
__global__ void uniform_kernel(D* out, int64_t n, uint64_t seed, uint64_t offset, double low,
                               double high) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const double value = low + (high - low) * static_cast<double>(philox_uniform(
                                                  seed, offset, static_cast<uint64_t>(i)));
    const D stored = device_convert<D>(value);
    out[i] = device_convert<double>(stored) >= high && high > low ? device_convert<D>(low) : stored;
  }
}

}  // namespace

void uniform(const Tensor& out, uint64_t seed, uint64_t offset, double low, double high) {
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_dtype(out.dtype(), [&](auto tag) {
    using D = device_t<typename decltype(tag)::type>;
    if constexpr (std::is_floating_point_v<D> || is_device_half_v<D>) {
      KILN_LAUNCH(grid_for(n), kThreads, 0, stream(), uniform_kernel<D>)
      (static_cast<D*>(out.data_ptr()), n, seed, offset, low, high);
      KILN_CUDA_CHECK_LAUNCH();
    } else {
      throw DTypeError(std::string("uniform: expected a floating dtype, got ") +
                       dtype_name(out.dtype()));
    }
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr RandomKernels kCuda{.uniform = cuda::uniform};
}  // namespace

const RandomKernels* const RandomKernels::cuda = &kCuda;

}  // namespace kiln
