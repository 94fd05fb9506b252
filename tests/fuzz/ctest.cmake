# The decode fuzzer (this folder, a standalone project built with clang and
# libFuzzer) as the CTest test `fuzz_decode`, label `fuzz`: it configures and
# builds that project under <build>/tests/fuzz, writes the seed corpus and
# fuzzes for DILOCO_FUZZ_SECONDS seconds (run.cmake). Any crash, sanitizer
# report, leak, timeout or broken invariant fails it; the input is kept in
# <build>/tests/fuzz/artifacts/. Included from tests/CMakeLists.txt.
#
# DILOCO_FUZZ (ON, OFF or AUTO, the top-level CMakeLists.txt's diloco_option)
# needs clang++ with its libFuzzer runtime (Debian: clang-14 and
# libclang-rt-14-dev). AUTO, the default in a top-level build, adds the test
# where they are found and otherwise leaves it out with a warning; ON makes
# their absence a configuration error. DILOCO_FUZZ_CXX names the clang++.

diloco_option(DILOCO_FUZZ "Run the decode fuzzer as the CTest test fuzz_decode (needs clang++ and libFuzzer)"
              ${diloco_own_programs})
set(DILOCO_FUZZ_SECONDS 30 CACHE STRING "How long the fuzz_decode test fuzzes, in seconds")

set(fuzz_missing "")
if(DILOCO_FUZZ)
  # The compiler of this build if it is clang, otherwise a clang++ on the PATH.
  if(NOT DILOCO_FUZZ_CXX AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    set(DILOCO_FUZZ_CXX ${CMAKE_CXX_COMPILER} CACHE FILEPATH "clang++ that builds the decode fuzzer")
  endif()
  find_program(DILOCO_FUZZ_CXX NAMES clang++-14 clang++ DOC "clang++ that builds the decode fuzzer")
  if(NOT DILOCO_FUZZ_CXX OR NOT EXISTS "${DILOCO_FUZZ_CXX}")
    set(fuzz_missing "clang++ with libFuzzer (Debian: clang-14 libclang-rt-14-dev, or set DILOCO_FUZZ_CXX to a "
                     "clang++)")
    if(DILOCO_FUZZ_CXX)
      list(APPEND fuzz_missing ", not '${DILOCO_FUZZ_CXX}'")
    endif()
  elseif(NOT DILOCO_FUZZ_CXX_CHECKED STREQUAL DILOCO_FUZZ_CXX)
    # Link a trivial fuzz target once per compiler, so that a missing
    # libFuzzer or sanitizer runtime shows here rather than in the test.
    set(probe_dir ${CMAKE_CURRENT_BINARY_DIR}/fuzz/probe)
    file(WRITE ${probe_dir}/probe.cpp
         "extern \"C\" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n")
    execute_process(COMMAND ${DILOCO_FUZZ_CXX} -fsanitize=fuzzer,address,undefined probe.cpp -o probe
                    WORKING_DIRECTORY ${probe_dir} RESULT_VARIABLE probe_result OUTPUT_VARIABLE probe_output
                    ERROR_VARIABLE probe_output)
    if(probe_result EQUAL 0)
      set(DILOCO_FUZZ_CXX_CHECKED ${DILOCO_FUZZ_CXX} CACHE INTERNAL "the clang++ whose libFuzzer runtime was checked")
    else()
      string(STRIP "${probe_output}" probe_output)
      set(fuzz_missing "the libFuzzer runtime of ${DILOCO_FUZZ_CXX}, which cannot link "
                       "-fsanitize=fuzzer,address,undefined (Debian: libclang-rt-14-dev for clang 14): ${probe_output}")
    endif()
  endif()
  string(JOIN "" fuzz_missing ${fuzz_missing})
endif()
diloco_decide(DILOCO_FUZZ "the fuzz test (fuzz_decode)" "${fuzz_missing}")

if(DILOCO_FUZZ)
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
