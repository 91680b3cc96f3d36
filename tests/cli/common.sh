# Sourced by the CLI test scripts that take SSMOPS TMP_DIR (basic.sh, bench.sh): sets ssmops
# and tmp, starts TMP_DIR empty, and counts failures: `fail MESSAGE` prints "FAIL: MESSAGE"
# and adds one to $failed.
set -u
ssmops=$1
tmp=$2
failed=0
rm -rf "$tmp"
mkdir -p "$tmp"

fail() {
    echo "FAIL: $*"
    failed=$((failed + 1))
}
