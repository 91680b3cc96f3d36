#!/bin/sh
# `ssmops check` passes for every operator in f32, f16 and bf16 (default shapes, then the
# built-in --all-shapes lists), with the auto backend and with the reference checking itself;
# the output format is one line per output: name rel_rms max_rel bar PASS|FAIL.
# usage: check_ops.sh SSMOPS
set -u
ssmops=$1
failed=0
ops=$("$ssmops" list | awk '/^operators:/ { on = 1; next } on && /^  / { print $1 }')
[ -n "$ops" ] || { echo "FAIL: no operators listed"; exit 1; }
for op in $ops; do
    for dtype in f32 f16 bf16; do
        out=$("$ssmops" check "$op" --dtype "$dtype" --threads 2 2>&1)
        rc=$?
        echo "$out"
        lines=$(echo "$out" | grep -Ec '^[a-z_]+ +[0-9.e+-]+ +[0-9.e+-]+ +[0-9.e+-]+/[0-9.e+-]+ +PASS$')
        if [ "$rc" -ne 0 ] || [ "$lines" -lt 1 ] || echo "$out" | grep -q FAIL; then
            echo "FAIL: ssmops check $op --dtype $dtype (exit $rc, $lines PASS lines)"
            failed=$((failed + 1))
        fi
    done
    if ! "$ssmops" check "$op" --all-shapes --dtype bf16 --threads 2; then
        echo "FAIL: ssmops check $op --all-shapes --dtype bf16"
        failed=$((failed + 1))
    fi
done
# every case of every op in f32 (also exercises `check all`), then the reference against itself
"$ssmops" check all --all-shapes --threads 1 || { echo "FAIL: check all --all-shapes"; failed=$((failed + 1)); }
"$ssmops" check all --backend ref --dtype f16 || { echo "FAIL: check all --backend ref"; failed=$((failed + 1)); }
# the CANN layout of chunk_state, with a padded tail
"$ssmops" check mamba2_chunk_state --dtype f16 --param layout=cann --shape S=300 ||
    { echo "FAIL: chunk_state layout=cann"; failed=$((failed + 1)); }
# stored f16/bf16 outputs of an op without a heavy-tailed gate meet the bars too
"$ssmops" check mamba2_scan --dtype bf16 --out-dtype same --param has_z=0,has_d=0 ||
    { echo "FAIL: scan --out-dtype same"; failed=$((failed + 1)); }
[ "$failed" -eq 0 ] && echo "cli check: all passed"
[ "$failed" -eq 0 ]
