#!/bin/sh
# gpu/verify_and_time.sh OUTDIR — one GPU round that first verifies, then times:
#   1. build (gpu/gpu_check.sh's configuration, sm_90a, all cores);
#   2. at once: the cuda-labelled CTest tests (or those SSMOPS_VT_TESTS, a regex, names), the
#      Python suite with CUDA tensors (extra pytest arguments in SSMOPS_VT_PYTEST_ARGS), and
#      examples/python/hf_mamba2_compare.py for each device:dtype of SSMOPS_VT_HF (default
#      "cuda:float32 cuda:bfloat16 cpu:float32"; 24 layers);
#   3. one after another, nothing else on the GPU: ours' per-kernel profile of forward + backward
#      (gpu/bench_train.py --profile --only SSMOPS_VT_PROFILE), tools/compare_upstream.py --only
#      SSMOPS_VT_COMPARE, and forward + backward against upstream (gpu/bench_train.py --only
#      SSMOPS_VT_TRAIN). A phase whose list is "none" is left out.
# Upstream's code comes from .upstream/ (carry it). Each phase has a time limit (SSMOPS_VT_*_S) so a
# slow phase cannot take the others' time; every log is written as it comes into OUTDIR.
set -u
out=${1:?usage: gpu/verify_and_time.sh OUTDIR}
mkdir -p "$out"
src=$(cd "$(dirname "$0")/.." && pwd)
build=${SSMOPS_GPU_BUILD:-$src/build-gpu}
log=$out/round.log
say() { echo "$*" | tee -a "$log"; }
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0)) s"; }
command -v nvcc >/dev/null 2>&1 || PATH=/usr/local/cuda/bin:$PATH
SSMOPS_GPU_PHASES=build "$src/gpu/gpu_check.sh" "$out/.check" >"$out/build.txt" 2>&1 || {
    say "BUILD FAILED"
    grep -E "error" "$out/.check/build.log" | head -30 | tee -a "$log"
    exit 1
}
say "built: $(el)"
export SSMOPS_LIBRARY=$build/libssmops.so PYTHONPATH=$src/python:$src/.upstream
sel="-L cuda"
[ -n "${SSMOPS_VT_TESTS:-}" ] && sel="-R $SSMOPS_VT_TESTS"
# shellcheck disable=SC2086
(cd "$build" && timeout "${SSMOPS_VT_CTEST_S:-300}" ctest $sel -j8 \
    --output-on-failure >"$out/ctest.txt" 2>&1) &
ctest_pid=$!
# shellcheck disable=SC2086
(cd "$src" && timeout "${SSMOPS_VT_PYTEST_S:-300}" python3 -m pytest -v tests/python --durations=10 \
    ${SSMOPS_VT_PYTEST_ARGS:-} >"$out/pytest.txt" 2>&1) &
py_pid=$!
(cd "$src" && for run in ${SSMOPS_VT_HF:-cuda:float32 cuda:bfloat16 cpu:float32}; do
    [ "$run" = none ] && break
    timeout "${SSMOPS_VT_HF_S:-300}" python3 examples/python/hf_mamba2_compare.py --device "${run%%:*}" \
        --dtype "${run#*:}" 2>&1 | grep -vE "^\[transformers\]|falling back"
done >"$out/hf.txt" 2>&1) &
hf_pid=$!
wait $ctest_pid
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Passed|\*\*\*" "$out/ctest.txt" | tee -a "$log"
say "ctest done: $(el)"
wait $py_pid
tail -3 "$out/pytest.txt" | tee -a "$log"
grep -E "FAILED|Error" "$out/pytest.txt" | head -10 | tee -a "$log"
wait $hf_pid
tee -a "$log" <"$out/hf.txt"
say "verification done: $(el)"
cd "$src" || exit 1
[ "${SSMOPS_VT_PROFILE:-mamba2,siso,mimo}" != none ] &&
    timeout "${SSMOPS_VT_PROFILE_S:-120}" python3 gpu/bench_train.py --profile --only "${SSMOPS_VT_PROFILE:-mamba2,siso,mimo}" 2>&1 |
    grep -v Warning | grep -v _warn_once | tee "$out/profile.txt" >>"$log"
say "profile done: $(el)"
[ "${SSMOPS_VT_COMPARE:-scan,step,chunk_state}" != none ] &&
    timeout "${SSMOPS_VT_COMPARE_S:-180}" python3 tools/compare_upstream.py --only "${SSMOPS_VT_COMPARE:-scan,step,chunk_state}" \
        --rounds 3 --json "$out/compare.json" 2>&1 | tee "$out/compare.txt" >>"$log"
say "compare done: $(el)"
[ "${SSMOPS_VT_TRAIN:-mamba2}" != none ] &&
    timeout "${SSMOPS_VT_TRAIN_S:-180}" python3 gpu/bench_train.py --only "${SSMOPS_VT_TRAIN:-mamba2}" --rounds 3 2>&1 |
    tee "$out/train.txt" >>"$log"
say "end: $(el)"
