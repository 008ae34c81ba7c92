// CUDA graphs: cudaGraphInstantiate, cudaGraphLaunch, cudaGraphGetNodes and the destroys. A launch
// runs the graph's nodes one after another, in the order they were captured, each on the device it
// was captured on; on a capturing stream it is itself recorded, as CUDA records a child graph.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/sim/runtime/capture.h"
#include "kiln/sim/runtime/graph.h"
#include "kiln/sim/runtime/state.h"

namespace {

namespace rt = kiln::sim::runtime;

cudaError_t invalid(const char* function, const std::string& why) {
  return rt::fail(cudaErrorInvalidValue,
                  std::string("invalid argument (kiln-sim: ") + function + ": " + why + ")");
}

// Runs the nodes with their device current, as the device they were captured on runs them.
void run_nodes(const std::vector<rt::GraphNode>& nodes) {
  int& current = rt::current_device();
  const int saved = current;
  struct Restore {
    int& current;
    int saved;
    ~Restore() { current = saved; }
  } restore{current, saved};
  for (const rt::GraphNode& node : nodes) {
    current = node.device;
    node.run();
  }
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                           unsigned long long flags) {
  rt::use_context();
  if (pGraphExec == nullptr || graph == nullptr)
    return invalid("cudaGraphInstantiate", "a null graph or result");
  if (flags != 0)
    return invalid("cudaGraphInstantiate",
                   "flags " + std::to_string(flags) +
                       ": the simulator has no memory nodes, device launch or node priorities");
  *pGraphExec = new CUgraphExec_st{graph->device, graph->nodes};
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                                    unsigned long long flags) {
  return cudaGraphInstantiate(pGraphExec, graph, flags);
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  rt::use_context();
  if (graphExec == nullptr) return invalid("cudaGraphLaunch", "a null executable graph");
  const rt::Queue queue = rt::queue_on("cudaGraphLaunch", stream);
  if (queue.action == rt::Queue::fail) return queue.error;
  if (queue.action == rt::Queue::record) {
    // A child graph node: the nodes as they are now, so a later destroy of graphExec is harmless.
    auto nodes = std::make_shared<const std::vector<rt::GraphNode>>(graphExec->nodes);
    rt::record(stream, {"child graph of " + std::to_string(nodes->size()) + " nodes",
                        graphExec->device, [nodes] { run_nodes(*nodes); }});
    return cudaSuccess;
  }
  run_nodes(graphExec->nodes);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes,
                                        size_t* numNodes) {
  if (graph == nullptr || numNodes == nullptr)
    return invalid("cudaGraphGetNodes", "a null graph or count");
  if (nodes != nullptr)
    return rt::fail(cudaErrorNotSupported,
                    "operation not supported (kiln-sim: cudaGraphGetNodes gives the number of "
                    "nodes; node handles are not simulated)");
  *numNodes = graph->nodes.size();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  if (graphExec == nullptr) return invalid("cudaGraphExecDestroy", "a null executable graph");
  delete graphExec;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) {
  if (graph == nullptr) return invalid("cudaGraphDestroy", "a null graph");
  delete graph;
  return cudaSuccess;
}

}  // extern "C"
