"""ssmops.distributed: a sequence split across 2, 3 and 4 gloo processes (torch.multiprocessing)
gives the single-process results: the outputs, the state after every piece, and every input
gradient (per-token inputs on their piece; shared parameters summed over the ranks). float64
on the reference backend (exact up to the order of float64 sums), float32 on the CPU backend
against the float64 reference within the fp32 bars of DESIGN §5. Pieces are uneven, one of
them a single token, and span several chunks."""
import datetime
import math
import os

import pytest

import ssmops

torch = pytest.importorskip("torch")
mp = pytest.importorskip("torch.multiprocessing")
dist = pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with the gloo backend is not available in this torch")

from ssmops import distributed as sd  # noqa: E402  (after the skip: it needs torch)

# piece lengths per world size: uneven, one single-token piece, 23 tokens in all
LENGTHS = {2: [7, 16], 3: [9, 1, 13], 4: [5, 8, 3, 7]}
# (rel_rms, max_rel) bars: float64 is the same math as the reference up to rounding order
BARS = {torch.float64: (1e-11, 1e-9), torch.float32: (1e-5, 1e-3)}
BACKEND = {torch.float64: "ref", torch.float32: "cpu"}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def _rand(g, *shape, lo=0.0, hi=1.0):
    return torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo


def _close(name, got, want, dtype, periodic=False):
    got, want = got.detach().to(torch.float64), want.detach().to(torch.float64)
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

    def inputs(self):
        full = self.make(_gen(self.seed))
        return {k: v.to(self.dtype).to(torch.float64) for k, v in full.items()}  # rounded once

    def check(self, rank, n):
        lengths = LENGTHS[n]
        bounds = [sum(lengths[:i]) for i in range(n + 1)]
        lo, hi = bounds[rank], bounds[rank + 1]
        base = self.inputs()
        g = _gen(self.seed + 1000)
        probe = {k: _randn(g, *shape) for k, shape in self.probe_shapes(base).items()}
        finals_w = [[_randn(g, *shape) for shape in self.final_shapes(base)] for _ in range(n)]

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
            mine[k] = self._cut(k, v, lo, hi).to(self.dtype).clone().requires_grad_(True)
        with ssmops.Context(backend=BACKEND[self.dtype], threads=1):
            out, fin = self.call(sd, mine, final=True)
            assert out.dtype == self.dtype
            probe_mine = self._cut_out(probe["out"], lo, hi).to(out.dtype)
            loss = (out * probe_mine).sum() + sum((f * w.to(f.dtype)).sum() for f, w in zip(fin, finals_w[rank]))
            loss.backward()

        tag = "%s rank %d/%d" % (type(self).__name__, rank, n)
        _close(tag + " out", out, self._cut_out(out_ref, lo, hi), self.dtype)
        for name, f, fr in zip(self.finals, fin, finals_ref[rank]):
            _close(tag + " " + name, f, fr, self.dtype, periodic=name in self.periodic)
        for k, t in mine.items():
            grad = t.grad
            assert grad is not None, tag + " d" + k + " missing"
            if k in self.shared:  # shared parameters: the ranks' partial gradients add up
                grad = grad.clone()
                dist.all_reduce(grad)
            _close(tag + " d" + k, grad, self._cut(k, ref[k].grad, lo, hi), self.dtype)

    def _cut(self, name, t, lo, hi):
        dim = self.token_dims.get(name)
        return t if dim is None else t.narrow(dim, lo, hi - lo)

    def _cut_out(self, t, lo, hi):
        return t.narrow(1, lo, hi - lo)


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


MAMBA2_CASES = [
    # everything: D per head, z, dt_bias, softplus, a dt_limit that clamps, initial states, 2 groups
    (torch.float64, dict(d="per_head", z=True, dt_bias=True, softplus=True, limit=(0.05, 0.9), init=True)),
    # fp32 on the CPU backend: D per channel, one group, raw dt
    (torch.float32, dict(d="per_channel", groups=1)),
    (torch.float32, dict(d="per_head", z=True, dt_bias=True, softplus=True, init=True)),
]


def _worker(rank, n, init_file, which):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=60))
    try:
        for i, (cls, dtype, options) in enumerate(CASES[which]):
            cls(dtype, 100 * i + 7, **options).check(rank, n)
    finally:
        dist.destroy_process_group()


CASES = {"mamba2": [(Mamba2, dt, o) for dt, o in MAMBA2_CASES]}


def _spawn(n, which, tmp_path):
    init_file = str(tmp_path / "init")
    mp.spawn(_worker, args=(n, init_file, which), nprocs=n, join=True)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_mamba2_sharded(n, tmp_path):
    _spawn(n, "mamba2", tmp_path)


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
