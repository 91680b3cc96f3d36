#!/bin/sh
# Round trip of the upstream test vectors through `ssmops run`:
#   for every tests/data/<op>/<case>/ (its operator must be one `ssmops list` knows), run
#   `ssmops run OP --in CASE --out TMP --backend B --dtype <case dtype> --param <case params>`
#   and compare each stored float64 output with `ssmops compare`:
#     --backend ref: rel_rms <= 1e-10 (the float64 reference against upstream's float64 oracle)
#     --backend cpu: the DESIGN bars of the case dtype.
#   Outputs named X__bf16ref (mamba3_mimo_bwd_fwd's bf16 cases: the seed's bf16-faithful
#   reference) are not what `run` writes by default: a second run with --ref-mode bf16 (ctx
#   ref_mode SSM_REF_UPSTREAM_BF16, both backends) must reproduce them, rel_rms < 1e-3.
# usage: run_vectors.sh SSMOPS DATA_DIR TMP_DIR ref|cpu
set -u
ssmops=$1
data=$2
tmp=$3
backend=$4

# The first "key": value of a JSON text (one line), as text without quotes.
json_string() { # json key
    printf '%s' "$1" | awk -v key="$2" '{
        if (match($0, "\"" key "\"[ \t]*:[ \t]*\"[^\"]*\"")) {
            s = substr($0, RSTART, RLENGTH); sub(/^[^:]*:[ \t]*"/, "", s); sub(/"$/, "", s); print s
        } }'
}
# "params": {"chunk": 32, "dt_limit": "0.0:0.08"} -> chunk=32,dt_limit=0.0:0.08
json_params() {
    printf '%s' "$1" | awk '{
        if (!match($0, /"params"[ \t]*:[ \t]*\{[^}]*\}/)) exit
        s = substr($0, RSTART, RLENGTH); sub(/^[^{]*\{/, "", s); sub(/\}$/, "", s)
        n = split(s, items, ","); out = ""
        for (i = 1; i <= n; i++) {
            item = items[i]; gsub(/[ \t"]/, "", item)
            if (item == "") continue
            sub(/:/, "=", item); sub(/=true$/, "=1", item); sub(/=false$/, "=0", item)
            out = out (out == "" ? "" : ",") item
        }
        print out }'
}
# "outputs": ["out", "final_states"] -> out final_states
json_outputs() {
    printf '%s' "$1" | awk '{
        if (!match($0, /"outputs"[ \t]*:[ \t]*\[[^]]*\]/)) exit
        s = substr($0, RSTART, RLENGTH); sub(/^[^[]*\[/, "", s); sub(/\]$/, "", s)
        gsub(/[ \t"]/, "", s); gsub(/,/, " ", s); print s }'
}

known_ops=$("$ssmops" list | awk '/^operators:/ { on = 1; next } on && /^  / { print $1 }')
[ -n "$known_ops" ] || { echo "FAIL: ssmops list shows no operators"; exit 1; }

cases=0
failed=0
# every Mamba-2 and Mamba-3 operator with test vectors has a CLI entry (a missing one
# would be skipped silently); vectors of families without entries yet are reported
for opdir in "$data"/*/; do
    set -- "$opdir"*/case.json
    [ -f "$1" ] || continue
    op=$(basename "$opdir")
    echo "$known_ops" | grep -qx "$op" && continue
    case "$op" in
        mamba2_* | mamba3_*)
            echo "FAIL: test vectors for $op but ssmops list has no such operator"
            failed=$((failed + 1))
            ;;
        *) echo "note: test vectors for $op skipped (no CLI operator yet)" ;;
    esac
done
for casedir in "$data"/*/*/; do
    [ -f "$casedir/case.json" ] || continue
    casedir=${casedir%/}
    op=$(basename "$(dirname "$casedir")")
    name=$(basename "$casedir")
    echo "$known_ops" | grep -qx "$op" || continue
    json=$(tr -d '\n\r' < "$casedir/case.json")
    dtype=$(json_string "$json" dtype)
    params=$(json_params "$json")
    outputs=$(json_outputs "$json")
    out="$tmp/$backend/$op/$name"
    rm -rf "$out"
    cases=$((cases + 1))
    set -- run "$op" --in "$casedir" --out "$out" --backend "$backend" --dtype "${dtype:-f32}"
    [ -n "$params" ] && set -- "$@" --param "$params"
    echo "== $op/$name: ssmops $*"
    if ! "$ssmops" "$@"; then
        echo "FAIL: $op/$name: ssmops run failed"
        failed=$((failed + 1))
        continue
    fi
    if [ "$backend" = ref ]; then
        set -- --tol 1e-10
    else
        set -- --dtype "${dtype:-f32}"
    fi
    bf16refs=
    for o in $outputs; do
        case "$o" in
            *__bf16ref)
                bf16refs="$bf16refs ${o%__bf16ref}"
                continue
                ;;
        esac
        if [ ! -f "$out/$o.npy" ]; then
            echo "FAIL: $op/$name: output $o.npy was not written"
            failed=$((failed + 1))
        elif ! "$ssmops" compare "$out/$o.npy" "$casedir/$o.npy" "$@"; then
            echo "FAIL: $op/$name: $o differs from the stored output"
            failed=$((failed + 1))
        fi
    done
    [ -n "$bf16refs" ] || continue
    set -- run "$op" --in "$casedir" --out "$out/bf16mode" --backend "$backend" --dtype "${dtype:-f32}" \
        --ref-mode bf16
    [ -n "$params" ] && set -- "$@" --param "$params"
    echo "== $op/$name (upstream bf16 rounding model): ssmops $*"
    if ! "$ssmops" "$@"; then
        echo "FAIL: $op/$name: ssmops run --ref-mode bf16 failed"
        failed=$((failed + 1))
        continue
    fi
    for o in $bf16refs; do
        if [ ! -f "$out/bf16mode/$o.npy" ]; then
            echo "FAIL: $op/$name: output $o.npy was not written with --ref-mode bf16"
            failed=$((failed + 1))
        elif ! "$ssmops" compare "$out/bf16mode/$o.npy" "$casedir/${o}__bf16ref.npy" --tol 1e-3; then
            echo "FAIL: $op/$name: $o (--ref-mode bf16) differs from ${o}__bf16ref"
            failed=$((failed + 1))
        fi
    done
done
echo "$cases case(s), $failed failure(s)"
[ "$cases" -gt 0 ] || { echo "FAIL: no test vectors found under $data"; exit 1; }
[ "$failed" -eq 0 ]
