#!/bin/sh
# gpu/san_new.sh CLI OUTLOG [ops...] — compute-sanitizer memcheck and racecheck of `ssmops check
# OP --backend cuda` (bf16, the operator's default check shape) for the given operators; prints
# one line per run and a count of clean runs.
cli=$1 log=$2
shift 2
: >"$log"
for op in "$@"; do
    for tool in memcheck racecheck; do
        timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 "$cli" check "$op" --backend cuda --dtype bf16 \
            >>"$log" 2>&1
        rc=$?
        echo "$tool $op rc=$rc"
    done
done
echo "sanitizer: $(grep -c 'ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0 hazards' "$log") clean summaries; nonzero: $(grep -c 'SUMMARY: [1-9]' "$log")"
