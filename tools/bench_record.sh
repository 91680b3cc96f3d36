#!/bin/sh
# The benchmarks of record (docs/PERF.md): every CPU number the issues ask for, in one run.
# Usage: tools/bench_record.sh [BUILD_DIR] [OUT_DIR]   (defaults: build, bench-out)
# Writes one JSON file per benchmark into OUT_DIR and prints the human-readable reports.
set -eu
BUILD=${1:-build}
OUT=${2:-bench-out}
SSMOPS="$BUILD/ssmops"
T=2
mkdir -p "$OUT"
run() { # name, then the bench arguments
    name=$1
    shift
    echo "== $name: ssmops bench $*"
    "$SSMOPS" bench "$@" --json "$OUT/$name.json"
}
"$SSMOPS" bench --ceilings --threads 1 --json "$OUT/ceilings_t1.json"
"$SSMOPS" bench --ceilings --threads $T --json "$OUT/ceilings_t2.json"

# Mamba-2 forward (issue 2)
run m2_scan_f32 mamba2_scan --threads $T --dtype f32
run m2_scan_bf16 mamba2_scan --threads $T --dtype bf16
run m2_scan_f32_t1 mamba2_scan --threads 1 --dtype f32
run m2_chunk_state_cann mamba2_chunk_state --threads $T --dtype f16 --param layout=cann
run m2_chunk_state_std mamba2_chunk_state --threads $T --dtype f16
# Mamba-2 backward and decode (issue 6)
run m2_scan_bwd_f32 mamba2_scan_bwd --threads $T --dtype f32
run m2_scan_bwd_bf16 mamba2_scan_bwd --threads $T --dtype bf16
run m2_step_b1 mamba2_step --threads $T --dtype f32 --shape B=1
run m2_step_b64 mamba2_step --threads $T --dtype f32 --shape B=64
run conv1d causal_conv1d --threads $T --dtype bf16
run rmsnorm rmsnorm_gated --threads $T --dtype bf16
# Mamba-3 SISO (issue 3)
run siso_fwd_f32 mamba3_siso --threads $T --dtype f32
run siso_fwd_bf16 mamba3_siso --threads $T --dtype bf16
run siso_bwd_f32 mamba3_siso_bwd --threads $T --dtype f32
run siso_bwd_bf16 mamba3_siso_bwd --threads $T --dtype bf16
run siso_step_b1 mamba3_siso_step --threads $T --dtype f32 --shape B=1
run siso_step_b16 mamba3_siso_step --threads $T --dtype f32 --shape B=16
run siso_step_b128 mamba3_siso_step --threads $T --dtype f32 --shape B=128
# Mamba-3 MIMO (issue 4)
run mimo_bwd_fwd_bf16 mamba3_mimo_bwd_fwd --threads $T --dtype bf16
run mimo_fwd_bf16 mamba3_mimo --threads $T --dtype bf16
run mimo_bwd_bf16 mamba3_mimo_bwd --threads $T --dtype bf16
run mimo_step_b1 mamba3_mimo_step --threads $T --dtype bf16 --shape B=1
