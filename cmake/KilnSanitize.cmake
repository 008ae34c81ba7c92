# KILN_SANITIZE=ON: AddressSanitizer + UBSan on every target, CPU only (the sanitizers do not see
# into CUDA kernels; compute-sanitizer does that on a GPU machine).
if(KILN_SANITIZE)
  set(KILN_CUDA OFF CACHE STRING "" FORCE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=address,undefined)
endif()
