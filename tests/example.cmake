# The example program and the packaging checks (included by tests/CMakeLists.txt).
#   example_mamba2         examples/mamba2_example.c linked with the shared library in the build
#   example_serving_loop   examples/serving_loop.c: continuous batching over state pools, each
#                          request checked against running it alone (CPU backend)
#   example_serving_loop_cuda  the same on the CUDA backend (`serving_loop cuda`; label cuda,
#                          exit 77 = no CUDA device)
#   install_find_package   cmake --install into a scratch prefix, then build and run
#                          examples/consumer with find_package(ssmops) (shared and static)
#   install_pkg_config     the same install, then compile the example with pkg-config;
#                          reported as skipped (exit 77) when pkg-config is not installed

add_executable(mamba2_example ${PROJECT_SOURCE_DIR}/examples/mamba2_example.c)
target_compile_options(mamba2_example PRIVATE ${SSMOPS_WARN})
target_link_libraries(mamba2_example PRIVATE ssmops m)
add_test(NAME example_mamba2 COMMAND mamba2_example)

add_executable(serving_loop ${PROJECT_SOURCE_DIR}/examples/serving_loop.c)
target_compile_options(serving_loop PRIVATE ${SSMOPS_WARN})
target_link_libraries(serving_loop PRIVATE ssmops m)
add_test(NAME example_serving_loop COMMAND serving_loop)
add_test(NAME example_serving_loop_cuda COMMAND serving_loop cuda)
set_tests_properties(example_serving_loop_cuda PROPERTIES LABELS cuda SKIP_RETURN_CODE 77)

# A sanitizer build installs sanitized libraries: their consumers need the same flags.
set(SSMOPS_CONSUMER_FLAGS "")
if(SSMOPS_SANITIZE)
  set(SSMOPS_CONSUMER_FLAGS "-fsanitize=address,undefined")
endif()

foreach(mode find_package pkg_config)
  add_test(NAME install_${mode}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/install_check.sh ${mode} ${PROJECT_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/install_${mode} ${CMAKE_COMMAND}
                   ${CMAKE_C_COMPILER} "${SSMOPS_CONSUMER_FLAGS}")
  set_tests_properties(install_${mode} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()
