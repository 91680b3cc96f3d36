"""Context parallelism: one long sequence split along S across the ranks of a torch.distributed
group (NCCL on GPUs, gloo on CPU), forward and backward, by state passing.

Each rank holds a contiguous piece of every sequence (rank 0 the first tokens) and calls

    out = ssmops.distributed.mamba2_scan(x, dt, a, b, c, d=d, z=z, dt_bias=bias, dt_softplus=1)

with the same keywords as ssmops.autograd.mamba2_scan on its piece. A rank's piece maps the
state entering it to the state leaving it linearly, so per call each rank

1. runs the operator on its piece from a zero state, without the gate: the pre-gate output
   y_loc and the piece's own final state (its summary), in one pass;
2. all-gathers the summaries (one collective of the summary size per rank) and combines the
   pieces before it, in rank order, into the state entering its piece;
3. adds the entering state's contribution to y_loc (a decay times a contraction with C, or
   with the rotated q for Mamba-3) and applies the gate with torch ops.

Everything is differentiable: the operator's backward (ssmops.autograd) takes the gradients of
y_loc and of the summary, torch differentiates the combine and the correction, and the
all-gather's backward sums each summary's gradient over the ranks that read it. So
loss.backward() on every rank gives every rank's input gradients; the gradients of parameters
shared by all ranks (a, d, dt_bias, biases) are per-rank partial sums, to be all-reduced as
for any data-parallel parameter. Every rank must backpropagate through the output of every
call (the backward holds a collective). docs/distributed.md has the math, the cost and a
scaling model. With a world size of 1 (or torch.distributed not initialised) each function is
the plain ssmops.autograd call."""
import math

import torch
import torch.nn.functional as F

import ssmops

try:
    import torch.distributed as dist
except ImportError:  # pragma: no cover (a torch built without distributed)
    dist = None


def world(group=None):
    """(world size, rank) of `group`; (1, 0) where torch.distributed is absent or not
    initialised."""
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 1, 0
    return dist.get_world_size(group), dist.get_rank(group)


class _AllGather(torch.autograd.Function):
    """all_gather of one tensor per rank into a (world, ...) tensor. Backward: the gradient of a
    rank's tensor is the sum over every rank of the gradient of its slot (a reduce-scatter on
    NCCL; an all-reduce where the backend has no reduce-scatter, as gloo)."""

    @staticmethod
    def forward(ctx, t, group):
        ctx.group = group
        n, _ = world(group)
        t = t.contiguous()
        parts = [torch.empty_like(t) for _ in range(n)]
        dist.all_gather(parts, t, group=group)
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, g):
        group = ctx.group
        _, rank = world(group)
        g = g.contiguous()
        if dist.get_backend(group) == "nccl":
            mine = torch.empty_like(g[0])
            dist.reduce_scatter(mine, list(g.unbind(0)), group=group)
        else:
            g = g.clone()
            dist.all_reduce(g, group=group)
            mine = g[rank]
        return mine, None


class _After(torch.autograd.Function):
    """Returns a copy of `t` whose backward also reaches `dep` (with a zero gradient): rank 0's
    entering state does not read the gathered summaries, yet its backward must join the
    all-gather's collective and collect the gradients of its own summary."""

    @staticmethod
    def forward(ctx, t, dep):
        ctx.dep = (dep.shape, dep.dtype, dep.device)
        return t.clone()

    @staticmethod
    def backward(ctx, g):
        shape, dtype, device = ctx.dep
        return g, torch.zeros(shape, dtype=dtype, device=device)


def _state_dtype(t):
    """Summaries, decays and the correction are float64 for float64 inputs, else float32 (the
    operators' state precision)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _exchange(summary, group):
    """All-gathers every rank's flat summary (batch, n): returns (world, batch, n)."""
    return _AllGather.apply(summary, group)


def _no_packing(name, other, packing):
    """The sharded calls take one sequence per batch row with dense states: packed sequences
    and state pools are refused, unknown keywords are errors."""
    for k, v in other.items():
        if k not in packing:
            raise TypeError("ssmops.distributed.%s() got an unexpected keyword %r" % (name, k))
        if v is not None:
            raise NotImplementedError("ssmops.distributed.%s: %s is not supported (one sequence per batch row "
                                      "split across the ranks, dense states)" % (name, k))


# ---------------------------------------------------------------------------------------------
# Mamba-2

def _processed_dt(dt, dt_bias, dt_softplus, dt_limit_lo, dt_limit_hi):
    """The operator's processed dt in float64: clamp(φ(dt + dt_bias), lo, hi), φ = softplus
    (the identity above 20, as torch's threshold) or the identity (docs/ops/mamba2.md §1)."""
    v = dt.to(torch.float64)
    if dt_bias is not None:
        v = v + dt_bias.to(torch.float64)
    if dt_softplus:
        v = F.softplus(v, beta=1, threshold=20)
    return v.clamp(float(dt_limit_lo), float(dt_limit_hi))


def mamba2_scan(x, dt, a, b, c, d=None, z=None, dt_bias=None, initial_states=None, final_states=None,
                chunk_size=256, dt_softplus=0, dt_limit_lo=0.0, dt_limit_hi=math.inf, ctx=None, group=None,
                **other):
    """The sequence-sharded ssmops.autograd.mamba2_scan: x (batch, S_r, H, P), dt (batch, S_r,
    H), b/c (batch, S_r, G, N), z (batch, S_r, H, P) are this rank's piece of the sequence
    (rank order = sequence order; pieces may differ in length, each at least one token);
    a, d, dt_bias are the shared parameters. initial_states (batch, H, P, N) is the state
    before the whole sequence: given on rank 0 only. With final_states=True each rank also
    returns the state after its own piece (on the last rank: the sequence's final state).
    Returns out (batch, S_r, H, P) in x's dtype, or (out, final_states)."""
    _no_packing("mamba2_scan", other, ("seq_idx", "cu_seqlens", "initial_state_indices", "final_state_indices",
                                       "num_computed_tokens", "chunk_states"))
    params = dict(chunk_size=int(chunk_size), dt_softplus=int(dt_softplus), dt_limit_lo=float(dt_limit_lo),
                  dt_limit_hi=float(dt_limit_hi))
    want_final = final_states is True
    n, rank = world(group)
    if n == 1:
        return ssmops.autograd.mamba2_scan(x, dt, a, b, c, d=d, z=z, dt_bias=dt_bias, initial_states=initial_states,
                                           final_states=True if want_final else None, ctx=ctx, **params)
    if initial_states is not None and rank != 0:
        raise ValueError("ssmops.distributed.mamba2_scan: initial_states is the state before the whole sequence; "
                         "give it on rank 0 only (rank %d got one)" % rank)
    batch, length, heads, p = x.shape
    groups, nstate = b.shape[2], b.shape[3]
    sdt = _state_dtype(x)

    # 1. this piece from a zero state, without the gate: pre-gate y (D term included), local state
    y_loc, s_loc = ssmops.autograd.mamba2_scan(x, dt, a, b, c, d=d, dt_bias=dt_bias, final_states=True, ctx=ctx,
                                               **params)
    s_loc = s_loc.to(sdt)
    # decay from the piece's start to token t (inclusive), and over the whole piece
    cum = torch.cumsum(_processed_dt(dt, dt_bias, dt_softplus, dt_limit_lo, dt_limit_hi), dim=1)
    w = torch.exp(cum * a.to(torch.float64)).to(sdt)               # (batch, S_r, H)
    decay = w[:, -1]                                                # (batch, H)

    # 2. exchange: rank 0 sends its true final state (the initial state folded in), the others
    # their zero-start state; each combines the pieces before its own in rank order
    start = initial_states.to(sdt) if initial_states is not None else None
    mine = s_loc if start is None else s_loc + decay[:, :, None, None] * start
    flat = torch.cat([mine.reshape(batch, heads, p * nstate), decay[:, :, None]], dim=2)
    gathered = _exchange(flat.reshape(batch, -1), group).reshape(n, batch, heads, p * nstate + 1)
    states = gathered[..., :p * nstate].reshape(n, batch, heads, p, nstate)
    decays = gathered[..., p * nstate]
    s_in = torch.zeros(batch, heads, p, nstate, dtype=sdt, device=x.device)
    for j in range(rank):
        s_in = decays[j][:, :, None, None] * s_in + states[j]
    if start is not None:
        s_in = s_in + start
    s_in = _After.apply(s_in, gathered)

    # 3. the entering state's part of y: w_t · (S_in · C_t), per group of heads
    s_g = s_in.reshape(batch, groups, heads // groups, p, nstate)
    corr = torch.einsum("btgn,bgkpn->btgkp", c.to(sdt), s_g).reshape(batch, length, heads, p)
    y = y_loc.to(sdt) + w[..., None] * corr
    out = y * F.silu(z.to(sdt)) if z is not None else y
    out = out.to(x.dtype)
    if not want_final:
        return out
    final = decay[:, :, None, None] * s_in + s_loc
    return out, final
