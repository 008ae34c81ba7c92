# FindOneDNN: oneDNN's C++ API (Debian's libdnnl-dev), as the imported target OneDNN::OneDNN.
# oneDNN's own CMake package (dnnl-config.cmake) also finds OpenCL, for its GPU runtime, and stops
# the configure where OpenCL's headers are missing; kiln calls only the CPU engine, so this module
# finds the header and the library alone. kernels/cpu/conv2d/onednn.cpp is written against the
# 2.x API (Debian 12's 2.6.3); 3.x changed how primitives are described, so a 3.x install counts
# as not found (OneDNN_VERSION says which was seen).
find_path(OneDNN_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.hpp)
find_library(OneDNN_LIBRARY NAMES dnnl)

if(OneDNN_INCLUDE_DIR AND EXISTS "${OneDNN_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h")
  file(STRINGS "${OneDNN_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" version_lines
       REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define DNNL_VERSION_${part} ([0-9]+).*" "\\1" OneDNN_VERSION_${part}
           "${version_lines}")
  endforeach()
  set(OneDNN_VERSION "${OneDNN_VERSION_MAJOR}.${OneDNN_VERSION_MINOR}.${OneDNN_VERSION_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneDNN REQUIRED_VARS OneDNN_LIBRARY OneDNN_INCLUDE_DIR
                                  VERSION_VAR OneDNN_VERSION)
if(OneDNN_FOUND AND NOT OneDNN_VERSION_MAJOR EQUAL 2)
  message(STATUS "oneDNN ${OneDNN_VERSION} found, but kiln calls the 2.x API: not used")
  set(OneDNN_FOUND FALSE)
endif()

if(OneDNN_FOUND AND NOT TARGET OneDNN::OneDNN)
  add_library(OneDNN::OneDNN UNKNOWN IMPORTED)
  set_target_properties(OneDNN::OneDNN PROPERTIES
    IMPORTED_LOCATION "${OneDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${OneDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(OneDNN_INCLUDE_DIR OneDNN_LIBRARY)
