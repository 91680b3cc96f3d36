#!/bin/sh
# gpu/gpu_round.sh OUTDIR — a GPU round for little device time:
# build (gpu/gpu_check.sh, no phase), the CUDA tests named by SSMOPS_ROUND_TESTS (ctest -R
# regex), compute-sanitizer on SSMOPS_ROUND_SAN_OPS (bf16), `ssmops check --all-shapes` for
# SSMOPS_ROUND_CHECK_OPS in f32/f16/bf16, and the benchmarks listed in SSMOPS_ROUND_BENCH (right
# after the tests) and SSMOPS_ROUND_BENCH2 (last): ';'-separated `ssmops bench` argument lists,
# an optional leading VAR=value knob each. SSMOPS_ROUND_JOBS: tests run at a time (default 1).
# Everything most important first, each result written as it comes (a killed run still
# returns what it did). Writes OUTDIR/round.log plus tests.log, san.log, checks.log, bench.log.
set -u
out=${1:?usage: gpu/gpu_round.sh OUTDIR}
mkdir -p "$out"
src=$(cd "$(dirname "$0")/.." && pwd)
build=${SSMOPS_GPU_BUILD:-$src/build-gpu}
log=$out/round.log
say() { echo "$*" | tee -a "$log"; }
SSMOPS_GPU_PHASES=build "$src/gpu/gpu_check.sh" "$out/.check" >/dev/null 2>&1 || { say "BUILD FAILED"; exit 1; }
say "built $(date -u +%H:%M:%S)"
(cd "$build" && ctest -R "${SSMOPS_ROUND_TESTS:-cuda}" -j "${SSMOPS_ROUND_JOBS:-1}" --output-on-failure >"$out/tests.log" 2>&1)
grep -E "tests passed|tests failed|Test +#" "$out/tests.log" | tee -a "$log"
cli=$build/ssmops
benches() { # ';'-separated `ssmops bench` argument lists, each with an optional VAR=value first
    echo "$1" | tr ';' '\n' | while read -r line; do
        [ -n "$line" ] || continue
        knob=SSMOPS_ROUND_NO_KNOB=1
        case $line in SSMOPS_*=*) knob=${line%% *}; line=${line#* } ;; esac
        # shellcheck disable=SC2086
        r=$(env "$knob" "$cli" bench $line --backend cuda 2>&1 | grep -E "median|GB/s" | tr -s ' ' | tr '\n' ' ')
        echo "bench [$knob] $line :: $r" | tee -a "$out/bench.log" >>"$log"
    done
}
benches "${SSMOPS_ROUND_BENCH:-}"
say "benches done $(date -u +%H:%M:%S)"
SSMOPS_GPU_PHASES=sanitizer SSMOPS_GPU_OPS="${SSMOPS_ROUND_SAN_OPS:-}" SSMOPS_GPU_QUICK=1 \
    "$src/gpu/gpu_check.sh" "$out/.san" >/dev/null 2>&1
cp "$out/.san/sanitizer.log" "$out/san.log" 2>/dev/null
grep -E "^sanitizer" "$out/.san/summary.txt" | tee -a "$log"
for op in ${SSMOPS_ROUND_CHECK_OPS:-}; do
    for dt in f32 f16 bf16; do
        echo "== check $op --backend cuda --dtype $dt --all-shapes" >>"$out/checks.log"
        "$cli" check "$op" --backend cuda --dtype "$dt" --all-shapes >>"$out/checks.log" 2>&1 ||
            say "CHECK FAILED: $op $dt"
    done
done
say "checks done $(date -u +%H:%M:%S)"
benches "${SSMOPS_ROUND_BENCH2:-}"
rm -rf "$out/.check" "$out/.san"
