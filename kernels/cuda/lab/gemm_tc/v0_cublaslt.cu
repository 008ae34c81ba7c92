// Tensor-core GEMM v0: cuBLASLt, the reference and the baseline. cublasLtMatmul with bf16 (or
// f16) inputs, f32 output, CUBLAS_COMPUTE_32F and the first algorithm of cuBLASLt's heuristic
// for the problem, with a 32 MiB workspace (what NVIDIA suggests for Hopper).
//
// Row-major C = A . B is column-major C^T = B^T . A^T, so B is the matmul's first operand and m
// and n swap, as in gemm/v0_cublas.cu. The descriptors, the heuristic's choice and the workspace
// are made once per problem and kept for the process (plans are never destroyed, like kiln's
// handles: a destructor at exit may run after the driver is gone), so a timed call is one
// cublasLtMatmul.
//
// measured: not yet on a GPU.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/dtype.h"
#include "kiln/kernels/cuda/lab/gemm_tc/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::gemm_tc {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct Plan {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t matmul = nullptr;
  cublasLtMatrixLayout_t b_layout = nullptr, a_layout = nullptr, c_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void* workspace = nullptr;
};

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mutex;
  static std::map<int, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  cublasLtHandle_t& handle = handles[device];
  if (handle == nullptr) KILN_CUBLAS_CHECK(cublasLtCreate(&handle));
  return handle;
}

Plan make_plan(int device, const GemmTcArgs& args) {
  Plan p;
  p.handle = lt_handle(device);
  const cudaDataType_t input = args.dtype == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
  KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.matmul, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major views: B^T is [n, k] with leading dimension n, A^T is [k, m], C^T is [n, m].
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b_layout, input, args.n, args.k, args.n));
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a_layout, input, args.k, args.m, args.k));
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c_layout, CUDA_R_32F, args.n, args.m, args.n));
  cublasLtMatmulPreference_t preference = nullptr;
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference,
                                                         CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &kWorkspaceBytes, sizeof kWorkspaceBytes));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  KILN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(p.handle, p.matmul, p.b_layout, p.a_layout,
                                                   p.c_layout, p.c_layout, preference, 1, &result,
                                                   &found));
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
  if (found == 0)
    throw Error("lab gemm_tc v0_cublaslt: cuBLASLt has no algorithm for this problem");
  p.algo = result.algo;
  KILN_CUDA_CHECK(cudaMalloc(&p.workspace, kWorkspaceBytes));
  return p;
}

const Plan& plan_for(const GemmTcArgs& args) {
  static std::mutex mutex;
  static auto* plans = new std::map<std::tuple<int, int64_t, int64_t, int64_t, DType>, Plan>;
  const int device = cuda::current_device();
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, args.m, args.n, args.k, args.dtype);
  auto found = plans->find(key);
  if (found == plans->end()) found = plans->emplace(key, make_plan(device, args)).first;
  return found->second;
}

}  // namespace

void v0_cublaslt(const GemmTcArgs& args) {
  if (args.dtype != DType::bf16 && args.dtype != DType::f16)
    throw DTypeError("lab gemm_tc v0_cublaslt: the inputs must be bf16 or f16");
  if (args.m == 0 || args.n == 0) return;
  const Plan& p = plan_for(args);
  const float alpha = 1.0f, beta = 0.0f;
  KILN_CUBLAS_CHECK(cublasLtMatmul(p.handle, p.matmul, &alpha, args.b, p.b_layout, args.a,
                                   p.a_layout, &beta, args.c, p.c_layout, args.c, p.c_layout,
                                   &p.algo, p.workspace, kWorkspaceBytes, cuda::stream()));
}

}  // namespace kiln::lab::gemm_tc
