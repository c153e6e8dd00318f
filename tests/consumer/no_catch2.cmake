# cmake -DSOURCE=<ferry> -DWORK=<dir> -P no_catch2.cmake
# Top-level configures of ferry where Catch2 cannot be found (CMAKE_DISABLE_FIND_PACKAGE_Catch2):
# a plain one succeeds, builds no tests and says what to install; one that asks for the tests
# (FERRY_BUILD_TESTS=ON) fails, saying the same.
cmake_minimum_required(VERSION 3.25)
foreach(v SOURCE WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "no_catch2.cmake needs -D${v}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
set(common -S ${SOURCE} -G Ninja -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON -DFERRY_ENABLE_CUDA=OFF)
set(hint "Catch2 v3 was not found: install it")

execute_process(COMMAND ${CMAKE_COMMAND} ${common} -B ${WORK}/plain
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "a plain configure without Catch2 failed:\n${out}${err}")
endif()
if(NOT "${out}${err}" MATCHES "ferry: tests not built: ${hint}")
  message(FATAL_ERROR "a plain configure without Catch2 did not say what to install:\n${out}${err}")
endif()
if(EXISTS ${WORK}/plain/tests)
  message(FATAL_ERROR "a plain configure without Catch2 added the tests")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} ${common} -B ${WORK}/asked -DFERRY_BUILD_TESTS=ON
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "FERRY_BUILD_TESTS=ON without Catch2 configured")
endif()
if(NOT "${out}${err}" MATCHES "ferry: FERRY_BUILD_TESTS is ON but ${hint}")
  message(FATAL_ERROR "FERRY_BUILD_TESTS=ON without Catch2 did not say what to install:\n${out}${err}")
endif()
