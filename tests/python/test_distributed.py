"""ssmops.distributed: a sequence split across 2, 3 and 4 gloo processes (torch.multiprocessing)
gives the single-process results: the outputs, the state after every piece, and every input
gradient (per-token inputs on their piece; shared parameters summed over the ranks), for
mamba2_scan, mamba3_siso, mamba3_mimo, causal_conv1d and the example Mamba-2 and Mamba-3
blocks. float64 on the reference backend (exact up to the order of float64 sums); float32 and
bf16 on the CPU backend against the float64 reference within the bars of DESIGN §5. Pieces are
uneven, one of them a single token, and span several chunks. Single-process tests check the
formulas the sharding relies on against the operators alone."""
import copy
import datetime
import gc
import math
import os
import sys
import traceback
import types
import weakref
from pathlib import Path

import pytest

import ssmops

torch = pytest.importorskip("torch")
mp = pytest.importorskip("torch.multiprocessing")
dist = pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with the gloo backend is not available in this torch")

from ssmops import compat, distributed as sd  # noqa: E402  (after the skip: they need torch)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python"))
import mamba2_block  # noqa: E402
import mamba3_block  # noqa: E402

# piece lengths per world size: uneven, one single-token piece, 23 tokens in all
LENGTHS = {2: [7, 16], 3: [9, 1, 13], 4: [5, 8, 3, 7]}
# (rel_rms, max_rel) bars: float64 is the same math as the reference up to rounding order
BARS = {torch.float64: (1e-11, 1e-9), torch.float32: (1e-5, 1e-3), torch.bfloat16: (2 ** -8, 2 ** -4)}
BACKEND = {torch.float64: "ref", torch.float32: "cpu", torch.bfloat16: "cpu"}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def _rand(g, *shape, lo=0.0, hi=1.0):
    return torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo


def _close(name, got, want, dtype, periodic=False):
    got, want = got.detach().cpu().to(torch.float64), want.detach().cpu().to(torch.float64)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    diff = got - want
    if periodic:  # angles: equal modulo 2π
        diff = torch.remainder(diff + math.pi, 2 * math.pi) - math.pi
    rms = want.norm() / math.sqrt(max(want.numel(), 1))
    assert rms > 0, "%s: an all-zero reference checks nothing" % name
    rel_rms = float(diff.norm() / want.norm())
    max_rel = float(diff.abs().max() / rms)
    bar_rms, bar_max = BARS[dtype]
    assert rel_rms <= bar_rms and max_rel <= bar_max, "%s: rel_rms %.3g, max_rel %.3g" % (name, rel_rms, max_rel)


class Case:
    """One configuration: inputs made in float64 from a seed (then rounded to `dtype`), the
    per-token inputs cut along their sequence axis, and a call of the full and the sharded
    operator. Subclasses give make(), call() and the names."""
    token_dims = {}        # per-token input -> its sequence axis
    shared = ()            # parameters every rank holds
    states = ()            # initial states (rank 0 only)
    finals = ()            # final-state outputs, in the call's order after out
    periodic = ()          # finals compared modulo 2π

    def __init__(self, dtype, seed, **options):
        self.dtype, self.seed, self.options = dtype, seed, options

    def dtype_of(self, name):
        """The per-token inputs in `dtype`; parameters and states in float32 when the
        activations are bf16 (as a model keeps them)."""
        if name in self.token_dims or self.dtype != torch.bfloat16:
            return self.dtype
        return torch.float32

    def inputs(self):
        full = self.make(_gen(self.seed))
        return {k: v.to(self.dtype_of(k)).to(torch.float64) for k, v in full.items()}  # rounded once

    def check(self, rank, n, device="cpu"):
        lengths = LENGTHS[n]
        bounds = [sum(lengths[:i]) for i in range(n + 1)]
        lo, hi = bounds[rank], bounds[rank + 1]
        base = self.inputs()
        g = _gen(self.seed + 1000)
        # the loss's weights, rounded as the sharded side uses them (the output's gradient in
        # the output's dtype, the states' in float32 or float64): both sides get the same numbers
        state_dtype = torch.float64 if self.dtype == torch.float64 else torch.float32
        probe = {k: _randn(g, *shape).to(self.dtype).double() for k, shape in self.probe_shapes(base).items()}
        finals_w = [[_randn(g, *shape).to(state_dtype).double() for shape in self.final_shapes(base)]
                    for _ in range(n)]

        # single process, float64 reference: the output, and the states after every piece (a
        # run over each prefix), all in one loss
        ref = {k: v.clone().requires_grad_(True) for k, v in base.items()}
        with ssmops.Context(backend="ref", threads=1):
            out_ref, _ = self.call(ssmops.autograd, ref, final=False)
            finals_ref = []
            for r in range(n):
                prefix = {k: self._cut(k, v, 0, bounds[r + 1]) for k, v in ref.items()}
                _, fin = self.call(ssmops.autograd, prefix, final=True)
                finals_ref.append(fin)
            loss = (out_ref * probe["out"]).sum()
            for r in range(n):
                loss = loss + sum((f * w).sum() for f, w in zip(finals_ref[r], finals_w[r]))
            loss.backward()

        # this rank's piece, in `dtype`
        mine = {}
        for k, v in base.items():
            if k in self.states and rank != 0:
                continue
            mine[k] = self._cut(k, v, lo, hi).to(self.dtype_of(k)).to(device).clone().requires_grad_(True)
        with ssmops.Context(backend=BACKEND[self.dtype] if device == "cpu" else "cuda", threads=1):
            out, fin = self.call(sd, mine, final=True)
            assert out.dtype == self.dtype
            probe_mine = self._cut_out(probe["out"], lo, hi).to(out.dtype).to(device)
            loss = (out * probe_mine).sum() + sum((f * w.to(f.dtype).to(device)).sum()
                                                  for f, w in zip(fin, finals_w[rank]))
            loss.backward()

        tag = "%s rank %d/%d" % (type(self).__name__, rank, n)
        _close(tag + " out", out, self._cut_out(out_ref, lo, hi), self.dtype)
        for name, f, fr in zip(self.finals, fin, finals_ref[rank]):
            _close(tag + " " + name, f, fr, self.dtype, periodic=name in self.periodic)
        for k, t in mine.items():
            grad = t.grad
            assert grad is not None, tag + " d" + k + " missing"
            if k in self.shared:  # shared parameters: the ranks' partial gradients add up (in float32
                # at least: gloo has no bf16 collectives)
                grad = grad.to(torch.float64 if grad.dtype == torch.float64 else torch.float32)
                dist.all_reduce(grad)
            _close(tag + " d" + k, grad, self._cut(k, ref[k].grad, lo, hi), self.dtype)

    def _cut(self, name, t, lo, hi):
        dim = self.token_dims.get(name)
        return t if dim is None else t.narrow(dim, lo, hi - lo)

    out_dim = 1            # the output's sequence axis

    def _cut_out(self, t, lo, hi):
        return t.narrow(self.out_dim, lo, hi - lo)


class Mamba2(Case):
    token_dims = {"x": 1, "dt": 1, "b": 1, "c": 1, "z": 1}
    shared = ("a", "d", "dt_bias")
    states = ("initial_states",)
    finals = ("final_states",)

    def make(self, g):
        o = self.options
        B, S, H, P, N, G = 2, sum(LENGTHS[2]), 4, 3, 5, o.get("groups", 2)
        t = {"x": _randn(g, B, S, H, P), "dt": _randn(g, B, S, H, scale=0.5) if o.get("softplus") else
             _rand(g, B, S, H, lo=0.05, hi=0.6),
             "a": -_rand(g, H, lo=0.3, hi=1.5), "b": _randn(g, B, S, G, N), "c": _randn(g, B, S, G, N)}
        if o.get("d"):
            t["d"] = _randn(g, *((H, P) if o["d"] == "per_channel" else (H,)))
        if o.get("z"):
            t["z"] = _randn(g, B, S, H, P)
        if o.get("dt_bias"):
            t["dt_bias"] = _randn(g, H, scale=0.3)
        if o.get("init"):
            t["initial_states"] = _randn(g, B, H, P, N)
        return t

    def probe_shapes(self, base):
        return {"out": base["x"].shape}

    def final_shapes(self, base):
        x, b = base["x"], base["b"]
        return [(x.shape[0], x.shape[2], x.shape[3], b.shape[3])]

    def call(self, module, t, final):
        o = self.options
        kw = {k: t[k] for k in ("d", "z", "dt_bias", "initial_states") if k in t}
        res = module.mamba2_scan(t["x"], t["dt"], t["a"], t["b"], t["c"], final_states=True if final else None,
                                 chunk_size=4, dt_softplus=int(bool(o.get("softplus"))),
                                 dt_limit_lo=o.get("limit", (0.0, math.inf))[0],
                                 dt_limit_hi=o.get("limit", (0.0, math.inf))[1], **kw)
        return (res[0], res[1:]) if final else (res, ())


class Mamba3Siso(Case):
    token_dims = {"q": 1, "k": 1, "v": 1, "z": 1, "angles": 1, "adt": 2, "dt": 2, "trap": 2}
    shared = ("q_bias", "k_bias", "d")
    states = ("angle_state", "ssm_state", "k_state", "v_state")
    finals = ("final_angle_state", "final_ssm_state", "final_k_state", "final_v_state")
    periodic = ("final_angle_state",)

    def make(self, g):
        o = self.options
        B, S, H, Hq, K, V, A = 2, sum(LENGTHS[2]), 4, o.get("hq", 2), 6, 3, o.get("pairs", 2)
        t = {"q": _randn(g, B, S, Hq, K), "k": _randn(g, B, S, Hq, K), "v": _randn(g, B, S, H, V),
             "adt": -_rand(g, B, H, S, lo=0.05, hi=0.5), "dt": _rand(g, B, H, S, lo=0.1, hi=0.8),
             "trap": _randn(g, B, H, S), "q_bias": _randn(g, H, K, scale=0.5), "k_bias": _randn(g, H, K, scale=0.5),
             "angles": _randn(g, B, S, H, A)}
        if o.get("d"):
            t["d"] = _randn(g, H)
        if o.get("z"):
            t["z"] = _randn(g, B, S, H, V)
        if o.get("init"):
            t.update(angle_state=_rand(g, B, H, A, lo=0.0, hi=6.0), ssm_state=_randn(g, B, H, V, K),
                     k_state=_randn(g, B, H, K), v_state=_randn(g, B, H, V))
        return t

    def probe_shapes(self, base):
        return {"out": base["v"].shape}

    def final_shapes(self, base):
        B, _, H, V = base["v"].shape
        K, A = base["q"].shape[3], base["angles"].shape[3]
        return [(B, H, A), (B, H, V, K), (B, H, K), (B, H, V)]

    def call(self, module, t, final):
        kw = {k: t[k] for k in ("d", "z") + self.states if k in t}
        want = True if final else None
        res = module.mamba3_siso(t["q"], t["k"], t["v"], t["adt"], t["dt"], t["trap"], t["q_bias"], t["k_bias"],
                                 t["angles"], final_angle_state=want, final_ssm_state=want, final_k_state=want,
                                 final_v_state=want, chunk_size=4, **kw)
        return (res[0], res[1:]) if final else (res, ())


SISO_CASES = [
    # D, z, the four initial states, GQA (2 V-heads per Q/K head), 2 of 3 pairs rotated
    (torch.float64, dict(d=True, z=True, init=True)),
    # fp32 on the CPU backend: every pair rotated, one Q/K head per V-head
    (torch.float32, dict(hq=4, pairs=3, d=True)),
    (torch.float32, dict(d=True, z=True, init=True)),
    (torch.bfloat16, dict(d=True, z=True, init=True)),
]


class Mamba3Mimo(Case):
    token_dims = {"q": 1, "k": 1, "v": 1, "z": 1, "angles": 1, "adt": 2, "dt": 2, "trap": 2}
    shared = ("q_bias", "k_bias", "mimo_v", "mimo_z", "mimo_o", "d", "outproj_norm_weight")
    states = ("angle_state", "ssm_state", "k_state", "v_state")
    finals = ("final_angle_state", "final_ssm_state", "final_k_state", "final_v_state")
    periodic = ("final_angle_state",)

    def make(self, g):
        o = self.options
        B, S, H, G, R, N, P, div = 2, sum(LENGTHS[2]), 4, o.get("g", 2), 2, 8, 3, o.get("div", 4)
        A = N // div
        t = {"q": _randn(g, B, S, R, G, N), "k": _randn(g, B, S, R, G, N), "v": _randn(g, B, S, H, P),
             "adt": -_rand(g, B, H, S, lo=0.05, hi=0.5), "dt": _rand(g, B, H, S, lo=0.1, hi=0.8),
             "trap": _randn(g, B, H, S), "q_bias": _randn(g, H, R, N, scale=0.5),
             "k_bias": _randn(g, H, R, N, scale=0.5), "mimo_v": _randn(g, H, R, P), "angles": _randn(g, B, S, H, A)}
        if o.get("d"):
            t["d"] = _randn(g, H)
        if o.get("z"):
            t.update(z=_randn(g, B, S, H, P), mimo_z=_randn(g, H, R, P))
        if o.get("reduce"):
            t["mimo_o"] = _randn(g, H, R, P)
        if o.get("norm"):
            t["outproj_norm_weight"] = _rand(g, H, P, lo=0.5, hi=1.5)
        if o.get("init"):
            t.update(angle_state=_rand(g, B, H, A, lo=0.0, hi=6.0), ssm_state=_randn(g, B, H, P, N),
                     k_state=_randn(g, B, R, H, N), v_state=_randn(g, B, H, P))
        return t

    def probe_shapes(self, base):
        B, S, H, P = base["v"].shape
        return {"out": (B, S, H, P) if "mimo_o" in base else (B, S, base["q"].shape[2], H, P)}

    def final_shapes(self, base):
        B, _, H, P = base["v"].shape
        R, N, A = base["q"].shape[2], base["q"].shape[4], base["angles"].shape[3]
        return [(B, H, A), (B, H, P, N), (B, R, H, N), (B, H, P)]

    def call(self, module, t, final):
        o = self.options
        kw = {k: t[k] for k in ("mimo_z", "mimo_o", "d", "z", "outproj_norm_weight") + self.states if k in t}
        want = True if final else None
        res = module.mamba3_mimo(t["q"], t["k"], t["v"], t["adt"], t["dt"], t["trap"], t["q_bias"], t["k_bias"],
                                 t["mimo_v"], t["angles"], final_angle_state=want, final_ssm_state=want,
                                 final_k_state=want, final_v_state=want, chunk_size=4,
                                 rotary_dim_divisor=o.get("div", 4), fuse_pregate_norm=int(bool(o.get("norm"))),
                                 **kw)
        return (res[0], res[1:]) if final else (res, ())


class Conv1d(Case):
    token_dims = {"x": 2}
    out_dim = 2
    shared = ("weight", "bias")
    states = ("initial_states",)
    finals = ("final_states",)

    def make(self, g):
        o = self.options
        B, D, S, W = 2, 5, sum(LENGTHS[2]), o.get("width", 4)
        t = {"x": _randn(g, B, D, S), "weight": _randn(g, D, W), "bias": _randn(g, D)}
        if o.get("init"):
            t["initial_states"] = _randn(g, B, D, W - 1)
        return t

    def probe_shapes(self, base):
        return {"out": base["x"].shape}

    def final_shapes(self, base):
        (B, D, _), W = base["x"].shape, base["weight"].shape[1]
        return [(B, D, W - 1)]

    def call(self, module, t, final):
        kw = {k: t[k] for k in self.states if k in t}
        res = module.causal_conv1d(t["x"], t["weight"], bias=t["bias"], final_states=True if final else None,
                                   activation=self.options.get("activation", 1), **kw)
        return (res[0], res[1:]) if final else (res, ())


MAMBA2_CASES = [
    # everything: D per head, z, dt_bias, softplus, a dt_limit that clamps, initial states, 2 groups
    (torch.float64, dict(d="per_head", z=True, dt_bias=True, softplus=True, limit=(0.05, 0.9), init=True)),
    # fp32 on the CPU backend: D per channel, one group, raw dt
    (torch.float32, dict(d="per_channel", groups=1)),
    (torch.float32, dict(d="per_head", z=True, dt_bias=True, softplus=True, init=True)),
    (torch.bfloat16, dict(d="per_head", z=True, dt_bias=True, softplus=True, init=True)),
]


MIMO_CASES = [
    # D, z with mimo_z, the rank reduction, the fused pre-gate norm, initial states, GQA, div 4
    (torch.float64, dict(d=True, z=True, reduce=True, norm=True, init=True)),
    # fp32 on the CPU backend: the per-rank output (no mimo_o), every pair rotated (div 2)
    (torch.float32, dict(g=4, div=2, d=True, z=True)),
    (torch.bfloat16, dict(d=True, z=True, reduce=True, init=True)),
]

CONV1D_CASES = [
    # W − 1 = 3 inputs of halo: a 1-token piece takes its halo from two ranks
    (torch.float64, dict(init=True)),
    (torch.float32, dict(width=3, activation=0)),
    (torch.bfloat16, dict(init=True)),
]

CASES = ([(Mamba2, dt, o) for dt, o in MAMBA2_CASES] + [(Mamba3Siso, dt, o) for dt, o in SISO_CASES] +
         [(Mamba3Mimo, dt, o) for dt, o in MIMO_CASES] + [(Conv1d, dt, o) for dt, o in CONV1D_CASES])


def _mamba2_block(block, u, conv, scan):
    """examples/python/mamba2_block.py's forward with the conv and the scan given (the plain or
    the sharded ones)."""
    batch, seqlen, _ = u.shape
    z, xbc, dt = torch.split(block.in_proj(u), [block.d_inner, block.d_inner + 2 * block.ngroups * block.d_state,
                                                block.nheads], dim=-1)
    xbc = conv(xbc.transpose(1, 2).contiguous(), block.conv_weight, bias=block.conv_bias, activation=1)
    x, b, c = torch.split(xbc.transpose(1, 2), [block.d_inner, block.ngroups * block.d_state,
                                                block.ngroups * block.d_state], dim=-1)
    y = scan(x.reshape(batch, seqlen, block.nheads, block.headdim).contiguous(), dt.contiguous(),
             -torch.exp(block.A_log), b.reshape(batch, seqlen, block.ngroups, block.d_state).contiguous(),
             c.reshape(batch, seqlen, block.ngroups, block.d_state).contiguous(), d=block.D, dt_bias=block.dt_bias,
             chunk_size=block.chunk_size, dt_softplus=1)
    y = compat.rmsnorm_fn(y.reshape(batch, seqlen, block.d_inner), block.norm_weight, None, z=z, eps=1e-5,
                          norm_before_gate=False)
    return block.out_proj(y)


def _check_block(tag, block, run_sharded, rank, n, dtype, device):
    """A whole block sharded in `dtype` on `device` (run_sharded(block, u_piece)): its output
    and the gradients of its input and of every parameter (all-reduced) against the block on
    the whole sequence in float64 on the reference backend (the same float32-rounded
    parameters and input)."""
    lengths = [4 * m for m in LENGTHS[n]]
    lo, hi = sum(lengths[:rank]), sum(lengths[:rank + 1])
    u = torch.randn(2, sum(lengths), 16, generator=_gen(6))
    probe = torch.randn(2, sum(lengths), 16, generator=_gen(7), dtype=torch.float64)
    ref_block, mine = copy.deepcopy(block).double(), copy.deepcopy(block).to(dtype).to(device)
    with ssmops.Context(backend="ref", threads=1):
        u_ref = u.double().requires_grad_(True)
        out_ref = ref_block(u_ref)
        (out_ref * probe).sum().backward()
    with ssmops.Context(backend=BACKEND[dtype] if device == "cpu" else "cuda", threads=1):
        u_mine = u[:, lo:hi].to(dtype).to(device).requires_grad_(True)
        out = run_sharded(mine, u_mine)
        (out * probe[:, lo:hi].to(dtype).to(device)).sum().backward()
    tag = "%s %s rank %d/%d" % (tag, device, rank, n)
    _close(tag + " out", out, out_ref[:, lo:hi], dtype)
    _close(tag + " du", u_mine.grad, u_ref.grad[:, lo:hi], dtype)
    refs = dict(ref_block.named_parameters())
    for k, p in mine.named_parameters():
        grad = p.grad.clone()
        dist.all_reduce(grad)
        _close(tag + " d" + k, grad, refs[k].grad, dtype)


def _check_blocks(rank, n, dtype, device):
    """examples/python's Mamba-2 block (in_proj, conv1d with its halo, scan, gated RMSNorm,
    out_proj; its forward mirrored with the sharded conv and scan) and Mamba-3 SISO block (its
    own forward, with the sharded mamba3_siso in place of ssmops.autograd's)."""
    torch.manual_seed(5)
    block = mamba2_block.Mamba2Block(d_model=16, d_state=8, headdim=4, ngroups=2, chunk_size=8)
    u = torch.randn(2, 12, 16, dtype=torch.float64)
    with ssmops.Context(backend="ref", threads=1):
        ref = copy.deepcopy(block).double()
        _close("Mamba-2 block: the mirrored forward", _mamba2_block(ref, u, ssmops.autograd.causal_conv1d,
                                                                    ssmops.autograd.mamba2_scan), ref(u), torch.float64)
    _check_block("Mamba-2 block", block, lambda b, x: _mamba2_block(b, x, sd.causal_conv1d, sd.mamba2_scan),
                 rank, n, dtype, device)

    torch.manual_seed(8)
    block = mamba3_block.Mamba3SisoBlock(d_model=16, nheads=4, headdim=4, d_state=8, nq_heads=2, angles=3,
                                         chunk_size=8)
    with torch.no_grad():
        block.q_bias.normal_(0, 0.5)
        block.k_bias.normal_(0, 0.5)
    sharded = types.SimpleNamespace(autograd=types.SimpleNamespace(mamba3_siso=sd.mamba3_siso))

    def run(b, x):
        saved, mamba3_block.ssmops = mamba3_block.ssmops, sharded
        try:
            return b(x)
        finally:
            mamba3_block.ssmops = saved
    _check_block("Mamba-3 SISO block", block, run, rank, n, dtype, device)


def _check_what_is_kept(rank, n):
    """After the sharded forward, the local pre-gate output y_loc is kept for the backward only
    where the gate needs it: without z it is freed (so the scan's activation memory is that of
    its piece), with z it lives until the backward. The backward works in both cases."""
    case = Mamba2(torch.float32, 31, z=True)
    lengths = LENGTHS[n]
    lo, hi = sum(lengths[:rank]), sum(lengths[:rank + 1])
    t = {k: case._cut(k, v, lo, hi).float().requires_grad_(True) for k, v in case.inputs().items()}
    plain, seen = ssmops.autograd.mamba2_scan, []

    def recording(*args, **kw):
        res = plain(*args, **kw)
        seen.append(weakref.ref(res[0]))
        return res
    for gate in (None, t["z"]):
        seen.clear()
        ssmops.autograd.mamba2_scan = recording
        try:
            out = sd.mamba2_scan(t["x"], t["dt"], t["a"], t["b"], t["c"], z=gate, chunk_size=4)
        finally:
            ssmops.autograd.mamba2_scan = plain
        gc.collect()
        assert (seen[0]() is None) == (gate is None), "y_loc kept: %s, z given: %s" % (seen[0]() is not None,
                                                                                      gate is not None)
        out.sum().backward()
        assert t["x"].grad is not None


def _check_rank_rules():
    """Initial states are the state before the whole sequence: another rank than 0 giving them
    is an error (raised before any collective)."""
    x, dt, a, b = torch.zeros(1, 4, 2, 3), torch.zeros(1, 4, 2), torch.zeros(2), torch.zeros(1, 4, 1, 4)
    with pytest.raises(ValueError, match="rank 0 only"):
        sd.mamba2_scan(x, dt, a, b, b, initial_states=torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="rank 0 only"):
        sd.causal_conv1d(torch.zeros(1, 3, 4), torch.zeros(3, 4), initial_states=torch.zeros(1, 3, 3))
    q, v, s = torch.zeros(1, 4, 1, 4), torch.zeros(1, 4, 2, 3), torch.zeros(1, 2, 4)
    states = dict(angle_state=torch.zeros(1, 2, 1), ssm_state=torch.zeros(1, 2, 3, 4), k_state=torch.zeros(1, 2, 4),
                  v_state=torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="rank 0 only"):
        sd.mamba3_siso(q, q, v, s, s, s, torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(1, 4, 2, 1), **states)
    with pytest.raises(ValueError, match="together"):
        sd.mamba3_siso(q, q, v, s, s, s, torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(1, 4, 2, 1),
                       angle_state=states["angle_state"])
    q5, bias3 = torch.zeros(1, 4, 1, 1, 4), torch.zeros(2, 1, 4)
    mimo_states = dict(states, ssm_state=torch.zeros(1, 2, 3, 4), k_state=torch.zeros(1, 1, 2, 4))
    with pytest.raises(ValueError, match="rank 0 only"):
        sd.mamba3_mimo(q5, q5, v, s, s, s, bias3, bias3, torch.zeros(2, 1, 3), torch.zeros(1, 4, 2, 1), **mimo_states)


def _worker(rank, n, init_file, device="cpu"):
    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_device(rank)
    # a collective that waits for a rank that never comes fails after the timeout, not hangs
    dist.init_process_group("gloo" if device == "cpu" else "nccl", init_method="file://" + init_file, rank=rank,
                            world_size=n, timeout=datetime.timedelta(seconds=60))
    try:
        _run_checks(rank, n, device)
    except BaseException:
        # a peer of a failed rank fails with a closed connection, and spawn reports whichever
        # rank exits first: each rank's own error goes to stderr
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()


def _run_checks(rank, n, device):
    for i, (cls, dtype, options) in enumerate(CASES):
        if device == "cpu" or dtype != torch.float64:
            cls(dtype, 100 * i + 7, **options).check(rank, n, device)
    for dtype in (torch.float64, torch.float32) if device == "cpu" else (torch.float32,):
        _check_blocks(rank, n, dtype, device)
    if device == "cpu":
        _check_what_is_kept(rank, n)
    if rank == 1:
        _check_rank_rules()


@pytest.mark.parametrize("n", [2, 3, 4])
def test_sharded_equals_one_process(n, tmp_path):
    """Every case of MAMBA2_CASES, SISO_CASES, MIMO_CASES and CONV1D_CASES, then the Mamba-2
    and Mamba-3 blocks in float64 and float32, on n processes (one spawn: starting a process
    that imports torch costs more than the cases)."""
    mp.spawn(_worker, args=(n, str(tmp_path / "init")), nprocs=n, join=True)


def _two_gpus():
    try:
        return (torch.cuda.is_available() and torch.cuda.device_count() >= 2 and dist.is_nccl_available()
                and ssmops.cuda_device_count() >= 2)
    except (AttributeError, OSError):
        return False


@pytest.mark.skipif(not _two_gpus(), reason="needs 2 CUDA devices, torch with NCCL and ssmops built with CUDA")
def test_sharded_on_two_gpus_over_nccl(tmp_path):
    """The float32 and bf16 cases and the float32 blocks on 2 GPUs over NCCL (CUDA backend)
    against the float64 reference on the CPU."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # the GPU machine's notes: no NVLink multicast
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), "cuda"), nprocs=2, join=True)


def test_siso_piece_is_affine_in_its_entering_state():
    """What the sharded SISO relies on, checked on the operator alone (float64 reference): a
    piece entered with any states (θ, S, k̂, v) has the output of the same piece run from zero
    states plus e^{cs_t}·H_in·R(θ + φ_t)·q̃_t, and leaves the states that _siso_leave composes
    from its zero-start summary."""
    case = Mamba3Siso(torch.float64, 11, d=True, z=True, init=True)
    t = case.inputs()
    with ssmops.Context(backend="ref", threads=1):
        out, *finals = ssmops.mamba3_siso(t["q"], t["k"], t["v"], t["adt"], t["dt"], t["trap"], t["q_bias"],
                                          t["k_bias"], t["angles"], d=t["d"], z=t["z"],
                                          **{s: t[s] for s in case.states}, final_angle_state=True,
                                          final_ssm_state=True, final_k_state=True, final_v_state=True, chunk_size=4)
        y_loc, piece, aux = sd._siso_local(t["q"], t["k"], t["v"], t["adt"], t["dt"], t["trap"], t["q_bias"],
                                           t["k_bias"], t["angles"], t["d"], 4, None)
    state = tuple(t[s] for s in case.states)
    _close("out", sd._with_state_term(y_loc, t["z"], torch.float64, sd._siso_state_term, aux, state, piece[5], t["q"], t["q_bias"]),
           out, torch.float64)
    for name, got, want in zip(case.finals, sd._siso_leave(state, piece), finals):
        _close(name, got, want, torch.float64, periodic=name in case.periodic)
    # and the entering state matters: without it the output is far off
    zero = tuple(torch.zeros_like(s) for s in state)
    wrong = sd._with_state_term(y_loc, t["z"], torch.float64, sd._siso_state_term, aux, zero, piece[5], t["q"], t["q_bias"])
    assert float((wrong - out).norm() / out.norm()) > 1e-2


def test_mimo_piece_is_affine_in_its_entering_state():
    """The same for MIMO (split-halves rotation, ranks, P-major state), before the output
    stage: the per-rank pre-gate output and the four states."""
    case = Mamba3Mimo(torch.float64, 12, d=True, init=True)
    t = case.inputs()
    args = [t[n] for n in ("q", "k", "v", "adt", "dt", "trap", "q_bias", "k_bias", "mimo_v", "angles")]
    with ssmops.Context(backend="ref", threads=1):
        out, *finals = ssmops.mamba3_mimo(*args, d=t["d"], **{s: t[s] for s in case.states}, final_angle_state=True,
                                          final_ssm_state=True, final_k_state=True, final_v_state=True, chunk_size=4)
        # through the sharded code's own pieces: a group of one rank entered with these states is
        # the plain call, so check the formulas directly
        y_loc, s_loc, k_loc = ssmops.mamba3_mimo(*args, d=t["d"], final_ssm_state=True, final_k_state=True,
                                                 chunk_size=4)
    cs = torch.cumsum(t["adt"], dim=2)
    phi = torch.cumsum(math.pi * torch.tanh(t["angles"]) * t["dt"].permute(0, 2, 1)[..., None], dim=1)
    c0 = t["dt"][:, :, 0] * torch.sigmoid(-t["trap"][:, :, 0])
    piece = (torch.remainder(phi[:, -1], 2 * math.pi), s_loc, k_loc.permute(0, 2, 1, 3), t["v"][:, -1],
             torch.exp(cs[:, :, -1]), c0)
    state = (t["angle_state"], t["ssm_state"], t["k_state"].permute(0, 2, 1, 3), t["v_state"])
    h_in = sd._mimo_pending(state, c0, t["mimo_v"])
    H, G = t["v"].shape[2], t["q"].shape[3]
    q_t = t["q"].repeat_interleave(H // G, dim=3) + t["q_bias"].permute(1, 0, 2)
    q_hat = sd._rotate_halves(q_t, (state[0][:, None] + phi)[:, :, None])
    y = y_loc + torch.exp(cs).permute(0, 2, 1)[:, :, None, :, None] * torch.einsum("btrhn,bhpn->btrhp", q_hat, h_in)
    _close("out", y, out, torch.float64)
    fa, fs, fk, fv = sd._mimo_leave(state, piece, t["mimo_v"])
    for name, got, want in zip(case.finals, (fa, fs, fk.permute(0, 2, 1, 3), fv), finals):
        _close(name, got, want, torch.float64, periodic=name in case.periodic)


def test_mamba2_fold_is_the_state_passing_operator():
    """docs/distributed.md: the rank-order fold of the summaries is ssm_mamba2_state_passing's
    recurrence with one chunk per rank (da_chunk_cumsum = log decay)."""
    g = _gen(21)
    R, B, H, P, N = 4, 2, 3, 4, 5
    s_loc, log_decay, init = _randn(g, R, B, H, P, N), -_rand(g, R, B, H), _randn(g, B, H, P, N)
    with ssmops.Context(backend="ref", threads=1):
        states_in, final = ssmops.mamba2_state_passing(s_loc.permute(1, 0, 2, 3, 4).contiguous(),
                                                       log_decay.permute(1, 2, 0).contiguous(), initial_states=init,
                                                       final_states=True)
    state = (init,)
    for r in range(R):
        _close("state entering piece %d" % r, state[0], states_in[:, r], torch.float64)
        state = sd._mamba2_leave(state, (s_loc[r], log_decay[r].exp()))
    _close("final state", state[0], final, torch.float64)


def test_world_of_one_is_the_plain_call():
    """Without an initialised process group the sharded call is ssmops.autograd's, bit for bit."""
    assert not dist.is_initialized()
    base = Mamba2(torch.float32, 3, d="per_head", z=True, dt_bias=True, softplus=True, init=True).inputs()
    t = {k: v.to(torch.float32) for k, v in base.items()}
    kw = dict(d=t["d"], z=t["z"], dt_bias=t["dt_bias"], initial_states=t["initial_states"], final_states=True,
              chunk_size=4, dt_softplus=1)
    a = sd.mamba2_scan(t["x"], t["dt"], t["a"], t["b"], t["c"], **kw)
    b = ssmops.autograd.mamba2_scan(t["x"], t["dt"], t["a"], t["b"], t["c"], **kw)
    assert all(torch.equal(u, v) for u, v in zip(a, b))


def test_refuses_packed_sequences_and_unknown_keywords():
    x = torch.zeros(1, 4, 2, 3)
    dt, a, b = torch.zeros(1, 4, 2), torch.zeros(2), torch.zeros(1, 4, 1, 4)
    with pytest.raises(NotImplementedError, match="cu_seqlens"):
        sd.mamba2_scan(x, dt, a, b, b, cu_seqlens=torch.tensor([0, 4]))
    with pytest.raises(TypeError, match="bogus"):
        sd.mamba2_scan(x, dt, a, b, b, bogus=1)
