#!/bin/sh
# gpu/gpu_quick.sh OUTDIR TEST_REGEX BENCH_OPS [PROFILE_CASES] — a short GPU round: build (as
# gpu/gpu_check.sh), the CUDA tests matching TEST_REGEX, the anchor benchmarks of BENCH_OPS
# (SSMOPS_GPU_OPS of gpu_check.sh) and optionally gpu/gpu_profile.sh on PROFILE_CASES. Writes
# OUTDIR/quick.tgz (one file: the device tool returns few files).
set -u
out=${1:?usage: gpu/gpu_quick.sh OUTDIR TEST_REGEX BENCH_OPS [PROFILE_CASES]}
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
SSMOPS_GPU_PHASES=build,bench SSMOPS_GPU_OPS="$3" SSMOPS_GPU_QUICK=1 "$src/gpu/gpu_check.sh" "$work/check" >"$work/check.out" 2>&1
grep -E "^bench|BUILD FAILED|error" "$work/check.out"
(cd "${SSMOPS_GPU_BUILD:-$src/build-gpu}" && ctest -R "$2" --output-on-failure >"$work/tests.log" 2>&1)
grep -E "tests passed|tests failed|CHECK FAILED" "$work/tests.log" | head -20
if [ -n "${4:-}" ]; then
    SSMOPS_PROFILE_CASES="$4" "$src/gpu/gpu_profile.sh" "$work/prof" >"$work/prof.out" 2>&1
    grep -E "^  [a-z].*\(|Duration" "$work/prof.out" | head -30
fi
mkdir -p "$out"
tar czf "$out/quick.tgz" -C "$work" .
