# cmake -P script: kiln-make-imagefolder writes 4 images of each class of a synthetic set as resized
# JPEGs in train/ and val/ class folders, then refuses to write into the same (now not empty) folder.
cmake_minimum_required(VERSION 3.25)  # the policies of the project, under CMake 4 too
file(REMOVE_RECURSE ${WORK_DIR})
set(args --dataset synthetic --synthetic-size 400 --per-class 4 --format jpeg --resize 48
         --out ${WORK_DIR})
execute_process(COMMAND ${TOOL} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "train: 40 jpeg files in 10 class folders"
   OR NOT out MATCHES "val: 40 jpeg files in 10 class folders")
  message(FATAL_ERROR "kiln-make-imagefolder failed with ${rc}:\n${out}\n${err}")
endif()
file(GLOB classes RELATIVE ${WORK_DIR}/train ${WORK_DIR}/train/*)
list(SORT classes)
if(NOT classes STREQUAL "0;1;2;3;4;5;6;7;8;9")
  message(FATAL_ERROR "expected the class folders 0 to 9, got ${classes}")
endif()
file(GLOB_RECURSE train_files ${WORK_DIR}/train/*.jpg)
file(GLOB_RECURSE val_files ${WORK_DIR}/val/*.jpg)
list(LENGTH train_files n_train)
list(LENGTH val_files n_val)
if(NOT n_train EQUAL 40 OR NOT n_val EQUAL 40)
  message(FATAL_ERROR "expected 40 + 40 .jpg files, found ${n_train} + ${n_val}")
endif()
execute_process(COMMAND ${TOOL} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "exists and is not empty")
  message(FATAL_ERROR "a second run into ${WORK_DIR} should fail with 1, got ${rc}:\n${err}")
endif()
