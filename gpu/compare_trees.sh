#!/bin/bash
# gpu/compare_trees.sh OUT NAME=SRC... — several source trees of ssmops side by side in one run on
# a GPU machine (developer tool): the first is the base, the others are candidates (kept branches,
# or scratch trees with a piece removed to time what it costs). SRC is a directory (a whole tree,
# exported with `git archive`) or, for a candidate, a patch file (*.patch, *.diff: `git diff` of
# the base, applied to the first tree and built incrementally in its build folder, one candidate
# at a time, which costs one file's compile instead of a whole build). For each: a Release build
# (sm_90a) of the CLI, the library and one test; the test with SSMOPS_TEST_HASH_LOG, its hashed
# outputs compared with the base's (a candidate meant to keep the arithmetic must show 0 differing);
# `ssmops bench` of one command, the trees interleaved, three rounds; Nsight per-launch kernel
# durations of that command (one call). For this tree against one base over every operator (all
# CUDA tests' hashes, the sanitizer sweep of every selection-table entry, the PERF.md bench rows):
# gpu/compare_builds.sh.
# Environment: SSMOPS_TREES_TEST (the test targets, space-separated, default test_cuda_mamba2_bwd),
# SSMOPS_TREES_BENCH (the bench arguments, default the Mamba-2 backward at the shape of record),
# SSMOPS_TREES_KERNELS (an extended regex of the kernels whose durations are printed, default all),
# SSMOPS_TREES_SANITIZE (candidate names, space-separated: compute-sanitizer memcheck and racecheck of
# each `ssmops check` in SSMOPS_TREES_CHECKS, `;`-separated, default two Mamba-2 backward checks),
# SSMOPS_TREES_TRAIN (tree names: gpu/bench_train.py side by side with upstream for each, arguments
# SSMOPS_TREES_TRAIN_ARGS, default the Mamba-2 number of record; needs .upstream/; runs before the
# sanitizers). Kernel durations are printed in µs whatever unit Nsight chose.
# Builds go to build-tree-NAME in this tree (for a patch: its binaries alone, copied there).
# Results: OUT/summary.txt (printed as it grows).
# Building away from the device: SSMOPS_TREES_PACK=FILE.tar.xz builds every tree as above (needs nvcc,
# no GPU), packs each tree's CLI, library (libssmops.so.0) and tests into FILE and stops; on the device,
# SSMOPS_TREES_PREBUILT=FILE.tar.xz unpacks it into the build folders and skips the builds (the same
# NAME=SRC arguments; the sources are not read then). A device call then spends no time building, and
# the archive of two trees is about the size of one tree's binaries (xz finds the shared bytes).
set -u
out=${1:?usage: gpu/compare_trees.sh OUT NAME=SRC...}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
command -v nvcc >/dev/null 2>&1 || PATH=/usr/local/cuda/bin:$PATH
src=$(cd "$(dirname "$0")/.." && pwd)
test=${SSMOPS_TREES_TEST:-test_cuda_mamba2_bwd}
read -r -a tests <<<"$test"
bench=${SSMOPS_TREES_BENCH:-"mamba2_scan_bwd --backend cuda --dtype bf16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param has_d=1,has_z=1,has_dt_bias=1,dt_softplus=1"}
kernels=${SSMOPS_TREES_KERNELS:-.}
sum=$out/summary.txt
: >"$sum"
say() { echo "$*" | tee -a "$sum"; }
is_patch() { case "$1" in *.patch | *.diff) return 0 ;; esac; return 1; }
# patch_in DIR PATCH [-R]: the patch applied (reversed with -R) in DIR, by git apply or patch; git
# is kept from finding a repository above DIR (inside one, git apply skips every path outside the
# current folder and still succeeds, so a tree under this checkout would get nothing applied)
patch_in() {
    if command -v git >/dev/null 2>&1; then
        (cd "$1" && GIT_CEILING_DIRECTORIES=$(dirname "$(pwd)") git apply ${3:+"$3"} "$2")
    else (cd "$1" && patch -p1 ${3:+"$3"} <"$2"); fi
}
names=() dirs=() patches=()
for t in "$@"; do
    names+=("${t%%=*}")
    if [ -n "${SSMOPS_TREES_PREBUILT:-}" ]; then
        dirs+=("${t%%=*}=-") # every tree's binaries come from the archive
    elif is_patch "${t#*=}"; then
        patches+=("${t%%=*}=$(cd "$(dirname "${t#*=}")" && pwd)/$(basename "${t#*=}")")
    else
        dirs+=("${t%%=*}=$(cd "${t#*=}" && pwd)")
    fi
done
is_patch "${1#*=}" && { echo "the first tree (the base) must be a directory" >&2; exit 2; }
base=${names[0]} basedir=${dirs[0]#*=}
jobs=$(($(nproc 2>/dev/null || echo 8) / ${#dirs[@]}))
[ "$jobs" -ge 1 ] || jobs=1
t0=$(date +%s)
prebuilt=${SSMOPS_TREES_PREBUILT:-} pack=${SSMOPS_TREES_PACK:-}
build() { # build NAME DIR JOBS (with a prebuilt archive: its binaries are already in place)
    [ -n "$prebuilt" ] && { [ -x "$src/build-tree-$1/ssmops" ]; return; }
    cmake -S "$2" -B "$src/build-tree-$1" -DSSMOPS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
        -DCMAKE_BUILD_TYPE=Release >>"$out/build-$1.log" 2>&1 &&
        cmake --build "$src/build-tree-$1" -j "$3" --target ssmops_cli ssmops "${tests[@]}" >>"$out/build-$1.log" 2>&1
}
if [ -n "$prebuilt" ]; then
    tar -xJf "$prebuilt" -C "$src" || { echo "cannot unpack $prebuilt" >&2; exit 2; }
fi
for t in "${dirs[@]}"; do
    (build "${t%%=*}" "${t#*=}" "$jobs"
    rc=$?
    [ $rc = 0 ] || : >"$out/failed-${t%%=*}"
    echo "build ${t%%=*} rc=$rc" >>"$sum") &
done
wait
cat "$sum"
# patches: applied to the base tree one at a time, built in its build folder, binaries copied out
if [ ${#patches[@]} -gt 0 ]; then
    keep=$src/build-tree-$base.keep
    rm -rf "$keep" && mkdir -p "$keep/tests"
    cp "$src/build-tree-$base/ssmops" "$src/build-tree-$base"/libssmops.so* "$keep/" 2>/dev/null
    for t in "${tests[@]}"; do cp "$src/build-tree-$base/tests/$t" "$keep/tests/"; done
    for t in "${patches[@]}"; do
        name=${t%%=*} p=${t#*=} b=$src/build-tree-$name
        if patch_in "$basedir" "$p" >"$out/build-$name.log" 2>&1; then
            build "$base" "$basedir" "$(nproc 2>/dev/null || echo 8)" >>"$out/build-$name.log" 2>&1
            rc=$?
            rm -rf "$b"
            if [ $rc = 0 ]; then # a failed build leaves no binaries: the candidate is skipped below
                mkdir -p "$b/tests"
                cp "$src/build-tree-$base/ssmops" "$src/build-tree-$base"/libssmops.so* "$b/" 2>/dev/null
                for t in "${tests[@]}"; do cp "$src/build-tree-$base/tests/$t" "$b/tests/"; done
            else
                : >"$out/failed-$name"
            fi
            patch_in "$basedir" "$p" -R >>"$out/build-$name.log" 2>&1 || rc=99
            say "build $name (patch) rc=$rc"
            [ $rc = 99 ] && { say "the patch of $name did not come off the base tree cleanly: stopping"; exit 1; }
        else
            say "build $name (patch) did not apply: $(tail -1 "$out/build-$name.log")"
            : >"$out/failed-$name"
        fi
    done
    # the base's own binaries back in its build folder (its sources are as they were)
    cp "$keep/ssmops" "$keep"/libssmops.so* "$src/build-tree-$base/" 2>/dev/null
    for t in "${tests[@]}"; do cp "$keep/tests/$t" "$src/build-tree-$base/tests/"; done
fi
say "built in $(($(date +%s) - t0)) s"
if [ -n "$pack" ]; then # the binaries only: the library once, by its soname (the CLI links it statically)
    files=()
    for name in "${names[@]}"; do
        [ -e "$out/failed-$name" ] && continue
        d=build-tree-$name
        files+=("$d/ssmops" "$d/libssmops.so.0")
        for t in "${tests[@]}"; do files+=("$d/tests/$t"); done
    done
    # one xz stream whose window spans every tree: the trees' binaries share most of their bytes
    tar -c -C "$src" --dereference "${files[@]}" | xz -T1 --lzma2=preset=6,dict=256MiB >"$pack" &&
        say "packed ${#files[@]} files into $pack ($(du -h "$pack" | cut -f1))"
    exit $?
fi
# the trees that built; the others are named once and left out of every step below
built=()
for name in "${names[@]}"; do
    if [ -e "$out/failed-$name" ]; then say "$name: no build, left out"; else built+=("$name"); fi
done
[ "${built[0]:-}" = "$base" ] || { say "the base did not build: stopping"; exit 1; }
names=("${built[@]}")
for name in "${names[@]}"; do
    # the test links libssmops.so: a patch candidate's binary carries the base's build path, so the
    # tree's own copy of the library is named first (and the one the loader picks is recorded)
    (cd "$src/build-tree-$name" && export LD_LIBRARY_PATH="$PWD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" &&
        for t in "${tests[@]}"; do
            SSMOPS_TEST_HASH_LOG="$out/hash-$name.txt" ./tests/"$t" >"$out/test-$name-$t.log" 2>&1
            rc=$?
            echo "$name $t rc=$rc $(tail -1 "$out/test-$name-$t.log")" \
                "[$(ldd ./tests/"$t" | grep -o 'libssmops[^ ]* => [^ ]*')]" >>"$sum"
        done) &
done
wait
grep -E " ($(echo "${tests[@]}" | tr ' ' '|')) rc=" "$sum"
for name in "${names[@]}"; do sort "$out/hash-$name.txt" >"$out/hash-$name.sorted" 2>/dev/null; done
for name in "${names[@]:1}"; do
    say "$name: $(wc -l <"$out/hash-$name.sorted") hashed outputs, $(diff "$out/hash-$base.sorted" "$out/hash-$name.sorted" |
        grep -c '^[<>]') lines differing from $base"
done
# shellcheck disable=SC2086
for _ in 1 2 3; do
    for name in "${names[@]}"; do
        "$src/build-tree-$name/ssmops" bench $bench --json "$out/.bench.json" >/dev/null 2>&1 &&
            echo "$name $(sed -n 's/.*"median_s": \([^,]*\),.*/\1/p' "$out/.bench.json")" >>"$out/bench.txt"
    done
done
for name in "${names[@]}"; do
    say "bench $name (ms): $(awk -v n="$name" '$1 == n {printf " %.4f", $2 * 1000}' "$out/bench.txt")"
done
for name in "${names[@]}"; do
    # shellcheck disable=SC2086
    timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum "$src/build-tree-$name/ssmops" bench $bench \
        --reps 1 >"$out/ncu-$name.log" 2>&1
    say "kernels $name (us): $(awk '/\(.*\) \(/ {k = $1; if (k == "void") k = $2; sub(/\(.*/, "", k); sub(/.*::/, "", k)}
        /gpu__time_duration/ {v = $NF; gsub(",", "", v); u = $(NF - 1)
            if (u == "ms" || u == "msecond") v *= 1000
            else if (u == "ns" || u == "nsecond") v /= 1000
            else if (u == "s" || u == "second") v *= 1e6
            print k, v}' "$out/ncu-$name.log" | grep -E "$kernels" | tr '\n' ';')"
done
# the side by side first: it is the number of record, and the sanitizers can take the rest of a call
train=${SSMOPS_TREES_TRAIN_ARGS:-"--only mamba2 --rounds 3 --kernels --memory"}
for name in ${SSMOPS_TREES_TRAIN:-}; do
    [ -e "$out/failed-$name" ] && continue
    # shellcheck disable=SC2086
    (cd "$src" && PYTHONPATH=python:.upstream SSMOPS_LIBRARY="$src/build-tree-$name/libssmops.so.0" \
        timeout 400 python3 gpu/bench_train.py $train) >"$out/train-$name.log" 2>&1
    say "bench_train $name rc=$? ($train):"
    grep -E 'median|speedup|peak|rror' "$out/train-$name.log" | tee -a "$sum"
done
checks=${SSMOPS_TREES_CHECKS:-"mamba2_scan_bwd --backend cuda --dtype bf16 --out-dtype f32 --shape B=1,S=333,H=2,P=72,N=40,G=1,chunk=64 --param nseq=2,has_d=1,has_z=1,has_init=1,has_dfinal=1;mamba2_scan_bwd --backend cuda --dtype bf16 --out-dtype f32 --shape B=2,S=200,H=4,P=64,N=128,G=2,chunk=64 --param has_d=1,has_z=1,has_init=1,has_dfinal=1"}
for name in ${SSMOPS_TREES_SANITIZE:-}; do
    [ -e "$out/failed-$name" ] && continue
    IFS=';' read -r -a cks <<<"$checks"
    for tool in memcheck racecheck; do
        for ck in "${cks[@]}"; do
            # shellcheck disable=SC2086
            timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$src/build-tree-$name/ssmops" check $ck \
                >"$out/san.log" 2>&1
            say "sanitize $name $tool rc=$? [$ck] $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san.log" | tail -1)"
        done
    done
done
say "done in $(($(date +%s) - t0)) s"
