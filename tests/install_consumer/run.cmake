# cmake -P script: install the kiln build into WORK_DIR/prefix, configure and build the consumer
# project against it, and run it. Any failing step fails the test.
#
#   CXX_COMPILER        kiln's compiler, for the consumer too
#   SANITIZE            ON: kiln is built with ASan + UBSan, and so must be a program linking it
#   CUDA_COMPILER       nvcc, in a CUDA build: the consumer compiles its own kernel with it
#   CUDA_ARCHITECTURES  kiln's, with commas for semicolons
#   SIM_DEVICES         in a simulator build: the simulated GPUs the consumer runs on
#                       (KILN_SIM_DEVICES); its output must show its own kernel on the last one
#   GUIDE               docs/guide.md, whose ```cuda block must be block_sum.cu as built here
cmake_minimum_required(VERSION 3.25)  # the policies of the project, under CMake 4 too
file(REMOVE_RECURSE ${WORK_DIR})
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "install_consumer: step failed (${result}): ${ARGN}")
  endif()
endfunction()

# The guide shows the consumer's kernel file to students: it must be the one this test builds.
if(GUIDE)
  file(READ ${GUIDE} guide)
  file(READ ${CONSUMER_SOURCE_DIR}/block_sum.cu kernel)
  string(FIND "${guide}" "```cuda\n${kernel}```\n" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "install_consumer: ${GUIDE} has no ```cuda block equal to "
                        "${CONSUMER_SOURCE_DIR}/block_sum.cu (the kernel this test builds)")
  endif()
endif()

set(options -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release
            -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
if(SANITIZE)
  set(flags "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all")
  list(APPEND options "-DCMAKE_CXX_FLAGS=${flags}"
                      -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined)
endif()
if(CUDA_COMPILER)
  string(REPLACE "," ";" architectures "${CUDA_ARCHITECTURES}")
  list(APPEND options -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}
                      "-DCMAKE_CUDA_ARCHITECTURES=${architectures}")
endif()

run_step(${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${WORK_DIR}/prefix)
run_step(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build -G ${GENERATOR} ${options})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)

set(environment)
if(SIM_DEVICES)
  set(environment KILN_SIM_DEVICES=${SIM_DEVICES})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${environment} ${WORK_DIR}/build/consumer
                RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
message("${output}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "install_consumer: the consumer failed (${result})")
endif()
if(SIM_DEVICES)
  math(EXPR last "${SIM_DEVICES} - 1")
  set(expected "own kernel on cuda:${last} of ${SIM_DEVICES} \\(kiln-sim\\)[^\n]*ok: yes")
  if(NOT output MATCHES "${expected}")
    message(FATAL_ERROR "install_consumer: expected the consumer's own kernel to run on "
                        "${SIM_DEVICES} simulated GPUs (output matching \"${expected}\"), got the "
                        "output above")
  endif()
endif()
# The install is only this test's: a sanitizer build's libkiln.so alone is about 300 MB.
file(REMOVE_RECURSE ${WORK_DIR}/prefix)
