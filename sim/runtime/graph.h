// cudaGraph_t and cudaGraphExec_t point to these (driver_types.h only declares them): a captured
// graph is its nodes in the order they were recorded, and an executable graph a copy of them that
// each cudaGraphLaunch runs (sim/runtime/graphs.cpp).
#pragma once

#include <vector>

#include "kiln/sim/runtime/capture.h"

struct CUgraph_st {
  int device = 0;
  std::vector<kiln::sim::runtime::GraphNode> nodes;
};

struct CUgraphExec_st {
  int device = 0;
  std::vector<kiln::sim::runtime::GraphNode> nodes;
};
