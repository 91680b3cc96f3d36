#!/bin/sh
# `ssmops bench` at a tiny shape writes one JSON measurement with the documented keys, and
# `ssmops bench --ceilings` prints and writes both ceilings (small buffers to stay quick).
# usage: bench.sh SSMOPS TMP_DIR
. "$(dirname "$0")/common.sh"

"$ssmops" bench mamba2_scan --shape B=1,S=128,H=4,P=16,N=16,G=1,chunk=64 --reps 2 --threads 2 \
    --buffer-mib 16 --json "$tmp/scan.json" > "$tmp/scan.txt" 2>&1 || fail "bench mamba2_scan"
cat "$tmp/scan.txt"
for key in op backend dtype shape params threads median_s min_s max_s tokens_per_s gflops gbps peak_fraction \
    bw_fraction workspace_bytes max_rss_bytes; do
    grep -q "\"$key\": " "$tmp/scan.json" || fail "bench JSON lacks \"$key\""
done
grep -q '"op": "mamba2_scan"' "$tmp/scan.json" || fail "bench JSON op"
grep -q '"reps": 2,' "$tmp/scan.json" || fail "bench JSON reps != 2"
grep -q '"shape": {"B": 1, "S": 128, "H": 4, "P": 16, "N": 16, "G": 1, "chunk": 64}' "$tmp/scan.json" ||
    fail "bench JSON shape object"
head -c 1 "$tmp/scan.json" | grep -q '\[' || fail "bench JSON is not an array"
tail -n 1 "$tmp/scan.json" | grep -q '^\]$' || fail "bench JSON array not closed"
grep -Eq '"median_s": [0-9]' "$tmp/scan.json" || fail "bench JSON median_s not a number"
grep -Eq '"peak_fraction": [0-9]' "$tmp/scan.json" || fail "bench JSON peak_fraction not a number"
for label in "time +median" "tokens/s" "GFLOP/s" "GB/s" "workspace" "peak RSS" "params +has_d=1,has_z=0"; do
    grep -Eq "$label" "$tmp/scan.txt" || fail "bench output lacks /$label/"
done

# every operator benches at a small shape (the CANN layout of chunk_state too)
"$ssmops" bench mamba2_chunk_state --shape B=1,S=256,H=8,P=16,N=16,G=2,chunk=64 --param layout=cann --reps 2 \
    --buffer-mib 16 > "$tmp/cstate.txt" 2>&1 || fail "bench chunk_state layout=cann"
grep -q "dtype=f16" "$tmp/cstate.txt" || fail "bench chunk_state default dtype is not f16"
for op in mamba2_chunk_cumsum mamba2_state_passing mamba2_bmm mamba2_chunk_scan; do
    "$ssmops" bench "$op" --shape B=1,S=128,chunk=64 --reps 2 --buffer-mib 16 > /dev/null 2>&1 || fail "bench $op"
done
# the training, layer and Mamba-3 operators bench at small shapes too
for spec in "mamba2_scan_bwd B=1,S=128,H=4,P=16,N=16,G=1,chunk=64" "causal_conv1d B=1,S=256,D=64" \
    "causal_conv1d_bwd B=1,S=256,D=64" "rmsnorm_gated M=128,D=256" "rmsnorm_gated_bwd M=128,D=256" \
    "mamba3_angle_cumsum B=1,S=128,H=4,A=8" "mamba3_angle_cumsum_bwd B=1,S=128,H=4,A=8" \
    "mamba3_siso_fwd B=1,S=128,H=4,Hq=1,K=32,V=16,A=8" "mamba3_siso B=1,S=128,H=4,Hq=1,K=32,V=16,A=8" \
    "mamba3_siso_bwd B=1,S=128,H=4,Hq=1,K=32,V=16,A=8"; do
    set -- $spec
    "$ssmops" bench "$1" --shape "$2" --reps 2 --buffer-mib 16 > "$tmp/$1.txt" 2>&1 || fail "bench $1"
    grep -Eq "GFLOP/s +[0-9]" "$tmp/$1.txt" || fail "bench $1 lacks GFLOP/s"
done
# Mamba-3 MIMO at tiny shapes (bf16 by default, the seed's headline dtype): GFLOP/s from spec
# §7, the decode step's time per token at B=16
for spec in "mamba3_mimo_bwd_fwd B=1,S=64,H=2,G=1,R=4,N=32,P=32,chunk=16" \
    "mamba3_mimo B=1,S=64,H=2,G=1,R=4,N=32,P=32,chunk=16" "mamba3_mimo_bwd B=1,S=64,H=2,G=1,R=4,N=32,P=32,chunk=16"; do
    set -- $spec
    "$ssmops" bench "$1" --shape "$2" --reps 2 --buffer-mib 16 --json "$tmp/$1.json" > "$tmp/$1.txt" 2>&1 ||
        fail "bench $1"
    grep -q "dtype=bf16" "$tmp/$1.txt" || fail "bench $1 default dtype is not bf16"
    grep -Eq "GFLOP/s +[0-9]" "$tmp/$1.txt" || fail "bench $1 lacks GFLOP/s"
    grep -q "\"op\": \"$1\"" "$tmp/$1.json" || fail "bench $1 JSON op"
done
cat "$tmp/mamba3_mimo_bwd_fwd.txt"
grep -q '"shape": {"B": 1, "S": 64, "H": 2, "G": 1, "R": 4, "N": 32, "P": 32, "chunk": 16}' \
    "$tmp/mamba3_mimo_bwd_fwd.json" || fail "mimo_bwd_fwd bench JSON shape object"
# spec §7 FLOPs of bwd_fwd: B·H·nc·C·(4CR²N + 2CR²P + 4RNP + 2R²P) = 1·2·64·66560 = 8519680
grep -q '"gflop": 0.00851968,' "$tmp/mamba3_mimo_bwd_fwd.json" || fail "mimo_bwd_fwd bench GFLOP per call"
"$ssmops" bench mamba3_mimo_step --shape B=16,H=4,N=32,P=32 --reps 3 --buffer-mib 16 > "$tmp/mstep.txt" 2>&1 ||
    fail "bench mamba3_mimo_step B=16"
grep -Eq "per token +[0-9.]+ us +\([0-9.]+ us per call of 16 token" "$tmp/mstep.txt" ||
    fail "mimo_step bench lacks us per token"
# decode steps report the time per token and bench at their default shapes (in-place pools)
"$ssmops" bench mamba3_siso_step --shape B=16 --reps 3 --buffer-mib 16 --json "$tmp/step.json" > "$tmp/step.txt" 2>&1 ||
    fail "bench mamba3_siso_step B=16"
cat "$tmp/step.txt"
grep -Eq "per token +[0-9.]+ us +\([0-9.]+ us per call of 16 token" "$tmp/step.txt" || fail "siso_step bench lacks us per token"
grep -q '"shape": {"B": 16, "H": 32, "Hq": 1, "K": 128, "V": 64, "A": 32}' "$tmp/step.json" ||
    fail "siso_step bench JSON shape object"
for op in mamba2_step mamba3_siso_step mamba3_mimo_step causal_conv1d_update; do
    "$ssmops" bench "$op" --reps 3 --buffer-mib 16 > "$tmp/$op.txt" 2>&1 || fail "bench $op"
    grep -Eq "per token +[0-9.]+ us" "$tmp/$op.txt" || fail "bench $op lacks the time per token"
done

"$ssmops" bench --ceilings --threads 1 --buffer-mib 32 --json "$tmp/ceil.json" > "$tmp/ceil.txt" 2>&1 ||
    fail "bench --ceilings"
cat "$tmp/ceil.txt"
grep -Eq "fma_peak +[0-9.]+ GFLOP/s" "$tmp/ceil.txt" || fail "ceilings lack the FMA peak"
grep -Eq "copy_bw +[0-9.]+ GB/s" "$tmp/ceil.txt" || fail "ceilings lack the copy bandwidth"
grep -Eq '"fma_gflops": [0-9]' "$tmp/ceil.json" || fail "ceilings JSON lacks fma_gflops"
grep -Eq '"copy_gbps": [0-9]' "$tmp/ceil.json" || fail "ceilings JSON lacks copy_gbps"
[ "$failed" -eq 0 ] && echo "cli bench: all passed"
[ "$failed" -eq 0 ]
