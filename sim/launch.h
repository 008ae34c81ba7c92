// KILN_LAUNCH's simulator half (sim/kernel_macros.h): Launch(name, grid, block, shared, stream,
// kernel)(args...) copies the arguments as CUDA does, checks the launch as CUDA does (a failure
// goes to cudaGetLastError and nothing runs), rejects pointer arguments a GPU would fault on, and
// runs the grid, or on a capturing stream records it with its own copy of the arguments, to run at
// each launch of the graph. `kernel` is a generic lambda around the kernel's name, so a kernel
// template whose arguments are deduced from the call works as under <<<>>>.
#pragma once

#include <driver_types.h>
#include <vector_types.h>

#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kiln/sim/grid.h"

namespace kiln::sim {

template <class Kernel>
class Launch {
 public:
  // serial: the kernel's file was compiled with KILN_SIM_SERIAL (sim/cuda_sim.h), so its static
  // shared memory is one copy for the process and its grid must run on one worker.
  Launch(const char* name, dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
         Kernel kernel, bool serial)
      : name_(name),
        grid_(grid),
        block_(block),
        shared_bytes_(shared_bytes),
        stream_(stream),
        kernel_(kernel),
        serial_(serial) {}

  // Arguments by value: each CUDA thread then gets its own copy through the kernel's parameters.
  template <class... Args>
  void operator()(Args... args) const {
    struct Context {
      const Kernel* kernel;
      std::tuple<Args...>* args;
    };
    std::tuple<Args...> arguments(args...);
    const Context context{&kernel_, &arguments};
    const GridLaunch launch{name_,
                            grid_,
                            block_,
                            shared_bytes_,
                            stream_,
                            (std::size_t{0} + ... + sizeof(Args)),
                            serial_,
                            [](const void* c) {
                              const Context& self = *static_cast<const Context*>(c);
                              std::apply(*self.kernel, *self.args);
                            },
                            &context};
    if (check_launch(launch) != cudaSuccess) return;
    int index = 0;
    (check_argument(index++, args), ...);
    switch (launch_target(launch)) {
      case LaunchTarget::refused:
        return;
      case LaunchTarget::now:
        run_grid(launch);
        return;
      case LaunchTarget::graph:
        break;
    }
    struct Recorded {
      Kernel kernel;
      std::tuple<Args...> args;
    };
    auto owner = std::make_shared<const Recorded>(Recorded{kernel_, arguments});
    GridLaunch recorded = launch;
    recorded.run = [](const void* c) {
      const Recorded& self = *static_cast<const Recorded*>(c);
      std::apply(self.kernel, self.args);
    };
    recorded.context = owner.get();
    record_grid(recorded, owner);
  }

 private:
  template <class A>
  void check_argument(int index, const A& argument) const {
    if constexpr (std::is_pointer_v<A>)
      check_pointer_argument(name_, index,
                             const_cast<const void*>(static_cast<const volatile void*>(argument)));
  }

  const char* name_;
  dim3 grid_;
  dim3 block_;
  std::size_t shared_bytes_;
  cudaStream_t stream_;
  Kernel kernel_;
  bool serial_;
};

}  // namespace kiln::sim
