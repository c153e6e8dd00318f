# Install rules (FERRY_INSTALL): headers (include/ and policies/), the exported target, ferryConfig.cmake,
# its version file and ferryBackend.cmake. ferry is header-only: the package is architecture-
# independent, and its backend is chosen by the consumer's configure (ferryConfig.cmake).
include(CMakePackageConfigHelpers)
set(FERRY_INSTALL_CMAKEDIR ${CMAKE_INSTALL_DATADIR}/cmake/ferry CACHE STRING
    "Where ferryConfig.cmake is installed")

install(DIRECTORY include/ferry policies/ferry DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ferry EXPORT ferryTargets)
install(EXPORT ferryTargets NAMESPACE ferry:: DESTINATION ${FERRY_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ferryConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/ferryConfig.cmake INSTALL_DESTINATION ${FERRY_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ferryConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ferryConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/ferryConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/ferryBackend.cmake
        DESTINATION ${FERRY_INSTALL_CMAKEDIR})
