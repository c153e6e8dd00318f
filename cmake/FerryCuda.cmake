# Finds the CUDA toolkit (optional). Sets FERRY_HAS_CUDA; when ferry is the top-level project,
# also enables the CUDA language (for its tests, benchmarks and examples) and C++20 for nvcc.
set(FERRY_HAS_CUDA OFF)
if(FERRY_ENABLE_CUDA)
  # nvcc is not always on PATH: look where the toolkit installs it.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(FERRY_NVCC nvcc HINTS ENV CUDA_PATH ENV CUDA_HOME PATH_SUFFIXES bin
                 PATHS /usr/local/cuda/bin)
    if(FERRY_NVCC)
      set(CMAKE_CUDA_COMPILER ${FERRY_NVCC} CACHE FILEPATH "CUDA compiler")
      get_filename_component(_ferry_cuda_root ${FERRY_NVCC} DIRECTORY)
      get_filename_component(_ferry_cuda_root ${_ferry_cuda_root} DIRECTORY)
      set(CUDAToolkit_ROOT ${_ferry_cuda_root})
    endif()
  endif()
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

if(FERRY_HAS_CUDA AND PROJECT_IS_TOP_LEVEL)
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
message(STATUS "ferry: CUDA backend ${FERRY_HAS_CUDA}, nvcc for tests ${FERRY_HAS_NVCC}")
