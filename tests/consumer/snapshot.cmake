# cmake -DSOURCE=<ferry> -DREPO=<dir> -P snapshot.cmake
# Makes REPO a git repository whose branch main holds one commit of SOURCE's working tree (tracked
# and untracked files, .gitignore honoured): what README's FetchContent and clone lines fetch.
cmake_minimum_required(VERSION 3.25)
foreach(v SOURCE REPO)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "snapshot.cmake needs -D${v}=...")
  endif()
endforeach()
find_package(Git REQUIRED)
file(REMOVE_RECURSE ${REPO})
file(MAKE_DIRECTORY ${REPO})
execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE} ls-files --cached --others --exclude-standard
                OUTPUT_VARIABLE files COMMAND_ERROR_IS_FATAL ANY)
string(REPLACE "\n" ";" files "${files}")
set(present "")
foreach(f IN LISTS files)
  if(EXISTS ${SOURCE}/${f} AND NOT IS_DIRECTORY ${SOURCE}/${f})  # a deletion not yet staged
    string(APPEND present "${f}\n")
  endif()
endforeach()
file(WRITE ${REPO}.files "${present}")
execute_process(COMMAND ${CMAKE_COMMAND} -E tar cf ${REPO}.tar --files-from=${REPO}.files
                WORKING_DIRECTORY ${SOURCE} COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} -E tar xf ${REPO}.tar WORKING_DIRECTORY ${REPO}
                COMMAND_ERROR_IS_FATAL ANY)
file(REMOVE ${REPO}.tar ${REPO}.files)
foreach(step "init -q -b main" "add -A"
             "-c user.name=ferry -c user.email=ferry@localhost commit -q -m snapshot")
  separate_arguments(args UNIX_COMMAND "${step}")
  execute_process(COMMAND ${GIT_EXECUTABLE} ${args} WORKING_DIRECTORY ${REPO} COMMAND_ERROR_IS_FATAL ANY)
endforeach()
