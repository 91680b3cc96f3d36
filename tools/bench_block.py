"""Tokens/s of the Mamba-2 block of examples/python (ssmops: causal_conv1d, chunked scan,
gated RMSNorm) against the same block in plain torch ops (F.conv1d, an SSD chunked scan in
einsums written here, a torch gated RMSNorm), on the CPU, forward only (no_grad), same
weights; the whole block and its core (conv + scan + norm, between the projections). Checks first that the two agree (fp32), then times them interleaved round by round
and prints the medians.

    SSMOPS_LIBRARY=build/libssmops.so python3 tools/bench_block.py [--seqlen 2048] [--rounds 5]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "examples" / "python"))
import mamba2_block  # noqa: E402
import ssmops  # noqa: E402


def segsum(x):
    """(..., T) -> (..., T, T): sum of x over (s, t] at [t, s] for s <= t, -inf above."""
    cs = torch.cumsum(x, dim=-1)
    out = cs[..., :, None] - cs[..., None, :]
    t = x.shape[-1]
    keep = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))
    return out.masked_fill(~keep, float("-inf"))


def ssd_chunked(x, dt, A, B, C, chunk):
    """y of the Mamba-2 scan: x (b, s, h, p), dt (b, s, h) after bias and softplus, A (h),
    B/C (b, s, g, n); the chunked SSD form (intra-chunk quadratic, inter-chunk recurrence)."""
    b, s, h, p = x.shape
    g = B.shape[2]
    pad = (-s) % chunk
    if pad:
        x, dt = F.pad(x, (0, 0, 0, 0, 0, pad)), F.pad(dt, (0, 0, 0, pad))
        B, C = F.pad(B, (0, 0, 0, 0, 0, pad)), F.pad(C, (0, 0, 0, 0, 0, pad))
    c = x.shape[1] // chunk
    X = (x * dt[..., None]).reshape(b, c, chunk, h, p)
    Ad = (A * dt).reshape(b, c, chunk, h).permute(0, 3, 1, 2)                   # (b, h, c, l)
    Bh = B.repeat_interleave(h // g, dim=2).reshape(b, c, chunk, h, -1)
    Ch = C.repeat_interleave(h // g, dim=2).reshape(b, c, chunk, h, -1)
    A_cs = torch.cumsum(Ad, dim=-1)
    L = torch.exp(segsum(Ad))                                                    # (b, h, c, l, s)
    scores = torch.einsum("bclhn,bcshn->bchls", Ch, Bh) * L.permute(0, 2, 1, 3, 4)
    y = torch.einsum("bchls,bcshp->bclhp", scores, X)
    decay = torch.exp(A_cs[..., -1:] - A_cs)                                     # (b, h, c, l)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bh, decay, X)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(A_cs[..., -1], (1, 0))))               # (b, h, c+1, c+1)
    states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
    y = y + torch.einsum("bclhn,bchpn,bhcl->bclhp", Ch, states, torch.exp(A_cs))
    return y.reshape(b, c * chunk, h, p)[:, :s]


def torch_core(m, zxbcdt):
    """Mamba2Block.core (the block between its projections) in plain torch ops."""
    batch, seqlen, _ = zxbcdt.shape
    z, xbc, dt = torch.split(zxbcdt, [m.d_inner, m.d_inner + 2 * m.ngroups * m.d_state, m.nheads], dim=-1)
    width = m.conv_weight.shape[1]
    xbc = F.silu(F.conv1d(F.pad(xbc.transpose(1, 2), (width - 1, 0)), m.conv_weight[:, None, :], m.conv_bias,
                          groups=m.conv_weight.shape[0])).transpose(1, 2)
    x, b, c = torch.split(xbc, [m.d_inner, m.ngroups * m.d_state, m.ngroups * m.d_state], dim=-1)
    x = x.reshape(batch, seqlen, m.nheads, m.headdim)
    dt = F.softplus(dt + m.dt_bias)
    y = ssd_chunked(x, dt, -torch.exp(m.A_log), b.reshape(batch, seqlen, m.ngroups, m.d_state),
                    c.reshape(batch, seqlen, m.ngroups, m.d_state), m.chunk_size)
    y = (y + x * m.D[:, None]).reshape(batch, seqlen, m.d_inner)
    g = y * F.silu(z)
    return g * torch.rsqrt(g.square().mean(-1, keepdim=True) + 1e-5) * m.norm_weight


def torch_block_forward(m, u):
    """mamba2_block.Mamba2Block.forward in plain torch ops."""
    return m.out_proj(torch_core(m, m.in_proj(u)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads for both (torch and the ssmops context); with 1 the clock is this "
                         "thread's CPU time, steady on a shared machine")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ctx = ssmops.Context(threads=a.threads)
    ctx.__enter__()
    clock = time.thread_time if a.threads == 1 else time.perf_counter
    torch.manual_seed(0)
    # mamba2-130m's mixer width: d_model 768, expand 2, 24 heads of 64, state 128, 1 group
    m = mamba2_block.Mamba2Block(d_model=768, d_state=128, headdim=64, expand=2, ngroups=1, d_conv=4,
                                 chunk_size=256).eval()
    with torch.no_grad():
        u = torch.randn(1, 300, 768)
        ref, got = torch_block_forward(m, u), m(u)
        rel = ((got - ref).norm() / ref.norm()).item()
        assert rel < 1e-4, "the plain-torch block disagrees with the ssmops block: rel %.3g" % rel
        u = torch.randn(a.batch, a.seqlen, 768)
        zx = m.in_proj(u)
        # the whole block, and its core between the projections (the projections are the same
        # torch matmuls in both, and dominate where torch's BLAS is slow)
        runs = (("ssmops block", lambda: m(u)), ("plain torch block", lambda: torch_block_forward(m, u)),
                ("ssmops core", lambda: m.core(zx)), ("plain torch core", lambda: torch_core(m, zx)))
        for _, f in runs:
            f()
        times = {k: [] for k, _ in runs}
        for _ in range(a.rounds):
            for k, f in runs:
                t0 = clock()
                f()
                times[k].append(clock() - t0)
    print("agreement: rel %.3g (S=300); B=%d S=%d, %d thread(s) each, %s clock" % (
        rel, a.batch, a.seqlen, a.threads, "thread CPU" if a.threads == 1 else "wall"))
    for k, v in times.items():
        med = statistics.median(v)
        print("%-18s median %8.1f ms  %9.0f tokens/s  (best %.1f ms, %d rounds)" % (
            k, med * 1e3, a.batch * a.seqlen / med, min(v) * 1e3, a.rounds))


if __name__ == "__main__":
    main()
