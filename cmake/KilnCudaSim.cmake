# kiln_cuda_sim_sources(source...): compile .cu files as C++ with the host compiler and the CUDA
# simulator's shim force-included (sim/cuda_sim.h), for -DKILN_CUDA=SIM. The target that holds
# them links kiln_cudasim. nvcc's #pragma unroll means nothing to g++ and is not warned about.
function(kiln_cuda_sim_sources)
  set_source_files_properties(${ARGN} PROPERTIES
    LANGUAGE CXX
    COMPILE_OPTIONS "-x;c++;-include;kiln/sim/cuda_sim.h;-Wno-unknown-pragmas")
endfunction()
