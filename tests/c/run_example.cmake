# Installs a build of kvscatter into a temporary prefix, then configures, builds and runs
# examples/c against that prefix, as a user of the installed package would. Run as
#   cmake -DBUILD_DIR=... -DEXAMPLE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DC_COMPILER=...
#         [-DC_FLAGS=... -DEXE_LINKER_FLAGS=... -DBUILD_TYPE=...]
#         [-DTOOLCHAIN_FILE=... -DEMULATOR=...] -P run_example.cmake
# A cross build passes its toolchain file and the emulator that runs its programs.
cmake_minimum_required(VERSION 3.20)
foreach(var BUILD_DIR EXAMPLE_DIR WORK_DIR GENERATOR C_COMPILER)
  if(NOT ${var})
    message(FATAL_ERROR "run_example.cmake needs -D${var}=...")
  endif()
endforeach()

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${step} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
set(toolchain "")
if(TOOLCHAIN_FILE)
  set(toolchain -DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN_FILE})
endif()
# Sanitizer builds pass their flags on, so the example links the runtime the library needs.
run("configure" ${CMAKE_COMMAND} -S ${EXAMPLE_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${C_COMPILER}
    "-DCMAKE_C_FLAGS=${C_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}"
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE} ${toolchain})
run("build" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run("run" ${EMULATOR} ${WORK_DIR}/build/kvscatter_c_example)
message(STATUS "example output:\n${last_output}")

# The example must have used the installed library, not the build tree's.
file(STRINGS ${WORK_DIR}/build/CMakeCache.txt kvscatter_dir REGEX "^kvscatter_DIR:")
string(FIND "${kvscatter_dir}" "${prefix}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "find_package(kvscatter) did not use the install prefix: ${kvscatter_dir}")
endif()
if(NOT last_output MATCHES "all layers verified")
  message(FATAL_ERROR "the example did not report success")
endif()
