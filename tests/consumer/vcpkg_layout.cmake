# cmake -DSOURCE=<ferry> -DWORK=<dir> -P vcpkg_layout.cmake
# Does what ports/ferry/portfile.cmake asks of ferry's build (same options, release install into a
# package directory), checks the layout vcpkg expects, then builds a find_package consumer on it.
file(REMOVE_RECURSE ${WORK})
set(pkg ${WORK}/packages/ferry)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -G Ninja
                        -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCHMARKS=OFF
                        -DFERRY_BUILD_EXAMPLES=OFF -DFERRY_INSTALL_CMAKEDIR=share/ferry
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${WORK}/build --prefix ${pkg} COMMAND_ERROR_IS_FATAL ANY)
foreach(f include/ferry/ferry.hpp include/ferry/policies.hpp include/ferry/policies/presets.hpp
          share/ferry/ferryConfig.cmake share/ferry/ferryConfigVersion.cmake share/ferry/ferryTargets.cmake)
  if(NOT EXISTS ${pkg}/${f})
    message(FATAL_ERROR "the port's install lacks ${f}")
  endif()
endforeach()
file(GLOB_RECURSE libs ${pkg}/lib/*)
if(libs)
  message(FATAL_ERROR "a header-only port installs no libraries, found: ${libs}")
endif()
foreach(f vcpkg.json portfile.cmake usage)
  if(NOT EXISTS ${SOURCE}/ports/ferry/${f})
    message(FATAL_ERROR "ports/ferry/${f} is missing")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -DMODE=find_package -DSOURCE=${SOURCE} -DWORK=${WORK}
                        -DPREFIX=${pkg} -DNVCC=OFF -P ${CMAKE_CURRENT_LIST_DIR}/run.cmake
                COMMAND_ERROR_IS_FATAL ANY)
