// Shape-routed dispatch from kiln's ops to the kernel lab's versions (docs/kernels/README.md):
// kernels are promoted by dispatch, never by copy. An op whose problem is one of the lab's asks
// here before it launches its own kernel:
//
//   softmax  softmax (not log_softmax) of a contiguous f32 tensor over its last dim, as the
//            softmax lab's [rows, cols] (kernels/cuda/softmax.cu);
//   sum      the sum of a contiguous, 16-byte-aligned f32 tensor over its trailing dims, as the
//            reduction lab's row sums (kernels/cuda/reduce.cu);
//   attention  scaled_dot_product_attention, causal or not, of query [..., L, D], key and value
//            [..., S, D] (one head dim D the version takes), as the attention lab's
//            [batch_heads, L, D] (kernels/cuda/attention.cpp); its row length is S, the length of
//            a row of scores. f32 inputs take the routes naming a version of the f32 forward
//            table (v1_naive, v2_fused_row, v3_tiled_fa1), bf16 and f16 ones those naming
//            v4_mma_fa2; a call with a mask tensor or dropout only a route to v3_tiled_fa1 or
//            v4_mma_fa2. The backward of a routed call runs v1_recompute from the forward's
//            log-sum-exp, or the backward version a route for its S names (v5_tiled: add
//            "attention:1-:v5_tiled"; such a route alone routes no forward). v4 on a GPU
//            below compute capability 8.0 is not taken: the op composes there, and the first such
//            call says so once on stderr.
//
// A route names the lab version a GPU measured faster than the op's own kernel (version 0) for a
// range of row lengths. The built-in table is empty: no version has been timed against the ops'
// kernels on a GPU yet (docs/results.md), so every shape runs the op's own kernel until a run of
// `kiln-bench lab` says otherwise. KILN_LAB_ROUTES sets a table at start-up for such experiments
// ("softmax:1024-8192:v4_block_vectorized,sum:4096-:v5_one_pass,attention:1-:v3_tiled_fa1"),
// set_lab_routes() in a program.
// A route never names version 0, which is the op's own kernel (and, for softmax, calls it through
// the op's table); measure the lab with an empty table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"
#include "kiln/kernels/cuda/lab/reduction/versions.h"
#include "kiln/kernels/cuda/lab/softmax/versions.h"

namespace kiln::cuda {

enum class RoutedOp { softmax, sum, attention };

struct LabRoute {
  RoutedOp op = RoutedOp::softmax;
  int64_t min_cols = 0;   // the row lengths routed: [min_cols, max_cols]
  int64_t max_cols = -1;  // -1: no upper bound
  std::string version;    // a name in the family's table, "v4_block_vectorized"
};

// The table in force (the built-in empty one, or KILN_LAB_ROUTES's, or the last set).
std::vector<LabRoute> lab_routes();
// Replaces the table; a ValueError names a version the lab does not have, a version 0, or an
// empty range.
void set_lab_routes(const std::vector<LabRoute>& routes);
// "op:min-max:version,..." (max may be left out: no bound); a ValueError names what it cannot read.
std::vector<LabRoute> parse_lab_routes(const std::string& text);

// The routed version for a problem of [rows, cols], or nullptr for the op's own kernel.
const lab::SoftmaxVersion* routed_softmax(int64_t rows, int64_t cols);
const lab::ReductionVersion* routed_sum(int64_t rows, int64_t cols);
// The routed forward version for attention of `dtype` q [batch_heads, l, d], k and v
// [batch_heads, s, d] on the current GPU: the first route whose range holds s, whose version is in
// the table of `dtype` and takes d (and, for v4_mma_fa2, the GPU); nullptr for the composed op.
// It does not count: the caller that runs the version calls note_lab_routed_call().
const lab::AttentionVersion* routed_attention(DType dtype, int64_t batch_heads, int64_t l,
                                              int64_t s, int64_t d);
// The backward version for a routed attention call of key length s: the first route whose range
// holds s and which names a version of the backward table, else v1_recompute.
const lab::AttentionBackwardVersion& routed_attention_backward(int64_t s);
void note_lab_routed_call();
// How many problems this process has routed to a lab version.
uint64_t lab_routed_calls();

}  // namespace kiln::cuda
