#!/bin/sh
# Worst rel_rms / max_rel per operator and dtype over `ssmops check --all-shapes` (CPU vs the
# float64 reference, outputs in f32). Usage: tools/accuracy_record.sh [BUILD_DIR] (default build).
B=${1:-build}
for op in $($B/ssmops list | awk '/^operators:/{f=1;next} f&&NF{print $1}'); do
  for dt in f32 f16 bf16; do
    $B/ssmops check $op --dtype $dt --all-shapes --threads 2 2>&1 | awk -v op=$op -v dt=$dt '
      /PASS|FAIL/ && NF>=5 { n++; if ($2+0>rr) {rr=$2+0; rn=$1}; if ($3+0>mr) mr=$3+0; if ($0 ~ /FAIL/) f++ }
      END { printf "%-28s %-5s outputs=%-4d worst_rel_rms=%.2e (%s) worst_max_rel=%.2e fails=%d\n", op, dt, n, rr, rn, mr, f+0 }'
  done
done
