#!/bin/sh
# gpu/compare_builds.sh PHASE BASE_SRC OUT — compares this tree's CUDA backend with another
# source tree (BASE_SRC, e.g. an exported earlier commit) on a GPU machine, one phase a call:
#   build      configure and build both trees (Release, sm_90a), side by side with all cores
#   hashes     the CUDA tests of both builds with SSMOPS_TEST_HASH_LOG: every checked output of
#              the default kernel choice hashed per case; prints the cases whose bytes differ
#              (same label, other hash) and the labels present in only one build; then the
#              whole test suite of this tree
#   sanitizer  compute-sanitizer memcheck and racecheck on every entry of every operator's
#              selection table (`ssmops list --variants`), small shapes, this tree
#   bench      `ssmops bench --backend cuda` of both builds interleaved (base, new, base, new,
#              base, new) at the shapes of docs/PERF.md; prints new/base time ratios.
#              SSMOPS_COMPARE_ONLY (an extended regex) keeps the rows whose label matches
# Build directories: build-gpu-base and build-gpu-new in this tree (kept while the machine is).
set -u
phase=${1:?usage: gpu/compare_builds.sh build|hashes|sanitizer|bench BASE_SRC OUT}
base_src=$(cd "${2:?BASE_SRC}" && pwd)
out=${3:?OUT}
mkdir -p "$out"
src=$(cd "$(dirname "$0")/.." && pwd)
bb=$src/build-gpu-base
bn=$src/build-gpu-new
jobs=$(nproc 2>/dev/null || echo 8)
command -v nvcc >/dev/null 2>&1 || PATH=/usr/local/cuda/bin:$PATH

build_one() { # src build log
    cmake -S "$1" -B "$2" -DSSMOPS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release >"$3" 2>&1 &&
        cmake --build "$2" -j "$((jobs / 2))" >>"$3" 2>&1
}

case $phase in
build)
    t0=$(date +%s)
    build_one "$base_src" "$bb" "$out/build-base.log" &
    pb=$!
    build_one "$src" "$bn" "$out/build-new.log"
    rn=$?
    wait $pb
    rb=$?
    echo "build: base rc=$rb new rc=$rn in $(($(date +%s) - t0)) s"
    [ $rb = 0 ] || grep -E "error" "$out/build-base.log" | head -20
    [ $rn = 0 ] || grep -E "error" "$out/build-new.log" | head -20
    [ $rb = 0 ] && [ $rn = 0 ]
    ;;
hashes)
    rm -f "$out/hash-base.txt" "$out/hash-new.txt"
    t0=$(date +%s)
    (cd "$bb" && SSMOPS_TEST_HASH_LOG="$out/hash-base.txt" ctest -L cuda -j 4 >"$out/ctest-cuda-base.log" 2>&1)
    echo "base cuda tests: rc=$? $(grep 'tests passed' "$out/ctest-cuda-base.log")"
    (cd "$bn" && SSMOPS_TEST_HASH_LOG="$out/hash-new.txt" ctest -L cuda -j 4 --output-on-failure \
        >"$out/ctest-cuda-new.log" 2>&1)
    echo "new cuda tests: rc=$? $(grep 'tests passed' "$out/ctest-cuda-new.log")"
    grep -E "Failed|FAILED|\*\*\*" "$out/ctest-cuda-new.log" | head -20
    # the decode step's default pass was labelled by its knob value ("v3 ...") before the
    # selection tables, "auto ..." after
    sed -i 's/^v3 \(case\|serving\|plan\)/auto \1/' "$out/hash-base.txt"
    sort "$out/hash-base.txt" >"$out/hb.sorted"
    sort "$out/hash-new.txt" >"$out/hn.sorted"
    # label -> hash sets: a label whose hash set differs is a byte change
    awk '{h=$NF; $NF=""; print $0 "\t" h}' "$out/hb.sorted" | sort -u >"$out/hb.pairs"
    awk '{h=$NF; $NF=""; print $0 "\t" h}' "$out/hn.sorted" | sort -u >"$out/hn.pairs"
    cut -f1 "$out/hb.pairs" | sort -u >"$out/hb.labels"
    cut -f1 "$out/hn.pairs" | sort -u >"$out/hn.labels"
    comm -12 "$out/hb.labels" "$out/hn.labels" >"$out/common.labels"
    echo "hashes: base $(wc -l <"$out/hash-base.txt") entries ($(wc -l <"$out/hb.labels") labels), new $(wc -l <"$out/hash-new.txt") entries ($(wc -l <"$out/hn.labels") labels), $(wc -l <"$out/common.labels") labels in both"
    grep -F -f "$out/common.labels" "$out/hb.pairs" >"$out/hb.common"
    grep -F -f "$out/common.labels" "$out/hn.pairs" >"$out/hn.common"
    ndiff=$(comm -3 "$out/hb.common" "$out/hn.common" | cut -f1 | sed 's/^\t//' | sort -u | wc -l)
    echo "hashes: $ndiff labels in both builds with different bytes"
    comm -3 "$out/hb.common" "$out/hn.common" | head -20
    echo "hashes: labels only in base: $(comm -23 "$out/hb.labels" "$out/hn.labels" | wc -l); only in new: $(comm -13 "$out/hb.labels" "$out/hn.labels" | wc -l)"
    comm -23 "$out/hb.labels" "$out/hn.labels" | head -10 | sed 's/^/only in base: /'
    (cd "$bn" && ctest -LE cuda -j "$jobs" --output-on-failure >"$out/ctest-rest-new.log" 2>&1)
    echo "new non-cuda tests: rc=$? $(grep 'tests passed' "$out/ctest-rest-new.log")"
    echo "hashes phase: $(($(date +%s) - t0)) s"
    ;;
sanitizer)
    # one run per (tool, entry): bf16 first, f32 when the entry does not cover bf16 (its forced
    # call is UNSUPPORTED); runs in parallel, the GPU has room for several small ones
    cli=$bn/ssmops
    t0=$(date +%s)
    "$cli" list --variants | awk 'NF >= 2 && $1 ~ /^mamba/ && $1 != "mamba3_siso_fwd" {print $1, $2}' \
        >"$out/variants.txt"
    cat >"$out/san_one.sh" <<'ONE'
#!/bin/sh
# san_one.sh CLI OUTDIR TOOL OP VARIANT
cli=$1 out=$2 tool=$3 op=$4 var=$5
case $op in
    mamba2_scan) extra="--shape B=1,S=300,H=2,P=72,N=128,G=1,chunk=64 --param nseq=3,has_d=1,has_z=1,has_init=1,has_final=1" ;;
    mamba2_chunk_state) extra="--shape B=1,S=88,H=4,P=16,N=32,G=2,chunk=32" ;;
    mamba2_step) extra="--shape B=40,H=16,P=64,N=128,G=2 --param slots=45" ;;
    mamba3_siso) extra="--shape B=1,S=700,H=3,Hq=1,K=128,V=72,A=32,chunk=64 --param has_d=1,has_z=1,has_states=1,has_final=1,nseq=3" ;;
    mamba3_siso_step) extra="--shape B=4,H=4,Hq=1,K=128,V=64,A=32" ;;
    mamba3_mimo_step) extra="--shape B=4,H=2,G=1,R=2,N=16,P=8" ;;
    mamba3_mimo*) extra="--shape B=1,S=40,H=2,G=1,R=2,N=16,P=8,chunk=8" ;;
    *) extra="" ;;
esac
log=$out/san_${tool}_${op}_${var}.log
for dt in bf16 f32; do
    # shellcheck disable=SC2086
    SSMOPS_VARIANT="$op=$var" compute-sanitizer --tool "$tool" --error-exitcode 9 "$cli" check "$op" --backend cuda \
        --dtype "$dt" --out-dtype "$dt" $extra >"$log" 2>&1
    rc=$?
    grep -q "UNSUPPORTED" "$log" || break
done
ran=$(grep -o "cuda variant [a-z0-9_]*" "$log" | head -1 | sed 's/cuda variant //')
echo "$tool $op $var dtype=$dt rc=$rc ran=${ran:-none}"
ONE
    while read -r op var; do
        for tool in memcheck racecheck; do echo "$tool $op $var"; done
    done <"$out/variants.txt" | xargs -P 6 -L 1 sh "$out/san_one.sh" "$cli" "$out" >"$out/sanitizer.txt" 2>&1
    sort "$out/sanitizer.txt"
    cat "$out"/san_*.log >"$out/sanitizer.log" 2>/dev/null
    rm -f "$out"/san_*.log
    echo "sanitizer: $(grep -c 'rc=0' "$out/sanitizer.txt") of $(wc -l <"$out/sanitizer.txt") runs clean; rc=9 is a sanitizer error, rc=1 the check's own failure ($(($(date +%s) - t0)) s)"
    ;;
bench)
    : >"$out/bench.log"
    scan=has_d=1,has_z=1,has_dt_bias=1,dt_softplus=1,has_init=0,has_final=0
    siso=has_d=1,has_z=1,has_states=0,has_final=0
    mimo=div=4,has_d=1,has_z=1,reduce_o=1
    med() { sed -n 's/.*"median_s": \([^,]*\),.*/\1/p' "$1"; }
    one() { # label, then bench arguments
        label=$1
        shift
        echo "$label" | grep -Eq "${SSMOPS_COMPARE_ONLY:-.}" || return 0
        tb="" tn=""
        for round in 1 2 3; do
            "$bb/ssmops" bench "$@" --backend cuda --json "$out/.b.json" >>"$out/bench.log" 2>&1 && tb="$tb $(med "$out/.b.json")"
            "$bn/ssmops" bench "$@" --backend cuda --json "$out/.n.json" >>"$out/bench.log" 2>&1 && tn="$tn $(med "$out/.n.json")"
        done
        mb=$(echo $tb | tr ' ' '\n' | sort -g | sed -n 2p)
        mn=$(echo $tn | tr ' ' '\n' | sort -g | sed -n 2p)
        if [ -z "$mb" ] || [ -z "$mn" ]; then
            printf '%-44s FAILED (bench.log)\n' "$label"
            return
        fi
        awk -v l="$label" -v b="$mb" -v n="$mn" \
            'BEGIN {printf "%-44s base %8.4f ms  new %8.4f ms  new/base %.3f\n", l, b * 1000, n * 1000, n / b}'
    }
    one "scan bf16 B1 S8192 H80 P64 N128" mamba2_scan --dtype bf16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan
    one "scan bf16 B4 S4096 H80 P64 N128" mamba2_scan --dtype bf16 --shape B=4,S=4096,H=80,P=64,N=128,G=1,chunk=256 --param $scan
    one "scan bf16 B8 S2048 H32 P64 N64" mamba2_scan --dtype bf16 --shape B=8,S=2048,H=32,P=64,N=64,G=1,chunk=256 --param $scan
    one "scan f32 B1 S8192 H80 P64 N128" mamba2_scan --dtype f32 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param $scan
    one "chunk_state f16 CANN B1 S1024 H128 G8" mamba2_chunk_state --dtype f16 --shape B=1,S=1024,H=128,P=64,N=128,G=8,chunk=256 --param layout=cann
    one "siso bf16 B1 S8192 H64 K128 V64" mamba3_siso --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso
    one "siso bf16 B4 S4096 H64 K128 V64" mamba3_siso --dtype bf16 --shape B=4,S=4096,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso
    one "scan_bwd bf16 B1 S8192 H80 P64 N128" mamba2_scan_bwd --dtype bf16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param has_d=1,has_z=1,has_dt_bias=1,dt_softplus=1,has_init=0,has_dfinal=0
    one "siso bf16 f32-angles B1 S8192 H64 K128 V64" mamba3_siso --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso,angles_f32=1
    one "siso_bwd bf16 f32-angles B1 S8192 H64 K128 V64" mamba3_siso_bwd --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1,has_states=0,has_dfinal=0,angles_f32=1
    one "siso_bwd bf16 B1 S8192 H64 K128 V64" mamba3_siso_bwd --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1,has_states=0,has_dfinal=0
    one "siso_fwd bf16 B1 S8192 H64 K128 V64" mamba3_siso_fwd --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param $siso
    one "mimo_bwd_fwd bf16 B1 S8192 H16 R4" mamba3_mimo_bwd_fwd --dtype bf16 --shape B=1,S=8192,H=16,G=1,R=4,N=64,P=64,chunk=16 --param $mimo
    one "mimo bf16 B1 S8192 H16 R4" mamba3_mimo --dtype bf16 --shape B=1,S=8192,H=16,G=1,R=4,N=64,P=64,chunk=16 --param $mimo
    one "mamba2_step f32 B128 H80 P64 N128 idx" mamba2_step --dtype f32 --shape B=128,H=80,P=64,N=128,G=1 --param slots=160
    one "siso_step f32 B128 H64 K128 V64" mamba3_siso_step --dtype f32 --shape B=128,H=64,Hq=1,K=128,V=64,A=32
    one "mimo_step f32 B128 H16 R4 N64 P64" mamba3_mimo_step --dtype f32 --shape B=128,H=16,G=1,R=4,N=64,P=64
    ;;
*) echo "unknown phase $phase"; exit 2 ;;
esac
