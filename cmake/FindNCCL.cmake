# FindNCCL: finds NCCL (the NVIDIA collective communications library) for ferry's several-GPU
# example. ferry itself never needs NCCL.
#
# Looks, in this order, in: NCCL_ROOT (CMake variable or environment variable; the prefix of an
# NCCL install, or of the pip wheel nvidia-nccl-cu13, which ships only include/nccl.h and
# lib/libnccl.so.2); the CUDA toolkit's include and library directories (NCCL is often installed
# beside the toolkit); the system's default paths; and, when none of these has it, the
# nvidia-nccl wheel of the python3 on PATH.
#
# Result variables:
#   NCCL_FOUND, NCCL_INCLUDE_DIRS, NCCL_LIBRARIES, NCCL_VERSION (from nccl.h, when it says)
# Cache variables (set them to choose an NCCL; -DCMAKE_DISABLE_FIND_PACKAGE_NCCL=ON builds without):
#   NCCL_INCLUDE_DIR, NCCL_LIBRARY
# Imported target:
#   NCCL::nccl
include(FindPackageHandleStandardArgs)

set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT})
set(_nccl_include_hints ${CUDAToolkit_INCLUDE_DIRS})
set(_nccl_library_hints ${CUDAToolkit_LIBRARY_DIR})
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _nccl_include_hints ${CUDAToolkit_LIBRARY_ROOT}/include)
  list(APPEND _nccl_library_hints ${CUDAToolkit_LIBRARY_ROOT}/lib64 ${CUDAToolkit_LIBRARY_ROOT}/lib)
endif()

# A pip-installed NCCL (nvidia-nccl-cu13, e.g. beside PyTorch): only asked when the cache has no
# answer yet and NCCL_ROOT was not given.
if(NOT NCCL_INCLUDE_DIR AND NOT NCCL_LIBRARY AND NOT _nccl_hints)
  find_program(_nccl_python NAMES python3 python)
  if(_nccl_python)
    execute_process(
      COMMAND ${_nccl_python} -c
              "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0] if s else '')"
      OUTPUT_VARIABLE _nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _nccl_rc)
    if(_nccl_rc EQUAL 0 AND _nccl_wheel)
      set(_nccl_wheel_hint ${_nccl_wheel})
    endif()
  endif()
  unset(_nccl_python CACHE)
endif()

find_path(NCCL_INCLUDE_DIR NAMES nccl.h
  HINTS ${_nccl_hints} ${_nccl_include_hints}
  PATH_SUFFIXES include
  PATHS ${_nccl_wheel_hint}
  DOC "Directory of nccl.h")
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${_nccl_hints} ${_nccl_library_hints}
  PATH_SUFFIXES lib64 lib
  PATHS ${_nccl_wheel_hint}
  DOC "The NCCL shared library")
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

unset(NCCL_VERSION)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_defines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_part} +([0-9]+)" _m "${_nccl_defines}")
    set(_nccl_${_part} ${CMAKE_MATCH_1})
  endforeach()
  if(NOT _nccl_MAJOR STREQUAL "" AND NOT _nccl_MINOR STREQUAL "" AND NOT _nccl_PATCH STREQUAL "")
    set(NCCL_VERSION ${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH})
  endif()
endif()

find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND)
  set(NCCL_INCLUDE_DIRS ${NCCL_INCLUDE_DIR})
  set(NCCL_LIBRARIES ${NCCL_LIBRARY})
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl SHARED IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    # nccl.h includes cuda_runtime.h.
    if(TARGET CUDA::cudart)
      set_property(TARGET NCCL::nccl APPEND PROPERTY
        INTERFACE_INCLUDE_DIRECTORIES $<TARGET_PROPERTY:CUDA::cudart,INTERFACE_INCLUDE_DIRECTORIES>)
    endif()
  endif()
endif()

unset(_nccl_hints)
unset(_nccl_include_hints)
unset(_nccl_library_hints)
unset(_nccl_wheel)
unset(_nccl_wheel_hint)
unset(_nccl_rc)
unset(_nccl_defines)
unset(_nccl_m)
unset(_part)
