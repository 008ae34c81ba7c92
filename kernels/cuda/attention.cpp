// No fused attention kernel on the GPU yet: ops/attention.cpp composes matmul and softmax there.
#include "kiln/kernels/attention.h"

namespace kiln {

namespace {
constexpr AttentionKernels kCuda{.forward = nullptr, .backward = nullptr};
}  // namespace

const AttentionKernels* const AttentionKernels::cuda = &kCuda;

}  // namespace kiln
