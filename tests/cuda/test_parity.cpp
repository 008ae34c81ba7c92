// The parity harness on cuda:0 (tests/support/op_table.h): every op of the table in f32, f64, f16
// and bf16, forward and backward, against the CPU in f64 on the same rounded inputs, as
// tests/test_parity.cpp on the CPU; and the whole table again on cuda:1 while cuda:0 is current
// (with two GPUs, as the CUDA simulator has by default, which fails a kernel given another
// device's memory). The executable exits 77 (ctest's skip code) without a GPU.
#include <catch2/catch.hpp>

#include "kiln/core/cuda.h"
#include "kiln/kiln.h"
#include "op_table.h"

using namespace kiln;
using kiln::testing::check_op_family;
using kiln::testing::OpFamily;

namespace {

const Device kGpu = Device::cuda(0);

}  // namespace

TEST_CASE("parity on cuda: elementwise unary ops") {
  check_op_family(OpFamily::unary, kGpu);
}
TEST_CASE("parity on cuda: elementwise binary ops") {
  check_op_family(OpFamily::binary, kGpu);
}
TEST_CASE("parity on cuda: comparisons, logical ops, where and masked_fill") {
  check_op_family(OpFamily::selection, kGpu);
}
TEST_CASE("parity on cuda: reductions and scans") {
  check_op_family(OpFamily::reduction, kGpu);
}
TEST_CASE("parity on cuda: softmax and log_softmax") {
  check_op_family(OpFamily::softmax, kGpu);
}
TEST_CASE("parity on cuda: losses") {
  check_op_family(OpFamily::loss, kGpu);
}
TEST_CASE("parity on cuda: matrix products") {
  check_op_family(OpFamily::linalg, kGpu);
}
TEST_CASE("parity on cuda: conv2d and its gradient ops") {
  check_op_family(OpFamily::convolution, kGpu);
}
TEST_CASE("parity on cuda: pooling") {
  check_op_family(OpFamily::pooling, kGpu);
}
TEST_CASE("parity on cuda: batch_norm and layer_norm") {
  check_op_family(OpFamily::normalization, kGpu);
}
TEST_CASE("parity on cuda: index ops") {
  check_op_family(OpFamily::indexing, kGpu);
}
TEST_CASE("parity on cuda: cat, stack, split and chunk") {
  check_op_family(OpFamily::joining, kGpu);
}
TEST_CASE("parity on cuda: the fused LSTM and GRU cells") {
  check_op_family(OpFamily::recurrent, kGpu);
}
TEST_CASE("parity on cuda: views, copies and in-place ops") {
  check_op_family(OpFamily::view, kGpu);
}

TEST_CASE("parity on cuda:1 while cuda:0 is current: every op of the table") {
  if (cuda::device_count() < 2) {
    WARN("one GPU visible: the table on a second GPU is not checked");
    return;
  }
  cuda::set_device(0);
  for (OpFamily family :
       {OpFamily::unary, OpFamily::binary, OpFamily::selection, OpFamily::reduction,
        OpFamily::softmax, OpFamily::loss, OpFamily::linalg, OpFamily::convolution,
        OpFamily::pooling, OpFamily::normalization, OpFamily::indexing, OpFamily::joining,
        OpFamily::recurrent, OpFamily::view})
    check_op_family(family, Device::cuda(1));
  CHECK(cuda::current_device() == 0);
}
