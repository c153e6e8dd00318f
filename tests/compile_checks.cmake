# Compile-time checks, run as CTest tests:
#  - every header compiles on its own with the host compiler (.hpp) and with nvcc (.cuh), and every
#    .hpp together in one nvcc unit: a generated translation unit and a test each;
#  - compile-fail snippets (tests/compile_fail/*.cpp): built with -DFERRY_EXPECT_FAIL the
#    compiler must print the exact diagnostic named on the snippet's `// expect:` line; built
#    without it, the twin must compile with the same flags (so an unrelated error cannot pass).
#    A snippet with a `// needs: cuda` line is about the CUDA backend: built where ferry has it,
#    reported as skipped elsewhere.
option(FERRY_HEADER_CHECKS "Compile every public header alone (as tests)" ON)

set(_ferry_inc -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}/policies)
if(FERRY_HAS_CUDA)
  foreach(d IN LISTS CUDAToolkit_INCLUDE_DIRS FERRY_CCCL_INCLUDE_DIR)  # as ferry::ferry gives them
    list(APPEND _ferry_inc -isystem ${d})
  endforeach()
  # <ferry/sync/sync_guard.hpp> needs cupti.h, which some toolkits keep in extras/CUPTI/include.
  if(TARGET CUDA::cupti)
    get_target_property(_cupti_inc CUDA::cupti INTERFACE_INCLUDE_DIRECTORIES)
    foreach(d IN LISTS _cupti_inc)
      if(d AND NOT d IN_LIST CUDAToolkit_INCLUDE_DIRS)
        list(APPEND _ferry_inc -isystem ${d})
      endif()
    endforeach()
  endif()
  set(_ferry_defs -DFERRY_DEFAULT_BACKEND=cuda -DFERRY_HAS_CUDA=1 -DFERRY_HAS_MDSPAN=${FERRY_HAS_MDSPAN})
else()
  set(_ferry_defs -DFERRY_DEFAULT_BACKEND=host -DFERRY_HAS_CUDA=0)
endif()

if(FERRY_HEADER_CHECKS)
  file(GLOB_RECURSE _headers RELATIVE ${PROJECT_SOURCE_DIR}/include
       ${PROJECT_SOURCE_DIR}/include/*.hpp ${PROJECT_SOURCE_DIR}/include/*.cuh)
  file(GLOB_RECURSE _policy_headers RELATIVE ${PROJECT_SOURCE_DIR}/policies
       ${PROJECT_SOURCE_DIR}/policies/*.hpp)
  # Interop headers over optional dependencies: <ferry/interop/dlpack.hpp> where dlpack's header
  # is found; <ferry/interop/torch.hpp> is compiled by examples/torch_extension against torch.
  list(REMOVE_ITEM _headers ferry/interop/torch.hpp)
  find_path(FERRY_DLPACK_INCLUDE_DIR dlpack/dlpack.h)
  if(FERRY_DLPACK_INCLUDE_DIR AND NOT FERRY_DLPACK_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    list(APPEND _ferry_inc -isystem ${FERRY_DLPACK_INCLUDE_DIR})
  elseif(NOT FERRY_DLPACK_INCLUDE_DIR)
    list(REMOVE_ITEM _headers ferry/interop/dlpack.hpp)
  endif()
  # g++: every .hpp alone (-fsyntax-only). nvcc: every .cuh alone (they hold the kernels), and
  # every .hpp in one translation unit: nvcc's front end parses the same code, and one unit per
  # header would cost about 13 s of device compilation each on CI's machine for no other check.
  set(_all_hpp "")
  foreach(h IN LISTS _headers _policy_headers)
    string(MAKE_C_IDENTIFIER ${h} id)
    if(h MATCHES "\\.hpp$")
      set(tu ${CMAKE_CURRENT_BINARY_DIR}/headers/${id}.cpp)
      file(CONFIGURE OUTPUT ${tu} CONTENT "#include <${h}>\n")
      add_test(NAME "header.g++: ${h}"
               COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -fsyntax-only -Wall -Wextra -Werror
                       ${_ferry_inc} ${_ferry_defs} ${tu})
      set_tests_properties("header.g++: ${h}" PROPERTIES LABELS header)
      string(APPEND _all_hpp "#include <${h}>\n")
    elseif(FERRY_HAS_NVCC)
      set(tu ${CMAKE_CURRENT_BINARY_DIR}/headers/${id}.cu)
      file(CONFIGURE OUTPUT ${tu} CONTENT "#include <${h}>\n")
      add_test(NAME "header.nvcc: ${h}"
               COMMAND ${CMAKE_CUDA_COMPILER} -std=c++20 -arch=sm_90 --expt-relaxed-constexpr
                       -c -o ${CMAKE_CURRENT_BINARY_DIR}/headers/${id}.o
                       ${_ferry_inc} ${_ferry_defs} ${tu})
      set_tests_properties("header.nvcc: ${h}" PROPERTIES LABELS header)
    endif()
  endforeach()
  if(FERRY_HAS_NVCC)
    set(tu ${CMAKE_CURRENT_BINARY_DIR}/headers/every_hpp.cu)
    file(CONFIGURE OUTPUT ${tu} CONTENT "${_all_hpp}")
    add_test(NAME "header.nvcc: every .hpp in one unit"
             COMMAND ${CMAKE_CUDA_COMPILER} -std=c++20 -arch=sm_90 --expt-relaxed-constexpr
                     -c -o ${CMAKE_CURRENT_BINARY_DIR}/headers/every_hpp.o ${_ferry_inc} ${_ferry_defs} ${tu})
    set_tests_properties("header.nvcc: every .hpp in one unit" PROPERTIES LABELS header)
  endif()
endif()

file(GLOB _snippets ${CMAKE_CURRENT_SOURCE_DIR}/compile_fail/*.cpp)
foreach(snippet IN LISTS _snippets)
  get_filename_component(name ${snippet} NAME_WE)
  file(STRINGS ${snippet} _expect REGEX "^// expect: ")
  string(REGEX REPLACE "^// expect: " "" _expect "${_expect}")
  if(_expect STREQUAL "")
    message(FATAL_ERROR "${snippet} has no '// expect: <regex>' line")
  endif()
  file(STRINGS ${snippet} _needs_cuda REGEX "^// needs: cuda$")
  if(_needs_cuda AND NOT FERRY_HAS_CUDA)
    foreach(kind compile_fail compile_twin)
      add_test(NAME "${kind}: ${name}" COMMAND ${CMAKE_COMMAND} -E echo "skipped: needs the CUDA backend")
      set_tests_properties("${kind}: ${name}" PROPERTIES SKIP_REGULAR_EXPRESSION "skipped: needs the CUDA backend"
                           LABELS compile)
    endforeach()
    continue()
  endif()
  set(cmd ${CMAKE_CXX_COMPILER} -std=c++20 -fsyntax-only ${_ferry_inc} ${_ferry_defs} ${snippet})
  add_test(NAME "compile_fail: ${name}" COMMAND ${cmd} -DFERRY_EXPECT_FAIL)
  set_tests_properties("compile_fail: ${name}" PROPERTIES PASS_REGULAR_EXPRESSION "${_expect}" LABELS compile)
  add_test(NAME "compile_twin: ${name}" COMMAND ${cmd})
  set_tests_properties("compile_twin: ${name}" PROPERTIES LABELS compile)
endforeach()

# docs/consuming.md's "Without CMake" lines, read from the page and run on a small program: g++
# with the host backend always; nvcc and g++ with the CUDA backend where the toolkit is found.
add_test(NAME "consumer: without CMake (docs/consuming.md)"
         COMMAND ${CMAKE_COMMAND} -DSOURCE=${PROJECT_SOURCE_DIR}
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/without_cmake
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/consumer/without_cmake.cmake)
set_tests_properties("consumer: without CMake (docs/consuming.md)" PROPERTIES LABELS "compile;consumer" TIMEOUT 900)
