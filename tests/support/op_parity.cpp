// The runner of the parity harness (op_table.h): one op on one device in one dtype against the
// CPU in f64.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradcheck.h"
#include "kiln/core/backends.h"
#include "kiln/kiln.h"
#include "op_table.h"
#include "parity.h"

namespace kiln::testing {

namespace {

Allowance allowance_for(const OpEntry& op, DType dtype, Device device) {
  for (const Allowance& a : op.allowances)
    if (a.dtype == dtype && (!a.gpu_only || device.is_cuda())) return a;
  return Allowance{dtype};
}

// A tensor of its own on `device` (never the made input itself, which the other side also reads),
// a leaf when asked.
Tensor fresh(const Tensor& t, Device device, bool leaf) {
  Tensor out = t.to(device).detach().clone();
  if (leaf) out.requires_grad_();
  return out;
}

// The fixed upstream gradient of output k: values in [-1, 1) rounded to the dtype under test, so
// both sides start the backward from the same numbers.
Tensor upstream_gradient(const Tensor& out, size_t k, uint64_t seed, DType dtype) {
  return random_f64(out.shape(), seed + 50 + k).to(dtype);
}

// Backward from every output that requires grad: one output takes its upstream gradient directly;
// several are summed as sum(out_k * g_k), whose gradient with respect to out_k is exactly g_k.
void backward(const std::vector<Tensor>& outputs, uint64_t seed, DType dtype, Device device,
              DType compute_dtype) {
  std::vector<Tensor> roots, grads;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!outputs[k].requires_grad()) continue;
    roots.push_back(outputs[k]);
    grads.push_back(upstream_gradient(outputs[k], k, seed, dtype).to(compute_dtype).to(device));
  }
  if (roots.empty()) return;
  if (roots.size() == 1) {
    roots[0].backward(grads[0]);
    return;
  }
  Tensor total;
  for (size_t k = 0; k < roots.size(); ++k) {
    Tensor term = sum(mul(roots[k], grads[k]));
    total = total.defined() ? add(total, term) : term;
  }
  total.backward();
}

void check_op(const OpEntry& op, Device device, DType dtype, uint64_t seed) {
  // f32 is checked at f32 accuracy: GPU convolutions round their operands to TF32 by default
  // (tests/cuda/test_conv2d.cpp checks that mode against its own tolerance).
  const backends::Tf32Scope f32(false);
  const Device cpu = Device::cpu();
  const std::vector<OpInput> made = op.inputs(seed);
  std::vector<Tensor> on_device, reference;
  std::vector<bool> leaf;
  for (const OpInput& in : made) {
    const bool floating = is_floating(in.value.dtype());
    const bool is_leaf = op.differentiable && in.differentiable && floating;
    const Tensor rounded = floating ? in.value.to(dtype) : in.value;
    on_device.push_back(fresh(rounded, device, is_leaf));
    reference.push_back(fresh(floating ? rounded.to(DType::f64) : rounded, cpu, is_leaf));
    leaf.push_back(is_leaf);
  }
  const std::vector<Tensor> got = op.run(on_device);
  const std::vector<Tensor> want = op.run(reference);
  REQUIRE(got.size() == want.size());

  const Allowance allowance = allowance_for(op, dtype, device);
  INFO((allowance.forward != 1.0 || allowance.gradient != 1.0 ? "looser here: " : "")
       << allowance.why);
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("output " << k);
    CHECK(got[k].device() == device);
    if (is_floating(want[k].dtype())) {
      CHECK(got[k].dtype() == dtype);
      check_close(got[k], want[k], tolerance(dtype).times(allowance.forward));
    } else {
      CHECK(got[k].dtype() == want[k].dtype());
      check_close(got[k], want[k], kExact);
    }
  }
  if (!op.differentiable) return;

  backward(got, seed, dtype, device, dtype);
  backward(want, seed, dtype, cpu, DType::f64);
  for (size_t i = 0; i < made.size(); ++i) {
    if (!leaf[i]) continue;
    INFO("gradient of input " << i);
    const Tensor g = on_device[i].grad(), w = reference[i].grad();
    REQUIRE(g.defined() == w.defined());
    if (!w.defined()) continue;
    CHECK(g.device() == device);
    CHECK(g.dtype() == dtype);
    check_close(g, w, gradient_tolerance(dtype).times(allowance.gradient));
  }
}

}  // namespace

std::vector<Tensor> op_results(const OpEntry& op, Device device, DType dtype, uint64_t seed) {
  const std::vector<OpInput> made = op.inputs(seed);
  std::vector<Tensor> inputs;
  for (const OpInput& in : made) {
    const bool floating = is_floating(in.value.dtype());
    const bool is_leaf = op.differentiable && in.differentiable && floating;
    inputs.push_back(fresh(floating ? in.value.to(dtype) : in.value, device, is_leaf));
  }
  const std::vector<Tensor> outputs = op.run(inputs);
  if (op.differentiable) backward(outputs, seed, dtype, device, dtype);
  std::vector<Tensor> results;
  for (const Tensor& out : outputs) results.push_back(out.detach().to(Device::cpu()));
  for (const Tensor& in : inputs)
    if (in.requires_grad())
      results.push_back(in.grad().defined() ? in.grad().to(Device::cpu()) : Tensor());
  return results;
}

uint64_t op_seed(size_t index) {
  return 1000 * (index + 1);
}

void check_op_family(OpFamily family, Device device) {
  const std::vector<OpEntry>& table = op_table();
  for (size_t index = 0; index < table.size(); ++index) {
    const OpEntry& op = table[index];
    if (op.family != family) continue;
    const uint64_t seed = op_seed(index);
    for (DType dtype : op.dtypes) {
      DYNAMIC_SECTION(op.name << " on " << device.str() << " in " << dtype_name(dtype)) {
        check_op(op, device, dtype, seed);
      }
    }
  }
}

}  // namespace kiln::testing
