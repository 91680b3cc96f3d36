#!/bin/sh
# tools/gpu_check.sh OUTDIR — everything the CUDA backend needs on a GPU machine, in one go
# (shared GPU.md): configure (-DSSMOPS_CUDA=ON, sm_90), build with all cores, the SASS of
# the kernels (HMMA count), the cuda-labelled tests, `ssmops check --backend cuda` for every
# operator with a CUDA path in f32/f16/bf16 (all shapes), compute-sanitizer memcheck and
# racecheck on small shapes, `ssmops bench --backend cuda` at the ANCHORS.md shapes, and the
# device ceilings. Writes at most 8 files to OUTDIR (build.log, sass.txt, tests.log,
# sanitizer.log, bench.json, bench.log, summary.txt) and prints a short table last.
# Environment: SSMOPS_GPU_BUILD (build directory, default build-gpu), SSMOPS_GPU_QUICK=1
# (sanitizer on bf16 only, no out-dtype checks, only the two anchor benchmarks).
set -u
out=${1:?usage: tools/gpu_check.sh OUTDIR}
mkdir -p "$out"
src=$(cd "$(dirname "$0")/.." && pwd)
build=${SSMOPS_GPU_BUILD:-$src/build-gpu}
jobs=$(nproc 2>/dev/null || echo 4)
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

note "# ssmops gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1 |
    sed 's/^/gpu: /' | tee -a "$summary"
command -v nvcc >/dev/null 2>&1 || PATH=/usr/local/cuda/bin:$PATH
nvcc --version 2>&1 | tail -1 | sed 's/^/nvcc: /' | tee -a "$summary"

# ---- build --------------------------------------------------------------------------------
t0=$(date +%s)
if ! { cmake -S "$src" -B "$build" -DSSMOPS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$build" -j "$jobs"; } >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    note "BUILD FAILED"
    exit 1
fi
note "build: $(($(date +%s) - t0)) s with $jobs jobs"
cli=$build/ssmops

# ---- SASS: tensor-core instructions per kernel ---------------------------------------------
if command -v cuobjdump >/dev/null 2>&1; then
    cuobjdump --dump-sass "$build/libssmops.a" >"$out/sass.txt" 2>&1
    awk '/Function :/ {f=$3} /HMMA/ {h[f]++} /FFMA/ {m[f]++} /Function :/ {seen[$3]=1}
         END {for (k in seen) printf "sass: %-70s HMMA %5d  FFMA %5d\n", k, h[k]+0, m[k]+0}' "$out/sass.txt" |
        sort | tee -a "$summary"
else
    note "sass: cuobjdump not found"
fi

# ---- tests and checks ----------------------------------------------------------------------
fails=0
{
    echo "== ctest -L cuda"
    (cd "$build" && ctest -L cuda --output-on-failure) || echo "CTEST FAILED"
    for op in mamba2_scan mamba2_chunk_state; do
        for dt in f32 f16 bf16; do
            echo "== check $op --backend cuda --dtype $dt --all-shapes"
            "$cli" check "$op" --backend cuda --dtype "$dt" --all-shapes || echo "CHECK FAILED: $op $dt"
            # Outputs in the input dtype: informative only. Rounding |y| >> rms(y) to f16/bf16
            # alone can exceed max_rel (half an ulp of the largest |y|, over rms), on any backend.
            [ "${SSMOPS_GPU_QUICK:-0}" = 1 ] && continue
            echo "== info: check $op --backend cuda --dtype $dt --out-dtype $dt"
            "$cli" check "$op" --backend cuda --dtype "$dt" --out-dtype "$dt" || echo "info: $op $dt out $dt off the bar"
        done
    done
    echo "== check mamba2_scan at the anchor shape (bf16)"
    "$cli" check mamba2_scan --backend cuda --dtype bf16 --shape B=1,S=2048,H=16,P=64,N=128,G=1,chunk=256 ||
        echo "CHECK FAILED: anchor-like bf16"
} >"$out/tests.log" 2>&1
grep -E "tests passed|Skipped|FAILED|info:" "$out/tests.log" | sed 's/^/tests: /' | tee -a "$summary"
grep -q "FAILED" "$out/tests.log" && fails=1

# ---- compute-sanitizer ---------------------------------------------------------------------
san_dtypes="f32 bf16 f16"
[ "${SSMOPS_GPU_QUICK:-0}" = 1 ] && san_dtypes=bf16
if command -v compute-sanitizer >/dev/null 2>&1; then
    {
        for tool in memcheck racecheck; do
            for dt in $san_dtypes; do
                echo "== $tool mamba2_scan $dt (seq_idx)"
                compute-sanitizer --tool "$tool" --error-exitcode 9 "$cli" check mamba2_scan --backend cuda --dtype "$dt" \
                    --shape B=2,S=100,H=4,P=24,N=40,G=2,chunk=32 --param seq_idx=3
                echo "rc=$?"
                echo "== $tool mamba2_scan $dt (varlen)"
                compute-sanitizer --tool "$tool" --error-exitcode 9 "$cli" check mamba2_scan --backend cuda --dtype "$dt" \
                    --shape B=1,S=90,H=2,P=16,N=16,G=1,chunk=32 --param nseq=4
                echo "rc=$?"
                echo "== $tool mamba2_chunk_state $dt (cann)"
                compute-sanitizer --tool "$tool" --error-exitcode 9 "$cli" check mamba2_chunk_state --backend cuda \
                    --dtype "$dt" --shape B=1,S=88,H=4,P=16,N=32,G=2,chunk=32 --param layout=cann
                echo "rc=$?"
            done
        done
    } >"$out/sanitizer.log" 2>&1
    note "sanitizer: $(grep -c '^rc=0' "$out/sanitizer.log") of $(grep -c '^rc=' "$out/sanitizer.log") runs clean"
    grep -E "ERROR SUMMARY|rc=[1-9]" "$out/sanitizer.log" | sort | uniq -c | sed 's/^/sanitizer: /' | tee -a "$summary"
fi

# ---- benchmarks ------------------------------------------------------------------------------
json=$out/bench.json
echo "[" >"$json"
first=1
bench() { # name, then ssmops bench arguments
    name=$1
    shift
    tmp=$out/.bench_tmp.json
    echo "== $name: ssmops bench $*" >>"$out/bench.log"
    if "$cli" bench "$@" --backend cuda --json "$tmp" >>"$out/bench.log" 2>&1; then
        [ $first = 1 ] || echo "," >>"$json"
        first=0
        sed -e '1d' -e '$d' "$tmp" >>"$json"
        med=$(sed -n 's/.*"median_s": \([^,]*\),.*/\1/p' "$tmp")
        floor=$(sed -n 's/.*"byte_floor_s": \([^,]*\),.*/\1/p' "$tmp")
        awk -v n="$name" -v m="$med" -v f="$floor" \
            'BEGIN {printf "bench: %-46s %9.4f ms   byte floor %.4f ms\n", n, m * 1000, f * 1000}' | tee -a "$summary"
    else
        note "bench: $name FAILED (see bench.log)"
        fails=1
    fi
    rm -f "$tmp"
}
: >"$out/bench.log"
scan_params=has_d=1,has_z=1,has_dt_bias=1,dt_softplus=1,has_init=0,has_final=0
bench "scan bf16 B1 S8192 H80 P64 N128 (0.462)" mamba2_scan --dtype bf16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
bench "chunk_state f16 CANN B1 S1024 H128 G8 (0.478)" mamba2_chunk_state --dtype f16 --shape B=1,S=1024,H=128,P=64,N=128,G=8,chunk=256 --param layout=cann
if [ "${SSMOPS_GPU_QUICK:-0}" != 1 ]; then
    bench "scan bf16 B4 S4096 H80 P64 N128 (0.793)" mamba2_scan --dtype bf16 --shape B=4,S=4096,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
    bench "scan bf16 B8 S2048 H32 P64 N64 (0.998)" mamba2_scan --dtype bf16 --shape B=8,S=2048,H=32,P=64,N=64,G=1,chunk=256 --param $scan_params
    bench "scan f16 B1 S8192 H80 P64 N128" mamba2_scan --dtype f16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
    bench "scan f32 B1 S8192 H80 P64 N128" mamba2_scan --dtype f32 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
    bench "chunk_state f16 upstream layout (CANN shape)" mamba2_chunk_state --dtype f16 --shape B=1,S=1024,H=128,P=64,N=128,G=8,chunk=256
fi
echo "]" >>"$json"
"$cli" bench --ceilings --backend cuda >>"$out/bench.log" 2>&1
grep "copy bandwidth" "$out/bench.log" | tail -1 | sed 's/^ */ceiling: /' | tee -a "$summary"

echo
echo "==== summary (anchors: scan 0.462 ms Triton, target 0.23 ms; CANN chunk_state 0.478 ms) ===="
cat "$summary"
exit $fails
