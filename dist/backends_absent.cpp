// The backends this build lacks: asking for one says why and what to do. Gloo comes from Debian's
// libgloo-dev (scripts/install-deps.sh); NCCL with the CUDA toolkit or PyTorch's wheel.
#include <memory>
#include <string>

#include "kiln/core/error.h"
#include "kiln/dist/backends.h"

namespace kiln::dist {

#if !KILN_WITH_GLOO
std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store>, int, int, const std::string&,
                                              const ProcessGroupOptions&) {
  throw NotImplementedError(
      "dist: the gloo backend needs kiln built with Gloo (Debian's libgloo-dev, which "
      "scripts/install-deps.sh installs); this build found none");
}
#endif

#if !KILN_WITH_NCCL
std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store>, int, int, const std::string&,
                                              const ProcessGroupOptions&) {
  throw NotImplementedError(
      "dist: the nccl backend needs kiln built with CUDA and NCCL; this build has no NCCL (use "
      "\"gloo\" for CPU tensors)");
}
#endif

}  // namespace kiln::dist
