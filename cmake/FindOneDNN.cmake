# FindOneDNN: oneDNN's C++ API (Debian's libdnnl-dev), as the imported target OneDNN::OneDNN.
# oneDNN's own CMake package (dnnl-config.cmake) also finds OpenCL, for its GPU runtime, and stops
# the configure where OpenCL's headers are missing; kiln calls only the CPU engine, so this module
# finds the header and the library alone.
find_path(OneDNN_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.hpp)
find_library(OneDNN_LIBRARY NAMES dnnl)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneDNN REQUIRED_VARS OneDNN_LIBRARY OneDNN_INCLUDE_DIR)

if(OneDNN_FOUND AND NOT TARGET OneDNN::OneDNN)
  add_library(OneDNN::OneDNN UNKNOWN IMPORTED)
  set_target_properties(OneDNN::OneDNN PROPERTIES
    IMPORTED_LOCATION "${OneDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${OneDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(OneDNN_INCLUDE_DIR OneDNN_LIBRARY)
