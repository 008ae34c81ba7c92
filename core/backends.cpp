#include "kiln/core/backends.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>

#include "kiln/core/error.h"

namespace kiln::backends {

namespace {

std::atomic<bool> matmul_tf32{false};
std::atomic<bool> conv_tf32{true};
std::atomic<bool> benchmark{false};
std::atomic<bool> deterministic{false};
std::atomic<bool> fused_attention{true};
std::atomic<bool> fused_rnn_cell{true};

CudnnApi api_from_environment() {
  const char* value = std::getenv("KILN_CUDNN_API");
  if (value == nullptr || *value == '\0') return CudnnApi::v7;
  try {
    return parse_cudnn_api(value);
  } catch (const ValueError& e) {
    throw ValueError(std::string("KILN_CUDNN_API: ") + e.what());
  }
}

bool onednn_from_environment() {
  const char* value = std::getenv("KILN_ONEDNN");
  if (value == nullptr || *value == '\0' || std::string(value) == "1") return true;
  if (std::string(value) == "0") return false;
  throw ValueError(std::string("KILN_ONEDNN: expected 0 or 1, got '") + value + "'");
}

bool fused_optimizer_from_environment() {
  const char* value = std::getenv("KILN_FUSED_OPTIMIZER");
  if (value == nullptr || *value == '\0' || std::string(value) == "0") return false;
  if (std::string(value) == "1") return true;
  throw ValueError(std::string("KILN_FUSED_OPTIMIZER: expected 0 or 1, got '") + value + "'");
}

// -1 until the first use reads KILN_FUSED_OPTIMIZER.
std::atomic<int> fused_optimizer{-1};

bool fused_rnn_cell_from_environment() {
  const char* value = std::getenv("KILN_FUSED_RNN_CELL");
  if (value == nullptr || *value == '\0' || std::string(value) == "0") return false;
  if (std::string(value) == "1") return true;
  throw ValueError(std::string("KILN_FUSED_RNN_CELL: expected 0 or 1, got '") + value + "'");
}

// -1 until the first use reads KILN_FUSED_RNN_CELL.
std::atomic<int> fused_rnn_cell_gpu{-1};

int failing_workspaces_from_environment() {
  const char* value = std::getenv("KILN_FAIL_CUDNN_WORKSPACE");
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long count = std::strtol(value, &end, 10);
  if (*end != '\0' || count < 0 || count > 1000000)
    throw ValueError(std::string("KILN_FAIL_CUDNN_WORKSPACE: expected a whole number, got '") +
                     value + "'");
  return static_cast<int>(count);
}

// -1 until the first use reads KILN_FAIL_CUDNN_WORKSPACE.
std::atomic<int> failing_workspaces{-1};

CpuConv cpu_conv_from_environment() {
  const char* value = std::getenv("KILN_CPU_CONV");
  if (value == nullptr || *value == '\0') return CpuConv::rule;
  try {
    return parse_cpu_conv(value);
  } catch (const ValueError& e) {
    throw ValueError(std::string("KILN_CPU_CONV: ") + e.what());
  }
}

// -1 until the first use reads KILN_CPU_CONV.
std::atomic<int> cpu_conv_pick{-1};

constexpr const char* kCpuConvNames[] = {"rule", "autotune", "onednn", "direct", "im2col"};

// -1 until the first use reads KILN_ONEDNN.
std::atomic<int> onednn{-1};
std::atomic<bool> onednn_keep_inputs{true};
std::atomic<int64_t> onednn_runs{0};

// -1 until the first use reads KILN_CUDNN_API.
std::atomic<int> api{-1};

std::atomic<int64_t> v9_runs{0}, v7_runs{0}, v9_fallbacks{0};
std::mutex fallback_mutex;
std::string fallback_reason;  // guarded by fallback_mutex

}  // namespace

bool cuda_matmul_allow_tf32() {
  return matmul_tf32.load(std::memory_order_relaxed);
}
void set_cuda_matmul_allow_tf32(bool allow) {
  matmul_tf32.store(allow, std::memory_order_relaxed);
}

bool cudnn_allow_tf32() {
  return conv_tf32.load(std::memory_order_relaxed);
}
void set_cudnn_allow_tf32(bool allow) {
  conv_tf32.store(allow, std::memory_order_relaxed);
}

bool cudnn_benchmark() {
  return benchmark.load(std::memory_order_relaxed);
}
void set_cudnn_benchmark(bool on) {
  benchmark.store(on, std::memory_order_relaxed);
}

bool fused_attention_enabled() {
  return fused_attention.load(std::memory_order_relaxed);
}
void set_fused_attention_enabled(bool on) {
  fused_attention.store(on, std::memory_order_relaxed);
}

bool fused_optimizer_on_gpu() {
  int value = fused_optimizer.load(std::memory_order_relaxed);
  if (value < 0) {
    value = fused_optimizer_from_environment() ? 1 : 0;
    fused_optimizer.store(value, std::memory_order_relaxed);
  }
  return value == 1;
}
void set_fused_optimizer_on_gpu(bool on) {
  fused_optimizer.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool fused_rnn_cell_enabled() {
  return fused_rnn_cell.load(std::memory_order_relaxed);
}
void set_fused_rnn_cell_enabled(bool on) {
  fused_rnn_cell.store(on, std::memory_order_relaxed);
}

bool fused_rnn_cell_on_gpu() {
  int value = fused_rnn_cell_gpu.load(std::memory_order_relaxed);
  if (value < 0) {
    value = fused_rnn_cell_from_environment() ? 1 : 0;
    fused_rnn_cell_gpu.store(value, std::memory_order_relaxed);
  }
  return value == 1;
}
void set_fused_rnn_cell_on_gpu(bool on) {
  fused_rnn_cell_gpu.store(on ? 1 : 0, std::memory_order_relaxed);
}

int failing_cudnn_workspaces() {
  int value = failing_workspaces.load(std::memory_order_relaxed);
  if (value < 0) {
    int unread = -1;
    failing_workspaces.compare_exchange_strong(unread, failing_workspaces_from_environment());
    value = failing_workspaces.load(std::memory_order_relaxed);
  }
  return value;
}
void fail_cudnn_workspaces(int count) {
  if (count < 0)
    throw ValueError("backends::fail_cudnn_workspaces: expected a count of 0 or more, got " +
                     std::to_string(count));
  failing_workspaces.store(count, std::memory_order_relaxed);
}
bool take_cudnn_workspace_failure() {
  int value = failing_cudnn_workspaces();
  while (value > 0)
    if (failing_workspaces.compare_exchange_weak(value, value - 1)) return true;
  return false;
}

bool cudnn_deterministic() {
  return deterministic.load(std::memory_order_relaxed);
}
void set_cudnn_deterministic(bool on) {
  deterministic.store(on, std::memory_order_relaxed);
}

CudnnApi parse_cudnn_api(const std::string& name) {
  if (name == "v7") return CudnnApi::v7;
  if (name == "v9") return CudnnApi::v9;
  throw ValueError("expected a cuDNN API v7 or v9, got '" + name + "'");
}

const char* cudnn_api_name(CudnnApi which) {
  return which == CudnnApi::v7 ? "v7" : "v9";
}

CudnnApi cudnn_api() {
  int value = api.load(std::memory_order_relaxed);
  if (value < 0) {
    // Two threads that race here read the same variable and store the same value.
    value = static_cast<int>(api_from_environment());
    api.store(value, std::memory_order_relaxed);
  }
  return static_cast<CudnnApi>(value);
}
void set_cudnn_api(CudnnApi which) {
  api.store(static_cast<int>(which), std::memory_order_relaxed);
}

CudnnApiCounts cudnn_api_counts() {
  CudnnApiCounts counts{v9_runs.load(std::memory_order_relaxed),
                        v7_runs.load(std::memory_order_relaxed),
                        v9_fallbacks.load(std::memory_order_relaxed),
                        {}};
  const std::lock_guard<std::mutex> lock(fallback_mutex);
  counts.last_fallback_reason = fallback_reason;
  return counts;
}
void count_cudnn_run(CudnnApi which) {
  (which == CudnnApi::v9 ? v9_runs : v7_runs).fetch_add(1, std::memory_order_relaxed);
}
void count_cudnn_fallback(const std::string& reason) {
  v9_fallbacks.fetch_add(1, std::memory_order_relaxed);
  const std::lock_guard<std::mutex> lock(fallback_mutex);
  fallback_reason = reason;
}

bool onednn_available() {
#if KILN_WITH_ONEDNN
  return true;
#else
  return false;
#endif
}

bool onednn_enabled() {
  int value = onednn.load(std::memory_order_relaxed);
  if (value < 0) {
    value = onednn_from_environment() ? 1 : 0;
    onednn.store(value, std::memory_order_relaxed);
  }
  return value == 1;
}
void set_onednn_enabled(bool on) {
  onednn.store(on ? 1 : 0, std::memory_order_relaxed);
}
int64_t onednn_conv2d_runs() {
  return onednn_runs.load(std::memory_order_relaxed);
}
void count_onednn_conv2d_run() {
  onednn_runs.fetch_add(1, std::memory_order_relaxed);
}

bool onednn_keep_conv_inputs() {
  return onednn_keep_inputs.load(std::memory_order_relaxed);
}
void set_onednn_keep_conv_inputs(bool on) {
  onednn_keep_inputs.store(on, std::memory_order_relaxed);
}

OneDnnScope::OneDnnScope(bool on) : previous_(onednn_enabled()) {
  set_onednn_enabled(on);
}

OneDnnScope::~OneDnnScope() {
  set_onednn_enabled(previous_);
}

CpuConv cpu_conv() {
  int value = cpu_conv_pick.load(std::memory_order_relaxed);
  if (value < 0) {
    value = static_cast<int>(cpu_conv_from_environment());
    cpu_conv_pick.store(value, std::memory_order_relaxed);
  }
  return static_cast<CpuConv>(value);
}
void set_cpu_conv(CpuConv pick) {
  cpu_conv_pick.store(static_cast<int>(pick), std::memory_order_relaxed);
}
const char* cpu_conv_name(CpuConv pick) {
  return kCpuConvNames[static_cast<int>(pick)];
}
CpuConv parse_cpu_conv(const std::string& name) {
  for (int i = 0; i < static_cast<int>(std::size(kCpuConvNames)); ++i)
    if (name == kCpuConvNames[i]) return static_cast<CpuConv>(i);
  throw ValueError("expected a CPU conv2d pick rule, autotune, onednn, direct or im2col, got '" +
                   name + "'");
}

CpuConvScope::CpuConvScope(CpuConv pick) : previous_(cpu_conv()) {
  set_cpu_conv(pick);
}

CpuConvScope::~CpuConvScope() {
  set_cpu_conv(previous_);
}

Tf32Scope::Tf32Scope(bool allow) : matmul_(cuda_matmul_allow_tf32()), cudnn_(cudnn_allow_tf32()) {
  set_cuda_matmul_allow_tf32(allow);
  set_cudnn_allow_tf32(allow);
}

Tf32Scope::~Tf32Scope() {
  set_cuda_matmul_allow_tf32(matmul_);
  set_cudnn_allow_tf32(cudnn_);
}

}  // namespace kiln::backends
