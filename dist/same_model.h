// The check DistributedDataParallel makes before its first broadcast: every rank holds a model of
// the same parameters and buffers, in the same order, of the same shapes and dtypes (PyTorch's DDP
// verifies the parameters' shapes across processes the same way). A difference would otherwise
// surface inside the backend, as a transfer of the wrong length, or as a hang. Internal to dist/.
#pragma once

#include "kiln/dist/process_group.h"
#include "kiln/nn/module.h"

namespace kiln::dist {

// Gathers every rank's description of `module` over `group`; when any rank's differs from rank
// 0's, throws DistError on every rank naming the first difference between this rank's model and
// the other's (rank 0's, or on rank 0 and the ranks that agree with it, the first that does not).
void check_same_model(const nn::Module& module, ProcessGroup& group);

}  // namespace kiln::dist
