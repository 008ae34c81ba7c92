// Dropout on the CPU in one pass: element i is kept iff philox_uniform(seed, offset, i) >= p, the
// CUDA kernel's rule, so a seed gives one mask on both devices. philox_uniform is a float that
// f64 holds exactly, so the comparison is made in double, as PyTorch's would be in f64.
#include "kiln/kernels/dropout.h"

#include <cstdint>

#include "kiln/core/philox.h"
#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out,
             const Tensor& mask) {
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    T* m = static_cast<T*>(mask.data_ptr());
    // The kept value rounded to x's dtype once, then applied: as the mask tensor holds it.
    const T scale = convert<T>(1.0 / (1.0 - p));
    parallel_for(x.numel(), 4, [&](int64_t begin, int64_t end) {
      // philox_uniform(seed, offset, i) is word i % 4 of Philox block i / 4: each block is drawn
      // once for its four elements rather than once for each.
      PhiloxCounter block{};
      for (int64_t i = begin; i < end; ++i) {
        const uint64_t index = static_cast<uint64_t>(i);
        if (i == begin || index % 4 == 0) block = philox_block(seed, offset, index / 4);
        const bool kept = static_cast<double>(uint32_to_uniform_float(block.x[index % 4])) >= p;
        m[i] = kept ? scale : convert<T>(0.0);
        o[i] = convert<T>(convert<acc_type_t<T>>(in[i]) * convert<acc_type_t<T>>(m[i]));
      }
    });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const DropoutKernels DropoutKernels::cpu{.dropout = cpu::dropout};

}  // namespace kiln
