#!/bin/sh
# gpu/gpu_profile.sh OUTDIR — Nsight Compute readings of the CUDA kernels at the anchor
# shapes (developer tool; METHOD.md: --clock-control none, the card's clocks left alone), and
# gpu/membench.cu (the in-place read-modify-write ceiling of a decode pool next to a copy).
# Needs the build of gpu/gpu_check.sh (SSMOPS_GPU_BUILD, default build-gpu).
# Writes OUTDIR/profile_<name>.txt (details page + warp-stall metrics per kernel),
# OUTDIR/sass_<name>.csv.gz (per-instruction stall samples), OUTDIR/src_<name>.csv.gz (the SASS
# interleaved with the CUDA source lines it came from: gpu_check.sh builds with
# SSMOPS_CUDA_LINEINFO=ON; gpu/profile_lines.py sums its stall samples per source line) and
# OUTDIR/membench.txt.
# Environment: SSMOPS_PROFILE_CASES (space list of case names, default the forward and decode
# cases; m2bwd, sisobwd and mimobwd profile the backwards' chunk kernels at the #18 shapes,
# m2chain the Mamba-2 backward's state chain (its three launches: 30, 30 and 20 heads), m2parts
# its state-parts kernel (dB and dC of the first head batch), sisosmall the SISO backward's prep
# and token kernels).
set -u
out=${1:?usage: gpu/gpu_profile.sh OUTDIR}
mkdir -p "$out"
src=$(cd "$(dirname "$0")/.." && pwd)
build=${SSMOPS_GPU_BUILD:-$src/build-gpu}
cli=$build/ssmops
command -v nvcc >/dev/null 2>&1 || PATH=/usr/local/cuda/bin:$PATH
cases=${SSMOPS_PROFILE_CASES:-"membench scan siso m2step sisostep"}
want() { case " $cases " in *" $1 "*) return 0 ;; esac; return 1; }

if want membench; then
    nvcc -O3 -arch=sm_90 "$src/gpu/membench.cu" -o "$build/membench" >"$out/membench.txt" 2>&1 &&
        "$build/membench" 320 >>"$out/membench.txt" 2>&1
    tail -45 "$out/membench.txt"
fi

sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
 --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters --section ComputeWorkloadAnalysis"
prof() { # name, launch count, then the ssmops arguments (SSMOPS_PROFILE_KERNEL: a kernel-name regex)
    name=$1 count=$2
    shift 2
    kf=
    [ -n "${SSMOPS_PROFILE_KERNEL:-}" ] && kf="-k regex:$SSMOPS_PROFILE_KERNEL"
    rep=$out/.rep_$name
    # shellcheck disable=SC2086
    timeout 240 ncu --clock-control none $kf -c "$count" $sections -f -o "$rep" "$cli" "$@" >"$out/.ncu_$name.log" 2>&1 ||
        { echo "ncu $name failed:"; tail -5 "$out/.ncu_$name.log"; }
    [ -f "$rep.ncu-rep" ] || return 0
    {
        ncu -i "$rep.ncu-rep" --page details
        echo "== warp stall ratios (cycles per issued instruction)"
        ncu -i "$rep.ncu-rep" --page raw --csv --metrics regex:smsp__average_warps?_issue_stalled_.*_per_issue_active.ratio
    } >"$out/profile_$name.txt" 2>&1
    ncu -i "$rep.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip -9 >"$out/sass_$name.csv.gz"
    ncu -i "$rep.ncu-rep" --page source --csv --print-source cuda,sass 2>&1 | gzip -9 >"$out/src_$name.csv.gz"
    rm -f "$rep.ncu-rep"
    grep -E "^  [a-z_].*\(|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|DRAM Throughput|Memory Throughput" \
        "$out/profile_$name.txt" | head -60
}
scan_params=has_d=1,has_z=1,has_dt_bias=1,dt_softplus=1,has_init=0,has_final=0
siso_params=has_d=1,has_z=1,has_states=0,has_final=0
want scan && prof scan 6 bench mamba2_scan --backend cuda --reps 1 --dtype bf16 \
    --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan_params
want siso && prof siso 8 bench mamba3_siso --backend cuda --reps 1 --dtype bf16 \
    --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso_params
want m2step && prof m2step 3 bench mamba2_step --backend cuda --reps 1 --dtype f32 --shape B=128,H=80,P=64,N=128,G=1
want sisostep && prof sisostep 3 bench mamba3_siso_step --backend cuda --reps 1 --dtype f32 \
    --shape B=128,H=64,Hq=1,K=128,V=64,A=32
want m2bwd && SSMOPS_PROFILE_KERNEL=bwd_chunk prof m2bwd 1 bench mamba2_scan_bwd --backend cuda --reps 1 --dtype bf16 \
    --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param has_d=1,has_z=1,has_dt_bias=1,dt_softplus=1,has_init=0,has_dfinal=0
want m2chain && SSMOPS_PROFILE_KERNEL=bwd_state_chain prof m2chain 3 bench mamba2_scan_bwd --backend cuda --reps 1 --dtype bf16 \
    --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param has_d=1,has_z=1,has_dt_bias=1,dt_softplus=1,has_init=0,has_dfinal=0
want m2parts && SSMOPS_PROFILE_KERNEL=bwd_state_parts prof m2parts 2 bench mamba2_scan_bwd --backend cuda --reps 1 --dtype bf16 \
    --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param has_d=1,has_z=1,has_dt_bias=1,dt_softplus=1,has_init=0,has_dfinal=0
want sisosmall && SSMOPS_PROFILE_KERNEL="bwd_tok_kernel|bwd_prep_kernel" prof sisosmall 2 bench mamba3_siso_bwd --backend cuda --reps 1 \
    --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1,angles_f32=1
want sisobwd && SSMOPS_PROFILE_KERNEL="bwd_chunk_planes_(sums|grads)|bwd_walks_kernel|bwd_prep_kernel" prof sisobwd 3 bench mamba3_siso_bwd --backend cuda --reps 1 --dtype bf16 \
    --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1,has_states=0,has_dfinal=0
want mimobwd && SSMOPS_PROFILE_KERNEL="tiles_kernel|grads_kernel" prof mimobwd 2 bench mamba3_mimo_bwd --backend cuda --reps 1 \
    --dtype bf16 --shape B=1,S=8192,H=16,G=1,R=4,N=64,P=64,chunk=16 --param div=4,has_d=1,has_z=1,reduce_o=1
exit 0
