// The parity harness on the CPU (tests/support/op_table.h): every op of the table in f32, f64, f16
// and bf16, forward and backward, against the CPU in f64 on the same rounded inputs. One test case
// per family, one section per op and dtype, so a failure names the op, the device and the dtype.
#include <catch2/catch.hpp>
#include <cstddef>
#include <set>
#include <string>

#include "kiln/kiln.h"
#include "op_table.h"

using namespace kiln;
using kiln::testing::check_op_family;
using kiln::testing::OpFamily;

namespace {

const Device kCpu = Device::cpu();

}  // namespace

TEST_CASE("parity: the table names each op once and gives every family entries") {
  std::set<std::string> names;
  std::set<OpFamily> families;
  for (const kiln::testing::OpEntry& op : kiln::testing::op_table()) {
    INFO(op.name);
    CHECK(names.insert(op.name).second);
    CHECK_FALSE(op.dtypes.empty());
    families.insert(op.family);
  }
  CHECK(families.size() == static_cast<size_t>(OpFamily::view) + 1);
}

TEST_CASE("parity on the cpu: elementwise unary ops") {
  check_op_family(OpFamily::unary, kCpu);
}
TEST_CASE("parity on the cpu: elementwise binary ops") {
  check_op_family(OpFamily::binary, kCpu);
}
TEST_CASE("parity on the cpu: comparisons, logical ops, where and masked_fill") {
  check_op_family(OpFamily::selection, kCpu);
}
TEST_CASE("parity on the cpu: reductions and scans") {
  check_op_family(OpFamily::reduction, kCpu);
}
TEST_CASE("parity on the cpu: softmax and log_softmax") {
  check_op_family(OpFamily::softmax, kCpu);
}
TEST_CASE("parity on the cpu: losses") {
  check_op_family(OpFamily::loss, kCpu);
}
TEST_CASE("parity on the cpu: matrix products") {
  check_op_family(OpFamily::linalg, kCpu);
}
TEST_CASE("parity on the cpu: conv2d and its gradient ops") {
  check_op_family(OpFamily::convolution, kCpu);
}
TEST_CASE("parity on the cpu: pooling") {
  check_op_family(OpFamily::pooling, kCpu);
}
TEST_CASE("parity on the cpu: batch_norm and layer_norm") {
  check_op_family(OpFamily::normalization, kCpu);
}
TEST_CASE("parity on the cpu: index ops") {
  check_op_family(OpFamily::indexing, kCpu);
}
TEST_CASE("parity on the cpu: cat, stack, split and chunk") {
  check_op_family(OpFamily::joining, kCpu);
}
TEST_CASE("parity on the cpu: the fused LSTM and GRU cells") {
  check_op_family(OpFamily::recurrent, kCpu);
}
TEST_CASE("parity on the cpu: views, copies and in-place ops") {
  check_op_family(OpFamily::view, kCpu);
}
