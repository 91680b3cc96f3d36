#!/usr/bin/env bash
# compare_ggml.sh — ssmops against ggml's CPU SSM operators on this machine, run interleaved.
#
#   tools/compare_ggml.sh [ROUNDS] [THREADS]        (defaults: 7 rounds, 2 threads)
#   SSMOPS_BASE=path/to/other/ssmops tools/compare_ggml.sh ...
#                 also times that ssmops binary (an older build) in the same rounds, so a change
#                 is measured as before/after ratios in one run.
#
# Builds ggml (its CPU backend, -march=native as ggml builds by default, OpenMP when found) and
# its test-backend-ops from the copy in .compare/ggml (an ignored folder, never committed), builds
# tools/ggml_ssm_bench.c against it, builds ssmops (Release, CPU only) in build-compare, then
# times the workloads below round by round, ssmops and ggml alternating within each workload (the
# order flipped every round), and prints per workload the median over rounds of each side's
# per-round median and the ratio ggml / ssmops (> 1: ssmops is faster). Both sides take f32 and
# the same thread count; ggml's scan has no D, z or dt_bias, so neither has them here; both read an
# initial state and write the final state. test-backend-ops' own perf mode is run once for
# SSM_SCAN and SSM_CONV as a check on the driver (its S=512 scan row is the same shape).
#
# It fetches nothing. Fill the folder from a checkout of ggml-org/ggml first (llama.cpp's ggml/
# folder has the library but not ggml's tests/ folder with its CMakeLists.txt):
#   mkdir -p .compare/ggml && git -C PATH/TO/ggml archive HEAD CMakeLists.txt cmake include src \
#       tests ggml.pc.in LICENSE | tar -x -C .compare/ggml
#   echo "ggml-org/ggml $(git -C PATH/TO/ggml rev-parse HEAD)" > .compare/ggml/SOURCE
# (src/ may leave out the GPU backends' folders; only src/*.{c,cpp,h}, src/CMakeLists.txt and
# src/ggml-cpu are built.) Add /.compare/ to .git/info/exclude so that git never sees it.
set -euo pipefail

ROUNDS=${1:-7}
THREADS=${2:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GG=$ROOT/.compare/ggml
GB=$ROOT/build-ggml
SB=$ROOT/build-compare
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -f "$GG/CMakeLists.txt" ] || [ ! -f "$GG/tests/test-backend-ops.cpp" ]; then
    sed -n '/^# It fetches nothing/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    echo "compare_ggml.sh: $GG is empty: fill it as above" >&2
    exit 2
fi

echo "== building ggml ($(cat "$GG/SOURCE" 2>/dev/null || echo 'source not recorded'))"
cmake -S "$GG" -B "$GB" -DCMAKE_BUILD_TYPE=Release -DGGML_BUILD_TESTS=ON -DGGML_BUILD_EXAMPLES=OFF \
    -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF > "$TMP/ggml-cfg.log"
cmake --build "$GB" -j2 --target ggml test-backend-ops > "$TMP/ggml-build.log"
GLIBS=("$GB/src/libggml.a" "$GB/src/libggml-cpu.a" "$GB/src/libggml-base.a")
OMP=""
grep -q "GGML_USE_OPENMP" "$GB/src/CMakeFiles/ggml-cpu.dir/flags.make" 2>/dev/null && OMP=-fopenmp
cc -O2 -std=c11 -Wall -Wextra -Werror -I"$GG/include" "$ROOT/tools/ggml_ssm_bench.c" "${GLIBS[@]}" \
    $OMP -lstdc++ -lm -lpthread -o "$GB/ggml_ssm_bench"

echo "== building ssmops in $SB"
cmake -S "$ROOT" -B "$SB" -DCMAKE_BUILD_TYPE=Release -DSSMOPS_CUDA=OFF > "$TMP/ssm-cfg.log"
cmake --build "$SB" -j2 --target ssmops_cli > "$TMP/ssm-build.log"
SSM=$SB/ssmops
[ -x "$SSM" ] || { echo "compare_ggml.sh: no $SSM after the build" >&2; exit 1; }

# name | ssmops op | --shape | --param | ggml_ssm_bench args | timed reps per measurement
NOSKIP=has_d=0,has_z=0,has_dt_bias=0
CASES=(
"mamba2_scan H=48 P=64 N=128 S=2048|mamba2_scan|B=1,S=2048,H=48,P=64,N=128,G=1|$NOSKIP|scan 48 64 128 2048|5"
"mamba2_scan H=48 P=64 N=128 S=512|mamba2_scan|B=1,S=512,H=48,P=64,N=128,G=1|$NOSKIP|scan 48 64 128 512|15"
"mamba2_scan H=128 P=80 N=128 S=2048|mamba2_scan|B=1,S=2048,H=128,P=80,N=128,G=1|$NOSKIP|scan 128 80 128 2048|3"
"decode H=48 P=64 N=128 B=1|mamba2_step|B=1,H=48,P=64,N=128,G=1|$NOSKIP|step 48 64 128 1|300"
"decode H=128 P=80 N=128 B=1|mamba2_step|B=1,H=128,P=80,N=128,G=1|$NOSKIP|step 128 80 128 1|200"
"decode H=48 P=64 N=128 B=16|mamba2_step|B=16,H=48,P=64,N=128,G=1|$NOSKIP|step 48 64 128 16|30"
"conv1d+bias+silu D=3328 S=2048 W=4|causal_conv1d|B=1,S=2048,D=3328,W=4|has_init=0,has_final=0|conv 3328 2048 4|20"
)

ssm_once() { # op shape param reps [binary] -> median seconds
    "${5:-$SSM}" bench "$1" --threads "$THREADS" --shape "$2" --param "$3" --reps "$4" --buffer-mib 8 \
        --json "$TMP/j.json" > /dev/null 2>&1
    sed -n 's/.*"median_s": \([^,]*\),.*/\1/p' "$TMP/j.json"
}
ggml_once() { # args reps -> median seconds
    # shellcheck disable=SC2086
    "$GB/ggml_ssm_bench" $1 "$THREADS" "$2" | sed -n 's/^median_s //p'
}

echo "== machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1); $(nproc) CPUs"
echo "   load before: $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds, $THREADS threads, f32"
for ((r = 1; r <= ROUNDS; ++r)); do
    for i in "${!CASES[@]}"; do
        IFS='|' read -r _ op shape param gargs reps <<< "${CASES[$i]}"
        if ((r % 2)); then
            s=$(ssm_once "$op" "$shape" "$param" "$reps"); g=$(ggml_once "$gargs" "$reps")
        else
            g=$(ggml_once "$gargs" "$reps"); s=$(ssm_once "$op" "$shape" "$param" "$reps")
        fi
        echo "$s" >> "$TMP/s$i"; echo "$g" >> "$TMP/g$i"
        if [ -n "${SSMOPS_BASE:-}" ]; then ssm_once "$op" "$shape" "$param" "$reps" "$SSMOPS_BASE" >> "$TMP/b$i"; fi
    done
    printf '   round %d/%d done\n' "$r" "$ROUNDS" >&2
done
echo "   load after:  $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g "$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : 0.5 * (v[NR / 2] + v[NR / 2 + 1])}'; }
fmt() { awk -v t="$1" 'BEGIN {if (t < 1e-3) printf "%.1f us", t * 1e6; else printf "%.2f ms", t * 1e3}'; }
echo
if [ -n "${SSMOPS_BASE:-}" ]; then
    echo "| workload | ssmops | ggml | ggml / ssmops | SSMOPS_BASE | ggml / SSMOPS_BASE |"
    echo "|---|---|---|---|---|---|"
else
    echo "| workload | ssmops | ggml | ggml / ssmops |"
    echo "|---|---|---|---|"
fi
for i in "${!CASES[@]}"; do
    IFS='|' read -r name _ <<< "${CASES[$i]}"
    s=$(median "$TMP/s$i"); g=$(median "$TMP/g$i")
    lo=$(paste "$TMP/s$i" "$TMP/g$i" | awk '{print $2 / $1}' | sort -g | head -1)
    hi=$(paste "$TMP/s$i" "$TMP/g$i" | awk '{print $2 / $1}' | sort -g | tail -1)
    printf '| %s | %s | %s | **%.2f** (rounds %.2f–%.2f) |' "$name" "$(fmt "$s")" "$(fmt "$g")" \
        "$(awk -v s="$s" -v g="$g" 'BEGIN {print g / s}')" "$lo" "$hi"
    if [ -n "${SSMOPS_BASE:-}" ]; then
        b=$(median "$TMP/b$i")
        printf ' %s | %.2f |' "$(fmt "$b")" "$(awk -v b="$b" -v g="$g" 'BEGIN {print g / b}')"
    fi
    echo
done

echo
echo "== test-backend-ops perf, CPU, SSM_SCAN and SSM_CONV (ggml's own timer, its own shapes):"
for o in SSM_SCAN SSM_CONV; do
    "$GB/bin/test-backend-ops" perf -o "$o" -b CPU 2>&1 | grep -E "^\s+$o" || true
done
