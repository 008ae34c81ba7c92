# Installs libkiln, its headers under include/kiln, and a kilnConfig.cmake so that another project
# can find_package(kiln) and link kiln::kiln.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# With the CUDA simulator (KILN_CUDA=SIM) kiln links the simulated cudart (kiln_cudasim) and the
# NCCL model (kiln_ncclsim), so they install and export with it, with the simulator's kernel-side
# headers and kiln_cuda_sim_sources() (cmake/KilnCudaSim.cmake): a user's own .cu file then
# compiles and runs on the simulator as kiln's do (docs/simulator.md, "Your own program").
set(kiln_installed_libraries kiln)
if(KILN_CUDA_SIM)
  list(APPEND kiln_installed_libraries kiln_cudasim)
  if(TARGET kiln_ncclsim)
    list(APPEND kiln_installed_libraries kiln_ncclsim)
  endif()
endif()
install(TARGETS ${kiln_installed_libraries} EXPORT kilnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES kiln.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
install(DIRECTORY core kernels ops nn optim data train dist
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln
  FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh"
  PATTERN "cuda_runtime" EXCLUDE)  # the runtime's internal header needs CUDA's; not kiln's API
# kernels/cuda/launch.h's launch macro (nvcc's half, and the simulator's behind its #if).
install(FILES sim/kernel_macros.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/sim)
# core/cuda_simulated.h's counts (plain C++, in every build), and what kiln_sim_counted_sources()
# force-includes.
install(FILES sim/metrics/counts.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/sim/metrics)
if(KILN_CUDA_SIM)
  install(FILES sim/metrics/counted_shared.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/sim/metrics)
endif()
if(KILN_CUDA_SIM)
  # What sim/cuda_sim.h, force-included into a .cu file, includes; not the scheduler's internals.
  install(FILES sim/atomics.h sim/cuda_sim.h sim/device_api.h sim/device_math.h sim/grid.h
                sim/launch.h sim/ptx.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/sim)
  install(FILES cmake/KilnCudaSim.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
endif()
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
