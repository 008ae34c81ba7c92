// Test cases per CPU instruction set: the kernels that exist once per set (core/cpu_isa.h) run
// each version in turn.
#pragma once

#include <catch2/catch.hpp>

#include "kiln/core/cpu_isa.h"

namespace kiln::testing {

// Runs fn() with the kernels of `isa` and puts the previous set back afterwards; a set this CPU
// cannot run is reported skipped (Catch's WARN "SKIPPED: ...", in a [may_skip] case), never
// passed, and fn does not run.
template <class F>
void with_cpu_isa(CpuIsa isa, F&& fn) {
  if (isa > cpu_isa_supported()) {
    WARN("SKIPPED: this CPU cannot run the " << cpu_isa_name(isa) << " kernels (its best is "
                                             << cpu_isa_name(cpu_isa_supported()) << ")");
    return;
  }
  struct Restore {
    CpuIsa previous;
    ~Restore() { set_cpu_isa(previous); }
  } restore{set_cpu_isa(isa)};
  fn();
}

}  // namespace kiln::testing
