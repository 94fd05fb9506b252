# Installs the build tree BINARY_DIR into a fresh PREFIX (cmake -P; CONFIG is
# the configuration for multi-config generators, may be empty) and removes
# CONSUMER_DIR, the consumer's old build tree, so nothing stale survives.
foreach(var BINARY_DIR PREFIX CONSUMER_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install.cmake: set ${var}")
  endif()
endforeach()

file(REMOVE_RECURSE ${PREFIX} ${CONSUMER_DIR})
set(config_args)
if(CONFIG)
  set(config_args --config ${CONFIG})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${PREFIX} ${config_args}
                RESULT_VARIABLE result COMMAND_ECHO STDOUT)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "installing ${BINARY_DIR} into ${PREFIX} failed: ${result}")
endif()
