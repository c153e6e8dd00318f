# Install rules: headers (include/ and policies/), the exported targets, ferryConfig.cmake and its
# version file. ferry is header-only: the package is architecture-independent.
include(CMakePackageConfigHelpers)
set(FERRY_INSTALL_CMAKEDIR ${CMAKE_INSTALL_DATADIR}/cmake/ferry CACHE STRING
    "Where ferryConfig.cmake is installed")

install(DIRECTORY include/ferry policies/ferry DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(_ferry_export_targets ferry)
if(TARGET ferry_sync_guard)
  list(APPEND _ferry_export_targets ferry_sync_guard)
endif()
install(TARGETS ${_ferry_export_targets} EXPORT ferryTargets)
install(EXPORT ferryTargets NAMESPACE ferry:: DESTINATION ${FERRY_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ferryConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/ferryConfig.cmake INSTALL_DESTINATION ${FERRY_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ferryConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ferryConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/ferryConfigVersion.cmake
        DESTINATION ${FERRY_INSTALL_CMAKEDIR})
