# Overlay port: `vcpkg install ferry --overlay-ports=<ferry>/ports`. The source is this checkout.
# ferry is header-only; the CUDA toolkit is found (or not) by the consumer's find_package.
set(VCPKG_BUILD_TYPE release)
set(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../..")

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
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
