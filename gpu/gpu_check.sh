#!/bin/sh
# gpu/gpu_check.sh OUTDIR — everything the CUDA backend needs on a GPU machine, in one go
# (shared GPU.md): configure (-DSSMOPS_CUDA=ON, sm_90), build with all cores, the SASS of
# the kernels (HMMA count), the cuda-labelled tests, `ssmops check --backend cuda` for every
# operator with a CUDA path in f32/f16/bf16 (all built-in shapes), compute-sanitizer
# memcheck and racecheck on small shapes of every kernel, `ssmops bench --backend cuda` at the
# ANCHORS.md shapes, and the device ceilings. Writes at most 8 files to OUTDIR (build.log,
# sass.txt, tests.log, sanitizer.log, bench.json, bench.log, summary.txt) and prints a short
# table last.
# Environment:
#   SSMOPS_GPU_BUILD   build directory (default build-gpu; kept between calls on a warm machine)
#   SSMOPS_GPU_PHASES  comma list of phases to run (default all): build,tests,checks,sanitizer,bench;
#                      without build, an existing build in SSMOPS_GPU_BUILD is used as it is (the
#                      build phase configures with -Xptxas=-v, which rebuilds a build made without it)
#   SSMOPS_GPU_OPS     space list of operators for checks/sanitizer/bench (default: all CUDA ops)
#   SSMOPS_GPU_QUICK=1 sanitizer on bf16 only, no out-dtype checks, only the anchor benchmarks
set -u
out=${1:?usage: gpu/gpu_check.sh OUTDIR}
mkdir -p "$out"
src=$(cd "$(dirname "$0")/.." && pwd)
build=${SSMOPS_GPU_BUILD:-$src/build-gpu}
phases=${SSMOPS_GPU_PHASES:-build,tests,checks,sanitizer,bench}
all_ops="mamba2_chunk_state mamba2_scan mamba2_scan_bwd mamba2_step mamba3_siso_fwd mamba3_siso mamba3_siso_bwd
mamba3_siso_step mamba3_mimo_bwd_fwd mamba3_mimo mamba3_mimo_bwd mamba3_mimo_step causal_conv1d causal_conv1d_bwd
causal_conv1d_update rmsnorm_gated rmsnorm_gated_bwd mamba3_angle_cumsum mamba3_angle_cumsum_bwd"
ops=${SSMOPS_GPU_OPS:-$all_ops}
quick=${SSMOPS_GPU_QUICK:-0}
jobs=$(nproc 2>/dev/null || echo 4)
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
want() { case ",$phases," in *",$1,"*) return 0 ;; esac; return 1; }
has_op() { case " $(echo $ops) " in *" $1 "*) return 0 ;; esac; return 1; }

note "# ssmops gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) phases=$phases"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1 |
    sed 's/^/gpu: /' | tee -a "$summary"
command -v nvcc >/dev/null 2>&1 || PATH=/usr/local/cuda/bin:$PATH
nvcc --version 2>&1 | tail -1 | sed 's/^/nvcc: /' | tee -a "$summary"

# ---- build --------------------------------------------------------------------------------
t0=$(date +%s)
if want build || [ ! -x "$build/ssmops" ]; then
    if ! { cmake -S "$src" -B "$build" -DSSMOPS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release \
        -DSSMOPS_CUDA_LINEINFO=ON -DCMAKE_CUDA_FLAGS=-Xptxas=-v &&
        cmake --build "$build" -j "$jobs"; } >"$out/build.log" 2>&1; then
        grep -E "error|Error" "$out/build.log" | head -40
        note "BUILD FAILED"
        exit 1
    fi
    note "build: $(($(date +%s) - t0)) s with $jobs jobs"
    grep -E "spill stores [1-9]|bytes stack frame, [1-9]" "$out/build.log" | sort | uniq -c | head -20 |
        sed 's/^/ptxas: /' | tee -a "$summary"
else
    note "build: using $build as it is"
fi
cli=$build/ssmops

# ---- SASS: tensor-core instructions per kernel ---------------------------------------------
if command -v cuobjdump >/dev/null 2>&1; then
    cuobjdump --dump-sass "$build/libssmops.a" >"$out/sass.txt" 2>&1
    awk '/Function :/ {f=$3; seen[f]=1} /HMMA/ {h[f]++} /FFMA/ {m[f]++}
         END {for (k in seen) printf "sass: %-60.60s HMMA %5d  FFMA %5d\n", k, h[k]+0, m[k]+0}' "$out/sass.txt" |
        sort | tee -a "$summary"
else
    note "sass: cuobjdump not found"
fi

fails=0
# ---- tests and checks ----------------------------------------------------------------------
: >"$out/tests.log"
if want tests; then
    t0=$(date +%s)
    {
        # four at a time (one GPU, ample memory): run one by one the suite takes about 9 minutes on an
        # H200, more than a device call may last
        echo "== ctest -L cuda"
        (cd "$build" && ctest -L cuda -j 4 --output-on-failure) || echo "CTEST FAILED"
        echo "== ctest (everything else, CLI tests on a GPU machine included)"
        (cd "$build" && ctest -LE cuda -j "$jobs" --output-on-failure) || echo "CTEST FAILED (non-cuda)"
    } >>"$out/tests.log" 2>&1
    note "tests: $(($(date +%s) - t0)) s"
fi
if want checks; then
    t0=$(date +%s)
    {
        for op in $ops; do
            for dt in f32 f16 bf16; do
                echo "== check $op --backend cuda --dtype $dt --all-shapes"
                "$cli" check "$op" --backend cuda --dtype "$dt" --all-shapes || echo "CHECK FAILED: $op $dt"
                # Outputs in the input dtype: informative only. Rounding |y| >> rms(y) to f16/bf16
                # alone can exceed max_rel (half an ulp of the largest |y|, over rms), on any backend.
                [ "$quick" = 1 ] && continue
                echo "== info: check $op --backend cuda --dtype $dt --out-dtype $dt"
                "$cli" check "$op" --backend cuda --dtype "$dt" --out-dtype "$dt" || echo "info: $op $dt out $dt off the bar"
            done
        done
        if has_op mamba2_scan; then
            echo "== check mamba2_scan at the anchor shape (bf16)"
            "$cli" check mamba2_scan --backend cuda --dtype bf16 --shape B=1,S=2048,H=16,P=64,N=128,G=1,chunk=256 ||
                echo "CHECK FAILED: anchor-like bf16"
        fi
        if has_op mamba3_siso; then
            echo "== check mamba3_siso at the anchor head shape (bf16)"
            "$cli" check mamba3_siso --backend cuda --dtype bf16 --shape B=1,S=1024,H=8,Hq=1,K=128,V=64,A=32,chunk=64 ||
                echo "CHECK FAILED: siso anchor-like bf16"
        fi
        if has_op mamba3_mimo_bwd_fwd; then
            echo "== check mamba3_mimo_bwd_fwd at the seed head shape (bf16)"
            "$cli" check mamba3_mimo_bwd_fwd --backend cuda --dtype bf16 --shape B=1,S=1024,H=4,G=1,R=4,N=64,P=64,chunk=16 ||
                echo "CHECK FAILED: mimo seed-like bf16"
        fi
    } >>"$out/tests.log" 2>&1
    note "checks: $(($(date +%s) - t0)) s"
fi
grep -E "tests passed|tests failed|Skipped|Failed|FAILED|info:" "$out/tests.log" | sed 's/^/tests: /' | tee -a "$summary"
grep -q "FAILED" "$out/tests.log" && fails=1

# ---- compute-sanitizer ---------------------------------------------------------------------
# Small shapes of every kernel: each op's default check shape, plus the special paths.
san_cases() { # op -> lines of extra check arguments (one run each)
    case $1 in
        mamba2_scan)
            echo "--shape B=2,S=100,H=4,P=24,N=40,G=2,chunk=32 --param seq_idx=3"
            echo "--shape B=1,S=90,H=2,P=16,N=16,G=1,chunk=32 --param nseq=4"
            echo "--shape B=2,S=300,H=4,P=72,N=136,G=2,chunk=32 --param seq_idx=3"
            echo "--shape B=1,S=520,H=2,P=16,N=20,G=2,chunk=32 --param nseq=4" ;;
        mamba2_chunk_state) echo "--shape B=1,S=88,H=4,P=16,N=32,G=2,chunk=32 --param layout=cann" ;;
        mamba2_step)
            echo ""
            echo "--param slots=7,in_place=0"
            echo "--shape B=40,H=16,P=64,N=128,G=2 --param slots=45"
            echo "--shape B=300,H=2,P=16,N=16,G=1 --param slots=301,per_head=0" ;;
        mamba3_siso_fwd | mamba3_siso)
            echo ""
            echo "--shape B=1,S=60,H=4,Hq=2,K=16,V=16,A=4,chunk=16 --param nseq=4"
            echo "--shape B=1,S=200,H=2,Hq=1,K=40,V=72,A=7 --param has_d=1,has_z=1,has_states=1,has_final=1,nseq=3"
            echo "--shape B=1,S=2200,H=2,Hq=1,K=128,V=64,A=64 --param has_d=1,has_z=1,has_states=1,has_final=1,nseq=2" ;;
        mamba3_siso_bwd) # the default shape (K = 32, 32-token chunks) is not one chained_planes serves
            echo ""
            echo "--shape B=1,S=200,H=2,Hq=1,K=128,V=64,A=8,chunk=64 --param has_d=1,has_z=1,has_states=1,has_dfinal=1,nseq=2"
            echo "--shape B=1,S=200,H=2,Hq=1,K=128,V=64,A=8,chunk=64 --param has_d=1,has_z=1,has_states=1,has_dfinal=1,nseq=2,saved_y=1,saved_states=1" ;;
        mamba3_mimo)
            echo ""
            echo "--shape B=1,S=40,H=2,G=1,R=2,N=16,P=8,chunk=8 --param nseq=3" ;;
        mamba3_siso_step | mamba3_mimo_step)
            echo ""
            echo "--param slots=7,in_place=0" ;;
        *) echo "" ;;
    esac
}
if want sanitizer && command -v compute-sanitizer >/dev/null 2>&1; then
    t0=$(date +%s)
    san_dtypes="bf16 f32"
    [ "$quick" = 1 ] && san_dtypes=bf16
    : >"$out/sanitizer.log"
    for tool in memcheck racecheck; do
        for op in $ops; do
            for dt in $san_dtypes; do
                san_cases "$op" | while IFS= read -r extra; do
                    echo "== $tool $op $dt $extra"
                    # shellcheck disable=SC2086
                    compute-sanitizer --tool "$tool" --error-exitcode 9 "$cli" check "$op" --backend cuda \
                        --dtype "$dt" $extra
                    echo "rc=$?"
                done
            done
        done
    done >>"$out/sanitizer.log" 2>&1
    # every entry of every selection table, forced, on a shape of its operator's san_cases that
    # it covers (a forced entry that does not cover the shape exits UNSUPPORTED: not a sanitizer
    # error, rc 9 is)
    "$cli" list --variants | awk 'NF >= 2 && $1 ~ /^mamba/ {print $1, $2}' | while read -r vop var; do
        has_op "$vop" || continue
        for tool in memcheck racecheck; do
            san_cases "$vop" | while IFS= read -r extra; do
                echo "== $tool $vop variant=$var bf16 $extra"
                # shellcheck disable=SC2086
                SSMOPS_VARIANT="$vop=$var" compute-sanitizer --tool "$tool" --error-exitcode 9 "$cli" check "$vop" \
                    --backend cuda --dtype bf16 $extra
                rc=$?
                [ "$rc" = 9 ] && echo "rc=9" || echo "rc=0 (check exit $rc)"
            done
        done
    done >>"$out/sanitizer.log" 2>&1
    note "sanitizer: $(grep -c '^rc=0' "$out/sanitizer.log") of $(grep -c '^rc=' "$out/sanitizer.log") runs clean ($(($(date +%s) - t0)) s)"
    grep -E "ERROR SUMMARY: [1-9]|rc=[1-9]" -B1 "$out/sanitizer.log" | grep -E "^==|rc=" | sed 's/^/sanitizer: /' |
        tee -a "$summary"
    grep -q "rc=[1-9]" "$out/sanitizer.log" && fails=1
fi

# ---- benchmarks ------------------------------------------------------------------------------
json=$out/bench.json
first=1
bench() { # name, [SSMOPS_VARIANT=op=name (a forced entry)], then ssmops bench arguments
    name=$1
    shift
    knob=SSMOPS_VARIANT=
    case $1 in SSMOPS_VARIANT=*) knob=$1; shift ;; esac
    has_op "$1" || return 0
    tmp=$out/.bench_tmp.json
    echo "== $name: ssmops bench $*" >>"$out/bench.log"
    if env "$knob" "$cli" bench "$@" --backend cuda --json "$tmp" >>"$out/bench.log" 2>&1; then
        [ $first = 1 ] || echo "," >>"$json"
        first=0
        sed -e '1d' -e '$d' "$tmp" >>"$json"
        med=$(sed -n 's/.*"median_s": \([^,]*\),.*/\1/p' "$tmp")
        floor=$(sed -n 's/.*"byte_floor_s": \([^,]*\),.*/\1/p' "$tmp")
        gbs=$(sed -n 's/.*"gbps": \([^,]*\),.*/\1/p' "$tmp")
        awk -v n="$name" -v m="$med" -v f="$floor" -v g="${gbs:-0}" \
            'BEGIN {printf "bench: %-50s %9.4f ms  floor %.4f ms  %7.1f GB/s\n", n, m * 1000, f * 1000, g}' |
            tee -a "$summary"
    else
        note "bench: $name FAILED (see bench.log)"
        fails=1
    fi
    rm -f "$tmp"
}
if want bench; then
    echo "[" >"$json"
    : >"$out/bench.log"
    scan_params=has_d=1,has_z=1,has_dt_bias=1,dt_softplus=1,has_init=0,has_final=0
    siso_params=has_d=1,has_z=1,has_states=0,has_final=0
    mimo_params=div=4,has_d=1,has_z=1,reduce_o=1
    bench "scan bf16 B1 S8192 H80 P64 N128 (0.462)" mamba2_scan --dtype bf16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
    bench "chunk_state f16 CANN B1 S1024 H128 G8 (0.478)" mamba2_chunk_state --dtype f16 --shape B=1,S=1024,H=128,P=64,N=128,G=8,chunk=256 --param layout=cann
    bench "siso bf16 B1 S8192 H64 K128 V64 (1.648)" mamba3_siso --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso_params
    bench "mimo_bwd_fwd bf16 B1 S8192 H16 R4 (8.20 H100)" mamba3_mimo_bwd_fwd --dtype bf16 --shape B=1,S=8192,H=16,G=1,R=4,N=64,P=64,chunk=16 --param $mimo_params
    bench "mamba2_step f32 pool B128 H80 P64 N128" mamba2_step --dtype f32 --shape B=128,H=80,P=64,N=128,G=1
    bench "mamba2_step f32 pool B128 H80 P64 N128 idx" mamba2_step --dtype f32 --shape B=128,H=80,P=64,N=128,G=1 --param slots=160
    bench "siso_step f32 pool B128 H64 K128 V64" mamba3_siso_step --dtype f32 --shape B=128,H=64,Hq=1,K=128,V=64,A=32
    bench "mimo_step f32 pool B128 H16 R4 N64 P64" mamba3_mimo_step --dtype f32 --shape B=128,H=16,G=1,R=4,N=64,P=64
    # other entries of the selection tables, forced, at the same shapes
    bench "scan bf16 anchor, forced mamba2_scan=chain2" SSMOPS_VARIANT=mamba2_scan=chain2 mamba2_scan --dtype bf16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
    bench "scan bf16 anchor, forced mamba2_scan=chain" SSMOPS_VARIANT=mamba2_scan=chain mamba2_scan --dtype bf16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
    bench "scan bf16 B8 S2048 H32 N64, forced mamba2_scan=wgmma" SSMOPS_VARIANT=mamba2_scan=wgmma mamba2_scan --dtype bf16 --shape B=8,S=2048,H=32,P=64,N=64,G=1,chunk=256 --param $scan_params
    bench "siso bf16 anchor, forced mamba3_siso=wgmma" SSMOPS_VARIANT=mamba3_siso=wgmma mamba3_siso --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso_params
    bench "siso bf16 anchor, forced mamba3_siso=chain64" SSMOPS_VARIANT=mamba3_siso=chain64 mamba3_siso --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso_params
    bench "scan bf16 anchor, forced mamba2_scan=mma" SSMOPS_VARIANT=mamba2_scan=mma mamba2_scan --dtype bf16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
    bench "scan bf16 anchor, forced mamba2_scan=mma_64row" SSMOPS_VARIANT=mamba2_scan=mma_64row mamba2_scan --dtype bf16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
    bench "mamba2_step f32 pool B128 H80 P64 N128, forced mamba2_step=streaming" SSMOPS_VARIANT=mamba2_step=streaming mamba2_step --dtype f32 --shape B=128,H=80,P=64,N=128,G=1
    bench "siso_step f32 pool B128 H64 K128 V64, forced mamba3_siso_step=warp_rows" SSMOPS_VARIANT=mamba3_siso_step=warp_rows mamba3_siso_step --dtype f32 --shape B=128,H=64,Hq=1,K=128,V=64,A=32
    bench "siso bf16 anchor, forced mamba3_siso=portable" SSMOPS_VARIANT=mamba3_siso=portable mamba3_siso --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso_params
    bench "mimo_bwd_fwd bf16 target, forced mamba3_mimo_bwd_fwd=two_gemm_y" SSMOPS_VARIANT=mamba3_mimo_bwd_fwd=two_gemm_y mamba3_mimo_bwd_fwd --dtype bf16 --shape B=1,S=8192,H=16,G=1,R=4,N=64,P=64,chunk=16 --param $mimo_params
    bench "mimo fwd bf16 target, forced mamba3_mimo=two_gemm_y" SSMOPS_VARIANT=mamba3_mimo=two_gemm_y mamba3_mimo --dtype bf16 --shape B=1,S=8192,H=16,G=1,R=4,N=64,P=64,chunk=16 --param $mimo_params
    if [ "$quick" != 1 ]; then
        bench "scan bf16 B4 S4096 H80 P64 N128 (0.793)" mamba2_scan --dtype bf16 --shape B=4,S=4096,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
        bench "scan bf16 B8 S2048 H32 P64 N64 (0.998)" mamba2_scan --dtype bf16 --shape B=8,S=2048,H=32,P=64,N=64,G=1,chunk=256 --param $scan_params
        bench "scan f16 B1 S8192 H80 P64 N128" mamba2_scan --dtype f16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
        bench "scan f32 B1 S8192 H80 P64 N128" mamba2_scan --dtype f32 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
        bench "chunk_state f16 upstream layout (CANN shape)" mamba2_chunk_state --dtype f16 --shape B=1,S=1024,H=128,P=64,N=128,G=8,chunk=256
        bench "siso bf16 B4 S4096, forced mamba3_siso=wgmma" SSMOPS_VARIANT=mamba3_siso=wgmma mamba3_siso --dtype bf16 --shape B=4,S=4096,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso_params
        bench "siso bf16 B4 S4096 H64 K128 V64 (1.784)" mamba3_siso --dtype bf16 --shape B=4,S=4096,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso_params
        bench "siso_fwd bf16 B1 S8192 H64 K128 V64" mamba3_siso_fwd --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1,has_states=0,has_final=0
        bench "siso f32 B1 S8192 H64 K128 V64" mamba3_siso --dtype f32 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso_params
        bench "mimo fwd bf16 B1 S8192 H16 R4" mamba3_mimo --dtype bf16 --shape B=1,S=8192,H=16,G=1,R=4,N=64,P=64,chunk=16 --param $mimo_params
        bench "mamba2_step f32 pool B1 H80 P64 N128" mamba2_step --dtype f32 --shape B=1,H=80,P=64,N=128,G=1
        bench "siso_step f32 pool B1 H64" mamba3_siso_step --dtype f32 --shape B=1,H=64,Hq=1,K=128,V=64,A=32
        bench "mimo_step f32 pool B1 H16" mamba3_mimo_step --dtype f32 --shape B=1,H=16,G=1,R=4,N=64,P=64
    fi
    echo "]" >>"$json"
    "$cli" bench --ceilings --backend cuda >>"$out/bench.log" 2>&1
    grep "copy bandwidth" "$out/bench.log" | tail -1 | sed 's/^ */ceiling: /' | tee -a "$summary"
fi

echo
echo "==== summary (anchors: scan 0.462 ms Triton, target 0.23; siso 1.648, target 0.82; mimo_bwd_fwd target 4 ms) ===="
cat "$summary"
exit $fails
