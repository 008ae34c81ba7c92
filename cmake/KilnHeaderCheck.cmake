# kiln_add_header_check(): the target kiln_header_check compiles every header of the library as a
# translation unit of its own (a generated file holding one #include), so a header that leans on
# whatever its includer happened to include first fails the build. .cuh headers are compiled by
# nvcc when CUDA is on; headers that include CUDA's own headers (cuda_runtime.h, cudnn.h, ...) only
# then too (not under the CUDA simulator, KILN_CUDA=SIM, whose kernel sources need its shim).
#
# KILN_HEADER_CHECK: ALL, or CUDA: only the headers that need nvcc or CUDA's headers, the rest
# being compiled by another build of the same sources (scripts/test.sh's release stage: its clang
# stage compiles every other header with clang and libc++).
set(KILN_HEADER_CHECK ALL CACHE STRING "Headers kiln_header_check compiles: ALL, or CUDA (those that need CUDA)")
set_property(CACHE KILN_HEADER_CHECK PROPERTY STRINGS ALL CUDA)
if(NOT KILN_HEADER_CHECK MATCHES "^(ALL|CUDA)$")
  message(FATAL_ERROR "KILN_HEADER_CHECK must be ALL or CUDA, got '${KILN_HEADER_CHECK}'")
endif()
function(kiln_add_header_check)
  file(GLOB_RECURSE headers RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/core/*.h ${PROJECT_SOURCE_DIR}/kernels/*.h
       ${PROJECT_SOURCE_DIR}/ops/*.h ${PROJECT_SOURCE_DIR}/nn/*.h ${PROJECT_SOURCE_DIR}/optim/*.h
       ${PROJECT_SOURCE_DIR}/data/*.h ${PROJECT_SOURCE_DIR}/train/*.h
       ${PROJECT_SOURCE_DIR}/dist/*.h
       ${PROJECT_SOURCE_DIR}/kernels/*.cuh)
  list(APPEND headers kiln.h)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/header_check)
  set(sources)
  foreach(header ${headers})
    file(STRINGS ${PROJECT_SOURCE_DIR}/${header} cuda_includes
         REGEX "^#include <(cuda|cudnn|cublas|nccl|nvtx)")
    set(needs_cuda FALSE)
    if(header MATCHES "\\.cuh$" OR cuda_includes)
      set(needs_cuda TRUE)
    endif()
    if(needs_cuda AND (NOT KILN_WITH_CUDA OR KILN_CUDA_SIM))
      continue()
    endif()
    if(NOT needs_cuda AND KILN_HEADER_CHECK STREQUAL "CUDA")
      continue()
    endif()
    if(header MATCHES "\\.cuh$")
      set(suffix cu)
    else()
      set(suffix cpp)
    endif()
    string(MAKE_C_IDENTIFIER ${header} stem)
    set(source ${dir}/${stem}.${suffix})
    set(text "#include \"kiln/${header}\"\n")
    # Rewrite only when the text changes, so reconfiguring does not rebuild the check.
    if(EXISTS ${source})
      file(READ ${source} old)
    else()
      set(old "")
    endif()
    if(NOT old STREQUAL text)
      file(WRITE ${source} ${text})
    endif()
    list(APPEND sources ${source})
  endforeach()
  # Part of the build with the tests, except under the sanitizers: the check is about includes,
  # which the test job's clang and release builds already check, and the sanitizer build's
  # compile time is the job's longest.
  if(KILN_BUILD_TESTS AND NOT KILN_SANITIZE)
    add_library(kiln_header_check OBJECT ${sources})
  else()
    add_library(kiln_header_check OBJECT EXCLUDE_FROM_ALL ${sources})
  endif()
  target_link_libraries(kiln_header_check PRIVATE kiln::kiln)
  if(KILN_WITH_CUDA AND NOT KILN_CUDA_SIM)
    target_include_directories(kiln_header_check PRIVATE ${KILN_CUDNN_INCLUDE_DIR})
  endif()
  kiln_set_warnings(kiln_header_check)
endfunction()
