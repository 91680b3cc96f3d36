"""Per-call overhead of the Python package over the C call, for mamba2_step (decode) at
B=1 H=24 P=64 N=128 on CPU (or, with --device cuda, on the GPU) with torch tensors, one
thread, every output given.

Times, interleaved round by round (so drift hits all alike): the C call alone (ssm_mamba2_step
through ctypes with an args struct built once), ssmops.mamba2_step(...) with out= and the
state updated in place, and the same call prepared once by ssmops.mamba2_step.bind(...)
(a decode loop's form). Prints the medians and their differences from the C call.

With --device cuda the calls only enqueue work (the device is synchronised at the end of each
round), so at a small shape the time per call is the host's cost of a call; --pool SLOTS reads
and writes the state through a device `state_batch_indices` of B random slots (the serving
form); when upstream's `selective_state_update` can be imported (`.upstream/` on PYTHONPATH) its
call and `ssmops.compat.selective_state_update` are timed in the same rounds.

    SSMOPS_LIBRARY=build/libssmops.so python3 tools/bench_overhead.py [--rounds 15] [--calls 2000]
        [--device cuda] [--pool SLOTS]
"""
import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import torch  # noqa: E402

import ssmops  # noqa: E402
from ssmops import _lib, _schema, _tensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--shape", default="1,24,64,128", help="B,H,P,N")
    ap.add_argument("--clock", default="wall", choices=("wall", "thread"),
                    help="thread: this thread's CPU time (the context runs one thread, the calling one), "
                         "steadier than wall time on a shared machine")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--pool", type=int, default=0, help="state pool of this many slots read through "
                    "state_batch_indices (0: the state is the batch)")
    a = ap.parse_args()
    B, H, P, N = (int(v) for v in a.shape.split(","))
    dev = a.device
    torch.manual_seed(0)
    x, z = torch.randn(B, H, P, device=dev), torch.randn(B, H, P, device=dev)
    dt = torch.rand(B, H, 1, device=dev).expand(B, H, P)               # per head: stride 0 over P
    A = (-torch.rand(H, 1, 1, device=dev)).expand(H, P, N)
    b, c = torch.randn(B, 1, N, device=dev), torch.randn(B, 1, N, device=dev)
    d, dt_bias = torch.randn(H, 1, device=dev).expand(H, P), torch.randn(H, 1, device=dev).expand(H, P)
    state, out = torch.zeros(max(B, a.pool), H, P, N, device=dev), torch.empty(B, H, P, device=dev)
    idx = torch.randperm(a.pool, device=dev)[:B].to(torch.int32) if a.pool else None
    ctx = ssmops.Context(threads=1, backend=dev)

    def api():
        ssmops.mamba2_step(x, dt, A, b, c, d=d, z=z, dt_bias=dt_bias, state=state, out=out, final_state=state,
                           state_batch_indices=idx, dt_softplus=1, ctx=ctx)

    # the C call alone: the args struct, params and function built once
    info = next(i for i in _schema.ops() if i.name == b"mamba2_step")
    buf = ctypes.create_string_buffer(info.args_size)
    keep = []
    arrays = dict(x=x, dt=dt, a=A, b=b, c=c, d=d, z=z, dt_bias=dt_bias, state=state, out=out, final_state=state)
    if idx is not None:
        arrays["state_batch_indices"] = idx
    for i in range(info.nargs):
        arg = info.args[i]
        name = arg.name.decode()
        if name in arrays:
            _tensors.to_tensor(arrays[name], name, keep, _lib.Tensor.from_buffer(buf, arg.offset))
    params = _schema.params_struct("ssm_mamba2_params")
    params.dt_softplus = 1
    fn = _lib.lib["ssm_mamba2_step"]  # its own function object
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    handle, pp = ctx.handle_for(None), ctypes.addressof(params)
    bp = ctypes.addressof(buf)

    def c_only():
        fn(handle, pp, bp)

    bound = ssmops.mamba2_step.bind(x, dt, A, b, c, d=d, z=z, dt_bias=dt_bias, state=state, out=out,
                                    final_state=state, state_batch_indices=idx, dt_softplus=1, ctx=ctx)
    assert fn(handle, pp, bp) == 0
    api()
    runs = [("C call", c_only), ("Python API", api), ("bound call", bound)]
    runs += compat_and_upstream(x, dt, A, b, c, d, z, dt_bias, state, idx) if dev == "cuda" else []
    times = {label: [] for label, _ in runs}
    clock = time.perf_counter if a.clock == "wall" else time.thread_time
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    for _ in range(a.rounds):
        for label, f in runs:
            sync()
            t0 = clock()
            for _ in range(a.calls):
                f()
            sync()
            times[label].append((clock() - t0) / a.calls * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print("%-12s median %7.2f us  best %7.2f us  (%d rounds of %d calls, %s clock)" % (
            k, med[k], min(v), a.rounds, a.calls, a.clock))
    for label in ("Python API", "bound call"):
        print("overhead of the %-10s over the C call: median %6.2f us" % (label, med[label] - med["C call"]))


def compat_and_upstream(x, dt, A, b, c, d, z, dt_bias, state, idx):
    """ssmops.compat.selective_state_update and, where it imports, upstream's, on the same
    tensors (upstream takes per-head A, D and dt_bias as stride-0 views like these)."""
    from ssmops import compat
    kw = dict(D=d, z=z, dt_bias=dt_bias, dt_softplus=True, state_batch_indices=idx)
    runs = [("compat", lambda: compat.selective_state_update(state, x, dt, A, b, c, **kw))]
    try:
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update
    except Exception as e:  # noqa: BLE001 — any import failure means "not available"
        print("upstream not timed: %s" % e)
        return runs
    selective_state_update(state, x, dt, A, b, c, **kw)  # compile outside the timing
    runs.append(("upstream", lambda: selective_state_update(state, x, dt, A, b, c, **kw)))
    return runs


if __name__ == "__main__":
    main()
