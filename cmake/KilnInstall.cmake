# Installs libkiln, its headers under include/kiln, and a kilnConfig.cmake so that another project
# can find_package(kiln) and link kiln::kiln.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS kiln EXPORT kilnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES kiln.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
install(DIRECTORY core kernels ops nn optim data train dist
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln
  FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh"
  PATTERN "cuda_runtime" EXCLUDE)  # the runtime's internal header needs CUDA's; not kiln's API
# kernels/cuda/launch.h's launch macro (nvcc's half, and the simulator's behind its #if).
install(FILES sim/kernel_macros.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/sim)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

configure_package_config_file(cmake/kilnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake
              cmake/FindTurboJPEG.cmake cmake/FindOneDNN.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
