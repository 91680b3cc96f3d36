# Tests of the ssmops command-line tool (included by tests/CMakeLists.txt); POSIX sh scripts
# in tests/cli/ drive the binary:
#   cli_basic      list / help / version, usage errors (exit 2), library errors (exit 1), compare
#   cli_check      `check` passes for every operator `ssmops list` shows (forward, backward
#                  with every gradient, decode steps with in-place pools, layer ops, Mamba-3
#                  SISO and MIMO) in f32, f16, bf16 (+ --all-shapes); mamba3_mimo_bwd_fwd in
#                  bf16 in both rounding models (float64 bars, and rel_rms < 1e-3 against the
#                  upstream-bf16 reference)
#   cli_run_ref    `run --backend ref` on every test vector in tests/data reproduces the
#                  stored float64 outputs (rel_rms <= 1e-10); Mamba-2 / Mamba-3 vectors without
#                  a CLI operator fail; mamba3_mimo_bwd_fwd's *__bf16ref outputs are matched
#                  by `run --ref-mode bf16` (rel_rms < 1e-3)
#   cli_run_cpu    `run --backend cpu` on the same vectors meets the dtype's DESIGN bars (and
#                  the *__bf16ref outputs with --ref-mode bf16, rel_rms < 1e-3)
#   cli_bench      `bench` writes valid JSON for every family (decode steps report us per
#                  token); `bench --ceilings` prints both ceilings
#   cli_schema_docs  every operator's argument table in docs/ops/*.md matches the schema
#                  (`ssmops list --schema OP`: field, dir, shape, dtype)
if(TARGET ssmops_cli)
  set(SSMOPS_CLI_SCRIPTS ${CMAKE_CURRENT_LIST_DIR}/cli)
  set(SSMOPS_CLI_TMP ${CMAKE_CURRENT_BINARY_DIR}/cli_tmp)
  add_test(NAME cli_basic COMMAND sh ${SSMOPS_CLI_SCRIPTS}/basic.sh $<TARGET_FILE:ssmops_cli> ${SSMOPS_CLI_TMP}/basic)
  set_tests_properties(cli_basic PROPERTIES ENVIRONMENT "SSMOPS_CLI_DATA=${CMAKE_CURRENT_LIST_DIR}/data")
  add_test(NAME cli_check COMMAND sh ${SSMOPS_CLI_SCRIPTS}/check_ops.sh $<TARGET_FILE:ssmops_cli>)
  foreach(backend ref cpu)
    add_test(NAME cli_run_${backend}
             COMMAND sh ${SSMOPS_CLI_SCRIPTS}/run_vectors.sh $<TARGET_FILE:ssmops_cli> ${CMAKE_CURRENT_LIST_DIR}/data
                     ${SSMOPS_CLI_TMP}/run ${backend})
  endforeach()
  add_test(NAME cli_bench COMMAND sh ${SSMOPS_CLI_SCRIPTS}/bench.sh $<TARGET_FILE:ssmops_cli> ${SSMOPS_CLI_TMP}/bench)
  add_test(NAME cli_schema_docs
           COMMAND sh ${SSMOPS_CLI_SCRIPTS}/schema_docs.sh $<TARGET_FILE:ssmops_cli>
                   ${CMAKE_CURRENT_LIST_DIR}/../docs/ops ${SSMOPS_CLI_TMP}/schema_docs)
  set_tests_properties(cli_basic cli_check cli_run_ref cli_run_cpu cli_bench cli_schema_docs PROPERTIES TIMEOUT 600)
endif()
