# cmake -P script: the checkpoint round trip in separate processes. Run A trains 2 epochs of 3
# batches straight; run B trains 1 epoch, exits, and a fresh process resumes it for the second;
# run C is interrupted in the middle of epoch 1 (as by Ctrl-C, after 2 batches) and resumed.
# The saved models must be byte-identical: weights, BatchNorm statistics and counters, with the
# optimizer's momentum, the data order and the random state all carried by the checkpoint.
# EXTRA (a list) goes to every run: "--amp;fp16" checks that the GradScaler's state resumes too.
cmake_minimum_required(VERSION 3.25)  # the policies of the project, under CMake 4 too
file(REMOVE_RECURSE ${WORK_DIR})
set(common --dataset synthetic --synthetic-size 256 --batch-size 32 --max-batches 3 --workers 1
           --threads 1 --schedule none --lr 0.05 ${EXTRA})
function(train dir)
  execute_process(COMMAND ${TRAIN} ${common} --checkpoint-dir ${WORK_DIR}/${dir} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kiln-train ${ARGN} failed with ${rc}:\n${out}\n${err}")
  endif()
endfunction()
train(straight --epochs 2)
train(resumed --epochs 1)
train(resumed --epochs 2 --resume last)
execute_process(COMMAND ${TRAIN} ${common} --checkpoint-dir ${WORK_DIR}/interrupted --epochs 2
                        --interrupt-after 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 130 OR NOT out MATCHES "interrupted at epoch 1, batch 2")
  message(FATAL_ERROR "kiln-train --interrupt-after 2 should stop with 130 mid-epoch, got ${rc}:\n${out}\n${err}")
endif()
train(interrupted --epochs 2 --resume last)
# The training checkpoints too: they hold what the model does not (the optimizer's and the loss
# scaler's state, the position).
foreach(dir resumed interrupted)
  foreach(file model.safetensors last.safetensors)
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK_DIR}/straight/${file}
                            ${WORK_DIR}/${dir}/${file} RESULT_VARIABLE different)
    if(different)
      message(FATAL_ERROR "${file} of training resumed in ${dir}/ differs from training straight through")
    endif()
  endforeach()
endforeach()
