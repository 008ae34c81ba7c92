# Decides KILN_WITH_CUDA from KILN_CUDA (AUTO|ON|OFF|SIM), sets up the CUDA language, and finds
# cuDNN and NCCL.
#
# SIM: kiln's CUDA simulator (sim/, docs/simulator.md): no nvcc, no GPU. KILN_WITH_CUDA and
# KILN_CUDA_SIM are both ON: kiln's CUDA backend is built, its .cu files compiled as C++ with the
# simulator's shim (kiln_cuda_sim_sources) and core/cuda_runtime against the simulated cudart
# (kiln_cudasim), from CUDA's headers (the toolkit's include folder) and boost.context. The
# libraries are not simulated: cuBLAS, cuDNN and CUB calls are replaced by kiln's CPU kernels on
# the simulated (host-addressable) device memory. NCCL is the simulator's model of it
# (kiln_ncclsim, sim/nccl/), which needs only nccl.h: with it KILN_WITH_NCCL is ON and the nccl
# backend is built against the model.
#
# CMAKE_CUDA_ARCHITECTURES: "native" when a GPU is visible at configure time; otherwise "80;90"
# (Ampere and Hopper: the A100, H100 and H200 kiln is measured on). Override with
# -DCMAKE_CUDA_ARCHITECTURES=... as for any CMake project.
#
# cuDNN and NCCL are looked for under the CUDA toolkit first, then inside the pip wheels PyTorch
# installs (python3's nvidia.cudnn and nvidia.nccl packages), which is where a machine with only
# PyTorch has them. Set KILN_CUDNN_INCLUDE_DIR / KILN_CUDNN_LIBRARY (and KILN_NCCL_*) to choose.
set(KILN_WITH_CUDA OFF)
set(KILN_CUDA_SIM OFF)
string(TOUPPER "${KILN_CUDA}" KILN_CUDA)
if(NOT KILN_CUDA MATCHES "^(AUTO|ON|OFF|SIM)$")
  message(FATAL_ERROR "KILN_CUDA must be AUTO, ON, OFF or SIM, got '${KILN_CUDA}'")
endif()

if(KILN_CUDA STREQUAL "SIM")
  set(KILN_CUDA_SIM ON)
  find_package(CUDAToolkit REQUIRED)
  find_package(Boost 1.74 REQUIRED COMPONENTS context)
  find_package(Threads REQUIRED)
  include(KilnCudaSim)
  set(KILN_WITH_CUDA ON)
  find_path(KILN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(KILN_NCCL_INCLUDE_DIR)
    set(KILN_WITH_NCCL ON)
    set(kiln_nccl_status "NCCL on the simulator's model, from ${KILN_NCCL_INCLUDE_DIR}/nccl.h")
  else()
    set(KILN_WITH_NCCL OFF)
    set(kiln_nccl_status "no NCCL: no nccl.h under the CUDA toolkit (set KILN_NCCL_INCLUDE_DIR)")
  endif()
  message(STATUS "kiln: CUDA simulator ON (CUDA headers ${CUDAToolkit_INCLUDE_DIRS}; kiln's CUDA "
                 "kernels run on the CPU, its library calls on kiln's CPU kernels; "
                 "${kiln_nccl_status})")
elseif(NOT KILN_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(KILN_WITH_CUDA ON)
  elseif(KILN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KILN_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()

# kiln_wheel_dir(<var> <module>): the folder of python3's package <module> (nvidia.cudnn, ...), or
# empty. Python runs with an argument vector, no shell.
function(kiln_wheel_dir var module)
  set(${var} "" PARENT_SCOPE)
  find_program(KILN_PYTHON3 python3)
  if(NOT KILN_PYTHON3)
    return()
  endif()
  execute_process(
    COMMAND ${KILN_PYTHON3} -c "import ${module} as m; print(list(m.__path__)[0])"
    OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE result)
  if(result EQUAL 0 AND IS_DIRECTORY "${dir}")
    set(${var} "${dir}" PARENT_SCOPE)
  endif()
endfunction()

if(KILN_WITH_CUDA AND NOT KILN_CUDA_SIM)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    execute_process(COMMAND nvidia-smi -L OUTPUT_VARIABLE kiln_gpus ERROR_QUIET RESULT_VARIABLE kiln_smi)
    if(kiln_smi EQUAL 0 AND kiln_gpus MATCHES "GPU")
      set(CMAKE_CUDA_ARCHITECTURES native CACHE STRING "CUDA architectures")
    else()
      set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures")
    endif()
  endif()
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc's C++20 flag (3.26 does); tell it.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)

  kiln_wheel_dir(kiln_cudnn_wheel nvidia.cudnn)
  find_path(KILN_CUDNN_INCLUDE_DIR cudnn.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ${kiln_cudnn_wheel}/include)
  # The wheel ships only libcudnn.so.9 (no unversioned link), hence the second name.
  find_library(KILN_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
               HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ${kiln_cudnn_wheel}/lib
               PATH_SUFFIXES lib lib64)
  if(NOT KILN_CUDNN_INCLUDE_DIR OR NOT KILN_CUDNN_LIBRARY)
    message(FATAL_ERROR "kiln: the CUDA backend needs cuDNN 9: none under the CUDA toolkit "
                        "(${CUDAToolkit_LIBRARY_ROOT}) nor in python3's nvidia.cudnn wheel. "
                        "Set KILN_CUDNN_INCLUDE_DIR and KILN_CUDNN_LIBRARY, or KILN_CUDA=OFF.")
  endif()

  # NCCL is optional: distributed training over GPUs needs it, the rest of kiln does not.
  kiln_wheel_dir(kiln_nccl_wheel nvidia.nccl)
  find_path(KILN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${kiln_nccl_wheel}/include)
  find_library(KILN_NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ${kiln_nccl_wheel}/lib
               PATH_SUFFIXES lib lib64)
  if(KILN_NCCL_INCLUDE_DIR AND KILN_NCCL_LIBRARY)
    set(KILN_WITH_NCCL ON)
    set(kiln_nccl_status "NCCL ${KILN_NCCL_LIBRARY}")
  else()
    set(KILN_WITH_NCCL OFF)
    set(kiln_nccl_status "no NCCL")
  endif()
  message(STATUS "kiln: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
                 "${CMAKE_CUDA_ARCHITECTURES}; cuDNN ${KILN_CUDNN_LIBRARY}; ${kiln_nccl_status})")
elseif(NOT KILN_CUDA_SIM)
  set(KILN_WITH_NCCL OFF)
  message(STATUS "kiln: CUDA backend OFF (CPU only)")
endif()
