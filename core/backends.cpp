#include "kiln/core/backends.h"

#include <atomic>

namespace kiln::backends {

namespace {

std::atomic<bool> matmul_tf32{false};
std::atomic<bool> conv_tf32{true};
std::atomic<bool> benchmark{false};
std::atomic<bool> deterministic{false};

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

bool cudnn_deterministic() {
  return deterministic.load(std::memory_order_relaxed);
}
void set_cudnn_deterministic(bool on) {
  deterministic.store(on, std::memory_order_relaxed);
}

Tf32Scope::Tf32Scope(bool allow)
    : matmul_(cuda_matmul_allow_tf32()), cudnn_(cudnn_allow_tf32()) {
  set_cuda_matmul_allow_tf32(allow);
  set_cudnn_allow_tf32(allow);
}

Tf32Scope::~Tf32Scope() {
  set_cuda_matmul_allow_tf32(matmul_);
  set_cudnn_allow_tf32(cudnn_);
}

}  // namespace kiln::backends
