# Chooses ferry's backend (cmake/ferryBackend.cmake) for the build-tree target `ferry_backend`;
# when ferry is the top-level project and builds its tests, benchmarks or examples, also enables
# the CUDA language and C++20 for nvcc.
if(FERRY_ENABLE_CUDA AND NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  # nvcc is not always on PATH: look where the toolkit installs it.
  find_program(FERRY_NVCC nvcc HINTS ENV CUDA_PATH ENV CUDA_HOME PATH_SUFFIXES bin
               PATHS /usr/local/cuda/bin)
  if(FERRY_NVCC)
    set(CMAKE_CUDA_COMPILER ${FERRY_NVCC} CACHE FILEPATH "CUDA compiler")
    get_filename_component(_ferry_cuda_root ${FERRY_NVCC} DIRECTORY)
    get_filename_component(_ferry_cuda_root ${_ferry_cuda_root} DIRECTORY)
    set(CUDAToolkit_ROOT ${_ferry_cuda_root})
  endif()
endif()

include(ferryBackend)
add_library(ferry_backend INTERFACE)
ferry_select_backend(ferry_backend)

set(FERRY_HAS_NVCC OFF)
if(FERRY_HAS_CUDA AND PROJECT_IS_TOP_LEVEL AND (FERRY_BUILD_TESTS OR FERRY_BUILD_BENCHMARKS OR FERRY_BUILD_EXAMPLES))
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    if(NOT CMAKE_VERSION VERSION_LESS 3.25.2)
      set(CMAKE_CUDA_STANDARD 20)
      set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    set(FERRY_HAS_NVCC ON)
  endif()
endif()
# One line on the backend. A subproject builds none of ferry's tests, so it says nothing about
# nvcc for them: it says where the kernels ferry launches are compiled, the consumer's .cu files.
if(PROJECT_IS_TOP_LEVEL)
  message(STATUS "ferry: CUDA backend ${FERRY_HAS_CUDA}, nvcc for tests ${FERRY_HAS_NVCC}")
elseif(FERRY_HAS_CUDA)
  message(STATUS "ferry: default backend cuda (CUDA toolkit ${CUDAToolkit_VERSION}); the kernels "
                 "ferry launches build in your .cu files that include <ferry/ferry.cuh>")
else()
  message(STATUS "ferry: default backend host (no CUDA toolkit found, or FERRY_ENABLE_CUDA is OFF)")
endif()
