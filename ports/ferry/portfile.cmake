# ferry's vcpkg port, used as an overlay from a ferry checkout:
#   vcpkg install ferry[cuda] --overlay-ports=<ferry>/ports
# The source is commit REF of the repository that holds this port, fetched by vcpkg_from_git, so
# vcpkg's ABI hash (which covers this file) changes with the source: a new ferry release bumps REF.
# A copy of the port for a registry sets URL to ferry's public git remote.
vcpkg_from_git(
  OUT_SOURCE_PATH SOURCE_PATH
  URL "${CMAKE_CURRENT_LIST_DIR}/../.."
  REF dd8242e69139fd5b88895c7585acc27ba6189308
  HEAD_REF main
)

# ferry is header-only: the backend is chosen at the consumer's configure (its ferryConfig.cmake
# finds CUDAToolkit there); the `cuda` feature makes the CUDA backend that configure's default.
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS FEATURES cuda FERRY_ENABLE_CUDA)
set(VCPKG_BUILD_TYPE release)
vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DFERRY_BUILD_TESTS=OFF
    -DFERRY_BUILD_BENCHMARKS=OFF
    -DFERRY_BUILD_EXAMPLES=OFF
    -DFERRY_INSTALL_CMAKEDIR=share/ferry
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME ferry CONFIG_PATH share/ferry)
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/lib" "${CURRENT_PACKAGES_DIR}/debug")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
