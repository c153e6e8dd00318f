# cmake -DMODE=<find_package|subdirectory|fetchcontent> -DSOURCE=<ferry> -DWORK=<dir>
#       [-DPREFIX=<install prefix>] [-DNVCC=ON] -P run.cmake
# Configures, builds and runs the consumer project one way; fails on any error.
foreach(v MODE SOURCE WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run.cmake needs -D${v}=...")
  endif()
endforeach()
set(build ${WORK}/${MODE})
file(REMOVE_RECURSE ${build})
set(args -S ${SOURCE}/tests/consumer -B ${build} -G Ninja -DFERRY_CONSUME=${MODE}
    -DFERRY_SOURCE_DIR=${SOURCE} -DFERRY_CONSUMER_NVCC=${NVCC})
if(MODE STREQUAL "find_package")
  list(APPEND args -DCMAKE_PREFIX_PATH=${PREFIX})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} ${args} COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${build} COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${build}/consumer_gxx COMMAND_ERROR_IS_FATAL ANY)
if(EXISTS ${build}/consumer_nvcc)
  execute_process(COMMAND ${build}/consumer_nvcc COMMAND_ERROR_IS_FATAL ANY)
elseif(NVCC)
  message(FATAL_ERROR "the nvcc consumer was not built")
endif()
