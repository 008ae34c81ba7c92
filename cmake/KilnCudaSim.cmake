# kiln_cuda_sim_sources(source...): compile .cu files as C++ with the host compiler and the CUDA
# simulator's shim force-included (sim/cuda_sim.h), for -DKILN_CUDA=SIM. The target that holds
# them links kiln_cudasim. nvcc's #pragma unroll means nothing to g++ and is not warned about.
function(kiln_cuda_sim_sources)
  set_source_files_properties(${ARGN} PROPERTIES
    LANGUAGE CXX
    COMPILE_OPTIONS "-x;c++;-include;kiln/sim/cuda_sim.h;-Wno-unknown-pragmas")
endfunction()

# kiln_sim_counted_sources(source...): kernel sources (already given to kiln_cuda_sim_sources) that
# the simulator's counting sees (sim/metrics/counts.h). GCC's ThreadSanitizer instrumentation calls
# a hook with the address of every load and store; the simulator defines the hooks
# (sim/metrics/hooks.cpp) and no libtsan is linked. Optimisations that would change the accesses a
# GPU's code makes are off: scalar replacement splits a float4 into four loads, vectorisation and
# store merging join scalar ones, and loop distribution turns loops into memcpy calls (and GCC's
# note that a fence is not modelled by ThreadSanitizer does not apply: no race is looked for).
# sim/metrics/counted_shared.h makes __shared__ constinit, so that no guard variable is counted. With
# KILN_SANITIZE the file loses AddressSanitizer, which cannot share it. GCC only.
function(kiln_sim_counted_sources)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    message(FATAL_ERROR "kiln_sim_counted_sources: the counting instrumentation needs GCC; "
                        "configure with -DKILN_SIM_METRICS=OFF")
  endif()
  set(options -include kiln/sim/metrics/counted_shared.h -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 -fno-tree-sra
              -fno-ipa-sra -fno-tree-vectorize -fno-tree-slp-vectorize -fno-store-merging
              -fno-tree-loop-distribute-patterns -Wno-tsan)
  if(KILN_SANITIZE)
    list(PREPEND options -fno-sanitize=address)
  endif()
  set_property(SOURCE ${ARGN} APPEND PROPERTY COMPILE_OPTIONS ${options})
endfunction()
