// Softmax v0: kiln's own kernel, called through the CUDA table of the softmax family
// (kernels/softmax.h) exactly as the softmax op calls it. For rows longer than 1024 it is a block
// of 512 threads per row making three passes over the row (max, sum, write), with kiln's
// row_allreduce for the combines (kernels/cuda/softmax.cu); shorter rows get a warp each.
//
// It is the speed baseline: a version that beats it here is a candidate for the op's dispatch
// (kernels are promoted by dispatch, never by copy).
//
// measured: not yet on a GPU.
#include "kiln/core/cuda.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/kernels/cuda/lab/borrowed_tensor.h"
#include "kiln/kernels/cuda/lab/softmax/versions.h"
#include "kiln/kernels/softmax.h"

namespace kiln::lab::softmax {

void v0_kiln(const SoftmaxArgs& args) {
  const Device device = Device::cuda(cuda::current_device());
  const Tensor x = borrow_tensor(args.x, {args.rows, args.cols}, DType::f32, device);
  const Tensor y = borrow_tensor(args.y, {args.rows, args.cols}, DType::f32, device);
  SoftmaxKernels::cuda->softmax(x, 1, /*log=*/false, y);
}

}  // namespace kiln::lab::softmax
