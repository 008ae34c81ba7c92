# cmake -P script: kiln-train for one short epoch with a checkpoint directory, then resumed for a
# second; checks the exit codes, the files written and the final accuracy line. EXTRA (a list) goes
# to both runs; EXPECT, when given, must match the first run's output; BATCHES (default 4) is
# --max-batches.
cmake_minimum_required(VERSION 3.25)  # the policies of the project, under CMake 4 too
file(REMOVE_RECURSE ${WORK_DIR})
if(NOT DEFINED BATCHES)
  set(BATCHES 4)
endif()
set(common --dataset synthetic --synthetic-size 256 --batch-size 32 --max-batches ${BATCHES} --workers 1
           --threads 2 --checkpoint-dir ${WORK_DIR} ${EXTRA})
execute_process(COMMAND ${TRAIN} ${common} --epochs 1 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "test accuracy: [0-9.]+%")
  message(FATAL_ERROR "kiln-train (epoch 1) failed with ${rc}:\n${out}\n${err}")
endif()
if(DEFINED EXPECT AND NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "kiln-train's output does not say '${EXPECT}':\n${out}")
endif()
foreach(f last.safetensors model.safetensors metrics.csv)
  if(NOT EXISTS ${WORK_DIR}/${f})
    message(FATAL_ERROR "kiln-train did not write ${f}")
  endif()
endforeach()
execute_process(COMMAND ${TRAIN} ${common} --epochs 2 --resume last RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "resumed from .* at epoch 2" OR NOT out MATCHES "epoch 2: train loss")
  message(FATAL_ERROR "kiln-train --resume failed with ${rc}:\n${out}\n${err}")
endif()
file(STRINGS ${WORK_DIR}/metrics.csv rows)
list(LENGTH rows n)
if(NOT n EQUAL 3)
  message(FATAL_ERROR "metrics.csv should hold a header and 2 epochs, has ${n} lines")
endif()
