// Running a grid on the CPU: the checks a launch gets before it runs, and the worker pool that
// runs its blocks. sim/launch.h is the typed front end (KILN_LAUNCH); this is the untyped core.
#pragma once

#include <driver_types.h>
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

namespace kiln::sim {

// A kernel doing what CUDA leaves undefined (a barrier some threads skip, a shuffle some lanes
// never reach, a deadlock), or what faults on a GPU (a host pointer argument, another device's
// memory). The message names the kernel, the block and the thread.
class KernelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How blocks are scheduled, and what the simulated GPUs look like to a program. Read from the
// environment on first use (KILN_SIM_SEED, KILN_SIM_WORKERS, KILN_SIM_FIBERS, KILN_SIM_SM_COUNT,
// KILN_SIM_POISON, KILN_SIM_COMPUTE_CAPABILITY, KILN_SIM_SHARED_POISON, KILN_SIM_HOLD_STORES,
// KILN_SIM_VARIED_SUMS); set_schedule changes them for the whole process.
struct Schedule {
  // 0: threads resume in lane order; 1: reversed; any other: shuffled between barriers, from
  // this seed and the block's index.
  std::uint64_t seed = 0;
  int workers = 1;      // OS threads running blocks, the launching thread among them
  bool fibers = false;  // every thread a fiber from the start (no fiberless fast path)
  // The multiprocessors each device reports (cudaDevAttrMultiProcessorCount), which kernels size
  // their grids by; 0: as many as workers. An H200 has 132, an H100 SXM 132, CI's machine 2.
  int sm_count = 0;
  // Fresh device memory (cudaMalloc) filled with 0xFF bytes, as a GPU's holds whatever was there:
  // read before written, it is NaN in a float and -1 in an integer, never the zeros a fresh page
  // of the host gives.
  bool poison_allocations = true;
  // The compute capability the devices report, as major * 10 + minor (KILN_SIM_COMPUTE_CAPABILITY,
  // e.g. 75 for a Turing T4): what a program checks before using newer instructions. The
  // simulator runs every instruction it emulates whatever this says.
  int compute_capability = 90;
  // In a file compiled with the instrumentation (kiln_sim_counted_sources): a static __shared__
  // byte read before any thread of the block wrote it holds 0xFF, as dynamic shared memory does
  // from each block's start (sim/metrics/strict_memory.h).
  bool poison_static_shared = true;
  // In a file compiled with the instrumentation: a block's plain stores to device memory stay
  // invisible to the grid's other blocks until the block runs __threadfence (or
  // __threadfence_system); stores after its last fence become visible when the grid ends.
  bool hold_global_stores = true;
  // The cuDNN stand-in's backward passes (input and weight gradients) sum in an order that changes
  // from call to call, as cuDNN's nondeterministic algorithms may, unless
  // backends::cudnn_deterministic() is on (kernels/cuda/simulator/conv2d.cpp).
  bool varied_library_sums = true;
};
// The multiprocessor count the devices report: sm_count, or workers when it is 0.
int reported_sm_count();
Schedule schedule();
void set_schedule(const Schedule& schedule);

// One launch, type-erased: run(context) runs the kernel for the CUDA thread current::* names.
struct GridLaunch {
  const char* kernel;
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes;
  cudaStream_t stream;
  std::size_t argument_bytes;
  bool serial;  // on one worker, whatever the schedule says (KILN_SIM_SERIAL)
  void (*run)(const void* context);
  const void* context;
};

// CUDA's launch checks, as cudaGetLastError reports them: cudaSuccess, or the error (and its
// explanation, which cudaGetErrorString then gives) for a block over 1024 threads or over
// 1024 x 1024 x 64, a grid over 2^31 - 1 x 65535 x 65535, an empty grid or block, dynamic shared
// memory over 48 KiB (unless cudaFuncSetAttribute raised the device's limit) or over 227 KiB,
// arguments over 4 KiB, or a stream of another device.
cudaError_t check_launch(const GridLaunch& launch);

// Runs every block of the grid; returns when all have finished. Throws KernelError.
void run_grid(const GridLaunch& launch);

// Where a launch that passed check_launch goes: run now, or, on a capturing stream, into the
// capture's graph (record_grid); refused: the capture refuses work (the error is the thread's last
// error, as CUDA reports a launch's), and nothing runs.
enum class LaunchTarget { now, graph, refused };
LaunchTarget launch_target(const GridLaunch& launch);
// Records the launch as a node of the capture its stream is part of. `owner` holds what
// launch.context points to (the kernel and a copy of its arguments) for as long as the graph.
void record_grid(const GridLaunch& launch, std::shared_ptr<const void> owner);

// Grids run so far in this process (launches that passed check_launch, and the launches of the
// graphs' kernel nodes), and calls of the libraries the simulator stands in for (cuBLAS and cuDNN,
// whose work kiln's CPU kernels do in this build), noted by those stand-ins: a training step's
// launches are the differences across it. launches_by_name splits both: grids by the kernel as
// KILN_LAUNCH names it ("softmax_rows_kernel<D, Acc, true>"), library calls by the name the
// stand-in gives ("cudnn convolution forward").
std::uint64_t grids_run();
void note_library_call(const char* name);
std::uint64_t library_calls();
std::map<std::string, std::uint64_t> launches_by_name();

// A call of a library the simulator stands in for, on `stream`: `work` (kiln's CPU kernel on the
// device memory) runs now, or, on a capturing stream, at each launch of the graph in stream order,
// as the library's kernels would. Counted as a library call under `name` ("cublas batched matmul")
// when it runs (a string literal: a graph keeps the pointer); `name` is also for errors: a
// capture that refuses work throws KernelError naming it and CUDA's error.
void library_call(const char* name, cudaStream_t stream, std::function<void()> work);

// CUDA threads run as fibers so far in this process: the blocks that never waited ran fiberless
// and add none.
std::uint64_t fibers_started();

// Throws KernelError unless a pointer argument is null, device memory of the current device, or
// pinned host memory (cudaHostAlloc: mapped into every device's address space).
void check_pointer_argument(const char* kernel, int index, const void* pointer);

}  // namespace kiln::sim
