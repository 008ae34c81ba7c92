# KILN_CCACHE (AUTO|ON|OFF): compile C++ and CUDA through ccache, when found (AUTO) or required
# (ON). The cache only saves time: a miss compiles as without it, and ccache hashes the compiler,
# its arguments, the preprocessed source and every header read, so a hit returns the object that
# compiling would give. Include before any target is made (the launcher is read at creation).
#
# What lets two clones of one commit share the cache (the test job runs in a fresh clone each
# time; docs/results-history.md, "The test job"):
# - base_dir at the source folder: ccache rewrites absolute paths under it (sources, -I) to
#   relative ones, on the compiler's command line too, so they name the same files in every clone;
# - the build folder mapped to "." in the debug information (-fdebug-prefix-map), which removes
#   the working directory from what ccache hashes for a -g build (the sanitizer stage's -g1);
# - sloppiness for the precompiled header of the tests (CMake's -include cmake_pch.hxx): ccache
#   caches its use only when told that __DATE__/__TIME__ and the header's mtime do not matter;
#   the .gch's contents are hashed still.
# No source may carry an absolute path of the clone in a definition (tests/support/reference_dir.cpp
# shows how a test finds its files instead).
# Settings go in the launcher's environment, not in ccache's configuration file, so a user's own
# ccache settings elsewhere are left as they are; CCACHE_DIR and CCACHE_MAXSIZE come from the
# environment as usual (scripts/test.sh sets the size).
set(KILN_CCACHE AUTO CACHE STRING "Compile through ccache: AUTO (when found), ON or OFF")
set_property(CACHE KILN_CCACHE PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${KILN_CCACHE}" kiln_ccache_mode)
if(NOT kiln_ccache_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "KILN_CCACHE must be AUTO, ON or OFF, got '${KILN_CCACHE}'")
endif()

set(KILN_WITH_CCACHE OFF)
if(NOT kiln_ccache_mode STREQUAL "OFF")
  find_program(KILN_CCACHE_PROGRAM ccache)
  if(KILN_CCACHE_PROGRAM)
    set(KILN_WITH_CCACHE ON)
  elseif(kiln_ccache_mode STREQUAL "ON")
    message(FATAL_ERROR "KILN_CCACHE=ON but ccache was not found (Debian: apt-get install ccache)")
  endif()
endif()

if(KILN_WITH_CCACHE)
  set(kiln_ccache_launcher
      ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
      CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      ${KILN_CCACHE_PROGRAM})
  foreach(lang CXX CUDA)
    if(NOT CMAKE_${lang}_COMPILER_LAUNCHER)
      set(CMAKE_${lang}_COMPILER_LAUNCHER ${kiln_ccache_launcher})
    endif()
  endforeach()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fdebug-prefix-map=${PROJECT_BINARY_DIR}=.>)
  message(STATUS "kiln: compiling through ${KILN_CCACHE_PROGRAM} (KILN_CCACHE=OFF to not)")
endif()
