// kiln-device-info: what a user checks first on a new machine, as the PyTorch guides do with
// torch.cuda.is_available(), device_count() and get_device_properties(): the CUDA build, the
// devices with their memory and compute capability, the library versions, and one small
// computation on each GPU checked against the CPU. Without a GPU it says so and exits 0. It also
// names the vector instructions the CPU kernels picked at start-up (core/cpu_isa.h), and which
// cuDNN API ran the convolution check (backends::cudnn_api(): v9 graph API or v7 legacy).
#include <omp.h>

#include <cstdio>
#include <string>

#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

std::string version(int v) {
  return v == 0 ? std::string("not found")
                : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

double gib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

// A matmul, a convolution and a softmax on the GPU against the same ops on the CPU, in f32: TF32
// (the default for convolutions, as PyTorch's) is off for the check, whose tolerance is f32's.
bool check_device(int index) {
  const backends::Tf32Scope f32(false);
  Generator gen(1234);
  Tensor a = randn({256, 384}, DType::f32, Device::cpu(), &gen);
  Tensor b = randn({384, 128}, DType::f32, Device::cpu(), &gen);
  Tensor x = randn({4, 8, 16, 16}, DType::f32, Device::cpu(), &gen);
  Tensor w = randn({16, 8, 3, 3}, DType::f32, Device::cpu(), &gen);
  const Device gpu = Device::cuda(index);
  struct Check {
    const char* name;
    Tensor cpu, gpu;
  };
  Check checks[] = {
      {"matmul 256x384 @ 384x128", matmul(a, b), matmul(a.to(gpu), b.to(gpu)).cpu()},
      {"conv2d 3x3 [4, 8, 16, 16]", conv2d(x, w, Tensor(), {1, 1}, {1, 1}),
       conv2d(x.to(gpu), w.to(gpu), Tensor(), {1, 1}, {1, 1}).cpu()},
      {"softmax [256, 384]", softmax(a, 1), softmax(a.to(gpu), 1).cpu()},
  };
  bool ok = true;
  for (const Check& c : checks) {
    const double diff = max(abs(sub(c.cpu, c.gpu))).item<double>();
    const double scale = max(abs(c.cpu)).item<double>();
    const bool pass = diff <= 1e-4 * (1.0 + scale);
    ok = ok && pass;
    std::printf("    %-28s max |gpu - cpu| = %.3g  %s\n", c.name, diff, pass ? "ok" : "MISMATCH");
  }
  return ok;
}

}  // namespace

int main() {
  return apps::run_main("kiln-device-info", [] {
    std::printf("CPU kernels: %s (this CPU runs up to %s; KILN_CPU_ISA caps it)\n",
                cpu_isa_name(cpu_isa()), cpu_isa_name(cpu_isa_supported()));
    const bool onednn_on = backends::onednn_enabled();  // reads and checks KILN_ONEDNN
    std::printf("oneDNN for CPU convolutions: %s\n", !backends::onednn_available()
                                                         ? "not in this build"
                                                     : onednn_on ? "on (KILN_ONEDNN=0 turns it off)"
                                                                 : "off (KILN_ONEDNN=0)");
    std::printf("kiln built with CUDA: %s\n", cuda::is_built() ? "yes" : "no");
    if (cuda::is_built()) {
      const cuda::LibraryVersions v = cuda::library_versions();
      std::printf(
          "CUDA runtime %s, driver supports CUDA %s, cuBLAS %s, cuDNN %s, NCCL headers %s\n",
          version(v.runtime).c_str(), version(v.driver).c_str(), version(v.cublas).c_str(),
          version(v.cudnn).c_str(), version(v.nccl_headers).c_str());
    }
    const bool available = cuda::is_available();
    std::printf("CUDA available: %s\n", available ? "yes" : "no");
    std::printf("device count: %d\n", cuda::device_count());
    if (!available) {
      std::printf("no GPU visible: kiln runs on the CPU (%d OpenMP threads)\n",
                  omp_get_max_threads());
      return 0;
    }
    bool ok = true;
    for (int i = 0; i < cuda::device_count(); ++i) {
      const cuda::DeviceProperties p = cuda::get_device_properties(i);
      const cuda::MemoryInfo m = cuda::mem_get_info(i);
      std::printf("cuda:%d  %s, compute capability %d.%d, %d SMs, %.1f GiB total, %.1f GiB free\n",
                  i, p.name.c_str(), p.major, p.minor, p.multi_processor_count, gib(p.total_memory),
                  gib(m.free_bytes));
      ok = check_device(i) && ok;
    }
    const backends::CudnnApiCounts api = backends::cudnn_api_counts();
    std::printf(
        "cuDNN convolution API asked for: %s (KILN_CUDNN_API); passes run on v9: %lld, on "
        "v7: %lld, problems v9 handed to v7: %lld\n",
        backends::cudnn_api_name(backends::cudnn_api()), static_cast<long long>(api.v9_runs),
        static_cast<long long>(api.v7_runs), static_cast<long long>(api.v9_fallbacks));
    if (!api.last_fallback_reason.empty())
      std::printf("  last fallback: %s\n", api.last_fallback_reason.c_str());
    std::printf("GPU check against the CPU: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
  });
}
