// conv2d on cuDNN 9's graph (backend) API, with the C calls alone (cudnn_graph.h: no
// cudnn-frontend). Every graph-API program takes the same steps (cuDNN's "Backend API" chapter):
//   1. tensor descriptors for x, w and y: dims in N, C, H, W order, strides for NCHW or NHWC
//   2. a convolution descriptor: compute type, paddings, strides, dilations
//   3. the operation (forward, backward data or backward filter) that ties them together
//   4. an operation graph that holds that one operation
//   5. engine heuristics on the graph: mode A's engine configurations, best first (as PyTorch
//      asks), then fallback mode's, which cover problems mode A ranks no engine for that builds
//      (a C = 3 NHWC stem in f16, small groups, f64; as cudnn-frontend's build({A, FALLBACK}))
//   6. an execution plan from the first configuration the switches allow that cuDNN finalizes
//   7. on every call: a variant pack (the data pointers by tensor id, and the workspace), executed
// Steps 1-6 run once per problem; the plan is cached. Under backends::cudnn_benchmark(), step 6
// times every allowed configuration that finalizes and keeps the fastest, as PyTorch's benchmark
// mode does with the heuristics' list (a configuration both modes list is timed twice).
//
// The GPU: from cuDNN 9.8 a device-properties descriptor (the device id) given to the heuristics,
// in place of the handle on the graph and on the plan (CUDNN_ATTR_OPERATIONGRAPH_HANDLE and
// CUDNN_ATTR_EXECUTION_PLAN_HANDLE, deprecated in cuDNN 9's headers); a plan built from an engine
// configuration needs neither, as cudnn-frontend builds them since its 1.13. The handle is given
// to cudnnBackendExecute alone. Compiled against an older cuDNN, the handle attributes as before.
// Written from the headers and cudnn-frontend; not run on a GPU yet (docs/results.md).
//
// Every cuDNN status error in steps 1-7 becomes "run the legacy path for this problem"
// (run_conv2d_graph_api answers false): a mistake here that cuDNN reports costs the graph API's
// choice of engine, not the convolution.
#include "kiln/kernels/cuda/conv2d/graph_api.h"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/backends.h"
#include "kiln/core/cuda.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/handles.h"

namespace kiln::cuda {

namespace {

using conv2d_graph::Pass;

// A cuDNN status other than success while building or running a graph: the caller falls back.
class GraphStatusError : public Error {
 public:
  GraphStatusError(const std::string& what, cudnnStatus_t status)
      : Error(what + " failed: " + cudnnGetErrorString(status)) {}
};

// The message is made only on failure: the variant pack's calls run on every convolution.
// `number` (an attribute or descriptor type) is appended when not negative.
void check(cudnnStatus_t status, const char* what, int number = -1) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw GraphStatusError(number < 0 ? std::string(what) : fmt::format("{} ({})", what, number),
                         status);
}

// Owns one backend descriptor. Every attribute is set as an array of `count` values of one type.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    check(cudnnBackendCreateDescriptor(type, &desc_), "cudnnBackendCreateDescriptor of type",
          static_cast<int>(type));
  }
  ~Descriptor() {
    if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
  }
  Descriptor(Descriptor&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    std::swap(desc_, other.desc_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values) {
    check(cudnnBackendSetAttribute(desc_, name, type, count, values),
          "cudnnBackendSetAttribute of attribute", static_cast<int>(name));
  }
  // Sets an attribute that names another descriptor.
  void set(cudnnBackendAttributeName_t name, const Descriptor& other) {
    const cudnnBackendDescriptor_t raw = other.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  // `what` names the descriptor in the error: "cudnnBackendFinalize of the <what>".
  void finalize(const char* what) {
    if (const cudnnStatus_t status = cudnnBackendFinalize(desc_); status != CUDNN_STATUS_SUCCESS)
      throw GraphStatusError(fmt::format("cudnnBackendFinalize of the {}", what), status);
  }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// The tensor ids the operation and the variant pack agree on.
constexpr int64_t kXId = 'x', kWId = 'w', kYId = 'y';

Descriptor make_tensor(int64_t id, const conv2d_graph::TensorLayout& t, cudnnDataType_t type,
                       int64_t alignment) {
  Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data());
  d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data());
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  d.finalize("tensor descriptor");
  return d;
}

Descriptor make_convolution(const Conv2dGeometry& g, cudnnDataType_t compute) {
  Descriptor d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t spatial_dims = 2;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;  // what deep learning calls conv
  const int64_t padding[2] = {g.pad_h, g.pad_w}, stride[2] = {g.stride_h, g.stride_w};
  const int64_t dilation[2] = {g.dilation_h, g.dilation_w};
  d.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  d.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  d.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial_dims);
  // kiln pads both sides alike; the graph API could pad the far side differently.
  d.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, padding);
  d.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, padding);
  d.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
  d.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation);
  d.finalize("convolution descriptor");
  return d;
}

// The three passes differ only in the operation's descriptor type and attribute names: which of
// x, w and y each one reads and which it writes is in the names (DX, DW, DY).
struct OperationNames {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, convolution, alpha, beta;
};

OperationNames operation_names(Pass pass) {
  switch (pass) {
    case Pass::forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case Pass::backward_input:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case Pass::backward_weight:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
  throw Error("conv2d (cuDNN graph API): unknown pass");
}

// y = 1 * conv(...) + 0 * y: the output is overwritten. The scalars are double only for f64.
Descriptor make_operation(Pass pass, DType dtype, const Descriptor& x, const Descriptor& w,
                          const Descriptor& y, const Descriptor& convolution) {
  const OperationNames names = operation_names(pass);
  Descriptor d(names.type);
  d.set(names.x, x);
  d.set(names.w, w);
  d.set(names.y, y);
  d.set(names.convolution, convolution);
  const double alpha_f64 = 1.0, beta_f64 = 0.0;
  const float alpha_f32 = 1.0f, beta_f32 = 0.0f;
  if (dtype == DType::f64) {
    d.set(names.alpha, CUDNN_TYPE_DOUBLE, 1, &alpha_f64);
    d.set(names.beta, CUDNN_TYPE_DOUBLE, 1, &beta_f64);
  } else {
    d.set(names.alpha, CUDNN_TYPE_FLOAT, 1, &alpha_f32);
    d.set(names.beta, CUDNN_TYPE_FLOAT, 1, &beta_f32);
  }
  d.finalize("convolution operation");
  return d;
}

#if CUDNN_VERSION >= 90800
// The GPU the heuristics rank engines for (step 5), in place of the graph's handle.
Descriptor make_device_properties(int device) {
  Descriptor d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  const int32_t id = device;
  d.set(CUDNN_ATTR_DEVICEPROP_DEVICE_ID, CUDNN_TYPE_INT32, 1, &id);
  d.finalize("device properties descriptor");
  return d;
}
#endif

// One heuristics mode's engine configurations for the graph, best first. `device_properties` is
// null when compiled against a cuDNN before 9.8, whose graph carries the handle instead.
std::vector<Descriptor> ranked_configs(const Descriptor& graph, const Descriptor* device_properties,
                                       cudnnBackendHeurMode_t mode, const char* mode_name) {
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
#if CUDNN_VERSION >= 90800
  if (device_properties != nullptr)
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, *device_properties);
#else
  static_cast<void>(device_properties);
#endif
  heuristics.finalize(fmt::format("engine heuristics, {}", mode_name).c_str());
  // Asking for zero results answers how many there are; the array must then hold that many
  // descriptors, created by the caller, for cuDNN to fill.
  int64_t count = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "reading the number of heuristics results");
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  configs.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t got = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
        "reading the heuristics results");
  configs.erase(configs.begin() + std::min(got, count), configs.end());
  return configs;
}

// Mode A's configurations, then fallback mode's. A mode whose heuristics cuDNN refuses adds none;
// both refused is the error of each.
std::vector<Descriptor> candidate_configs(const Descriptor& graph,
                                          const Descriptor* device_properties) {
  std::vector<Descriptor> configs;
  std::string refused;
  const std::pair<cudnnBackendHeurMode_t, const char*> modes[] = {
      {CUDNN_HEUR_MODE_A, "mode A"}, {CUDNN_HEUR_MODE_FALLBACK, "fallback mode"}};
  for (const auto& [mode, name] : modes) {
    try {
      std::vector<Descriptor> ranked = ranked_configs(graph, device_properties, mode, name);
      std::move(ranked.begin(), ranked.end(), std::back_inserter(configs));
    } catch (const GraphStatusError& e) {
      refused += refused.empty() ? e.what() : std::string("; ") + e.what();
    }
  }
  if (configs.empty() && !refused.empty())
    throw GraphStatusError(refused, CUDNN_STATUS_NOT_SUPPORTED);
  return configs;
}

// What the engine of a configuration says about its numerics.
conv2d_graph::EngineNotes notes_of(const Descriptor& config) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t got = 0;
  check(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &raw),
        "reading an engine configuration's engine");
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  check(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE, static_cast<int64_t>(notes.size()),
                                 &got, notes.data()),
        "reading an engine's numerical notes");
  conv2d_graph::EngineNotes result;
  for (int64_t i = 0; i < got && i < static_cast<int64_t>(notes.size()); ++i) {
    result.tensor_core = result.tensor_core || notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
    result.down_convert_inputs =
        result.down_convert_inputs || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
    result.nondeterministic =
        result.nondeterministic || notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
  }
  return result;
}

// The plan of one configuration, or nothing when cuDNN does not finalize it: that engine cannot
// run this problem on this GPU, and the next configuration is tried. From cuDNN 9.8 the
// configuration names the GPU (through the heuristics' device properties) and the plan takes no
// handle.
std::optional<Descriptor> make_plan(const Descriptor& config, cudnnHandle_t handle) {
  Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
#if CUDNN_VERSION < 90800
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
#else
  static_cast<void>(handle);
#endif
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
  if (cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) return std::nullopt;
  return plan;
}

int64_t workspace_bytes_of(const Descriptor& plan) {
  int64_t bytes = 0, got = 0;
  check(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &got, &bytes),
        "reading a plan's workspace size");
  return bytes;
}

// A finalized plan with everything it was built from (the descriptors it refers to live as long
// as it does), and the workspace it needs, taken from the caching allocator on every run.
struct Plan {
  std::vector<Descriptor> owned;  // built in dependency order; destroyed in reverse
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace_bytes = 0;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    while (!owned.empty()) owned.pop_back();
  }
};

Tensor workspace(int device, int64_t bytes) {
  if (bytes > 0 && backends::take_cudnn_workspace_failure())
    throw OutOfMemoryError(fmt::format(
        "cuDNN workspace of {} bytes on cuda:{}: failed as backends::fail_cudnn_workspaces asked",
        bytes, device));
  return bytes > 0 ? empty({bytes}, DType::u8, Device::cuda(device)) : Tensor();
}

cudnnStatus_t execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                      const GraphConvCall& call, const Tensor& workspace) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t ids[3] = {kXId, kWId, kYId};
  void* pointers[3] = {call.x, call.w, call.y};
  void* workspace_ptr = workspace.defined() ? workspace.data_ptr() : nullptr;
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, ids);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace_ptr);
  pack.finalize("variant pack");
  return cudnnBackendExecute(handle, plan, pack.get());
}

// Milliseconds of one run of `plan`, the best of a few after a warm-up run; nothing when it
// cannot run (its workspace does not fit, or cuDNN refuses to execute it): the next one is timed.
std::optional<float> time_plan(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                               int64_t workspace_bytes, const GraphConvCall& call) {
  Tensor buffer;
  try {
    buffer = workspace(call.device, workspace_bytes);
  } catch (const OutOfMemoryError&) {
    return std::nullopt;
  }
  try {
    // The runs overwrite the output, as the real run will.
    if (execute(handle, plan, call, buffer) != CUDNN_STATUS_SUCCESS) return std::nullopt;
    constexpr int kTimedRuns = 3;
    float best_ms = 0;
    for (int run = 0; run < kTimedRuns; ++run) {
      Event start(/*enable_timing=*/true), end(/*enable_timing=*/true);
      start.record();
      const cudnnStatus_t status = execute(handle, plan, call, buffer);
      end.record();
      end.synchronize();
      if (status != CUDNN_STATUS_SUCCESS) return std::nullopt;
      const float ms = start.elapsed_time(end);
      if (run == 0 || ms < best_ms) best_ms = ms;
    }
    return best_ms;
  } catch (const GraphStatusError&) {
    return std::nullopt;
  }
}

// Steps 1-6 for one problem. Throws GraphStatusError when cuDNN refuses a step, or when no
// configuration both passes the switches' filter and finalizes.
std::shared_ptr<const Plan> build_plan(const GraphConvCall& call, cudnnHandle_t handle,
                                       const std::array<int64_t, 3>& alignments) {
  auto result = std::make_shared<Plan>();
  std::vector<Descriptor>& owned = result->owned;
  const Conv2dGeometry& g = call.geometry;
  const cudnnDataType_t type = cudnn_data_type(call.dtype, call.op);
  owned.push_back(
      make_tensor(kXId, conv2d_graph::input_layout(g, call.format), type, alignments[0]));
  owned.push_back(
      make_tensor(kWId, conv2d_graph::weight_layout(g, call.format), type, alignments[1]));
  owned.push_back(
      make_tensor(kYId, conv2d_graph::output_layout(g, call.format), type, alignments[2]));
  owned.push_back(
      make_convolution(g, cudnn_data_type(conv2d_graph::compute_dtype(call.dtype), call.op)));
  // owned: x, w, y, the convolution, then the operation on them.
  owned.push_back(make_operation(call.pass, call.dtype, owned[0], owned[1], owned[2], owned[3]));
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, owned[4]);
#if CUDNN_VERSION >= 90800
  owned.push_back(make_device_properties(call.device));
  const Descriptor* device_properties = &owned.back();
#else
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  const Descriptor* device_properties = nullptr;
#endif
  graph.finalize("operation graph");
  std::vector<Descriptor> configs = candidate_configs(graph, device_properties);
  // Last: a push may move the Descriptor device_properties points to (not its cuDNN descriptor).
  owned.push_back(std::move(graph));
  const bool allow_tf32 = backends::cudnn_allow_tf32();
  const bool deterministic = backends::cudnn_deterministic();
  const bool benchmark = backends::cudnn_benchmark();
  std::optional<float> best_ms;
  size_t allowed = 0;
  for (Descriptor& config : configs) {
    if (!conv2d_graph::engine_allowed(call.dtype, notes_of(config), allow_tf32, deterministic))
      continue;
    ++allowed;
    std::optional<Descriptor> plan = make_plan(config, handle);
    if (!plan) continue;
    const int64_t bytes = workspace_bytes_of(*plan);
    if (benchmark) {
      const std::optional<float> ms = time_plan(handle, plan->get(), bytes, call);
      if (!ms || (best_ms && *best_ms <= *ms)) continue;
      best_ms = ms;
    }
    // The first plan that builds (the heuristics' best), or the fastest so far when timing:
    // replace the one kept before, which sits behind its configuration at the end.
    if (result->plan != nullptr) {
      owned.pop_back();
      owned.pop_back();
    }
    result->plan = plan->get();
    result->workspace_bytes = bytes;
    owned.push_back(std::move(config));
    owned.push_back(std::move(*plan));
    if (!benchmark) break;
  }
  if (result->plan == nullptr)
    throw GraphStatusError(fmt::format("building a plan from the heuristics' {} engine "
                                       "configurations of modes A and fallback ({} allowed by "
                                       "the TF32/deterministic switches{})",
                                       configs.size(), allowed, benchmark ? ", timed" : ""),
                           CUDNN_STATUS_NOT_SUPPORTED);
  return result;
}

// Per thread: a plan is finalized with its thread's cuDNN handle (handles.h), as PyTorch keeps
// its graph-API plan cache thread-local. A null plan means "this problem runs on the legacy API".
using PlanCache = std::map<std::vector<int64_t>, std::shared_ptr<const Plan>>;

PlanCache& plan_cache() {
  thread_local PlanCache cache;
  return cache;
}

}  // namespace

cudnnDataType_t cudnn_data_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      throw DTypeError(
          fmt::format("{}: cuDNN takes f32, f64, f16 or bf16, got {}", op, dtype_name(dtype)));
  }
}

bool run_conv2d_graph_api(const GraphConvCall& call) {
  const std::array<int64_t, 3> alignments{
      conv2d_graph::byte_alignment(reinterpret_cast<uintptr_t>(call.x)),
      conv2d_graph::byte_alignment(reinterpret_cast<uintptr_t>(call.w)),
      conv2d_graph::byte_alignment(reinterpret_cast<uintptr_t>(call.y))};
  const std::vector<int64_t> key = conv2d_graph::plan_key(
      {call.pass, call.device, call.dtype, call.format, call.geometry, alignments,
       backends::cudnn_allow_tf32(), backends::cudnn_deterministic(), backends::cudnn_benchmark()});
  const cudnnHandle_t handle = cudnn_handle(call.device);
  PlanCache& cache = plan_cache();
  auto fall_back = [&](const std::string& why) {
    backends::count_cudnn_fallback(fmt::format(
        "{} (cuDNN graph API): {} for {}", call.op, why,
        conv2d_graph::describe_problem(call.geometry, call.format, call.dtype, call.device)));
    cache[key] = nullptr;
    return false;
  };
  auto it = cache.find(key);
  if (it == cache.end()) {
    // Building a plan may time candidates (benchmark mode: execute, then synchronize) and load
    // runtime-compiled kernels, neither of which a capture can hold: a graph is captured after a
    // warm-up step has built the plans it needs.
    cuda::check_not_capturing(
        "a cuDNN graph-API plan built for a problem not seen before (it may time candidates and "
        "load kernels); run the step once before capturing it");
    try {
      it = cache.emplace(key, build_plan(call, handle, alignments)).first;
    } catch (const GraphStatusError& e) {
      return fall_back(e.what());
    }
  }
  if (it->second == nullptr) return false;
  // Kept alive by this copy even if a fallback below drops the cache's.
  const std::shared_ptr<const Plan> plan = it->second;
  // The plan's workspace near a full GPU: the legacy path takes this call (it looks for an
  // algorithm whose workspace fits), as PyTorch moves on to its next plan; the plan stays cached
  // for a later call with memory to spare.
  Tensor buffer;
  try {
    buffer = workspace(call.device, plan->workspace_bytes);
  } catch (const OutOfMemoryError& e) {
    backends::count_cudnn_fallback(fmt::format(
        "{} (cuDNN graph API): its plan's workspace of {} bytes did not fit ({}); this call ran on "
        "the legacy API",
        call.op, plan->workspace_bytes, e.what()));
    return false;
  }
  try {
    const cudnnStatus_t status = execute(handle, plan->plan, call, buffer);
    if (status != CUDNN_STATUS_SUCCESS)
      return fall_back(std::string("cudnnBackendExecute failed: ") + cudnnGetErrorString(status));
  } catch (const GraphStatusError& e) {
    return fall_back(e.what());
  }
  return true;
}

}  // namespace kiln::cuda
