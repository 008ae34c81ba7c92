# KILN_SANITIZE=ON: AddressSanitizer + UBSan on every target, CPU only (the sanitizers do not see
# into nvcc's kernels; compute-sanitizer does that on a GPU machine), or with the CUDA simulator
# (KILN_CUDA=SIM), whose kernels are host code the sanitizers do see.
if(KILN_SANITIZE)
  string(TOUPPER "${KILN_CUDA}" kiln_cuda_mode)
  if(NOT kiln_cuda_mode STREQUAL "SIM")
    set(KILN_CUDA OFF CACHE STRING "" FORCE)
  endif()
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=address,undefined)
endif()
