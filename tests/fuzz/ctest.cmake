# The decode fuzzer (this folder, a standalone project built with clang and
# libFuzzer) as the CTest test `fuzz_decode`, label `fuzz`: it configures and
# builds that project under <build>/tests/fuzz, writes the seed corpus and
# fuzzes for DILOCO_FUZZ_SECONDS seconds (run.cmake). Any crash, sanitizer
# report, leak, timeout or broken invariant fails it; the input is kept in
# <build>/tests/fuzz/artifacts/. Included from tests/CMakeLists.txt.
#
# DILOCO_FUZZ is on by default in a top-level build and then needs clang++
# with its libFuzzer runtime (Debian: clang-14 and libclang-rt-14-dev);
# configuration fails if they are missing. -DDILOCO_FUZZ=OFF drops the test.

option(DILOCO_FUZZ "Run the decode fuzzer as a CTest test (needs clang++ and libFuzzer)" ${PROJECT_IS_TOP_LEVEL})
set(DILOCO_FUZZ_SECONDS 30 CACHE STRING "How long the fuzz_decode test fuzzes, in seconds")

if(DILOCO_FUZZ)
  # The compiler of this build if it is clang, otherwise a clang++ on the PATH.
  if(NOT DILOCO_FUZZ_CXX AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    set(DILOCO_FUZZ_CXX ${CMAKE_CXX_COMPILER} CACHE FILEPATH "clang++ that builds the decode fuzzer")
  endif()
  find_program(DILOCO_FUZZ_CXX NAMES clang++-14 clang++ DOC "clang++ that builds the decode fuzzer")
  if(NOT DILOCO_FUZZ_CXX)
    message(FATAL_ERROR "DILOCO_FUZZ is ON but no clang++ was found. Install clang and its libFuzzer runtime "
                        "(Debian: apt-get install clang-14 libclang-rt-14-dev), set DILOCO_FUZZ_CXX to a clang++, "
                        "or configure with -DDILOCO_FUZZ=OFF.")
  endif()

  # Link a trivial fuzz target once per compiler, so that a missing libFuzzer
  # or sanitizer runtime fails here rather than in the test.
  if(NOT DILOCO_FUZZ_CXX_CHECKED STREQUAL DILOCO_FUZZ_CXX)
    set(probe_dir ${CMAKE_CURRENT_BINARY_DIR}/fuzz/probe)
    file(WRITE ${probe_dir}/probe.cpp
         "extern \"C\" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n")
    execute_process(COMMAND ${DILOCO_FUZZ_CXX} -fsanitize=fuzzer,address,undefined probe.cpp -o probe
                    WORKING_DIRECTORY ${probe_dir} RESULT_VARIABLE probe_result OUTPUT_VARIABLE probe_output
                    ERROR_VARIABLE probe_output)
    if(NOT probe_result EQUAL 0)
      message(FATAL_ERROR "DILOCO_FUZZ is ON but ${DILOCO_FUZZ_CXX} cannot link a libFuzzer target "
                          "(-fsanitize=fuzzer,address,undefined). Install its runtime (Debian: libclang-rt-14-dev "
                          "for clang 14), set DILOCO_FUZZ_CXX to another clang++, or configure with "
                          "-DDILOCO_FUZZ=OFF.\n${probe_output}")
    endif()
    set(DILOCO_FUZZ_CXX_CHECKED ${DILOCO_FUZZ_CXX} CACHE INTERNAL "the clang++ whose libFuzzer runtime was checked")
  endif()

  add_test(NAME fuzz_decode
           COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_CURRENT_LIST_DIR} -DBINARY_DIR=${CMAKE_CURRENT_BINARY_DIR}/fuzz
                   -DCXX_COMPILER=${DILOCO_FUZZ_CXX} -DINCLUDE_DIR=${PROJECT_SOURCE_DIR}/include
                   -DGENERATOR=${CMAKE_GENERATOR} -DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM} -DSECONDS=${DILOCO_FUZZ_SECONDS}
                   -P ${CMAKE_CURRENT_LIST_DIR}/run.cmake)
  math(EXPR fuzz_timeout "${DILOCO_FUZZ_SECONDS} + 240")
  # COST: about its seconds in CI (a build, then the fuzzing), so that CTest
  # starts it early (examples/01_fashion_mnist/CMakeLists.txt).
  math(EXPR fuzz_cost "${DILOCO_FUZZ_SECONDS} + 45")
  set_tests_properties(fuzz_decode PROPERTIES LABELS fuzz TIMEOUT ${fuzz_timeout} COST ${fuzz_cost})
endif()
