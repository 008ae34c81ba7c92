// The one place that decides which implementation runs a CPU convolution pass (choice.cpp), and
// what it decided: for the tests, the benchmarks and kiln-device-info.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/kernels/conv2d.h"
#include "kiln/kernels/cpu/conv2d/call.h"

namespace kiln::cpu {

// The implementations: oneDNN's (onednn.h), kiln's direct kernels (direct.h), im2col + GEMM
// (im2col.h), and, for f16 and for bf16 where kiln has no bf16 kernel, f32 copies of the operands
// run on the f32 implementation picked for them, the result rounded back.
enum class Conv2dImpl { onednn, direct, im2col, through_f32 };
const char* conv2d_impl_name(Conv2dImpl impl);

// The implementations the autotuner times for `call` here (by the ISA level, whether oneDNN is
// on and has a JIT kernel for it), in the hand-written rule's order: its pick first. im2col is
// one for f64 only (it runs f32 when backends::CpuConv::im2col forces it).
std::vector<Conv2dImpl> conv2d_candidates(const ConvCall& call);

// Runs `call` on the implementation backends::cpu_conv() picks; under autotune, a problem seen for
// the first time runs on every candidate (a few times each) and the fastest is kept for the
// process; the result is always the kept one's.
void run_conv2d(const ConvCall& call);

// Whether the weight gradient of `forward`'s problem runs on oneDNN: its kept choice, the fixed
// pick, or, not yet timed, whether oneDNN is a candidate (the timing then finds its kept input).
bool weight_grad_on_onednn(const ConvCall& forward);

// How many passes each implementation ran in this process (through_f32 counts its f32 pass too).
int64_t conv2d_runs(Conv2dImpl impl);

// One problem the autotuner timed: its candidates' best times in seconds, in candidate order,
// and the one kept.
struct Conv2dChoice {
  ConvPass pass;
  DType dtype;
  Conv2dGeometry g;
  std::vector<Conv2dImpl> candidates;
  std::vector<double> seconds;
  Conv2dImpl kept;
};
// The autotuner's choices so far, in the order they were made.
std::vector<Conv2dChoice> conv2d_choices();
// Forgets them, and the choice file: the next call of each problem times its candidates again.
void clear_conv2d_choices();

// Takes the choices in the file at `path` (choice_file.h) as made, and adds every later one to
// it: a second run on the same machine then skips the timing. KILN_CPU_CONV_CACHE=path does this
// on the first autotuned call. A choice that can no longer run (oneDNN turned off) is timed anew.
void use_conv2d_choice_file(const std::string& path);

// Replaces what the autotuner reads as a run's time with clock(impl, measured seconds), so a test
// can make any candidate win; null puts the measured time back.
using Conv2dTestClock = double (*)(Conv2dImpl impl, double measured);
void set_conv2d_test_clock(Conv2dTestClock clock);

}  // namespace kiln::cpu
