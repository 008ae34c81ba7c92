// Lazy streams (docs/simulator.md, "Strictness"): with Schedule::lazy_streams
// (KILN_SIM_LAZY_STREAMS, on by default) work queued on a stream made by cudaStreamCreate* is kept,
// not run, until something waits for it: a synchronisation or query of the stream, of an event
// recorded after the work, cudaStreamWaitEvent for such an event, cudaDeviceSynchronize, cudaFree,
// a copy the host must wait for, or, for a blocking stream (made without cudaStreamNonBlocking),
// any work on the legacy stream of its device. The legacy and per-thread default streams run work
// at once, as before. So a stream that reads what another stream writes without waiting for it
// reads the old bytes every time, where a GPU reads them only when the timing says so.
#pragma once

#include <driver_types.h>

#include "kiln/sim/runtime/capture.h"

namespace kiln::sim::runtime {

// Whether streams are lazy: KILN_SIM_LAZY_STREAMS (0 or 1, default 1) read on first use, or what
// set_lazy_streams said last. Turning them off first runs every stream's queued work, so that it
// stays before later work.
bool lazy_streams();
void set_lazy_streams(bool lazy);
// Whether work on `stream` is kept until waited for: the schedule asks for it and `stream` is not
// the legacy or per-thread default stream.
bool is_lazy(cudaStream_t stream);
// Keeps `node` on `stream`'s queue; call only when is_lazy(stream) and it does not capture.
void defer(cudaStream_t stream, GraphNode node);
// The number of nodes queued on `stream` so far: what an event recorded now waits for.
unsigned long long deferred_mark(cudaStream_t stream);
// Runs `stream`'s queued nodes up to the first `mark` ever queued on it (all of them by default),
// in order, each on its device, on the calling thread.
void run_deferred(cudaStream_t stream, unsigned long long mark = ~0ull);
// Runs the queued nodes of every stream of `device`, or of its blocking streams only: what
// cudaDeviceSynchronize, and work on the legacy stream, wait for.
void run_deferred_on_device(int device, bool blocking_only);
// Runs every stream's queued nodes, whatever its device (cudaFreeHost).
void run_all_deferred();
// cudaEventRecord on `stream`: the event then waits for what is queued there now (nothing on an
// eager stream).
void note_event(cudaEvent_t event, cudaStream_t stream);
// A wait for `event` (a synchronisation, query, cudaStreamWaitEvent): runs the nodes it waits for.
void run_event(cudaEvent_t event);
// cudaStreamDestroy: runs what is queued and forgets the stream.
void forget_stream(cudaStream_t stream);

}  // namespace kiln::sim::runtime
