// A build without CUDA has no GPU kernels: every family's CUDA table is null, and the device
// switch (ops/dispatch.h) turns a request for one into a DeviceError naming the op. Compiled only
// when KILN_WITH_CUDA is off (CMakeLists.txt); with CUDA, kernels/cuda/<family> defines each.
#include "kiln/kernels/amp.h"
#include "kiln/kernels/attention.h"
#include "kiln/kernels/conv2d.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/cross_entropy.h"
#include "kiln/kernels/dropout.h"
#include "kiln/kernels/elementwise.h"
#include "kiln/kernels/index.h"
#include "kiln/kernels/loss.h"
#include "kiln/kernels/matmul.h"
#include "kiln/kernels/normalization.h"
#include "kiln/kernels/optim.h"
#include "kiln/kernels/pooling.h"
#include "kiln/kernels/random.h"
#include "kiln/kernels/reduce.h"
#include "kiln/kernels/reduce_minmax.h"
#include "kiln/kernels/rnn_cell.h"
#include "kiln/kernels/scan.h"
#include "kiln/kernels/softmax.h"
#include "kiln/kernels/sort.h"

namespace kiln {

const AmpKernels* const AmpKernels::cuda = nullptr;
const Conv2dKernels* const Conv2dKernels::cuda = nullptr;
const CopyKernels* const CopyKernels::cuda = nullptr;
const AttentionKernels* const AttentionKernels::cuda = nullptr;
const CrossEntropyKernels* const CrossEntropyKernels::cuda = nullptr;
const DropoutKernels* const DropoutKernels::cuda = nullptr;
const ElementwiseKernels* const ElementwiseKernels::cuda = nullptr;
const IndexKernels* const IndexKernels::cuda = nullptr;
const LossKernels* const LossKernels::cuda = nullptr;
const MatmulKernels* const MatmulKernels::cuda = nullptr;
const NormalizationKernels* const NormalizationKernels::cuda = nullptr;
const OptimizerKernels* const OptimizerKernels::cuda = nullptr;
const PoolingKernels* const PoolingKernels::cuda = nullptr;
const RandomKernels* const RandomKernels::cuda = nullptr;
const ReduceKernels* const ReduceKernels::cuda = nullptr;
const MinMaxKernels* const MinMaxKernels::cuda = nullptr;
const RnnCellKernels* const RnnCellKernels::cuda = nullptr;
const ScanKernels* const ScanKernels::cuda = nullptr;
const SortKernels* const SortKernels::cuda = nullptr;
const SoftmaxKernels* const SoftmaxKernels::cuda = nullptr;

}  // namespace kiln
