"""gpu/bench_train.py — forward and forward + backward of ssmops against upstream state-spaces/mamba's
Triton kernels, side by side in one process on the same torch tensors with the same timer
(triton.testing.do_bench: it clears the L2 before every repetition; medians), interleaved over
rounds. The shapes are the ones of record of the CUDA backward issue:

  mamba2   B=1 S=8192 H=80 P=64 N=128 G=1 chunk 256, D, z, dt_bias, softplus   (mamba_chunk_scan_combined)
  siso     B=1 S=8192 H=64 Hq=1 K=128 V=64 A=32 chunk 64, D, Z                  (mamba3_siso_combined)
  mimo     B=1 S=8192 H=16 G=1 N=P=64 R=4 chunk 16 (ours only: upstream's TileLang backward does not run here)

Usage (GPU machine): PYTHONPATH=python:.upstream SSMOPS_LIBRARY=build/libssmops.so \
    python3 gpu/bench_train.py [--rounds 3] [--only mamba2,siso,mimo] [--json OUT] [--profile] [--memory]
    [--kernels]
Upstream comes from an ignored folder (.upstream/, see shared GPU.md; gpu/upstream_copy.sh makes it from a
git directory of state-spaces/mamba); without it only ours is timed.
Prints one line per (case, implementation, pass): the median ms of every round, and the ratio
upstream / ours for each pass. --memory adds, after the timing, the peak device memory of one
forward + backward per implementation above what was allocated before it (inputs, upstream's
autotune done): torch's peak, with ours' device workspace routed through torch's allocator for
that call so the peak counts it. --kernels adds each side's summed GPU kernel time (no host launch
gaps; see kernel_times).
"""
import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import ssmops

DEV = "cuda"


def try_upstream():
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
        from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined
        return mamba_chunk_scan_combined, mamba3_siso_combined
    except Exception as e:  # noqa: BLE001 — any import failure means "not available"
        print("upstream not importable (%s): timing ours only" % e, file=sys.stderr)
        return None, None


def mamba2_case():
    torch.manual_seed(0)
    B, S, H, P, N, G, L = 1, 8192, 80, 64, 128, 1, 256
    dt_ = torch.bfloat16
    x = torch.randn(B, S, H, P, device=DEV, dtype=dt_)
    dt = torch.randn(B, S, H, device=DEV, dtype=dt_) * 0.5 - 2.0
    A = -torch.rand(H, device=DEV, dtype=torch.float32) * 4 - 0.5
    Bm = torch.randn(B, S, G, N, device=DEV, dtype=dt_)
    Cm = torch.randn(B, S, G, N, device=DEV, dtype=dt_)
    D = torch.randn(H, device=DEV, dtype=torch.float32)
    z = torch.randn(B, S, H, P, device=DEV, dtype=dt_)
    dt_bias = torch.randn(H, device=DEV, dtype=torch.float32) * 0.1
    leaves = [x, dt, A, Bm, Cm, D, z, dt_bias]
    for t in leaves:
        t.requires_grad_(True)
    g = torch.randn(B, S, H, P, device=DEV, dtype=dt_)

    def call(fn):
        return fn(x, dt, A, Bm, Cm, L, D=D, z=z, dt_bias=dt_bias, dt_softplus=True)
    return leaves, g, call


def siso_case():
    torch.manual_seed(0)
    B, S, H, Hq, K, V, NA, L = 1, 8192, 64, 1, 128, 64, 32, 64
    dt_ = torch.bfloat16
    q = F.normalize(torch.randn(B, S, Hq, K, device=DEV, dtype=torch.float32), dim=-1).to(dt_) * math.sqrt(K)
    k = F.normalize(torch.randn(B, S, Hq, K, device=DEV, dtype=torch.float32), dim=-1).to(dt_) * math.sqrt(K)
    v = torch.randn(B, S, H, V, device=DEV, dtype=dt_)
    a = -torch.empty(B, H, S, device=DEV).uniform_(1.0, 16.0)
    dt = torch.exp(torch.rand(B, H, S, device=DEV) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
    adt = (a * dt).contiguous()
    trap = torch.rand(B, H, S, device=DEV, dtype=dt_)
    q_bias = torch.randn(H, K, device=DEV, dtype=dt_)
    k_bias = torch.randn(H, K, device=DEV, dtype=dt_)
    angles = torch.randn(B, S, H, NA, device=DEV, dtype=torch.float32)
    D = torch.ones(H, device=DEV, dtype=torch.float32)
    Z = torch.randn(B, S, H, V, device=DEV, dtype=dt_)
    leaves = [q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, Z]
    for t in leaves:
        t.requires_grad_(True)
    g = torch.randn(B, S, H, V, device=DEV, dtype=dt_)

    def call(fn):
        return fn(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, Z, chunk_size=L)
    return leaves, g, call


def ours_mamba2(x, dt, A, Bm, Cm, L, D=None, z=None, dt_bias=None, dt_softplus=False):
    f = ssmops.autograd.mamba2_scan if torch.is_grad_enabled() else ssmops.mamba2_scan
    return f(x, dt, A, Bm, Cm, d=D, z=z, dt_bias=dt_bias, chunk_size=L, dt_softplus=int(dt_softplus))


def ours_siso(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, Z, chunk_size=64):
    f = ssmops.autograd.mamba3_siso if torch.is_grad_enabled() else ssmops.mamba3_siso
    return f(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d=D, z=Z, chunk_size=chunk_size)


def ours_siso_keep(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, Z, chunk_size=64):
    """With grad: the forward keeps its pregate_y (fp32, 4·B·S·H·V bytes: 134 MB here) and chunk_states
    (fp32, 4·NCS·H·V·K bytes: 268 MB) for the backward, which then forms dz from y and runs the
    state chain's reverse walk only (upstream's forward saves its pre-gate output too)."""
    if torch.is_grad_enabled():
        return ssmops.autograd.mamba3_siso(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d=D, z=Z,
                                           chunk_size=chunk_size, keep_pregate_y=True, keep_chunk_states=True)
    return ssmops.mamba3_siso(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d=D, z=Z, chunk_size=chunk_size)


def mimo_case():
    """Ours only (upstream's TileLang MIMO does not run here): forward and forward + backward
    through the autograd Function, D, z and the reduced output (mimo_o)."""
    torch.manual_seed(0)
    B, S, H, G, N, P, R, NA, L = 1, 8192, 16, 1, 64, 64, 4, 16, 16
    dt_ = torch.bfloat16
    q = torch.randn(B, S, R, G, N, device=DEV, dtype=dt_) / math.sqrt(N)
    k = torch.randn(B, S, R, G, N, device=DEV, dtype=dt_) / math.sqrt(N)
    v = torch.randn(B, S, H, P, device=DEV, dtype=dt_)
    a = -torch.empty(B, H, S, device=DEV).uniform_(1.0, 16.0)
    dt = torch.exp(torch.rand(B, H, S, device=DEV) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
    adt = (a * dt).contiguous()
    trap = torch.randn(B, H, S, device=DEV, dtype=dt_)
    q_bias = torch.randn(H, R, N, device=DEV, dtype=dt_)
    k_bias = torch.randn(H, R, N, device=DEV, dtype=dt_)
    mimo_v = torch.randn(H, R, P, device=DEV, dtype=dt_)
    mimo_z = torch.randn(H, R, P, device=DEV, dtype=dt_)
    mimo_o = torch.randn(H, R, P, device=DEV, dtype=dt_)
    angles = torch.randn(B, S, H, NA, device=DEV, dtype=torch.float32)
    D = torch.ones(H, device=DEV, dtype=torch.float32)
    z = torch.randn(B, S, H, P, device=DEV, dtype=dt_)
    leaves = [q, k, v, adt, dt, trap, q_bias, k_bias, mimo_v, mimo_z, mimo_o, angles, D, z]
    for t in leaves:
        t.requires_grad_(True)
    g = torch.randn(B, S, H, P, device=DEV, dtype=dt_)

    def call(fn):
        return fn(q, k, v, adt, dt, trap, q_bias, k_bias, mimo_v, angles, mimo_z=mimo_z, mimo_o=mimo_o, d=D, z=z,
                  chunk_size=L)
    return leaves, g, call


def ours_mimo(*args, **kw):
    """With grad: the forward keeps its pregate_y and chunk_states (fp32, 4·B·S·H·R·P and
    4·NCS·H·N·P bytes: 134 + 134 MB here) for the backward, which then skips recomputing the
    pre-gate output and the chunk states."""
    if torch.is_grad_enabled():
        return ssmops.autograd.mamba3_mimo(*args, keep_pregate_y=True, keep_chunk_states=True, **kw)
    return ssmops.mamba3_mimo(*args, **kw)


def peak_memory(label, leaves, g, call, impls, results):
    """Peak device bytes of one forward + backward of each implementation (gradients included),
    above the bytes allocated before it; ours' calls (the backward runs on autograd's thread) take a context
    whose device allocator is torch's, so the workspace is in torch's peak."""
    import ssmops._ops as ops_mod
    torch_ctx = ssmops.Context(device_allocator="torch")
    for name, fn in impls:
        saved = ops_mod.current_context
        if name == "ssmops":
            ops_mod.current_context = lambda: torch_ctx
        for t in leaves:
            t.grad = None
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            out = call(fn)
            out = out[0] if isinstance(out, tuple) else out
            out.backward(g)
            del out
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base
        finally:
            ops_mod.current_context = saved
        print("%-8s %-9s peak device memory of forward + backward %.1f MiB" % (label, name, peak / 2**20))
        results.append({"case": label, "impl": name, "pass": "peak_bytes", "bytes": peak})


def print_speedups(label, times, rounds, what):
    """upstream's median over each of ours (ssmops, ssmops_keep) per pass, where both ran."""
    ours = sorted({name for name, _ in times if name.startswith("ssmops")})
    for kind in ("fwd", "fwd+bwd"):
        for name in ours:
            if ("upstream", kind) in times and (name, kind) in times:
                u = sorted(times[("upstream", kind)])[rounds // 2]
                o = sorted(times[(name, kind)])[rounds // 2]
                tail = "" if name == "ssmops" else " (%s)" % name
                print("%-8s %-9s %s upstream/ours = %.2f%s" % (label, kind, what, u / o, tail))


def time_pair(label, leaves, g, call, impls, rounds, results):
    def fwd(fn):
        with torch.no_grad():
            call(fn)

    def fwd_bwd(fn):
        out = call(fn)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(g)

    for name, fn in impls:  # warm-up (Triton autotunes on the first call of a shape)
        fwd(fn)
        fwd_bwd(fn)
    torch.cuda.synchronize()
    times = {}
    for r in range(rounds):
        for name, fn in impls if r % 2 == 0 else impls[::-1]:
            for kind, run in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                ms = do_bench(lambda: run(fn), grad_to_none=leaves, return_mode="median")
                times.setdefault((name, kind), []).append(ms)
    for (name, kind), ms in sorted(times.items()):
        med = sorted(ms)[len(ms) // 2]
        print("%-8s %-9s %-8s median %.3f ms  rounds %s" % (label, name, kind, med, " ".join("%.3f" % m for m in ms)))
        results.append({"case": label, "impl": name, "pass": kind, "ms": med, "rounds": ms})
    print_speedups(label, times, rounds, "speedup")


def profile_one(label, leaves, g, call, fn, top=14):
    """Per-kernel CUDA time of one forward + backward of one implementation (torch.profiler), the
    `top` largest first."""
    from torch.profiler import ProfilerActivity, profile

    def fwd_bwd():
        for t in leaves:  # as the timed runs do: a gradient left set would add autograd's accumulation kernels
            t.grad = None
        out = call(fn)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(g)
    fwd_bwd()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fwd_bwd()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            t = rows.setdefault(e.name, [0, 0.0])
            t[0] += 1
            t[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    total = sum(v[1] for v in rows.values())
    print("%s profile: %.3f ms in %d kernels" % (label, total / 1e3, sum(v[0] for v in rows.values())))
    for name, (n, us) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:top]:
        print("  %8.3f ms %5.1f%%  x%-4d %s" % (us / 1e3, 100 * us / max(total, 1e-9), n, name[:90]))


def kernel_times(label, leaves, g, call, impls, rounds, results):
    """GPU kernel time of one forward and one forward + backward per implementation: the sum of the
    durations of the CUDA kernels (and memory operations) it launched, from torch.profiler, median
    over `rounds` repetitions each, an L2 clear (a bitwise_not over 256 MiB, left out of the sums)
    before every repetition. Unlike do_bench's wall time between two events it does not count the
    GPU waiting for the host to launch the next kernel, which a chain of many short kernels driven
    from Python (upstream's backward) can make the larger part."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=DEV)

    def fwd(fn):
        with torch.no_grad():
            call(fn)

    def fwd_bwd(fn):
        for t in leaves:
            t.grad = None
        out = call(fn)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(g)

    times = {}
    for name, fn in impls:
        for kind, run in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
            run(fn)
            torch.cuda.synchronize()
            for _ in range(rounds):
                flush.bitwise_not_()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    flush.bitwise_not_()
                    run(fn)
                    torch.cuda.synchronize()
                us = 0.0
                for e in prof.events():
                    if e.device_type == torch.autograd.DeviceType.CUDA and "bitwise_not" not in e.name:
                        us += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
                times.setdefault((name, kind), []).append(us / 1e3)
    for (name, kind), ms in sorted(times.items()):
        med = sorted(ms)[len(ms) // 2]
        print("%-8s %-9s %-8s kernel time median %.3f ms  reps %s" % (label, name, kind, med,
                                                                        " ".join("%.3f" % m for m in ms)))
        results.append({"case": label, "impl": name, "pass": kind + " kernels", "ms": med, "rounds": ms})
    print_speedups(label, times, rounds, "kernel-time speedup")


def compare_grads(fa, fb):
    a, b = torch.load(fa), torch.load(fb)
    for name in sorted(set(a) & set(b)):
        for i, (x, y) in enumerate(zip(a[name], b[name])):
            what = "output" if i == 0 else "grad %d" % (i - 1)
            if x is None or y is None:
                print("%s %s: %s" % (name, what, "both absent" if x is None and y is None else "absent in one"))
            elif torch.equal(x, y):
                print("%s %s: equal bytes %s" % (name, what, tuple(x.shape)))
            else:
                d = (x.double() - y.double()).abs()
                print("%s %s: DIFFERENT, max |a-b| %.3g, %d elements" % (name, what, d.max().item(), int((d > 0).sum())))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="mamba2,siso,mimo")
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true", help="print each side's per-kernel times of one forward + backward instead of timing")
    ap.add_argument("--memory", action="store_true", help="after the timing, the peak device memory of each side")
    ap.add_argument("--kernels", action="store_true",
                    help="after the timing, each side's summed GPU kernel time (torch.profiler; no host launch gaps)")
    ap.add_argument("--save-grads", metavar="FILE",
                    help="instead of timing, save ssmops' output and gradients of one forward + backward of each case "
                         "(torch.save), to compare two builds byte for byte (--compare-grads)")
    ap.add_argument("--compare-grads", nargs=2, metavar=("A", "B"),
                    help="compare two --save-grads files: per tensor, equal bytes or the largest difference")
    args = ap.parse_args()
    if args.compare_grads:
        compare_grads(*args.compare_grads)
        return
    up_m2, up_siso = try_upstream()
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__, "ssmops", ssmops.__version__)
    results = []
    only = args.only.split(",")
    if args.save_grads:
        cases = {"mamba2": (mamba2_case, ours_mamba2), "siso": (siso_case, ours_siso), "mimo": (mimo_case, ours_mimo)}
        saved = {}
        for name in only:
            leaves, g, call = cases[name][0]()
            out = call(cases[name][1])
            out = out[0] if isinstance(out, tuple) else out
            grads = torch.autograd.grad(out, leaves, g, allow_unused=True)
            saved[name] = [out.detach().cpu()] + [t.cpu() if t is not None else None for t in grads]
        torch.save(saved, args.save_grads)
        return
    if args.profile:
        # per case: its inputs, our implementations as the timed runs name them, upstream's
        cases = {"mamba2": (mamba2_case, [("ssmops", ours_mamba2)], up_m2),
                 "siso": (siso_case, [("ssmops", ours_siso), ("ssmops_keep", ours_siso_keep)], up_siso),
                 "mimo": (mimo_case, [("ssmops", ours_mimo)], None)}
        for name in only:
            leaves, g, call = cases[name][0]()
            for label, fn in cases[name][1]:
                profile_one(name + " " + label, leaves, g, call, fn)
            if cases[name][2]:
                profile_one(name + " upstream", leaves, g, call, cases[name][2], top=24)
        return
    if "mamba2" in only:
        leaves, g, call = mamba2_case()
        impls = [("ssmops", ours_mamba2)] + ([("upstream", up_m2)] if up_m2 else [])
        time_pair("mamba2", leaves, g, call, impls, args.rounds, results)
        if args.kernels:
            kernel_times("mamba2", leaves, g, call, impls, max(args.rounds, 5), results)
        if args.memory:
            peak_memory("mamba2", leaves, g, call, impls, results)
    if "siso" in only:
        leaves, g, call = siso_case()
        impls = [("ssmops", ours_siso), ("ssmops_keep", ours_siso_keep)] + \
            ([("upstream", up_siso)] if up_siso else [])
        time_pair("siso", leaves, g, call, impls, args.rounds, results)
        if args.kernels:
            kernel_times("siso", leaves, g, call, impls, max(args.rounds, 5), results)
        if args.memory:
            peak_memory("siso", leaves, g, call, impls, results)
    if "mimo" in only:
        leaves, g, call = mimo_case()
        time_pair("mimo", leaves, g, call, [("ssmops", ours_mimo)], args.rounds, results)
        if args.kernels:
            kernel_times("mimo", leaves, g, call, [("ssmops", ours_mimo)], max(args.rounds, 5), results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
