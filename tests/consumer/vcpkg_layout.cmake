# cmake -DSOURCE=<ferry> -DWORK=<dir> -DHAS_CUDA=<ON|OFF> -P vcpkg_layout.cmake
# Does what ports/ferry asks, without vcpkg: vcpkg_from_git's source (the pinned REF of SOURCE's
# repository), the portfile's configure options with the `cuda` feature on, a release install into
# a package directory; checks the layout vcpkg expects and that the installed package fixes no
# backend; then find_package consumers choose theirs: host (FERRY_ENABLE_CUDA=OFF) and, where the
# CUDA toolkit is found (HAS_CUDA), cuda.
cmake_minimum_required(VERSION 3.25)
foreach(v SOURCE WORK HAS_CUDA)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "vcpkg_layout.cmake needs -D${v}=...")
  endif()
endforeach()
find_package(Git REQUIRED)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/src)
set(port ${SOURCE}/ports/ferry)
foreach(f vcpkg.json portfile.cmake usage)
  if(NOT EXISTS ${port}/${f})
    message(FATAL_ERROR "ports/ferry/${f} is missing")
  endif()
endforeach()

# vcpkg.json: the `cuda` feature depends on vcpkg's cuda port; the helper ports are host tools.
file(READ ${port}/vcpkg.json manifest)
string(JSON cuda_deps GET "${manifest}" features cuda dependencies)
if(NOT cuda_deps MATCHES "\"cuda\"")
  message(FATAL_ERROR "ports/ferry/vcpkg.json: the cuda feature must depend on the cuda port: ${cuda_deps}")
endif()
string(JSON n LENGTH "${manifest}" dependencies)
set(host_deps "")
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON name GET "${manifest}" dependencies ${i} name)
  string(JSON host ERROR_VARIABLE no_host GET "${manifest}" dependencies ${i} host)
  if(host)
    list(APPEND host_deps ${name})
  endif()
endforeach()
foreach(d vcpkg-cmake vcpkg-cmake-config)
  if(NOT d IN_LIST host_deps)
    message(FATAL_ERROR "ports/ferry/vcpkg.json: ${d} must be a host dependency")
  endif()
endforeach()

# portfile.cmake: vcpkg_from_git of a commit of this repository, the `cuda` feature as
# FERRY_ENABLE_CUDA, and its -D options.
file(READ ${port}/portfile.cmake portfile)
string(REGEX MATCH "vcpkg_from_git\\([^)]*URL \"\\\${CMAKE_CURRENT_LIST_DIR}/\\.\\./\\.\\.\"[^)]*REF ([0-9a-f]+)" from_git "${portfile}")
set(ref ${CMAKE_MATCH_1})
string(LENGTH "${ref}" ref_length)
if(NOT ref_length EQUAL 40)
  message(FATAL_ERROR "ports/ferry/portfile.cmake: vcpkg_from_git must take URL \"\${CMAKE_CURRENT_LIST_DIR}/../..\" and a 40-digit commit REF")
endif()
if(NOT portfile MATCHES "vcpkg_check_features\\([^)]*FEATURES cuda FERRY_ENABLE_CUDA")
  message(FATAL_ERROR "ports/ferry/portfile.cmake: the cuda feature must set FERRY_ENABLE_CUDA")
endif()
string(REGEX MATCHALL "-DFERRY_[A-Z_]+=[^ \n)]+" options "${portfile}")
execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE} cat-file -e ${ref}^{commit} RESULT_VARIABLE missing
                ERROR_QUIET)
if(missing)
  # A shallow clone may simply not reach the pinned commit: skip (the test's SKIP_REGULAR_EXPRESSION
  # matches this message). A full clone that lacks it has a wrong REF: fail.
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE} rev-parse --is-shallow-repository
                  OUTPUT_VARIABLE shallow OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(shallow STREQUAL "true")
    message("ferry: vcpkg port layout skipped: ports/ferry/portfile.cmake pins REF ${ref}, which this "
            "shallow clone lacks (git fetch --unshallow, or a deeper clone, to run it)")
    return()
  endif()
  # A working tree copied beside an older history (its portfile is not the one HEAD holds) cannot
  # reach the commit either: skip. Only a portfile that HEAD itself pins to a missing commit fails.
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE} diff --quiet HEAD -- ports/ferry/portfile.cmake
                  RESULT_VARIABLE portfile_changed)
  if(portfile_changed)
    message("ferry: vcpkg port layout skipped: ports/ferry/portfile.cmake pins REF ${ref}, and this "
            "checkout's history is older than its portfile (the file differs from HEAD's)")
    return()
  endif()
  message(FATAL_ERROR "ports/ferry/portfile.cmake pins REF ${ref}, which this repository lacks: set REF to the commit to package")
endif()
execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE} archive -o ${WORK}/src.tar ${ref} COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} -E tar xf ${WORK}/src.tar WORKING_DIRECTORY ${WORK}/src
                COMMAND_ERROR_IS_FATAL ANY)

set(pkg ${WORK}/packages/ferry)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${WORK}/src -B ${WORK}/build -G Ninja -DCMAKE_BUILD_TYPE=Release
                        -DFERRY_ENABLE_CUDA=ON ${options}
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${WORK}/build --prefix ${pkg} COMMAND_ERROR_IS_FATAL ANY)
foreach(f include/ferry/ferry.hpp include/ferry/policies.hpp include/ferry/policies/presets.hpp
          include/ferry/interop/cccl.hpp include/ferry/step/step_batch.hpp
          share/ferry/ferryConfig.cmake share/ferry/ferryConfigVersion.cmake share/ferry/ferryTargets.cmake
          share/ferry/ferryBackend.cmake)
  if(NOT EXISTS ${pkg}/${f})
    message(FATAL_ERROR "the port's install lacks ${f}")
  endif()
endforeach()
file(GLOB_RECURSE libs ${pkg}/lib/*)
if(libs)
  message(FATAL_ERROR "a header-only port installs no libraries, found: ${libs}")
endif()
file(GLOB targets ${pkg}/share/ferry/ferryTargets*.cmake)
foreach(f IN LISTS targets)
  file(READ ${f} text)
  if(text MATCHES "FERRY_DEFAULT_BACKEND|FERRY_HAS_CUDA|CUDA::")
    message(FATAL_ERROR "${f} fixes the backend at install time; the consumer's configure must choose it")
  endif()
endforeach()

set(backends host)
if(HAS_CUDA)
  list(APPEND backends cuda)
endif()
foreach(backend IN LISTS backends)
  set(enable OFF)
  if(backend STREQUAL "cuda")
    set(enable ON)
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -DMODE=find_package -DSOURCE=${SOURCE} -DWORK=${WORK}/${backend}
                          -DPREFIX=${pkg} -DBACKEND=${backend} -DENABLE_CUDA=${enable} -DNVCC=OFF
                          -P ${CMAKE_CURRENT_LIST_DIR}/run.cmake
                  COMMAND_ERROR_IS_FATAL ANY)
endforeach()
