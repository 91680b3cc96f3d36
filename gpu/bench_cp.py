"""gpu/bench_cp.py — context parallelism (ssmops.distributed) on 1 against N devices: forward +
backward of one mamba2_scan, mamba3_siso or mamba3_mimo layer on a sequence of S tokens split evenly across
the ranks. Per (op, S, world) it prints the median wall time of a forward + backward (the
slowest rank's, after a barrier), tokens/s, the speedup over world 1, the peak memory per
device, and two parts of the sharded time: the same piece run alone (ssmops.autograd on the
rank's tokens, no exchange, no correction) and the summary's collectives alone (the forward
all-gather and the backward reduce-scatter, or all-reduce on gloo, of the summary's size).

  mamba2  B=1 H=80 P=64 N=128 G=1 chunk 256, D, z, dt_bias, softplus (the anchor of PERF.md §5)
  siso    B=1 H=64 Hq=1 K=128 V=64 A=32 chunk 64, D, Z
  mimo    B=1 H=16 G=1 N=P=64 R=4 chunk 16 div 4, D, z, mimo_z, mimo_o

Usage (GPU machine with 2 GPUs):
    NCCL_NVLS_ENABLE=0 PYTHONPATH=python SSMOPS_LIBRARY=build/libssmops.so \\
        python3 gpu/bench_cp.py --world 1,2 --S 32768,131072,524288 [--op mamba2,siso,mimo] [--dtype bf16]
        [--reps 3] [--json OUT]
CPU smoke run over gloo (tiny heads): python3 gpu/bench_cp.py --device cpu --small --S 512 --world 1,2
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import ssmops  # noqa: E402
from ssmops import distributed as sd  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def shapes(op, small):
    if op == "mamba2":
        return dict(H=4, P=8, N=16) if small else dict(H=80, P=64, N=128)
    if op == "mimo":
        return dict(H=2, N=16, P=8, R=2) if small else dict(H=16, N=64, P=64, R=4)
    return dict(H=4, K=16, V=8, A=4) if small else dict(H=64, K=128, V=64, A=32)


def make(op, length, dtype, device, small, seed):
    """This rank's inputs (requires_grad on every float input) and the call on them."""
    g = torch.Generator().manual_seed(seed)

    def rn(*shape, scale=1.0, dt=dtype):
        return (torch.randn(*shape, generator=g) * scale).to(dt).to(device).requires_grad_(True)

    def ru(*shape, lo, hi, dt=dtype):
        return (torch.rand(*shape, generator=g) * (hi - lo) + lo).to(dt).to(device).requires_grad_(True)

    s = shapes(op, small)
    if op == "mamba2":
        H, P, N = s["H"], s["P"], s["N"]
        t = dict(x=rn(1, length, H, P), dt=rn(1, length, H, scale=0.5), a=ru(H, lo=-1.5, hi=-0.3, dt=torch.float32),
                 b=rn(1, length, 1, N), c=rn(1, length, 1, N), d=rn(H, dt=torch.float32), z=rn(1, length, H, P),
                 dt_bias=rn(H, scale=0.3, dt=torch.float32))

        def call(module):
            return module.mamba2_scan(t["x"], t["dt"], t["a"], t["b"], t["c"], d=t["d"], z=t["z"],
                                      dt_bias=t["dt_bias"], chunk_size=256, dt_softplus=1)
        summary = H * (P * N + 1)
        return t, call, summary
    if op == "mimo":
        H, N, P, R = s["H"], s["N"], s["P"], s["R"]
        t = dict(q=rn(1, length, R, 1, N), k=rn(1, length, R, 1, N), v=rn(1, length, H, P),
                 adt=ru(1, H, length, lo=-0.5, hi=-0.05, dt=torch.float32),
                 dt=ru(1, H, length, lo=0.1, hi=0.8, dt=torch.float32), trap=rn(1, H, length, dt=torch.float32),
                 q_bias=rn(H, R, N, scale=0.5), k_bias=rn(H, R, N, scale=0.5), mimo_v=rn(H, R, P),
                 mimo_z=rn(H, R, P), mimo_o=rn(H, R, P), angles=rn(1, length, H, N // 4, dt=torch.float32),
                 d=rn(H, dt=torch.float32), z=rn(1, length, H, P))

        def call(module):
            return module.mamba3_mimo(t["q"], t["k"], t["v"], t["adt"], t["dt"], t["trap"], t["q_bias"],
                                      t["k_bias"], t["mimo_v"], t["angles"], mimo_z=t["mimo_z"], mimo_o=t["mimo_o"],
                                      d=t["d"], z=t["z"], chunk_size=64 // R, rotary_dim_divisor=4)
        summary = H * (P * N + R * N + P + N // 4 + 2)
        return t, call, summary
    H, K, V, A = s["H"], s["K"], s["V"], s["A"]
    t = dict(q=rn(1, length, 1, K), k=rn(1, length, 1, K), v=rn(1, length, H, V),
             adt=ru(1, H, length, lo=-0.5, hi=-0.05, dt=torch.float32), dt=ru(1, H, length, lo=0.1, hi=0.8,
                                                                                 dt=torch.float32),
             trap=rn(1, H, length, dt=torch.float32), q_bias=rn(H, K, scale=0.5), k_bias=rn(H, K, scale=0.5),
             angles=rn(1, length, H, A, dt=torch.float32), d=rn(H, dt=torch.float32), z=rn(1, length, H, V))

    def call(module):
        return module.mamba3_siso(t["q"], t["k"], t["v"], t["adt"], t["dt"], t["trap"], t["q_bias"], t["k_bias"],
                                  t["angles"], d=t["d"], z=t["z"], chunk_size=64)
    summary = H * (V * K + K + V + A + 2)
    return t, call, summary


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, reps, device, world):
    """Median over reps of the slowest rank's wall time of fn() (seconds), after one warm-up."""
    times = []
    for i in range(reps + 1):
        sync(device)
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        sync(device)
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
        if world > 1:
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if i:
            times.append(float(dt))
    return statistics.median(times)


def measure(op, total, world, args):
    """One (op, S, world) row on this rank (every rank calls it: it holds collectives)."""
    device = args.device
    t, call, summary = make(op, total // world, DTYPES[args.dtype], device, args.small, seed=dist.get_rank())
    probe = []

    def step(module):
        for v in t.values():
            v.grad = None
        out = call(module)
        if not probe:
            probe.append(torch.randn_like(out))
        (out.float() * probe[0].float()).sum().backward()

    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    sharded = timed(lambda: step(sd), args.reps, device, world)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    local = timed(lambda: step(ssmops.autograd), args.reps, device, world) if world > 1 else sharded
    comm = 0.0
    if world > 1:
        buf = torch.randn(1, summary, device=device)

        def collectives():
            parts = [torch.empty_like(buf) for _ in range(world)]
            dist.all_gather(parts, buf)
            g = torch.stack(parts)
            if device == "cuda":
                mine = torch.empty_like(buf)
                dist.reduce_scatter(mine, list(g.unbind(0)))
            else:
                dist.all_reduce(g)
        comm = timed(collectives, args.reps, device, world)
    peaks = torch.tensor([float(peak)], dtype=torch.float64, device=device)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    return dict(op=op, S=total, world=world, ms=sharded * 1e3, tokens_per_s=total / sharded,
                peak_gib=float(peaks) / 2 ** 30, local_ms=local * 1e3, comm_ms=comm * 1e3, summary_bytes=4 * summary)


def worker(rank, world, init_file, args, out_file):
    if args.device == "cuda":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", init_method="file://" + init_file,
                            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    try:
        results = [measure(op, int(total), world, args) for op in args.op.split(",") for total in args.S.split(",")]
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out_file).write_text(json.dumps(results))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--op", default="mamba2,siso,mimo")
    ap.add_argument("--S", default="32768,131072,524288")
    ap.add_argument("--world", default="1,2")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="tiny heads (a smoke run)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in [int(w) for w in args.world.split(",")]:
            out_file = os.path.join(tmp, "w%d.json" % world)
            mp.spawn(worker, args=(world, os.path.join(tmp, "init%d" % world), args, out_file), nprocs=world)
            rows += json.loads(Path(out_file).read_text())
    base = {(r["op"], r["S"]): r["ms"] for r in rows if r["world"] == 1}
    print("| op | S | ranks | ms (fwd+bwd) | tokens/s | speedup | peak GiB/device | piece alone ms | "
          "collectives ms | summary bytes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = base.get((r["op"], r["S"]))
        speed = "%.2f" % (b / r["ms"]) if b else "-"
        print("| %s | %d | %d | %.2f | %.0f | %s | %.2f | %.2f | %.3f | %d |" % (
            r["op"], r["S"], r["world"], r["ms"], r["tokens_per_s"], speed, r["peak_gib"], r["local_ms"],
            r["comm_ms"], r["summary_bytes"]))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
