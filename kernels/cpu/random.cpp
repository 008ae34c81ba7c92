// Uniform random numbers from the Philox stream on the CPU: element i is
// philox_uniform_in(seed, offset, i), so the threads may split the range any way.
#include "kiln/kernels/random.h"

#include <cstdint>

#include "kiln/core/philox.h"
#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

void uniform(const Tensor& out, uint64_t seed, uint64_t offset, double low, double high) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(out.data_ptr());
    parallel_for(out.numel(), 8, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        p[i] = philox_uniform_in<T>(seed, offset, static_cast<uint64_t>(i), low, high);
    });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const RandomKernels RandomKernels::cpu{.uniform = cpu::uniform};

}  // namespace kiln
