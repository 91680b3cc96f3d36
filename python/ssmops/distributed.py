"""Context parallelism: one long sequence split along S across the ranks of a torch.distributed
group (NCCL on GPUs, gloo on CPU), forward and backward, by state passing.

Each rank holds a contiguous piece of every sequence (rank 0 the first tokens) and calls

    out = ssmops.distributed.mamba2_scan(x, dt, a, b, c, d=d, z=z, dt_bias=bias, dt_softplus=1)

with the same keywords as ssmops.autograd.mamba2_scan on its piece (likewise mamba3_siso,
mamba3_mimo, and causal_conv1d, whose halo of W − 1 inputs comes from the ranks before). A
rank's piece maps the state entering it to the state leaving it affinely, so per call each
rank

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
import torch.utils.checkpoint

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
        if g.is_cuda and "nccl" in str(dist.get_backend(group)):
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


def _exchange(piece, nstate, start, leave, group):
    """The state entering this rank's piece, from one all-gather of every rank's summary.

    `piece` is this rank's summary, a tuple of tensors (batch, H, ...): its first `nstate`
    fields are the state its piece leaves when entered from a zero state, the others what
    `leave(state, piece) -> state` needs besides (decays ...). `start` is the state before the
    whole sequence (rank 0 only; None = zeros). Rank 0 sends its true final state instead of
    the zero-start one (start folded in), so every rank folds the pieces before its own, in
    rank order, from zeros."""
    _, rank = world(group)
    head = tuple(piece[:nstate]) if start is None else tuple(leave(start, piece))
    sent = head + tuple(piece[nstate:])
    batch, heads = piece[0].shape[:2]
    shapes = [t.shape[2:] for t in sent]
    sizes = [int(math.prod(sh)) for sh in shapes]
    flat = torch.cat([t.reshape(batch, heads, -1) for t in sent], dim=2)
    gathered = _AllGather.apply(flat, group)                   # (world, batch, H, sum(sizes))
    state = tuple(start) if start is not None else tuple(torch.zeros_like(t) for t in piece[:nstate])
    for j in range(rank):
        fields = [f.reshape(batch, heads, *sh) for f, sh in zip(gathered[j].split(sizes, dim=2), shapes)]
        state = leave(state, fields)
    # rank 0's state does not read `gathered`: _After makes its backward join the collective
    return (_After.apply(state[0], gathered),) + tuple(state[1:])


def _recomputed(fn, *args):
    """fn(*args), with a backward that recomputes fn from its arguments instead of keeping its
    intermediates (torch.utils.checkpoint, non-reentrant): the correction and the gate would
    otherwise keep several float32 tensors of the output's size per layer, more than the
    operator keeps for the whole piece. It holds no collective, so the recomputation is local."""
    return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)


def _local_out(like, shape):
    """`out=` for the local pass: a float32 array for low-precision activations, so that the
    pre-gate y_loc and its gradient are not rounded to the activation dtype (the output is
    rounded once, at the end, as on one device); nothing (the operator's own) otherwise."""
    if like.dtype in (torch.float32, torch.float64):
        return {}
    return {"out": torch.empty(shape, dtype=torch.float32, device=like.device)}


def _widened(*ts):
    """Low-precision tensors as float32 (others as they are). For the per-token inputs that the
    operator and the torch side both read (dt and C; adt, dt, trap, angles and q: all small
    next to x or v): their gradients then add up in float32 and are rounded once, as on one
    device."""
    return tuple(t.float() if t is not None and t.dtype in (torch.float16, torch.bfloat16) else t for t in ts)


def _with_state_term(y_loc, z, dtype, term, *args):
    """out = (y_loc + term(*args))·silu(z) (no gate without z), in `dtype`; term(*args) is the
    entering state's part of y, float32 (float64). The term and the gate are recomputed in the
    backward; without z y_loc is not kept either (the sum's backward does not read it)."""
    if z is None:
        term_value = _recomputed(term, *args)
        return (y_loc.to(term_value.dtype) + term_value).to(dtype)

    def gated(y_loc, z, *args):
        term_value = term(*args)
        sdt = term_value.dtype
        return ((y_loc.to(sdt) + term_value) * F.silu(z.to(sdt))).to(dtype)
    return _recomputed(gated, y_loc, z, *args)


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


def _mamba2_leave(state, piece):
    """The state after a piece entered with `state`: S_out = decay·S_in + S_loc."""
    s_loc, decay = piece[0], piece[1]
    return (decay[:, :, None, None] * state[0] + s_loc,)


def _mamba2_state_term(w, c, s_in):
    """The entering state's part of y: w_t·(S_in·C_t), per group of heads (batch, S_r, H, P)."""
    batch, heads, p, nstate = s_in.shape
    groups = c.shape[2]
    s_g = s_in.reshape(batch, groups, heads // groups, p, nstate)
    corr = torch.einsum("btgn,bgkpn->btgkp", c.to(s_in.dtype), s_g).reshape(batch, c.shape[1], heads, p)
    return w[..., None] * corr


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
    sdt = _state_dtype(x)
    dt, c = _widened(dt, c)

    # 1. this piece from a zero state, without the gate: pre-gate y (D term included), local state
    y_loc, s_loc = ssmops.autograd.mamba2_scan(x, dt, a, b, c, d=d, dt_bias=dt_bias, final_states=True, ctx=ctx,
                                               **_local_out(x, x.shape), **params)
    s_loc = s_loc.to(sdt)
    # decay from the piece's start to token t (inclusive), and over the whole piece
    cum = torch.cumsum(_processed_dt(dt, dt_bias, dt_softplus, dt_limit_lo, dt_limit_hi), dim=1)
    w = torch.exp(cum * a.to(torch.float64)).to(sdt)               # (batch, S_r, H)
    decay = w[:, -1]                                                # (batch, H)

    # 2. the state entering this piece: (S_loc, decay) of every rank, folded in rank order
    start = (initial_states.to(sdt),) if initial_states is not None else None
    (s_in,) = _exchange((s_loc, decay), 1, start, _mamba2_leave, group)

    # 3. the entering state's part of y, then the gate
    out = _with_state_term(y_loc, z, x.dtype, _mamba2_state_term, w, c, s_in)
    if not want_final:
        return out
    return out, _mamba2_leave((s_in,), (s_loc, decay))[0]


# ---------------------------------------------------------------------------------------------
# Mamba-3 SISO

TWO_PI = 2 * math.pi


def _rotate(x, theta):
    """R(θ)·x on the last axis (docs/ops/mamba3_siso.md §1.3): interleaved pairs (2i, 2i+1)
    rotated by +θ_i for i < A = theta.shape[-1], the other dimensions unchanged."""
    npairs = theta.shape[-1]
    if npairs == 0:
        return x
    pairs = x[..., :2 * npairs].reshape(*x.shape[:-1], npairs, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    cos, sin = torch.cos(theta), torch.sin(theta)
    turned = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).reshape(*x.shape[:-1], 2 * npairs)
    return torch.cat((turned, x[..., 2 * npairs:]), dim=-1)


def _siso_leave(state, piece):
    """The four states after a piece entered with `state` = (θ, S, k̂, v). The piece from a
    zero state left (φ, S_loc, k̂_loc, v_last); entered with θ its k̂ are turned by θ, so
        H_in  = S + c0·v k̂ᵀ                    (the first token's pending term, c0 = dt_0·(1 − λ_0))
        S_out = decay·H_in + S_loc·R(θ)ᵀ        (S_loc's rows turned by θ)
        θ_out = wrap(θ + φ),  k̂_out = R(θ)·k̂_loc,  v_out = v_last."""
    angle, ssm, k, v = state
    phi, s_loc, k_loc, v_last, decay, c0 = piece
    h_in = ssm + c0[:, :, None, None] * v[:, :, :, None] * k[:, :, None, :]
    s_out = decay[:, :, None, None] * h_in + _rotate(s_loc, angle[:, :, None, :])
    return torch.remainder(angle + phi, TWO_PI), s_out, _rotate(k_loc, angle), v_last


def _angles_from_zero(angles, dt, sdt, ctx):
    """φ_t, the piece's cumulative angles from a zero angle state, wrapped to [0, 2π): the
    operator's own angle cumsum (ssmops.autograd.mamba3_angle_cumsum, its θ exactly), in float32
    at least (its output takes the rates' dtype: a bf16 θ would lose the angle)."""
    if angles.dtype not in (torch.float32, torch.float64):
        angles = angles.float()
    return ssmops.autograd.mamba3_angle_cumsum(angles, dt, ctx=ctx).to(sdt)


def _siso_local(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, chunk_size, ctx):
    """This piece from zero states, without the gate: the pre-gate output y_loc, the summary
    (φ, S_loc, k̂_loc, v_last, decay, c0) and what the correction needs (cs_t in float64 and
    the cumulative angle φ_t from the piece's start)."""
    sdt = _state_dtype(v)
    y_loc, s_loc, k_loc = ssmops.autograd.mamba3_siso(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d=d,
                                                      final_ssm_state=True, final_k_state=True,
                                                      chunk_size=int(chunk_size), ctx=ctx, **_local_out(v, v.shape))
    cs = torch.cumsum(adt.to(torch.float64), dim=2)                                    # (batch, H, S_r)
    phi = _angles_from_zero(angles, dt, sdt, ctx)                                       # (batch, S_r, H, A)
    c0 = dt[:, :, 0].to(torch.float64) * (1 - torch.sigmoid(trap[:, :, 0].to(torch.float64)))
    piece = (phi[:, -1], s_loc.to(sdt), k_loc.to(sdt), v[:, -1].to(sdt),
             torch.exp(cs[:, :, -1]).to(sdt), c0.to(sdt))
    return y_loc, piece, (cs, phi)


def _siso_state_term(aux, state, c0, q, q_bias):
    """The entering state's part of y: e^{cs_t}·H_in·q̂_t with q̂_t = R(θ_in + φ_t)·(q_t + q_bias)
    (every other term of the piece's output depends on relative angles only)."""
    cs, phi = aux
    angle, ssm, k, v = state
    sdt = ssm.dtype
    heads = q_bias.shape[0]
    h_in = ssm + c0[:, :, None, None] * v[:, :, :, None] * k[:, :, None, :]
    q_t = q.to(sdt).repeat_interleave(heads // q.shape[2], dim=2) + q_bias.to(sdt)       # (batch, S_r, H, K)
    q_hat = _rotate(q_t, torch.remainder(angle[:, None] + phi, TWO_PI))
    return torch.exp(cs).to(sdt).permute(0, 2, 1)[..., None] * torch.einsum("bthk,bhvk->bthv", q_hat, h_in)


SISO_STATES = ("angle_state", "ssm_state", "k_state", "v_state")
SISO_FINALS = ("final_angle_state", "final_ssm_state", "final_k_state", "final_v_state")


def _m3_sharded_states(name, other, given, finals, group):
    """What the sharded Mamba-3 forwards check alike: no packed sequences or state pools, the
    four initial states `given` all or none and, being those before the whole sequence, on
    rank 0 only. Returns the world size and which of the four final states `finals` asks for."""
    _no_packing(name, other, ("cu_seqlens", "initial_state_indices", "final_state_indices"))
    wanted = [f is True for f in finals]
    if any(s is None for s in given) and any(s is not None for s in given):
        raise ValueError("ssmops.distributed.%s: give the four initial states together or none" % name)
    n, rank = world(group)
    if given[0] is not None and rank != 0:
        raise ValueError("ssmops.distributed.%s: the initial states are those before the whole sequence; "
                         "give them on rank 0 only (rank %d got them)" % (name, rank))
    return n, wanted


def mamba3_siso(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d=None, z=None, angle_state=None, ssm_state=None,
                k_state=None, v_state=None, final_angle_state=None, final_ssm_state=None, final_k_state=None,
                final_v_state=None, chunk_size=64, ctx=None, group=None, **other):
    """The sequence-sharded ssmops.autograd.mamba3_siso: q/k (batch, S_r, Hq, K), v/z (batch,
    S_r, H, V), angles (batch, S_r, H, A) and adt/dt/trap (batch, H, S_r) are this rank's
    piece of the sequence (rank order = sequence order; each at least one token); q_bias,
    k_bias, d the shared parameters. The four initial states are those before the whole
    sequence (all four or none, rank 0 only). Each final_*=True returns the state after this
    rank's piece (on the last rank: the sequence's), in the order of the operator. Returns
    out (batch, S_r, H, V) in v's dtype, then the final states asked for."""
    given = (angle_state, ssm_state, k_state, v_state)
    n, wanted = _m3_sharded_states("mamba3_siso", other, given,
                                   (final_angle_state, final_ssm_state, final_k_state, final_v_state), group)
    if n == 1:
        finals = {f: True if w else None for f, w in zip(SISO_FINALS, wanted)}
        return ssmops.autograd.mamba3_siso(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d=d, z=z,
                                           **dict(zip(SISO_STATES, given)), **finals,
                                           chunk_size=int(chunk_size), ctx=ctx)
    sdt = _state_dtype(v)
    q, adt, dt, trap, angles = _widened(q, adt, dt, trap, angles)
    y_loc, piece, aux = _siso_local(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, chunk_size, ctx)
    start = tuple(s.to(sdt) for s in given) if angle_state is not None else None
    state = _exchange(piece, 4, start, _siso_leave, group)
    out = _with_state_term(y_loc, z, v.dtype, _siso_state_term, aux, state, piece[5], q, q_bias)
    if not any(wanted):
        return out
    finals = _siso_leave(state, piece)
    return (out,) + tuple(f for f, w in zip(finals, wanted) if w)


# ---------------------------------------------------------------------------------------------
# the causal conv1d of a Mamba-2 layer: a halo of W − 1 inputs

def causal_conv1d(x, weight, bias=None, initial_states=None, final_states=None, activation=1, ctx=None, group=None,
                  **other):
    """The sequence-sharded ssmops.autograd.causal_conv1d: x (batch, D, S_r) is this rank's
    piece (each at least one token); weight (D, W) and bias (D) shared. A rank's conv reads the
    W − 1 inputs before its piece (its halo): one all-gather of every rank's last W − 1 inputs
    (shorter pieces padded, with a row of flags saying which columns are real), then each rank
    takes the last W − 1 real inputs before its own. initial_states (batch, D, W − 1) are the
    inputs before the whole sequence: rank 0 only. final_states=True returns the last W − 1
    inputs up to the end of this rank's piece."""
    _no_packing("causal_conv1d", other, ("seq_idx", "cu_seqlens", "initial_state_indices", "final_state_indices"))
    n, rank = world(group)
    halo = weight.shape[1] - 1
    want_final = final_states is True
    if n == 1 or halo == 0:
        return ssmops.autograd.causal_conv1d(x, weight, bias=bias, initial_states=initial_states,
                                             final_states=True if want_final else None, activation=int(activation),
                                             ctx=ctx)
    if initial_states is not None and rank != 0:
        raise ValueError("ssmops.distributed.causal_conv1d: initial_states are the inputs before the whole "
                         "sequence; give them on rank 0 only (rank %d got them)" % rank)
    batch, dim, length = x.shape
    # rank 0 sends the last W − 1 inputs of (initial states, x): all real; the others their own
    # last min(S_r, W − 1) inputs, left-padded with zeros; in float32 at least (exact for the
    # activation dtypes, and gloo has no bf16 collectives)
    sdt = _state_dtype(x)
    if rank == 0:
        before = initial_states.to(x.dtype) if initial_states is not None else x.new_zeros(batch, dim, halo)
        tail = torch.cat((before, x), dim=2)[:, :, -halo:]
        real = halo
    else:
        real = min(length, halo)
        tail = torch.cat((x.new_zeros(batch, dim, halo - real), x[:, :, length - real:]), dim=2)
    flags = torch.zeros(batch, 1, halo, dtype=sdt, device=x.device)
    flags[:, :, halo - real:] = 1
    gathered = _AllGather.apply(torch.cat((tail.to(sdt), flags), dim=1), group)  # (world, batch, D + 1, W − 1)
    counts = [int(c) for c in gathered[:, 0, dim].sum(dim=1).tolist()]
    state = gathered[0, :, :dim]
    for j in range(1, rank):
        state = torch.cat((state, gathered[j, :, :dim, halo - counts[j]:]), dim=2)[:, :, -halo:]
    state = before if rank == 0 else state.to(x.dtype)
    state = _After.apply(state, gathered)
    out = ssmops.autograd.causal_conv1d(x, weight, bias=bias, initial_states=state, activation=int(activation),
                                        ctx=ctx)
    if not want_final:
        return out
    return out, torch.cat((state, x), dim=2)[:, :, -halo:]


# ---------------------------------------------------------------------------------------------
# Mamba-3 MIMO

def _rotate_halves(x, theta):
    """Rot(θ)·x on the last axis (docs/ops/mamba3_mimo.md §1.2): column a paired with column
    a + N/2 and the pair rotated by +θ_a for a < A = theta.shape[-1]; the rest unchanged."""
    npairs, half = theta.shape[-1], x.shape[-1] // 2
    if npairs == 0:
        return x
    x0, x1 = x[..., :npairs], x[..., half:half + npairs]
    cos, sin = torch.cos(theta), torch.sin(theta)
    return torch.cat((x0 * cos - x1 * sin, x[..., npairs:half], x0 * sin + x1 * cos, x[..., half + npairs:]), dim=-1)


def _mimo_pending(state, c0, mimo_v):
    """H_in = S + c0·Σ_r (v ⊙ mimo_v[h,r]) ⊗ k̂_r, P-major (P, N): the entering state with the
    previous token's second-step term (docs/ops/mamba3_mimo.md §1.5)."""
    _, ssm, k, v = state
    u = v[:, :, None, :] * mimo_v[None]                                       # (batch, H, R, P)
    return ssm + c0[:, :, None, None] * torch.einsum("bhrp,bhrn->bhpn", u, k)


def _mimo_leave(state, piece, mimo_v):
    """The four states after a piece entered with `state` = (θ, S, k̂, v), with k̂ (batch, H,
    R, N) here (head before rank), from the piece's zero-start summary (φ, S_loc, k̂_loc,
    v_last, decay, c0): as SISO's, with the split-halves rotation and the ranks' lifted v."""
    angle = state[0]
    phi, s_loc, k_loc, v_last, decay, c0 = piece
    h_in = _mimo_pending(state, c0, mimo_v)
    turn = angle[:, :, None, :]
    return (torch.remainder(angle + phi, TWO_PI), decay[:, :, None, None] * h_in + _rotate_halves(s_loc, turn),
            _rotate_halves(k_loc, turn), v_last)


def _mimo_output(y_loc, dtype, cs, phi, state, c0, lift, q, q_bias, z, mimo_z, mimo_o, norm, eps):
    """y[t,r] = y_loc[t,r] + e^{cs_t}·H_in·Rot(θ_in + φ_t)·(q[t,r] + q_bias[r]), then the output
    stage of docs/ops/mamba3_mimo.md §1.4 (the fused pre-gate RMSNorm when `norm` (H, P) is
    given, the gate silu(z ⊙ mimo_z[r]), the reduction by mimo_o), in `dtype`."""
    h_in = _mimo_pending(state, c0, lift)                                               # (batch, H, P, N)
    sdt = h_in.dtype
    heads = h_in.shape[1]
    q_t = q.to(sdt).repeat_interleave(heads // q.shape[3], dim=3) + q_bias.to(sdt).permute(1, 0, 2)
    q_hat = _rotate_halves(q_t, torch.remainder(state[0][:, None] + phi, TWO_PI)[:, :, None])
    corr = torch.einsum("btrhn,bhpn->btrhp", q_hat, h_in)
    y = y_loc.to(sdt) + torch.exp(cs).to(sdt).permute(0, 2, 1)[:, :, None, :, None] * corr
    if norm is not None:
        y = y * torch.rsqrt(y.square().mean(dim=-1, keepdim=True) + eps) * norm.to(sdt)
    if z is not None and mimo_z is not None:
        y = y * F.silu(z.to(sdt)[:, :, None] * mimo_z.to(sdt).permute(1, 0, 2))
    out = torch.einsum("btrhp,hrp->bthp", y, mimo_o.to(sdt)) if mimo_o is not None else y
    return out.to(dtype)


MIMO_PARAMS = ("chunk_size", "rotary_dim_divisor", "fuse_pregate_norm", "norm_eps")


def mamba3_mimo(q, k, v, adt, dt, trap, q_bias, k_bias, mimo_v, angles, mimo_z=None, mimo_o=None, d=None, z=None,
                outproj_norm_weight=None, angle_state=None, ssm_state=None, k_state=None, v_state=None,
                final_angle_state=None, final_ssm_state=None, final_k_state=None, final_v_state=None, ctx=None,
                group=None, **other):
    """The sequence-sharded ssmops.autograd.mamba3_mimo: q/k (batch, S_r, R, G, N), v/z
    (batch, S_r, H, P), angles (batch, S_r, H, A) and adt/dt/trap (batch, H, S_r) are this
    rank's piece (rank order = sequence order; each at least one token); the biases, mimo_*,
    d and outproj_norm_weight are shared. The four initial states are those before the whole
    sequence (all four or none, rank 0 only). Params (chunk_size, rotary_dim_divisor,
    fuse_pregate_norm, norm_eps) as the operator's. The operator runs on the piece without
    its output stage (per-rank pre-gate y); the entering state's part, the gate, the fused
    norm and the rank reduction are torch ops. Returns out, then the final states asked for."""
    params = {k_: other.pop(k_) for k_ in MIMO_PARAMS if k_ in other}
    given = (angle_state, ssm_state, k_state, v_state)
    n, wanted = _m3_sharded_states("mamba3_mimo", other, given,
                                   (final_angle_state, final_ssm_state, final_k_state, final_v_state), group)
    if n == 1:
        finals = {f: True if w else None for f, w in zip(SISO_FINALS, wanted)}
        return ssmops.autograd.mamba3_mimo(q, k, v, adt, dt, trap, q_bias, k_bias, mimo_v, angles, mimo_z=mimo_z,
                                           mimo_o=mimo_o, d=d, z=z, outproj_norm_weight=outproj_norm_weight,
                                           **dict(zip(SISO_STATES, given)), **finals, **params, ctx=ctx)
    from . import _schema
    struct = _schema.params_struct("ssm_mamba3_mimo_params")
    fused = int(params.get("fuse_pregate_norm", struct.fuse_pregate_norm))
    eps = float(params.get("norm_eps", struct.norm_eps))
    if fused and (z is None or mimo_z is None or mimo_o is None):
        raise ValueError("ssmops.distributed.mamba3_mimo: fuse_pregate_norm needs z, mimo_z and mimo_o")
    sdt = _state_dtype(v)
    heads = v.shape[2]
    q, adt, dt, trap, angles = _widened(q, adt, dt, trap, angles)

    # 1. the piece from zero states without the output stage: y (batch, S_r, R, H, P), d·u included
    local = {k_: v_ for k_, v_ in params.items() if k_ != "fuse_pregate_norm"}
    per_rank = (v.shape[0], v.shape[1], q.shape[2], v.shape[2], v.shape[3])             # (batch, S_r, R, H, P)
    y_loc, s_loc, k_loc = ssmops.autograd.mamba3_mimo(q, k, v, adt, dt, trap, q_bias, k_bias, mimo_v, angles, d=d,
                                                      final_ssm_state=True, final_k_state=True, ctx=ctx,
                                                      **_local_out(v, per_rank), **local)
    cs = torch.cumsum(adt.to(torch.float64), dim=2)                                     # (batch, H, S_r)
    phi = _angles_from_zero(angles, dt, sdt, ctx)                                       # (batch, S_r, H, A)
    c0 = dt[:, :, 0].to(torch.float64) * torch.sigmoid(-trap[:, :, 0].to(torch.float64))
    piece = (phi[:, -1], s_loc.to(sdt), k_loc.to(sdt).permute(0, 2, 1, 3),
             v[:, -1].to(sdt), torch.exp(cs[:, :, -1]).to(sdt), c0.to(sdt))
    lift = mimo_v.to(sdt)

    def leave(state, p):
        return _mimo_leave(state, p, lift)

    # 2. the entering state
    start = None
    if angle_state is not None:
        start = (angle_state.to(sdt), ssm_state.to(sdt), k_state.to(sdt).permute(0, 2, 1, 3), v_state.to(sdt))
    state = _exchange(piece, 4, start, leave, group)

    # 3. the entering state's part of y, then the output stage
    norm = None
    if fused:
        norm = (outproj_norm_weight.reshape(heads, -1) if outproj_norm_weight is not None
                else torch.ones(heads, v.shape[3], dtype=sdt, device=v.device))
    out = _recomputed(_mimo_output, y_loc, v.dtype, cs, phi, state, piece[5], lift, q, q_bias, z, mimo_z, mimo_o,
                      norm, eps)
    if not any(wanted):
        return out
    fa, fs, fk, fv = leave(state, piece)
    finals = (fa, fs, fk.permute(0, 2, 1, 3), fv)
    return (out,) + tuple(f for f, w_ in zip(finals, wanted) if w_)
