# cmake -P script: kiln-train --dataset imagefolder on a folder kiln-make-imagefolder wrote (a
# synthetic set as 48-pixel PNGs): one short epoch reports top-1 and top-5; a folder whose val/
# lacks a class of train/, and a missing --data-dir, fail with exit 1 and say why.
cmake_minimum_required(VERSION 3.25)  # the policies of the project, under CMake 4 too
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${TOOL} --dataset synthetic --synthetic-size 400 --per-class 4 --resize 48
                        --out ${WORK_DIR}/images
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kiln-make-imagefolder failed with ${rc}:\n${out}\n${err}")
endif()
set(common --dataset imagefolder --image-size 32 --batch-size 16 --epochs 1 --workers 2
           --threads 2)
execute_process(COMMAND ${TRAIN} ${common} --data-dir ${WORK_DIR}/images --augment
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "40 train / 40 test images"
   OR NOT out MATCHES "images: 10 classes; training on random 32-pixel crops, testing on the 32-pixel centre of each image resized to 37"
   OR NOT out MATCHES "test loss [0-9.]+ acc [0-9.]+% top-5 [0-9.]+%"
   OR NOT out MATCHES "test top-5 accuracy: [0-9.]+%")
  message(FATAL_ERROR "kiln-train on an image folder failed with ${rc}:\n${out}\n${err}")
endif()
file(REMOVE_RECURSE ${WORK_DIR}/images/val/3)
execute_process(COMMAND ${TRAIN} ${common} --data-dir ${WORK_DIR}/images
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "train/ has the classes .* but val/ has")
  message(FATAL_ERROR "mismatched class folders should fail with 1, got ${rc}:\n${err}")
endif()
execute_process(COMMAND ${TRAIN} ${common}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "--dataset imagefolder needs --data-dir")
  message(FATAL_ERROR "a missing --data-dir should fail with 1, got ${rc}:\n${err}")
endif()
