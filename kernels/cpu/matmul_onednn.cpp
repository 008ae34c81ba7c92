#include "kiln/kernels/cpu/matmul_onednn.h"

#if KILN_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <utility>

#include "kiln/core/backends.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/kernels/cpu/onednn_isa.h"
#endif

#include <cstdint>
#include <map>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/kernels/layout.h"

namespace kiln::cpu {

#if KILN_WITH_ONEDNN

namespace {

using dnnl::memory;

// An operand's batch dimensions (those of out, `batch` of them) folded into one: its count (1
// when the operand is broadcast along all of them) and stride; nullopt when they do not fold.
struct Batch {
  int64_t count = 1, stride = 0;
};

std::optional<Batch> fold_batch(const Tensor& t, const Tensor& out, int64_t batch) {
  Batch folded;
  bool broadcast = false, strided = false;
  int64_t expected = -1;  // the stride the next dimension outward must have to fold
  for (int64_t d = batch - 1; d >= 0; --d) {
    const int64_t size = out.size(d), stride = t.strides()[d];
    if (size == 1) continue;
    if (stride == 0) {
      broadcast = true;
      continue;
    }
    if (expected >= 0 && stride != expected) return std::nullopt;
    if (!strided) folded.stride = stride;
    strided = true;
    folded.count *= size;
    expected = stride * size;
  }
  if (broadcast && strided) return std::nullopt;  // broadcast along some dims only
  if (!broadcast) return folded;
  return Batch{1, 0};
}

// A [count, rows, cols] bf16 descriptor of a row- or column-major matrix stack.
memory::desc matrix_desc(const Tensor& t, const Batch& batch, int64_t rows, int64_t cols) {
  const GemmLayout layout = matrix_layout(t);
  const memory::dims strides =
      layout.trans ? memory::dims{batch.count == 1 ? rows * cols : batch.stride, 1, layout.ld}
                   : memory::dims{batch.count == 1 ? rows * cols : batch.stride, layout.ld, 1};
  return memory::desc({batch.count, rows, cols}, memory::data_type::bf16, strides);
}

struct Plan {
  bool usable = false;
  dnnl::matmul matmul;
  memory::desc a, b, out;
};

// JIT kernels only ("brg:avx512_core_bf16", "brg:avx512_core_amx", "gemm:jit"), not "ref".
bool is_jit(const std::string& impl) {
  return impl.rfind("brg", 0) == 0 || impl.find("jit") != std::string::npos;
}

Plan make_plan(const memory::desc& a, const memory::desc& b, const memory::desc& out,
               bool accumulate) {
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, out), attr, onednn_engine());
  Plan plan;
  if (!is_jit(pd.impl_info_str())) return plan;
  plan.matmul = dnnl::matmul(pd);
  plan.a = a, plan.b = b, plan.out = out;
  plan.usable = true;
  return plan;
}

// The plan for a problem, made on first use and kept per thread; one oneDNN rejects or would run
// with reference code gets an unusable plan.
const Plan& plan_for(const memory::desc& a, const memory::desc& b, const memory::desc& out,
                     bool accumulate) {
  thread_local std::map<std::vector<int64_t>, Plan> plans;
  std::vector<int64_t> key{accumulate};
  for (const memory::desc* d : {&a, &b, &out}) {
    const memory::dims dims = d->dims();
    key.insert(key.end(), dims.begin(), dims.end());
    const dnnl_memory_desc_t& c = d->data;
    key.insert(key.end(), c.format_desc.blocking.strides, c.format_desc.blocking.strides + 3);
  }
  auto found = plans.find(key);
  if (found != plans.end()) return found->second;
  Plan plan;
  try {
    plan = make_plan(a, b, out, accumulate);
  } catch (const dnnl::error&) {
    plan = Plan();  // unimplemented here: the f32 copies take it
  }
  return plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace

bool onednn_bf16_matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  if (!backends::onednn_enabled() || onednn_level() != cpu_isa()) return false;
  if (a.dtype() != DType::bf16 || b.dtype() != DType::bf16 || out.dtype() != DType::bf16)
    return false;
  const int64_t d = out.dim(), batch = d - 2;
  const int64_t n = out.size(d - 2), m = out.size(d - 1), k = a.size(d - 1);
  if (n == 0 || m == 0 || k == 0) return false;
  if (!matrix_layout(a).ok || !matrix_layout(b).ok) return false;
  const std::optional<Batch> batch_a = fold_batch(a, out, batch);
  const std::optional<Batch> batch_b = fold_batch(b, out, batch);
  const Batch batch_out{shape_numel(Shape(out.shape().begin(), out.shape().end() - 2)), n * m};
  if (!batch_a || !batch_b) return false;
  if ((batch_a->count != 1 && batch_a->count != batch_out.count) ||
      (batch_b->count != 1 && batch_b->count != batch_out.count))
    return false;
  const Plan& plan = plan_for(
      matrix_desc(a, *batch_a, n, k), matrix_desc(b, *batch_b, k, m),
      memory::desc({batch_out.count, n, m}, memory::data_type::bf16, memory::dims{n * m, m, 1}),
      accumulate);
  if (!plan.usable) return false;
  thread_local dnnl::stream s(onednn_engine());
  plan.matmul.execute(s, {{DNNL_ARG_SRC, memory(plan.a, onednn_engine(), a.data_ptr())},
                          {DNNL_ARG_WEIGHTS, memory(plan.b, onednn_engine(), b.data_ptr())},
                          {DNNL_ARG_DST, memory(plan.out, onednn_engine(), out.data_ptr())}});
  s.wait();
  return true;
}

#else

bool onednn_bf16_matmul(const Tensor&, const Tensor&, const Tensor&, bool) {
  return false;
}

#endif

}  // namespace kiln::cpu
