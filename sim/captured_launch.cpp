// Launches and library stand-in calls on a capturing stream (sim/runtime/capture.h): recorded as
// nodes of the capture's graph instead of run, so a launch of the graph runs them in stream order.
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "kiln/sim/grid.h"
#include "kiln/sim/runtime/capture.h"
#include "kiln/sim/runtime/state.h"

namespace kiln::sim {

LaunchTarget launch_target(const GridLaunch& launch) {
  const runtime::Queue queue = runtime::queue_on(launch.kernel, launch.stream);
  if (queue.action == runtime::Queue::fail) return LaunchTarget::refused;
  return queue.action == runtime::Queue::record ? LaunchTarget::graph : LaunchTarget::now;
}

void record_grid(const GridLaunch& launch, std::shared_ptr<const void> owner) {
  runtime::record(launch.stream,
                  {std::string("kernel ") + launch.kernel, runtime::stream_device(launch.stream),
                   [launch, owner = std::move(owner)] { run_grid(launch); }});
}

void library_call(const char* name, cudaStream_t stream, std::function<void()> work) {
  const runtime::Queue queue = runtime::queue_on(name, stream);
  if (queue.action == runtime::Queue::fail) {
    cudaGetLastError();  // the library reports it as its own failure, as cuBLAS and cuDNN do
    throw KernelError(std::string("kiln-sim: ") + name +
                      " on a stream whose capture refuses work: " + cudaGetErrorName(queue.error) +
                      " (" + cudaGetErrorString(queue.error) + ")");
  }
  if (queue.action == runtime::Queue::record) {
    runtime::record(stream, {name, runtime::stream_device(stream), [name, work = std::move(work)] {
                               note_library_call(name);
                               work();
                             }});
    return;
  }
  note_library_call(name);
  work();
}

}  // namespace kiln::sim
