# FindTurboJPEG: libjpeg-turbo's TurboJPEG API (Debian's libturbojpeg0-dev), as the imported target
# TurboJPEG::TurboJPEG. libjpeg-turbo's own CMake package names its library by absolute path, which
# breaks where the package is unpacked into a prefix (scripts/gpu-prepare-carry.sh); this module
# searches CMAKE_PREFIX_PATH like FindPNG does.
find_path(TurboJPEG_INCLUDE_DIR NAMES turbojpeg.h)
find_library(TurboJPEG_LIBRARY NAMES turbojpeg)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(TurboJPEG REQUIRED_VARS TurboJPEG_LIBRARY TurboJPEG_INCLUDE_DIR)

if(TurboJPEG_FOUND AND NOT TARGET TurboJPEG::TurboJPEG)
  add_library(TurboJPEG::TurboJPEG UNKNOWN IMPORTED)
  set_target_properties(TurboJPEG::TurboJPEG PROPERTIES
    IMPORTED_LOCATION "${TurboJPEG_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${TurboJPEG_INCLUDE_DIR}")
endif()
mark_as_advanced(TurboJPEG_INCLUDE_DIR TurboJPEG_LIBRARY)
