#!/bin/sh
# The argument tables of the manuals against the operator schema. Every operator `ssmops list`
# shows has one table in docs/ops/*.md, marked by a line <!-- ssmops list --schema OP ... -->
# right above it; read field by field (a row may list several fields: `a`, `b`), its field,
# dir, shape and dtype cells are exactly what `ssmops list --schema OP` prints, in the schema's
# order (the args struct's). The notes column is the manual's own. To write or fix a table:
# `ssmops list --schema OP`, then add the notes.
# usage: schema_docs.sh SSMOPS DOCS_OPS_DIR TMP_DIR
set -u
ssmops=$1
docs=$2
tmp=$3
mkdir -p "$tmp" || exit 1

# "OP<TAB>field<TAB>dir<TAB>shape<TAB>dtype", one line per field, from markdown tables
# (stdin) that follow a marker line (or, with $2 set, every table, all of operator $2).
fields() { # [op]
    awk -v fixed="${1:-}" '
        function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
        /^<!-- ssmops list --schema / { op = $5; sub(/:$/, "", op); intable = 0; next }
        /^\| field \| dir \| shape \| dtype \| notes \|/ { if (fixed != "") op = fixed; intable = (op != ""); next }
        intable && /^\|---/ { next }
        intable && /^\|/ {
            n = split($0, c, "|")
            names = c[2]; dir = trim(c[3]); shape = trim(c[4]); dtype = trim(c[5])
            while (match(names, /`[^`]*`/)) {
                printf "%s\t%s\t%s\t%s\t%s\n", op, substr(names, RSTART + 1, RLENGTH - 2), dir, shape, dtype
                names = substr(names, RSTART + RLENGTH)
            }
            next
        }
        { intable = 0; if (fixed == "") op = "" }'
}

ops=$("$ssmops" list | awk '/^operators:/ { on = 1; next } on && /^  / { print $1 }')
[ -n "$ops" ] || { echo "FAIL: ssmops list shows no operators"; exit 1; }
cat "$docs"/*.md | fields > "$tmp/docs.txt"
failed=0
for op in $ops; do
    "$ssmops" list --schema "$op" | fields "$op" > "$tmp/schema.txt"
    awk -F '\t' -v op="$op" '$1 == op' "$tmp/docs.txt" > "$tmp/doc_op.txt"
    tables=$(grep -c -- "^<!-- ssmops list --schema $op[: ]" "$docs"/*.md | awk -F: '{ n += $2 } END { print n + 0 }')
    if [ "$tables" != 1 ]; then
        echo "FAIL: $op has $tables marked argument tables in $docs (want 1)"
        failed=$((failed + 1))
    elif ! cmp -s "$tmp/schema.txt" "$tmp/doc_op.txt"; then
        echo "FAIL: $op: the manual's argument table differs from ssmops list --schema $op (< schema, > manual):"
        diff "$tmp/schema.txt" "$tmp/doc_op.txt" | sed 's/^/    /'
        failed=$((failed + 1))
    else
        echo "ok  $op ($(wc -l < "$tmp/schema.txt" | tr -d ' ') arguments)"
    fi
done
echo "$failed failure(s)"
[ "$failed" -eq 0 ]
