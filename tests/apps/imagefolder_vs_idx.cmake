# cmake -P script: Fashion-MNIST written as PNG class folders by kiln-make-imagefolder (the first
# PER_CLASS images of each class in each split), then imagefolder_vs_idx trains ResNet-18 from
# those files and from the IDX files and compares the two accuracies.
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${TOOL} --dataset fashion-mnist --per-class ${PER_CLASS}
                        --out ${WORK_DIR}/images
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kiln-make-imagefolder failed with ${rc}:\n${out}\n${err}")
endif()
execute_process(COMMAND ${PROGRAM} ${WORK_DIR}/images ${PER_CLASS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "imagefolder_vs_idx failed with ${rc}:\n${err}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
