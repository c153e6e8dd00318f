# cmake -DMODE=<find_package|subdirectory|readme|cpm|readme_install> -DSOURCE=<ferry> -DWORK=<dir>
#       -DBACKEND=<cuda|host> -DENABLE_CUDA=<ON|OFF> [-DNVCC=ON] [-DREPO=<git repository>]
#       [-DPREFIX=<install prefix>] -P run.cmake
# Configures and builds the consumer project (tests/consumer) one way and runs `app`; fails on any
# error. FERRY_ENABLE_CUDA=ENABLE_CUDA is the consumer's choice; BACKEND the default backend it
# must get. consumer_model (NVCC) is built here and run by its own test.
#   find_package   — ferry installed at PREFIX;
#   subdirectory   — README.md's add_subdirectory line, verbatim, in a copy of the consumer project
#                    beside a clone of REPO in its folder `ferry`;
#   readme         — README.md's FetchContent block, verbatim but for <ferry-git-url> = REPO;
#   cpm            — README.md's CPMAddPackage line, verbatim but for <ferry-git-url> = REPO, after
#                    the consumer includes CPM.cmake (cpm/CPM.cmake, see there); checks that CPM
#                    cloned REPO's main;
#   readme_install — README.md's install recipe (a `sh` block), verbatim but for <ferry-git-url>
#                    = REPO, run with HOME=WORK/readme_install/home; then README's find_package
#                    block, verbatim, finds it.
# The subproject modes then install the consumer and check that ferry was not installed with it;
# subdirectory then checks that -DFERRY_INSTALL=ON installs it.
cmake_minimum_required(VERSION 3.25)
foreach(v MODE SOURCE WORK BACKEND ENABLE_CUDA)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run.cmake needs -D${v}=...")
  endif()
endforeach()
set(build ${WORK}/${MODE})
file(REMOVE_RECURSE ${build})
file(MAKE_DIRECTORY ${build})
set(env "")  # a command prefix for the consumer's configure

# README.md's fenced block of `lang` that contains `marker`, <ferry-git-url> replaced by REPO.
function(readme_block lang marker out)
  file(READ ${SOURCE}/README.md readme)
  string(REGEX MATCHALL "```${lang}\n[^`]*```" blocks "${readme}")
  set(found "")
  foreach(b IN LISTS blocks)
    string(FIND "${b}" "${marker}" at)
    if(at GREATER -1)
      set(found "${b}")
    endif()
  endforeach()
  if(found STREQUAL "")
    message(FATAL_ERROR "README.md has no ```${lang} block with '${marker}'")
  endif()
  string(REGEX REPLACE "^```${lang}\n" "" found "${found}")
  string(REGEX REPLACE "```$" "" found "${found}")
  string(REPLACE "<ferry-git-url>" "${REPO}" found "${found}")
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# The one call to `command` that README.md gives inline, in a paragraph, <ferry-git-url> replaced
# by REPO, written to `file`.
function(readme_line command file)
  file(READ ${SOURCE}/README.md readme)
  string(REGEX MATCHALL "${command}\\([^)]*\\)" lines "${readme}")
  list(LENGTH lines n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "README.md must give one ${command} line, it gives ${n}: ${lines}")
  endif()
  string(REPLACE "<ferry-git-url>" "${REPO}" line "${lines}")
  file(WRITE ${file} "${line}\n")
endfunction()

find_package(Git REQUIRED)
set(project ${SOURCE}/tests/consumer)
set(args -B ${build}/app -G Ninja -DFERRY_CONSUMER_BACKEND=${BACKEND} -DFERRY_ENABLE_CUDA=${ENABLE_CUDA}
    -DFERRY_CONSUMER_NVCC=${NVCC})
if(MODE STREQUAL "find_package")
  list(APPEND args -DFERRY_CONSUME=find_package -DCMAKE_PREFIX_PATH=${PREFIX})
elseif(MODE STREQUAL "subdirectory")
  set(project ${build}/src)
  file(COPY ${SOURCE}/tests/consumer/ DESTINATION ${project})
  execute_process(COMMAND ${GIT_EXECUTABLE} clone -q ${REPO} ${project}/ferry COMMAND_ERROR_IS_FATAL ANY)
  readme_line(add_subdirectory ${build}/snippet.cmake)
  list(APPEND args -DFERRY_CONSUME=subdirectory -DFERRY_README_SNIPPET=${build}/snippet.cmake)
elseif(MODE STREQUAL "readme")
  readme_block(cmake "FetchContent_Declare(ferry GIT_REPOSITORY <ferry-git-url>" snippet)
  file(WRITE ${build}/snippet.cmake "${snippet}")
  list(APPEND args -DFERRY_CONSUME=readme -DFERRY_README_SNIPPET=${build}/snippet.cmake)
elseif(MODE STREQUAL "cpm")
  readme_line(CPMAddPackage ${build}/snippet.cmake)
  # A fresh consumer's CPM: no source cache or local packages from this machine's environment.
  set(env ${CMAKE_COMMAND} -E env --unset=CPM_SOURCE_CACHE --unset=CPM_USE_LOCAL_PACKAGES
      --unset=CPM_LOCAL_PACKAGES_ONLY --unset=CPM_ferry_SOURCE)
  list(APPEND args -DFERRY_CONSUME=cpm -DFERRY_README_SNIPPET=${build}/snippet.cmake)
elseif(MODE STREQUAL "readme_install")
  readme_block(sh "cmake --install" recipe)
  file(MAKE_DIRECTORY ${build}/home)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env HOME=${build}/home
                          bash -euo pipefail -c "${recipe}"
                  WORKING_DIRECTORY ${build} COMMAND_ERROR_IS_FATAL ANY)
  readme_block(cmake "find_package(ferry" snippet)
  file(WRITE ${build}/snippet.cmake "${snippet}")
  list(APPEND args -DFERRY_CONSUME=readme -DFERRY_README_SNIPPET=${build}/snippet.cmake
       -DCMAKE_PREFIX_PATH=${build}/home/.local)
else()
  message(FATAL_ERROR "unknown MODE=${MODE}")
endif()

execute_process(COMMAND ${env} ${CMAKE_COMMAND} -S ${project} ${args}
                OUTPUT_VARIABLE configured ECHO_OUTPUT_VARIABLE COMMAND_ERROR_IS_FATAL ANY)
# ferry's one configure line, as a consumer sees it: the backend chosen, nothing about ferry's own
# tests (which a subproject or an installed ferry does not build).
if(NOT configured MATCHES "-- ferry: default backend ${BACKEND}")
  message(FATAL_ERROR "the consumer's configure did not print '-- ferry: default backend ${BACKEND}'")
endif()
if(configured MATCHES "nvcc for tests")
  message(FATAL_ERROR "the consumer's configure speaks of ferry's tests ('nvcc for tests')")
endif()
if(MODE STREQUAL "cpm")
  # CPM fetched ferry itself: a clone of REPO at its main, where FetchContent puts it.
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${build}/app/_deps/ferry-src rev-parse HEAD
                  OUTPUT_VARIABLE fetched OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${REPO} rev-parse main
                  OUTPUT_VARIABLE repo OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  if(NOT fetched STREQUAL repo)
    message(FATAL_ERROR "CPM's ferry (_deps/ferry-src at '${fetched}') is not REPO's main (${repo})")
  endif()
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${build}/app COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${build}/app/app COMMAND_ERROR_IS_FATAL ANY)
if(NVCC AND NOT EXISTS ${build}/app/consumer_model)
  message(FATAL_ERROR "consumer_model was not built")
endif()

if(MODE MATCHES "^(subdirectory|readme|cpm)$")
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${build}/app --prefix ${build}/prefix
                  COMMAND_ERROR_IS_FATAL ANY)
  file(GLOB_RECURSE installed RELATIVE ${build}/prefix ${build}/prefix/*)
  if(NOT installed MATCHES "bin/app")
    message(FATAL_ERROR "the consumer's install did not install app: ${installed}")
  endif()
  if(installed MATCHES "ferry")
    message(FATAL_ERROR "the consumer's install installed ferry (FERRY_INSTALL is off): ${installed}")
  endif()
endif()
if(MODE STREQUAL "subdirectory")
  # README: -DFERRY_INSTALL=ON makes the consumer's install install ferry too.
  execute_process(COMMAND ${CMAKE_COMMAND} ${build}/app -DFERRY_INSTALL=ON COMMAND_ERROR_IS_FATAL ANY)
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${build}/app --prefix ${build}/prefix_ferry
                  COMMAND_ERROR_IS_FATAL ANY)
  file(GLOB_RECURSE installed RELATIVE ${build}/prefix_ferry ${build}/prefix_ferry/*)
  foreach(f include/ferry/ferry.hpp ferryConfig.cmake)
    if(NOT installed MATCHES "(^|;|/)${f}(;|$)")
      message(FATAL_ERROR "with -DFERRY_INSTALL=ON the consumer's install did not install ${f}: ${installed}")
    endif()
  endforeach()
endif()
