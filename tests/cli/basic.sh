#!/bin/sh
# The ssmops CLI's plumbing: list, help, version, and usage errors (exit 2 + a message on
# stderr), run's input errors (exit 1), compare's verdicts.
# usage: basic.sh SSMOPS TMP_DIR
. "$(dirname "$0")/common.sh"

# expect STATUS PATTERN ARGS...: exit status STATUS and PATTERN (grep -E) in stdout+stderr
expect() {
    want=$1
    pattern=$2
    shift 2
    "$ssmops" "$@" > "$tmp/out.txt" 2>&1
    got=$?
    if [ "$got" -ne "$want" ]; then
        fail "ssmops $*: exit $got, expected $want"
        sed 's/^/    /' "$tmp/out.txt"
    elif ! grep -Eq -- "$pattern" "$tmp/out.txt"; then
        fail "ssmops $*: output lacks /$pattern/"
        sed 's/^/    /' "$tmp/out.txt"
    fi
}

# list names every operator, the backends and the dtypes
for op in mamba2_chunk_cumsum mamba2_chunk_state mamba2_state_passing mamba2_bmm mamba2_chunk_scan mamba2_scan \
    mamba2_scan_bwd mamba2_step causal_conv1d causal_conv1d_bwd causal_conv1d_update rmsnorm_gated \
    rmsnorm_gated_bwd mamba3_angle_cumsum mamba3_angle_cumsum_bwd mamba3_siso_fwd mamba3_siso mamba3_siso_bwd \
    mamba3_siso_step mamba3_mimo_bwd_fwd mamba3_mimo mamba3_mimo_bwd mamba3_mimo_step; do
    expect 0 "^  $op " list
    expect 0 "^$op: " help "$op"
done
expect 0 "^  ref " list
# the schema as the manual's table (the manuals are checked against it by schema_docs.sh)
expect 0 '^\| `final_states` \| out, optional \| \(batch, H, P, N\), or \(nseq, H, P, N\)' list --schema mamba2_scan
expect 0 '^\| `dd` \| out, optional, needs `d` \|' list --schema mamba3_siso_bwd
expect 0 '^### `ssm_mamba3_mimo_step`' list --schema all
expect 2 "unknown operator 'bogus'" list --schema bogus
expect 2 "list takes no arguments" list extra
# the cuda line agrees with the device: "available", naming the decode step among its operators,
# exactly when a CUDA check runs; "unavailable" exactly when --backend cuda is refused
"$ssmops" list > "$tmp/list.txt" 2>&1
if grep -Eq "^  cuda +available \([1-9][0-9]* device\(s\);.* mamba2_step(,|\))" "$tmp/list.txt"; then
    expect 0 "final_state +.* PASS" check mamba2_step --backend cuda --shape B=3,H=2,P=8,N=16,G=1 --param slots=5
    expect 0 "out +.* PASS" check mamba2_scan --backend cuda --shape S=8,H=2,P=4,N=4,G=1,chunk=8
elif grep -Eq "^  cuda +unavailable \(" "$tmp/list.txt"; then
    expect 1 "SSM_STATUS_UNSUPPORTED" check mamba2_scan --backend cuda --shape S=8,H=2,P=4,N=4,G=1,chunk=8
    expect 1 "SSM_STATUS_UNSUPPORTED" check mamba2_step --backend cuda --shape B=2,H=2,P=4,N=4,G=1
else
    fail "list: the cuda line says neither available (with mamba2_step) nor unavailable"
    sed 's/^/    /' "$tmp/list.txt"
fi
# an operator without a CUDA path is refused either way
expect 1 "SSM_STATUS_UNSUPPORTED" check mamba2_chunk_cumsum --backend cuda
expect 0 "^dtypes: f32 f16 bf16" list
# the selection tables: a header always; entries only where the build has the CUDA backend
expect 2 "gives B twice" check mamba2_scan --shape B=1,B=2
expect 2 "gives has_d twice" check mamba2_scan --param has_d=1,has_d=0
expect 0 "^# operator +variant" list --variants
# SSMOPS_VARIANT reaches the CLI's CUDA and AUTO contexts only, and is checked there
export SSMOPS_VARIANT=mamba2_scan
expect 1 "is not op=variant" bench mamba2_step --reps 1
export SSMOPS_VARIANT=no_such_op=x
expect 1 "no operator is named" bench mamba2_step --reps 1
export SSMOPS_VARIANT=mamba2_scan=bogus
expect 0 "PASS" check mamba2_step --backend cpu
unset SSMOPS_VARIANT
expect 0 "^# operator +variant" list --variants mamba2_scan
expect 2 "unknown operator" list --variants no_such_op
expect 1 "variant 'no_such_variant' of mamba2_step" bench mamba2_step --variant no_such_variant --reps 1
expect 0 "^ssmops [0-9]+\.[0-9]+\.[0-9]+$" --version
expect 0 "ssmops bench --ceilings" --help
expect 0 "usage:" help
expect 0 "has_dt_bias +default 1" help mamba2_scan

# usage errors: exit 2 and a message naming the problem
expect 2 "usage" 
expect 2 "unknown command 'frobnicate'" frobnicate
expect 2 "unknown option '--bogus'" check mamba2_scan --bogus
expect 2 "unknown operator 'mamba2_nope'" check mamba2_nope
expect 2 "--dtype expects f32, f16 or bf16" check mamba2_scan --dtype f8
expect 2 "--backend expects" check mamba2_scan --backend gpu
expect 2 "has no shape key 'Q'" check mamba2_scan --shape Q=64
expect 2 "has no param key 'has_w'" check mamba2_scan --param has_w=1
expect 2 "S=x: expected an integer" check mamba2_scan --shape S=x
expect 2 "dt_limit=1: expected lo:hi" check mamba2_scan --param dt_limit=1
expect 2 "layout=nchw: expected one of std\|cann" check mamba2_chunk_state --param layout=nchw
expect 2 "has_d=3 must be 0, 1" check mamba2_scan --param has_d=3
expect 2 "shape B=0 must be >= 1" check mamba2_scan --shape B=0
expect 2 "needs B=1 and seq_idx=0" check mamba2_scan --param nseq=3
expect 2 "--threads expects an integer" check mamba2_scan --threads 0
expect 2 "check does not take --in" check mamba2_scan --in x
expect 2 "run needs --in DIR and --out DIR" run mamba2_scan --in "$tmp"
expect 2 "bench needs an operator or --ceilings" bench
expect 2 "unexpected argument 'extra'" check mamba2_scan extra
expect 2 "slots=2 must be 0 .* or in \[B=4" check mamba2_step --shape B=4 --param slots=2
expect 2 "in_place=2 must be 0 or 1" check mamba3_siso_step --param in_place=2
expect 2 "seq_idx=3 needs has_init=0" check causal_conv1d --param seq_idx=3
expect 2 "group_size=7 must be 0 or divide D=256" check rmsnorm_gated --param group_size=7
expect 2 "nseq=3 \(cu_seqlens\) needs B=1" check mamba3_siso --param nseq=3
expect 2 "has no shape key 'S'" check mamba3_siso_step --shape S=4
expect 2 "has_dfinal=5 must be 0 or 1" check mamba2_scan_bwd --param has_dfinal=5
expect 2 "--ref-mode expects exact or bf16, got 'fp8'" check mamba3_mimo_bwd_fwd --ref-mode fp8
expect 2 "--ref-mode: mamba2_scan has one rounding model" check mamba2_scan --ref-mode bf16
expect 2 "--ref-mode: mamba3_mimo has one rounding model" run mamba3_mimo --ref-mode exact --in "$tmp" --out "$tmp/o"
expect 2 "bench does not take --ref-mode" bench mamba3_mimo_bwd_fwd --ref-mode bf16
expect 2 "nseq=2 \(cu_seqlens\) needs B=1" check mamba3_mimo --param nseq=2
expect 2 "has no shape key 'S'" check mamba3_mimo_step --shape S=4
expect 2 "fused=2 must be 0 or 1" check mamba3_mimo --param fused=2
expect 0 "ref_mode=exact" check mamba3_mimo_bwd_fwd --ref-mode exact --shape S=8,N=16,P=8,R=2,chunk=4
expect 0 "ref_mode=bf16: .*bar rel_rms < 1e-3" check mamba3_mimo_bwd_fwd --ref-mode bf16 --dtype bf16 \
    --shape S=8,N=16,P=8,R=2,chunk=4

# library failures: exit 1 with the status and the library's message
expect 1 "SSM_STATUS_[A-Z_]+: .*mamba2" check mamba2_scan --shape H=6,G=4
expect 1 "SSM_STATUS_[A-Z_]+: mamba3_siso: .*K" check mamba3_siso --shape K=7,A=2
expect 1 "SSM_STATUS_[A-Z_]+: mamba2_step: .*multiple" check mamba2_step --shape H=6,G=4
expect 1 "SSM_STATUS_[A-Z_]+: causal_conv1d_update: conv_state.* must be at least" check causal_conv1d_update --shape W=4,L=2
# Mamba-3 MIMO rules (spec §6): C·R > 128, divisor 3, odd N, H % G, z without mimo_z is
# impossible here (has_z draws both)
expect 1 "SSM_STATUS_INVALID_ARGUMENT: mamba3_mimo_bwd_fwd: .*C·R must be at most 128" check mamba3_mimo_bwd_fwd \
    --shape R=8,chunk=32
expect 1 "SSM_STATUS_INVALID_ARGUMENT: mamba3_mimo: .*rotary_dim_divisor=3" check mamba3_mimo --param div=3 --shape N=12
expect 1 "SSM_STATUS_INVALID_ARGUMENT: mamba3_mimo_step: .*\(N\) must be even" check mamba3_mimo_step --shape N=7
expect 1 "SSM_STATUS_INVALID_SHAPE: mamba3_mimo_bwd: .*not a multiple of" check mamba3_mimo_bwd --shape H=3,G=2

# run: a missing required input is an error naming the file
mkdir -p "$tmp/empty"
expect 1 "required input .*/x.npy is missing" run mamba2_scan --in "$tmp/empty" --out "$tmp/o"
expect 1 "required input .*/q.npy is missing" run mamba3_siso_step --in "$tmp/empty" --out "$tmp/o"

# compare: a file against itself passes; a bf16 result passes the bf16 bar but not 1e-9
if [ -d "${SSMOPS_CLI_DATA:-}" ]; then
    a="$SSMOPS_CLI_DATA/mamba2_scan/varlen/out.npy"
    c="$SSMOPS_CLI_DATA/mamba2_scan/varlen/final_states.npy"
    expect 0 "rel_rms 0.000e\+00 .* PASS" compare "$a" "$a" --tol 1e-12
    expect 1 "shapes differ" compare "$a" "$c" --tol 1e-3
    expect 2 "compare needs --tol" compare "$a" "$a"
    # a bf16 run of the case: within the bf16 bars, far outside 1e-9
    "$ssmops" run mamba2_scan --in "$SSMOPS_CLI_DATA/mamba2_scan/varlen" --out "$tmp/v" --backend cpu --dtype bf16 \
        --param chunk=16,dt_softplus=1 > /dev/null 2>&1 || fail "run bf16 failed"
    expect 1 "FAIL" compare "$tmp/v/out.npy" "$a" --tol 1e-9
    expect 0 "PASS" compare "$tmp/v/out.npy" "$a" --dtype bf16
    # a decode step run on the CPU updates the pool in place and writes it as final_state:
    # slots no row uses (and the padding row's) keep their values
    pool="$SSMOPS_CLI_DATA/mamba2_step/per_head_pool"
    "$ssmops" run mamba2_step --in "$pool" --out "$tmp/step" --backend cpu --param dt_softplus=1 > /dev/null 2>&1 ||
        fail "run mamba2_step failed"
    expect 0 "PASS" compare "$tmp/step/final_state.npy" "$pool/final_state.npy" --dtype f32
    expect 1 "FAIL" compare "$tmp/step/final_state.npy" "$pool/state.npy" --dtype f32
    # mamba3_mimo_bwd_fwd's rounding models differ measurably: the default (fp32) CPU run misses
    # the seed's 1e-3 bar against the bf16-faithful outputs, the --ref-mode bf16 run meets it
    mimo="$SSMOPS_CLI_DATA/mamba3_mimo_bwd_fwd/tail_s35_h2_seed0_bf16"
    "$ssmops" run mamba3_mimo_bwd_fwd --in "$mimo" --out "$tmp/mx" --backend cpu --dtype bf16 > /dev/null 2>&1 ||
        fail "run mamba3_mimo_bwd_fwd failed"
    "$ssmops" run mamba3_mimo_bwd_fwd --in "$mimo" --out "$tmp/mb" --backend cpu --dtype bf16 --ref-mode bf16 \
        > /dev/null 2>&1 || fail "run mamba3_mimo_bwd_fwd --ref-mode bf16 failed"
    expect 1 "FAIL" compare "$tmp/mx/dz.npy" "$mimo/dz__bf16ref.npy" --tol 1e-3
    expect 0 "PASS" compare "$tmp/mb/dz.npy" "$mimo/dz__bf16ref.npy" --tol 1e-3
    expect 0 "PASS" compare "$tmp/mx/dz.npy" "$mimo/dz.npy" --dtype bf16
else
    fail "SSMOPS_CLI_DATA is not a directory"
fi

[ "$failed" -eq 0 ] && echo "cli basic: all passed"
[ "$failed" -eq 0 ]
