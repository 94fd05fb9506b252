# The CTest test `fuzz_decode` (see ctest.cmake), run with `cmake -P`:
# configures and builds the fuzz project with clang, writes the seed corpus
# and fuzzes for SECONDS seconds. Fails on a build error, a seed that no
# longer does what it should, or any crash, sanitizer report, leak or
# timeout (libFuzzer then exits non-zero and writes the input to artifacts/).
#
# Variables: SOURCE_DIR (tests/fuzz), BINARY_DIR (where everything goes),
# CXX_COMPILER (a clang++), INCLUDE_DIR (diloco's include/), GENERATOR,
# MAKE_PROGRAM, SECONDS.

foreach(var SOURCE_DIR BINARY_DIR CXX_COMPILER INCLUDE_DIR GENERATOR SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run.cmake: ${var} is not set")
  endif()
endforeach()

set(build ${BINARY_DIR}/build)
set(make_program)
if(MAKE_PROGRAM)
  set(make_program -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} -G ${GENERATOR} ${make_program}
                        -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DDILOCO_INCLUDE_DIR=${INCLUDE_DIR}
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${build} --parallel 2 COMMAND_ERROR_IS_FATAL ANY)

# A fresh corpus every run: the seeds, and what this run discovers.
file(REMOVE_RECURSE ${BINARY_DIR}/seeds ${BINARY_DIR}/corpus ${BINARY_DIR}/artifacts)
file(MAKE_DIRECTORY ${BINARY_DIR}/corpus ${BINARY_DIR}/artifacts)
execute_process(COMMAND ${build}/make_corpus ${BINARY_DIR}/seeds COMMAND_ERROR_IS_FATAL ANY)

# regressions/: inputs that once failed, run first with the seeds (new
# inputs go to corpus/, the first directory).
execute_process(COMMAND ${build}/decode_fuzzer -max_total_time=${SECONDS} -timeout=10 -print_final_stats=1
                        -artifact_prefix=${BINARY_DIR}/artifacts/ ${BINARY_DIR}/corpus ${BINARY_DIR}/seeds
                        ${SOURCE_DIR}/regressions
                RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  file(GLOB crashes ${BINARY_DIR}/artifacts/*)
  message(FATAL_ERROR "decode_fuzzer failed (exit ${result}). Input: ${crashes}\n"
                      "Reproduce with: ${build}/decode_fuzzer <input>")
endif()
