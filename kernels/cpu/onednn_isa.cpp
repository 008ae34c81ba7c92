#include "kiln/kernels/cpu/onednn_isa.h"

#if KILN_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include "kiln/core/cpu_isa.h"

namespace kiln::cpu {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine cpu(dnnl::engine::kind::cpu, 0);
  return cpu;
}

CpuIsa onednn_level() {
  static const CpuIsa level = [] {
    const CpuIsa now = cpu_isa();
    // Uncapped, oneDNN also uses what kiln has no level for (AMX on Xeons).
    if (now != cpu_isa_supported()) {
      const dnnl::cpu_isa cap = now == CpuIsa::avx2     ? dnnl::cpu_isa::avx2
                                : now == CpuIsa::avx512 ? dnnl::cpu_isa::avx512_core
                                                        : dnnl::cpu_isa::avx512_core_bf16;
      // Refused when oneDNN already ran in this process (another library's calls): uncapped, it
      // then serves only uncapped kiln.
      if (dnnl::set_max_cpu_isa(cap) != dnnl::status::success) return cpu_isa_supported();
    }
    return now;
  }();
  return level;
}

}  // namespace kiln::cpu
#endif
