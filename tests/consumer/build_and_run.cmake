# Configures, builds and runs the consumer project (cmake -P) in a fresh build
# tree. Fails on the first step that fails.
#
#   SOURCE_DIR, BINARY_DIR  the consumer project and its build tree
#   MODE                    find_package or add_subdirectory
#   PREFIX                  find_package: the install prefix diloco must come from
#   DILOCO_SOURCE_TREE      add_subdirectory: diloco's source tree
#   GENERATOR, MAKE_PROGRAM, CXX_COMPILER, BUILD_TYPE, CONFIG, EIGEN3_DIR
#                           as in the enclosing build (may be empty)
#   CTEST_COMMAND           the ctest that runs the consumer's test
foreach(var SOURCE_DIR BINARY_DIR MODE GENERATOR CXX_COMPILER CTEST_COMMAND)
  if(NOT ${var})
    message(FATAL_ERROR "build_and_run.cmake: set ${var}")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result COMMAND_ECHO STDOUT)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "consumer (${MODE}): ${what} failed: ${result}")
  endif()
endfunction()

file(REMOVE_RECURSE ${BINARY_DIR})
set(options -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DDILOCO_CONSUMER_MODE=${MODE}
            -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(MAKE_PROGRAM)
  list(APPEND options -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(BUILD_TYPE)
  list(APPEND options -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
  if(DEFINED CXX_FLAGS_BUILD_TYPE)
    string(TOUPPER "${BUILD_TYPE}" build_type_upper)
    list(APPEND options "-DCMAKE_CXX_FLAGS_${build_type_upper}=${CXX_FLAGS_BUILD_TYPE}")
  endif()
endif()
if(EIGEN3_DIR)
  list(APPEND options -DEigen3_DIR=${EIGEN3_DIR})
endif()
if(MODE STREQUAL "find_package")
  list(APPEND options -DCMAKE_PREFIX_PATH=${PREFIX} -DDILOCO_CONSUMER_PREFIX=${PREFIX})
else()
  list(APPEND options -DDILOCO_CONSUMER_SOURCE_TREE=${DILOCO_SOURCE_TREE})
endif()
set(config_args)
if(CONFIG)
  set(config_args --config ${CONFIG})
endif()

run_step(configure ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BINARY_DIR} ${options})
run_step(build ${CMAKE_COMMAND} --build ${BINARY_DIR} ${config_args})
if(CONFIG)
  set(config_args -C ${CONFIG})
endif()
run_step(run ${CTEST_COMMAND} --test-dir ${BINARY_DIR} ${config_args} --output-on-failure --no-tests=error)
