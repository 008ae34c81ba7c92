// oneDNN's convolutions, called as PyTorch 1.13 calls them on the CPU: kiln's NCHW tensors are
// reordered into the blocked layouts oneDNN's kernels pick (format "any"), the convolution runs,
// and the result is reordered back, on every call (the reorders cost oneDNN about a third of its
// time inside ResNet-20's steps), but for the weight gradient's grad_output when the input
// gradient just reordered the same one (BlockedGradOutput below), and for the weight gradient's x
// when the forward kept its copy (KeptInput below). A plan (the primitive and its reorders) is
// made once per pass, dtype and shape and kept per thread; the other blocked copies live in
// per-thread buffers that are kept, as the direct kernels' are.
//
// Only oneDNN's JIT kernels count: a shape oneDNN would run with its reference or GEMM-based code
// stays with kiln. backends::set_onednn_enabled(false) or KILN_ONEDNN=0 turns oneDNN off, as
// torch.backends.mkldnn.enabled. kiln's ISA cap (KILN_CPU_ISA, set_cpu_isa) caps oneDNN too, once,
// on oneDNN's first use; while kiln's level differs from the one oneDNN was capped to, oneDNN
// runs nothing, so the per-ISA tests compare kiln's own kernels. Uncapped, oneDNN also uses what
// kiln has no level for: AMX on Xeons that have it, which choice.cpp's timing finds by itself.
#include "kiln/kernels/cpu/conv2d/onednn.h"

#if KILN_WITH_ONEDNN
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/core/backends.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/core/dtype.h"
#include "kiln/core/storage.h"
#include "kiln/core/tensor.h"
#endif

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/onednn_isa.h"

namespace kiln::cpu {

#if KILN_WITH_ONEDNN

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

memory::data_type data_type(DType dtype) {
  return dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
}

struct Descs {
  memory::dims src, weights, dst, strides, dilates, pad_l, pad_r;
  Tag weights_tag;
};

Descs descs(const Conv2dGeometry& g) {
  Descs d;
  d.src = {g.batch, g.in_channels, g.in_h, g.in_w};
  d.dst = {g.batch, g.out_channels, g.out_h, g.out_w};
  if (g.groups == 1) {
    d.weights = {g.out_channels, g.in_channels, g.kernel_h, g.kernel_w};
    d.weights_tag = Tag::oihw;
  } else {
    d.weights = {g.groups, g.out_channels / g.groups, g.in_channels / g.groups, g.kernel_h,
                 g.kernel_w};
    d.weights_tag = Tag::goihw;
  }
  d.strides = {g.stride_h, g.stride_w};
  d.dilates = {g.dilation_h - 1, g.dilation_w - 1};  // oneDNN counts the gaps between taps
  // Padding on the far side as on the near one, as PyTorch passes it: the output sizes agree.
  d.pad_l = {g.pad_h, g.pad_w};
  d.pad_r = {g.pad_h, g.pad_w};
  return d;
}

// A pass's primitive with the layouts it chose and the reorders from and to kiln's.
struct Plan {
  bool usable = false;
  dnnl::primitive conv;
  int arg_a = 0, arg_b = 0, arg_result = 0;
  memory::desc user_a, user_b, user_result, bias;
  memory::desc a, b, result;
  std::optional<dnnl::reorder> a_in, b_in, result_out;
};

std::optional<dnnl::reorder> reorder_between(const memory::desc& from, const memory::desc& to) {
  if (from == to) return std::nullopt;
  return dnnl::reorder(dnnl::reorder::primitive_desc(onednn_engine(), from, onednn_engine(), to));
}

// JIT kernels only: "jit:avx512_core", "jit_1x1:avx2", "brgconv:...", not "gemm:jit" or "ref".
bool is_jit(const std::string& impl) {
  return impl.rfind("jit", 0) == 0 || impl.rfind("brg", 0) == 0;
}

template <class Primitive, class PrimitiveDesc>
void finish(Plan& plan, const PrimitiveDesc& pd, const memory::desc& a, const memory::desc& b,
            const memory::desc& result) {
  if (!is_jit(pd.impl_info_str())) return;
  plan.conv = Primitive(pd);
  plan.a = a, plan.b = b, plan.result = result;
  plan.a_in = reorder_between(plan.user_a, a);
  plan.b_in = reorder_between(plan.user_b, b);
  plan.result_out = reorder_between(result, plan.user_result);
  plan.usable = true;
}

Plan make_plan(ConvPass pass, DType dtype, bool with_bias, const Conv2dGeometry& g) {
  using dnnl::algorithm;
  using dnnl::prop_kind;
  const Descs d = descs(g);
  const memory::data_type t = data_type(dtype);
  const memory::desc src_any(d.src, t, Tag::any), weights_any(d.weights, t, Tag::any),
      dst_any(d.dst, t, Tag::any);
  const memory::desc src_user(d.src, t, Tag::nchw), weights_user(d.weights, t, d.weights_tag),
      dst_user(d.dst, t, Tag::nchw);
  const memory::desc bias_md =
      with_bias ? memory::desc({g.out_channels}, t, Tag::x) : memory::desc();
  const auto forward_desc = dnnl::convolution_forward::desc(
      prop_kind::forward_training, algorithm::convolution_direct, src_any, weights_any, bias_md,
      dst_any, d.strides, d.dilates, d.pad_l, d.pad_r);
  const dnnl::convolution_forward::primitive_desc forward_pd(forward_desc, onednn_engine());
  Plan plan;
  plan.bias = bias_md;
  switch (pass) {
    case ConvPass::forward:
      plan.arg_a = DNNL_ARG_SRC, plan.arg_b = DNNL_ARG_WEIGHTS, plan.arg_result = DNNL_ARG_DST;
      plan.user_a = src_user, plan.user_b = weights_user, plan.user_result = dst_user;
      finish<dnnl::convolution_forward>(plan, forward_pd, forward_pd.src_desc(),
                                        forward_pd.weights_desc(), forward_pd.dst_desc());
      break;
    case ConvPass::input_grad: {
      const dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(algorithm::convolution_direct, src_any, weights_any,
                                                dst_any, d.strides, d.dilates, d.pad_l, d.pad_r),
          onednn_engine(), forward_pd);
      plan.arg_a = DNNL_ARG_DIFF_DST, plan.arg_b = DNNL_ARG_WEIGHTS;
      plan.arg_result = DNNL_ARG_DIFF_SRC;
      plan.user_a = dst_user, plan.user_b = weights_user, plan.user_result = src_user;
      finish<dnnl::convolution_backward_data>(plan, pd, pd.diff_dst_desc(), pd.weights_desc(),
                                              pd.diff_src_desc());
      break;
    }
    case ConvPass::weight_grad: {
      const dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, src_any,
                                                   weights_any, dst_any, d.strides, d.dilates,
                                                   d.pad_l, d.pad_r),
          onednn_engine(), forward_pd);
      plan.arg_a = DNNL_ARG_DIFF_DST, plan.arg_b = DNNL_ARG_SRC;
      plan.arg_result = DNNL_ARG_DIFF_WEIGHTS;
      plan.user_a = dst_user, plan.user_b = src_user, plan.user_result = weights_user;
      finish<dnnl::convolution_backward_weights>(plan, pd, pd.diff_dst_desc(), pd.src_desc(),
                                                 pd.diff_weights_desc());
      break;
    }
  }
  return plan;
}

// The plan for a pass, made on first use; a problem oneDNN rejects gets an unusable plan.
const Plan& plan_for(ConvPass pass, DType dtype, bool with_bias, const Conv2dGeometry& g) {
  thread_local std::map<std::vector<int64_t>, Plan> plans;
  std::vector<int64_t> key{static_cast<int64_t>(pass), static_cast<int64_t>(dtype), with_bias};
  const std::array<int64_t, 14> geometry = geometry_key(g);
  key.insert(key.end(), geometry.begin(), geometry.end());
  auto found = plans.find(key);
  if (found != plans.end()) return found->second;
  Plan plan;
  try {
    plan = make_plan(pass, dtype, with_bias, g);
  } catch (const dnnl::error&) {
    plan = Plan();  // unimplemented here: kiln's kernels take it
  }
  return plans.emplace(key, std::move(plan)).first->second;
}

// A thread's buffer for one operand in oneDNN's layout, grown to `bytes` and kept, 64-byte
// aligned as oneDNN's own allocations are.
void* scratch(int slot, size_t bytes) {
  struct Buffer {
    void* data = nullptr;
    size_t size = 0;
    ~Buffer() { ::operator delete (data, std::align_val_t{64}); }
  };
  thread_local Buffer buffers[3];
  Buffer& b = buffers[slot];
  if (b.size < bytes) {
    ::operator delete (b.data, std::align_val_t{64});
    b.data = nullptr;
    b.data = ::operator new (bytes, std::align_val_t{64});
    b.size = bytes;
  }
  return b.data;
}

// kiln's operand at `data`, in the layout the plan's primitive reads: reordered into the thread's
// buffer `slot` where the two differ.
memory operand(dnnl::stream& s, const memory::desc& user_desc, void* data,
               const memory::desc& wanted, const std::optional<dnnl::reorder>& reorder, int slot) {
  memory user(user_desc, onednn_engine(), data);
  if (!reorder) return user;
  memory blocked(wanted, onednn_engine(), scratch(slot, wanted.get_size()));
  reorder->execute(s, user, blocked);
  return blocked;
}

// What the thread's buffer 0 holds: the output gradient (operand a of both gradient passes) of
// the last call that reordered one, so that the weight gradient Conv2dBackward asks for right
// after the input gradient reads the copy that pass made instead of reordering it again. The
// copy stands for the tensor while its storage lives unchanged (same storage, version and
// address) and both passes want the same layout.
struct BlockedGradOutput {
  std::weak_ptr<Storage> storage;
  uint64_t version = 0;
  const void* data = nullptr;
  memory::desc user, blocked;

  bool holds(const Tensor& t, const memory::desc& user_desc, const memory::desc& wanted) const {
    const std::shared_ptr<Storage>& mine = t.storage();
    return data == t.data_ptr() && user == user_desc && blocked == wanted && mine &&
           !storage.owner_before(mine) && !mine.owner_before(storage) && !storage.expired() &&
           version == t.version();
  }
};

thread_local BlockedGradOutput blocked_grad_output;

// Blocked copies of forward inputs kept for the weight gradient (ConvCall::keep_input): the
// weight gradient of a step reads its input long after the forward reordered it, from memory
// instead of cache, and reordering it again cost ResNet-20's f32 steps on a Zen 5 about 4 ms in 85.
// A copy stands for its tensor while the tensor's storage lives unchanged (same storage, version,
// address and layouts); the weight gradient that reads it drops it, and copies whose storage died
// are dropped on the next call that looks.
struct KeptInput {
  std::weak_ptr<Storage> storage;
  uint64_t version = 0;
  const void* data = nullptr;
  memory::desc user, blocked;
  Tensor copy;

  bool holds(const Tensor& t, const memory::desc& user_desc, const memory::desc& wanted) const {
    const std::shared_ptr<Storage>& mine = t.storage();
    return data == t.data_ptr() && user == user_desc && blocked == wanted && mine &&
           !storage.owner_before(mine) && !mine.owner_before(storage) && !storage.expired() &&
           version == t.version();
  }
};

std::mutex kept_inputs_mutex;
std::vector<KeptInput> kept_inputs;  // guarded by kept_inputs_mutex

void drop_dead_inputs() {
  std::erase_if(kept_inputs, [](const KeptInput& k) { return k.storage.expired(); });
}

// The forward's input reordered into a new buffer, kept for the weight gradient.
memory kept_input_copy(dnnl::stream& s, const Plan& plan, const ConvCall& call) {
  const int64_t words = static_cast<int64_t>((plan.a.get_size() + 3) / 4);
  KeptInput kept{call.a.storage(), call.a.version(), call.a.data_ptr(),
                 plan.user_a,      plan.a,           empty({words}, DType::f32)};
  memory blocked(plan.a, onednn_engine(), kept.copy.data_ptr());
  memory user(plan.user_a, onednn_engine(), call.a.data_ptr());
  plan.a_in->execute(s, user, blocked);
  const std::lock_guard<std::mutex> lock(kept_inputs_mutex);
  drop_dead_inputs();
  std::erase_if(kept_inputs,
                [&](const KeptInput& k) { return k.holds(call.a, plan.user_a, plan.a); });
  kept_inputs.push_back(std::move(kept));
  return blocked;
}

// The kept copy of the weight gradient's input, taken out of the kept ones; undefined if none.
Tensor take_kept_input(const Plan& plan, const ConvCall& call) {
  const std::lock_guard<std::mutex> lock(kept_inputs_mutex);
  drop_dead_inputs();
  // A copy of this storage from before an in-place change stands for nothing any more.
  std::erase_if(kept_inputs, [&](const KeptInput& k) {
    const std::shared_ptr<Storage>& mine = call.b.storage();
    return !k.storage.owner_before(mine) && !mine.owner_before(k.storage) &&
           k.version != call.b.version();
  });
  for (auto it = kept_inputs.begin(); it != kept_inputs.end(); ++it) {
    if (!it->holds(call.b, plan.user_b, plan.b)) continue;
    Tensor copy = std::move(it->copy);
    kept_inputs.erase(it);
    return copy;
  }
  return Tensor();
}

void run(const Plan& plan, const ConvCall& call) {
  thread_local dnnl::stream s(onednn_engine());
  std::unordered_map<int, memory> args;
  const bool gradient_pass = call.pass != ConvPass::forward;
  BlockedGradOutput& kept = blocked_grad_output;
  if (gradient_pass && plan.a_in && kept.holds(call.a, plan.user_a, plan.a)) {
    args.emplace(plan.arg_a, memory(plan.a, onednn_engine(), scratch(0, plan.a.get_size())));
  } else if (call.keep_input && plan.a_in) {
    args.emplace(plan.arg_a, kept_input_copy(s, plan, call));
  } else {
    args.emplace(plan.arg_a, operand(s, plan.user_a, call.a.data_ptr(), plan.a, plan.a_in, 0));
    // The buffer now holds this call's copy: a gradient pass's to keep, a forward's to forget.
    if (plan.a_in)
      kept = gradient_pass ? BlockedGradOutput{call.a.storage(), call.a.version(),
                                               call.a.data_ptr(), plan.user_a, plan.a}
                           : BlockedGradOutput();
  }
  const Tensor kept_input =
      call.pass == ConvPass::weight_grad && plan.b_in ? take_kept_input(plan, call) : Tensor();
  if (kept_input.defined())
    args.emplace(plan.arg_b, memory(plan.b, onednn_engine(), kept_input.data_ptr()));
  else
    args.emplace(plan.arg_b, operand(s, plan.user_b, call.b.data_ptr(), plan.b, plan.b_in, 1));
  memory user_result(plan.user_result, onednn_engine(), call.result.data_ptr());
  memory out = plan.result_out
                   ? memory(plan.result, onednn_engine(), scratch(2, plan.result.get_size()))
                   : user_result;
  args.emplace(plan.arg_result, out);
  if (call.bias.defined())
    args.emplace(DNNL_ARG_BIAS, memory(plan.bias, onednn_engine(), call.bias.data_ptr()));
  plan.conv.execute(s, args);
  if (plan.result_out) plan.result_out->execute(s, out, user_result);
  s.wait();
}

}  // namespace

bool onednn_conv2d_runs(const ConvCall& call) {
  if (!backends::onednn_enabled()) return false;
  const CpuIsa isa = cpu_isa();
  const DType dtype = call.dtype();
  if (dtype == DType::bf16 ? isa < CpuIsa::avx512_bf16 : dtype != DType::f32 || isa < CpuIsa::avx2)
    return false;
  if (isa != onednn_level()) return false;
  return plan_for(call.pass, dtype, call.bias.defined(), call.g).usable;
}

void onednn_conv2d(const ConvCall& call) {
  const Plan& plan = plan_for(call.pass, call.dtype(), call.bias.defined(), call.g);
  KILN_CHECK(plan.usable, ValueError, "conv2d: oneDNN has no JIT kernel for this problem");
  try {
    run(plan, call);
  } catch (const dnnl::error& e) {
    throw Error(std::string("conv2d: oneDNN failed (") + e.what() +
                "); KILN_ONEDNN=0 runs kiln's own kernels");
  }
  backends::count_onednn_conv2d_run();
}

int64_t onednn_kept_conv_inputs() {
  const std::lock_guard<std::mutex> lock(kept_inputs_mutex);
  drop_dead_inputs();
  return static_cast<int64_t>(kept_inputs.size());
}

void forget_onednn_conv2d_copies() {
  blocked_grad_output = BlockedGradOutput();
}

#else

bool onednn_conv2d_runs(const ConvCall&) {
  return false;
}

void onednn_conv2d(const ConvCall&) {
  throw Error("conv2d: this build has no oneDNN");
}

int64_t onednn_kept_conv_inputs() {
  return 0;
}

void forget_onednn_conv2d_copies() {}

#endif

}  // namespace kiln::cpu
