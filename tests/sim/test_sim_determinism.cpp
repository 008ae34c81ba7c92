// The determinism pass of the CUDA simulator (docs/simulator.md): every op of the parity table
// (tests/support/op_table.h) runs on simulated cuda:0 in each of its dtypes, forward and backward,
// under three schedules (threads in lane order on one worker without fibers; reversed, as fibers,
// on two workers; shuffled between barriers, as fibers, on three workers), and its outputs and
// gradients must be the same bytes under each. A kernel that reads shared memory another thread
// has not yet written (a missing __syncthreads) or that depends on which block finishes first
// gives different bytes. The ops whose kernels add with atomics in an order the schedule decides
// (and whose bytes do differ between these schedules) are listed with their kernel, and compared
// within the dtype's tolerance instead. The pass asks cuDNN for determinism, as a byte-exact check
// on a GPU must: without it the simulator's cuDNN stand-in varies its backward sums from call to
// call (docs/simulator.md, "Strictness"), whatever the schedule.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/core/backends.h"
#include "kiln/kiln.h"
#include "kiln/sim/grid.h"
#include "op_table.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::op_results;
using kiln::testing::op_seed;
using kiln::testing::op_table;
using kiln::testing::OpEntry;
using kiln::testing::OpFamily;
using kiln::testing::tolerance;

namespace {

struct NamedSchedule {
  const char* name;
  sim::Schedule schedule;
};

const NamedSchedule kSchedules[] = {
    {"lane order, 1 worker, fiberless", {0, 1, false}},
    {"reversed, 2 workers, fibers", {1, 2, true}},
    {"shuffled (seed 0x5eed), 3 workers, fibers", {0x5eed, 3, true}},
};

// Ops whose CUDA kernels accumulate with atomicAdd into one element from several threads or
// blocks: float addition in another order rounds differently, so their bytes may differ between
// schedules (as between two runs on a GPU).
struct OrderDependent {
  const char* op;
  const char* kernel;
};
const OrderDependent kOrderDependent[] = {
    {"max_pool2d_with_indices", "max_pool2d_backward_kernel (kernels/cuda/pooling.cu)"},
    {"max_pool2d_backward", "max_pool2d_backward_kernel (kernels/cuda/pooling.cu)"},
    // The plain max pools' backward is the same kernel: an input that is the maximum of three or
    // more overlapping windows sums their gradients in the order the threads reach it (whether
    // one does depends on the entry's random inputs, which move with the table's order).
    {"max_pool2d 3x3 stride 2 padding 1", "max_pool2d_backward_kernel (kernels/cuda/pooling.cu)"},
    {"max_pool2d dilation 2 ceil_mode", "max_pool2d_backward_kernel (kernels/cuda/pooling.cu)"},
    {"max_pool2d channels-last 3x3 stride 2 padding 1",
     "max_pool2d_backward_kernel (kernels/cuda/pooling.cu)"},
    {"scatter_add dim 1", "index_accumulate (kernels/cuda/index.cu)"},
    {"index_add dim 0", "index_accumulate (kernels/cuda/index.cu)"},
    {"embedding with padding_idx", "index_accumulate (kernels/cuda/index.cu)"},
    {"index_select dim 1", "index_accumulate in its backward (kernels/cuda/index.cu)"},
    {"gather dim 1", "index_accumulate in its backward (kernels/cuda/index.cu)"},
    // interpolate's index_select repeats source positions (upsampling, the edges).
    {"interpolate bilinear", "index_accumulate in index_select's backward"},
    {"interpolate nearest, channels-last", "index_accumulate in index_select's backward"},
};

const char* order_dependent_kernel(const std::string& op) {
  for (const OrderDependent& entry : kOrderDependent)
    if (op == entry.op) return entry.kernel;
  return nullptr;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()) == 0;
}

// Restores the process's schedule and cuDNN's determinism switch when a case ends, however it
// ends.
class ScheduleScope {
 public:
  ScheduleScope() : saved_(sim::schedule()), deterministic_(backends::cudnn_deterministic()) {}
  ~ScheduleScope() {
    sim::set_schedule(saved_);
    backends::set_cudnn_deterministic(deterministic_);
  }
  ScheduleScope(const ScheduleScope&) = delete;
  ScheduleScope& operator=(const ScheduleScope&) = delete;

 private:
  sim::Schedule saved_;
  bool deterministic_;
};

void check_op_under_schedules(const OpEntry& op, DType dtype, uint64_t seed) {
  const ScheduleScope restore;
  backends::set_cudnn_deterministic(true);
  const Device gpu = Device::cuda(0);
  sim::set_schedule(kSchedules[0].schedule);
  const std::vector<Tensor> first = op_results(op, gpu, dtype, seed);
  const char* atomic_kernel = order_dependent_kernel(op.name);
  for (size_t s = 1; s < std::size(kSchedules); ++s) {
    sim::set_schedule(kSchedules[s].schedule);
    const std::vector<Tensor> again = op_results(op, gpu, dtype, seed);
    REQUIRE(again.size() == first.size());
    for (size_t k = 0; k < first.size(); ++k) {
      INFO("result " << k << " (outputs first, then input gradients) under '" << kSchedules[s].name
                     << "' against '" << kSchedules[0].name << "'");
      if (atomic_kernel && first[k].defined() && is_floating(first[k].dtype())) {
        INFO("order-dependent: " << atomic_kernel);
        check_close(again[k], first[k], tolerance(dtype));
      } else {
        CHECK(same_bytes(again[k], first[k]));
      }
    }
  }
}

void check_family_under_schedules(OpFamily family) {
  const std::vector<OpEntry>& table = op_table();
  for (size_t index = 0; index < table.size(); ++index) {
    const OpEntry& op = table[index];
    if (op.family != family) continue;
    for (DType dtype : op.dtypes) {
      DYNAMIC_SECTION(op.name << " in " << dtype_name(dtype)) {
        check_op_under_schedules(op, dtype, op_seed(index));
      }
    }
  }
}

}  // namespace

TEST_CASE("same bytes under three schedules: elementwise ops, comparisons and selection") {
  check_family_under_schedules(OpFamily::unary);
  check_family_under_schedules(OpFamily::binary);
  check_family_under_schedules(OpFamily::selection);
}
TEST_CASE("same bytes under three schedules: reductions, softmax and losses") {
  check_family_under_schedules(OpFamily::reduction);
  check_family_under_schedules(OpFamily::softmax);
  check_family_under_schedules(OpFamily::loss);
}
TEST_CASE("same bytes under three schedules: matrix products, conv2d and pooling") {
  check_family_under_schedules(OpFamily::linalg);
  check_family_under_schedules(OpFamily::convolution);
  check_family_under_schedules(OpFamily::pooling);
}
TEST_CASE("same bytes under three schedules: normalization and index ops") {
  check_family_under_schedules(OpFamily::normalization);
  check_family_under_schedules(OpFamily::indexing);
}
TEST_CASE("same bytes under three schedules: joining, recurrent cells, views and in-place ops") {
  check_family_under_schedules(OpFamily::joining);
  check_family_under_schedules(OpFamily::recurrent);
  check_family_under_schedules(OpFamily::view);
}

TEST_CASE("the determinism pass lists only ops of the parity table") {
  for (const OrderDependent& entry : kOrderDependent) {
    bool found = false;
    for (const OpEntry& op : op_table()) found = found || op.name == entry.op;
    INFO(entry.op);
    CHECK(found);
  }
}
