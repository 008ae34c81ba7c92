# KILN_LINKER: the linker for kiln's programs and tests. AUTO takes LLVM's lld when the compiler
# accepts -fuse-ld=lld (Debian's lld package): the test job links about 200 programs against the
# static library in each build, and lld links one of them in about 40% of GNU ld's time
# (docs/results-history.md, "The test job"). DEFAULT leaves the compiler's own linker.
set(KILN_LINKER AUTO CACHE STRING "Linker for kiln's programs: AUTO (lld when it works), lld, DEFAULT")
set_property(CACHE KILN_LINKER PROPERTY STRINGS AUTO lld DEFAULT)

string(TOUPPER "${KILN_LINKER}" kiln_linker_mode)
if(kiln_linker_mode STREQUAL "AUTO" OR kiln_linker_mode STREQUAL "LLD")
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_LINK_OPTIONS -fuse-ld=lld)
  check_cxx_source_compiles("int main() { return 0; }" KILN_HAVE_LLD)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(KILN_HAVE_LLD)
    # C++ link lines only: nvcc's own device-link steps do not take the option.
    add_link_options($<$<LINK_LANGUAGE:CXX>:-fuse-ld=lld>)
  elseif(kiln_linker_mode STREQUAL "LLD")
    message(FATAL_ERROR "KILN_LINKER=lld: ${CMAKE_CXX_COMPILER} cannot link with -fuse-ld=lld "
                        "(install Debian's lld package, or configure with -DKILN_LINKER=DEFAULT)")
  endif()
elseif(NOT kiln_linker_mode STREQUAL "DEFAULT")
  message(FATAL_ERROR "KILN_LINKER must be AUTO, lld or DEFAULT, not '${KILN_LINKER}'")
endif()
