// Process-wide switches of the GPU math libraries, as torch.backends: they trade exactness or
// reproducibility for speed. Every build has them (a CPU-only build ignores them), so code and
// tests set them without #if. Reads and writes are atomic; a change applies to later calls.
#pragma once

namespace kiln::backends {

// f32 matmul/linear/bmm may use TF32 tensor cores (10-bit mantissa products). Default false, as
// torch.backends.cuda.matmul.allow_tf32.
bool cuda_matmul_allow_tf32();
void set_cuda_matmul_allow_tf32(bool allow);

// f32 conv2d may use TF32 tensor cores (inputs rounded to 10 mantissa bits, sums in f32). Default
// true, as PyTorch's torch.backends.cudnn.allow_tf32: f32 convolutions on a GPU then agree with
// the CPU to about 1e-3 relative, not to f32's 1e-6; turn it off (or use Tf32Scope) for that.
bool cudnn_allow_tf32();
void set_cudnn_allow_tf32(bool allow);

// conv2d picks its cuDNN algorithms by timing them (once per shape, then cached) instead of by
// cuDNN's heuristics. Default false, as torch.backends.cudnn.benchmark.
bool cudnn_benchmark();
void set_cudnn_benchmark(bool on);

// conv2d uses only algorithms that give bitwise-identical results run to run. Default false, as
// torch.backends.cudnn.deterministic.
bool cudnn_deterministic();
void set_cudnn_deterministic(bool on);

// Sets both TF32 switches for a scope and puts the old values back at its end, as PyTorch's
// torch.backends.cudnn.flags(allow_tf32=...) with the matmul switch beside it.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool allow);
  ~Tf32Scope();
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  bool matmul_, cudnn_;
};

}  // namespace kiln::backends
