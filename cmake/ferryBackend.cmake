# ferry_select_backend(<target>): gives the ferry::ferry interface target its backend, chosen by the
# configure that runs it — ferry's own, or a consumer's find_package(ferry) — never fixed at install.
# The CUDA backend when FERRY_ENABLE_CUDA is on and CUDAToolkit is found, the host backend otherwise.
# Sets, in the caller's scope, FERRY_HAS_CUDA, FERRY_HAS_MDSPAN (1 when staged_view is
# cuda::std::mdspan), FERRY_CCCL_INCLUDE_DIR (where <cuda/std/mdspan> is) and CUDAToolkit's results.
macro(ferry_select_backend _ferry_target)
  set(FERRY_HAS_CUDA OFF)
  set(FERRY_HAS_MDSPAN 0)
  set(FERRY_CCCL_INCLUDE_DIR "")
  if(FERRY_ENABLE_CUDA)
    # CMake < 3.28's FindCUDAToolkit tags CUDA::nvToolsExt as deprecated whenever the project asks
    # for CMake >= 3.25, and fails when the toolkit (CUDA >= 12.9) no longer ships that library.
    # Hide the minimum version from that one check.
    set(_ferry_min ${CMAKE_MINIMUM_REQUIRED_VERSION})
    if(CMAKE_VERSION VERSION_LESS 3.28)
      set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
    endif()
    find_package(CUDAToolkit QUIET)
    set(CMAKE_MINIMUM_REQUIRED_VERSION ${_ferry_min})
    if(CUDAToolkit_FOUND)
      set(FERRY_HAS_CUDA ON)
    endif()
  endif()

  if(FERRY_HAS_CUDA)
    # <cuda/std/mdspan> (ferry::staged_view) must be seen alike by nvcc and the host compiler, or
    # the two disagree on public types. CUDA 13 keeps CCCL in include/cccl, which nvcc searches
    # on its own and the host compiler only when told.
    foreach(_ferry_dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
      foreach(_ferry_candidate IN ITEMS ${_ferry_dir}/cccl ${_ferry_dir})
        if(FERRY_CCCL_INCLUDE_DIR STREQUAL "" AND EXISTS ${_ferry_candidate}/cuda/std/mdspan)
          set(FERRY_CCCL_INCLUDE_DIR ${_ferry_candidate})
        endif()
      endforeach()
    endforeach()
    if(NOT FERRY_CCCL_INCLUDE_DIR STREQUAL "")
      set(FERRY_HAS_MDSPAN 1)
      target_include_directories(${_ferry_target} SYSTEM INTERFACE
        $<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${FERRY_CCCL_INCLUDE_DIR}>)
    endif()
    # Host-compiled consumers link the shared CUDA runtime; an nvcc-linked consumer keeps its own
    # cudart flavour (CMAKE_CUDA_RUNTIME_LIBRARY), so ferry forces none there.
    target_link_libraries(${_ferry_target} INTERFACE $<$<NOT:$<LINK_LANGUAGE:CUDA>>:CUDA::cudart>)
    target_include_directories(${_ferry_target} SYSTEM INTERFACE
      $<TARGET_PROPERTY:CUDA::cudart,INTERFACE_INCLUDE_DIRECTORIES>)
    target_compile_definitions(${_ferry_target} INTERFACE
      FERRY_DEFAULT_BACKEND=cuda FERRY_HAS_CUDA=1 FERRY_HAS_MDSPAN=${FERRY_HAS_MDSPAN})
    # C++20 for nvcc. CMake < 3.25.2 cannot express cuda_std_20 for nvcc 13: pass the flag.
    if(CMAKE_VERSION VERSION_LESS 3.25.2)
      target_compile_options(${_ferry_target} INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
    endif()
  else()
    target_compile_definitions(${_ferry_target} INTERFACE
      FERRY_DEFAULT_BACKEND=host FERRY_HAS_CUDA=0 FERRY_HAS_MDSPAN=0)
  endif()
endmacro()
