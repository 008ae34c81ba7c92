// `kiln-bench ops`: op bandwidth against the copy, matmul TFLOP/s and the host cost of a tiny op
// (ops.cpp); its PyTorch peer is ops_torch.py.
#pragma once

#include <string>

namespace kiln::bench {

struct OpsOptions {
  std::string device = "cpu";
  int log2 = 0;        // vector length 2^log2; 0: 28 on a GPU, 24 on a CPU
  int repeats = 20;    // the median of these is printed
  std::string csv;     // also write the rows here
  bool smoke = false;  // tiny sizes and 2 repeats: that it runs, not its figures
};

int run_ops(const OpsOptions& options);

}  // namespace kiln::bench
