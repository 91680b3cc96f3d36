"""tools/compare_upstream.py — ssmops against upstream state-spaces/mamba's Triton kernels, side
by side in one process, on the same torch tensors, with the same timer.

The timer is triton.testing.do_bench: it writes a buffer larger than the L2 before every
repetition and returns the median; the two implementations alternate within every round and
the order flips each round. Each row prints both medians and the ratio upstream / ours (> 1:
ssmops faster). Rows are the shapes of record of the GPU speed issue (bf16 inputs, fp32 states).

Upstream's code is read from an ignored folder that is never committed: `.upstream/` at the
repository root holding `mamba_ssm/ops`, `mamba_ssm/utils`, `mamba_ssm/modules/ssd_minimal.py`
and an empty `mamba_ssm/__init__.py` (from state-spaces/mamba; shared GPU.md says how to fill
it). Without it the script says so and exits 0.

    PYTHONPATH=python:.upstream SSMOPS_LIBRARY=build/libssmops.so \
        python3 tools/compare_upstream.py [--rounds 3] [--only scan,siso,step,siso_step,chunk_state] [--json OUT]

Triton autotunes every kernel on its first call at a shape (minutes for the Mamba-3 kernels on a
cold cache); the first call of each row is outside the timing.
"""
import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F

import ssmops
from ssmops import compat

DEV = "cuda"
BF16 = torch.bfloat16


def upstream():
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update
        from mamba_ssm.ops.triton.ssd_chunk_state import _chunk_state_fwd
        from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined
        from mamba_ssm.ops.triton.mamba3.mamba3_siso_step import mamba3_siso_step
    except Exception as e:  # noqa: BLE001 — any import failure means "not available"
        return None, str(e)
    return dict(scan=mamba_chunk_scan_combined, step=selective_state_update, chunk_state=_chunk_state_fwd,
                siso=mamba3_siso_combined, siso_step=mamba3_siso_step), None


# ---- cases: each returns (label, ours(), theirs()) over the same tensors -------------------------

def scan_case(up, B, S, H, P, N, G, L=256):
    torch.manual_seed(0)
    x = torch.randn(B, S, H, P, device=DEV, dtype=BF16)
    dt = torch.randn(B, S, H, device=DEV, dtype=BF16) * 0.5 - 2.0
    A = -torch.rand(H, device=DEV) * 4 - 0.5
    Bm = torch.randn(B, S, G, N, device=DEV, dtype=BF16)
    Cm = torch.randn(B, S, G, N, device=DEV, dtype=BF16)
    D = torch.randn(H, device=DEV)
    z = torch.randn(B, S, H, P, device=DEV, dtype=BF16)
    bias = torch.randn(H, device=DEV) * 0.1
    kw = dict(D=D, z=z, dt_bias=bias, dt_softplus=True)
    label = "mamba2_scan B=%d S=%d H=%d P=%d N=%d G=%d" % (B, S, H, P, N, G)
    return (label, lambda: compat.mamba_chunk_scan_combined(x, dt, A, Bm, Cm, L, **kw),
            lambda: up["scan"](x, dt, A, Bm, Cm, L, **kw))


def siso_inputs(B, S, H, Hq, K, V, NA):
    torch.manual_seed(0)
    q = F.normalize(torch.randn(B, S, Hq, K, device=DEV), dim=-1).to(BF16) * math.sqrt(K)
    k = F.normalize(torch.randn(B, S, Hq, K, device=DEV), dim=-1).to(BF16) * math.sqrt(K)
    v = torch.randn(B, S, H, V, device=DEV, dtype=BF16)
    a = -torch.empty(B, H, S, device=DEV).uniform_(1.0, 16.0)
    dt = torch.exp(torch.rand(B, H, S, device=DEV) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
    trap = torch.rand(B, H, S, device=DEV, dtype=BF16)
    qb = torch.randn(H, K, device=DEV, dtype=BF16)
    kb = torch.randn(H, K, device=DEV, dtype=BF16)
    ang = torch.randn(B, S, H, NA, device=DEV)
    D = torch.ones(H, device=DEV)
    Z = torch.randn(B, S, H, V, device=DEV, dtype=BF16)
    return (q, k, v, (a * dt).contiguous(), dt, trap, qb, kb, ang), dict(D=D, Z=Z)


def siso_case(up, B, S, H, Hq, K, V, NA, L=64):
    args, kw = siso_inputs(B, S, H, Hq, K, V, NA)
    label = "mamba3_siso B=%d S=%d H=%d Hq=%d K=%d V=%d A=%d" % (B, S, H, Hq, K, V, NA)
    return (label, lambda: compat.mamba3_siso_combined(*args, chunk_size=L, **kw),
            lambda: up["siso"](*args, chunk_size=L, **kw))


def step_case(up, B, pool, H, P, N, G=1):
    torch.manual_seed(0)
    state = torch.randn(pool, H, P, N, device=DEV)
    idx = torch.randperm(pool, device=DEV)[:B].to(torch.int32)
    x = torch.randn(B, H, P, device=DEV, dtype=BF16)
    dt = torch.randn(B, H, P, device=DEV, dtype=BF16) * 0.5 - 2.0
    A = (-torch.rand(H, device=DEV) * 4 - 0.5)[:, None, None].expand(H, P, N)
    Bm = torch.randn(B, G, N, device=DEV, dtype=BF16)
    Cm = torch.randn(B, G, N, device=DEV, dtype=BF16)
    D = torch.randn(H, device=DEV)[:, None].expand(H, P)
    z = torch.randn(B, H, P, device=DEV, dtype=BF16)
    bias = (torch.randn(H, device=DEV) * 0.1)[:, None].expand(H, P)
    dt = dt[:, :, :1].expand(B, H, P)  # one dt per head, as the models call it
    kw = dict(D=D, z=z, dt_bias=bias, dt_softplus=True, state_batch_indices=idx)
    label = "mamba2_step B=%d pool=%d H=%d P=%d N=%d (fp32 pool, indices)" % (B, pool, H, P, N)
    # the pool is updated in place: the agreement check gives each side its own copy of the
    # initial pool; the timed calls keep updating one pool
    return (label, lambda pool=state: compat.selective_state_update(pool, x, dt, A, Bm, Cm, **kw),
            lambda pool=state: up["step"](pool, x, dt, A, Bm, Cm, **kw),
            lambda: (state.clone(), state.clone()))


def siso_step_case(up, B, H, Hq, K, V, NA):
    torch.manual_seed(0)
    q = torch.randn(B, Hq, K, device=DEV, dtype=BF16)
    k = torch.randn(B, Hq, K, device=DEV, dtype=BF16)
    v = torch.randn(B, H, V, device=DEV, dtype=BF16)
    adt = -torch.rand(B, H, device=DEV) * 0.1
    dt = torch.rand(B, H, device=DEV) * 0.1
    trap = torch.rand(B, H, device=DEV, dtype=BF16)
    qb = torch.randn(H, K, device=DEV, dtype=BF16)
    kb = torch.randn(H, K, device=DEV, dtype=BF16)
    ang = torch.randn(B, H, NA, device=DEV)
    D = torch.ones(H, device=DEV)
    Z = torch.randn(B, H, V, device=DEV, dtype=BF16)
    states = (torch.randn(B, H, NA, device=DEV), torch.randn(B, H, V, K, device=DEV),
              torch.randn(B, H, K, device=DEV, dtype=BF16), torch.randn(B, H, V, device=DEV, dtype=BF16))
    args = (q, k, v, adt, dt, trap, qb, kb, ang)
    label = "mamba3_siso_step B=%d H=%d K=%d V=%d (fp32 states)" % (B, H, K, V)
    return (label, lambda: compat.mamba3_siso_step(*args, D=D, Z=Z, Input_States=states),
            lambda: up["siso_step"](*args, D=D, Z=Z, Input_States=states))


def chunk_state_case(up, B, S, H, G, N, P, L=256):
    torch.manual_seed(0)
    nc = (S + L - 1) // L
    x = torch.randn(B, S, H, P, device=DEV, dtype=torch.float16)
    Bm = torch.randn(B, S, G, N, device=DEV, dtype=torch.float16)
    dt = torch.rand(B, H, nc, L, device=DEV) * 0.1
    dacs = torch.cumsum(-dt * 0.5, dim=-1)
    label = "mamba2_chunk_state f16 B=%d S=%d H=%d G=%d N=%d P=%d" % (B, S, H, G, N, P)
    return (label, lambda: ssmops.mamba2_chunk_state(Bm, x, dt, dacs, chunk_size=L),
            lambda: up["chunk_state"](Bm, x, dt, dacs, states_in_fp32=True))


CASES = {
    "scan": [(scan_case, (1, 8192, 80, 64, 128, 1)), (scan_case, (4, 4096, 80, 64, 128, 1)),
             (scan_case, (8, 2048, 32, 64, 64, 1)), (scan_case, (1, 4096, 128, 64, 128, 8))],
    "siso": [(siso_case, (1, 8192, 64, 1, 128, 64, 32)), (siso_case, (4, 4096, 64, 1, 128, 64, 32)),
             (siso_case, (8, 2048, 32, 32, 64, 64, 16))],
    "chunk_state": [(chunk_state_case, (1, 1024, 128, 8, 128, 64)), (chunk_state_case, (1, 8192, 80, 1, 128, 64))],
    "step": [(step_case, (128, 256, 80, 64, 128)), (step_case, (256, 512, 24, 64, 128))],
    "siso_step": [(siso_step_case, (128, 64, 1, 128, 64, 32))],
}


def first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--json")
    args = ap.parse_args()
    up, why = upstream()
    if up is None:
        print("compare_upstream: upstream's code is not importable (%s); fill .upstream/ (see the header)" % why)
        return 0
    from triton.testing import do_bench
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__, "ssmops", ssmops.__version__)
    results = []
    for group in args.only.split(","):
        for make, shape in CASES[group]:
            try:
                label, ours, theirs, *fresh = make(up, *shape)
                if fresh:  # in-place operators: each side starts from its own copy of the state
                    mine, yours = fresh[0]()
                    a, b = first(ours(mine)).float(), first(theirs(yours)).float()
                else:
                    a, b = first(ours()).float(), first(theirs()).float()  # warm-up (autotune) and agreement
            except Exception as e:  # noqa: BLE001 — report the row and go on with the others
                print("%s %s: not timed: %s: %s" % (group, shape, type(e).__name__, str(e).split("\n")[0]), flush=True)
                continue
            rel = ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
            times = {"ours": [], "upstream": []}
            for r in range(args.rounds):
                order = (("ours", ours), ("upstream", theirs))
                for name, fn in order if r % 2 == 0 else order[::-1]:
                    times[name].append(do_bench(fn, return_mode="median"))
            mo = sorted(times["ours"])[args.rounds // 2]
            mu = sorted(times["upstream"])[args.rounds // 2]
            print("%-58s ours %.4f ms  upstream %.4f ms  upstream/ours %.2f  (rel diff %.1e)" % (
                label, mo, mu, mu / mo, rel), flush=True)
            results.append(dict(row=label, ours_ms=mo, upstream_ms=mu, ratio=mu / mo, rounds=times, rel_diff=rel))
            del ours, theirs
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
