"""Upstream's entry points over ssmops: the names, argument names and order, shapes, defaults
and return conventions of state-spaces/mamba's `mamba_chunk_scan_combined` and
`selective_state_update`, and of `rmsnorm_fn`, `causal_conv1d_fn` and `causal_conv1d_update`
(the causal-conv1d package), so that switching a script is one import line:

    from ssmops.compat import mamba_chunk_scan_combined, selective_state_update

Differences from upstream are listed in docs/python.md (states and accumulation in fp32, no
clamped exponents, per-sequence states with cu_seqlens, ...)."""
import math

import ssmops
from . import _tensors


def _library_ops():
    """Whether ssmops.autograd runs over torch.library custom ops (torch >= 2.4)."""
    if ssmops.autograd is None:
        return False
    from . import _torch_ops
    return _torch_ops.available()


_LIBRARY = _library_ops()


def _grad_enabled(*ts):
    """Whether a call takes ssmops.autograd's path: torch tensors where gradients flow, or any
    torch tensors where that path is torch.library custom ops (torch.compile traces those,
    with or without gradients)."""
    t = _tensors.torch
    if t is None:
        return False
    if _LIBRARY:
        return any(_tensors.is_torch(x) for x in ts if x is not None)
    return t.is_grad_enabled() and any(_tensors.is_torch(x) and x.requires_grad for x in ts if x is not None)


def _scan_fn(*ts):
    return ssmops.autograd.mamba2_scan if _grad_enabled(*ts) else ssmops.mamba2_scan


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
                              seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False):
    """x (batch, seqlen, nheads, headdim), dt (batch, seqlen, nheads), A (nheads), B/C (batch,
    seqlen, ngroups, dstate), D (nheads) or (nheads, headdim), z like x, dt_bias (nheads),
    initial_states (batch, nheads, headdim, dstate), seq_idx (batch, seqlen), cu_seqlens
    (nseq + 1). Returns out, then final_states if asked, then varlen_states if asked."""
    if return_varlen_states and cu_seqlens is None:
        raise ValueError("return_varlen_states needs cu_seqlens")
    want_states = return_final_states or return_varlen_states
    if cu_seqlens is not None:  # the library resets at cu_seqlens' boundaries itself (seq_idx says the same)
        seq_idx = None
    f = _scan_fn(x, dt, A, B, C, D, z, dt_bias, initial_states)
    res = f(x, dt, A, B, C, d=D, z=z, dt_bias=dt_bias, initial_states=initial_states, seq_idx=seq_idx,
            cu_seqlens=cu_seqlens, final_states=True if want_states else None, chunk_size=int(chunk_size),
            dt_softplus=int(bool(dt_softplus)), dt_limit_lo=float(dt_limit[0]), dt_limit_hi=float(dt_limit[1]))
    if not want_states:
        return res
    out, states = res
    if cu_seqlens is None:
        return (out, states)
    # with cu_seqlens the library returns each sequence's final state (upstream's varlen_states);
    # upstream's final_states is the state after the row's last token: the last sequence's
    final = states[-1:]
    if return_final_states and return_varlen_states:
        return out, final, states
    return (out, final) if return_final_states else (out, states)


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None, dst_state_batch_indices=None, pad_slot_id=-1, out=None,
                           num_accepted_tokens=None, cu_seqlens=None):
    """Decode; state (batch or slots, nheads, dim, dstate) updated in place (also the headless
    (batch, dim, dstate) form with x (batch, dim)); returns out shaped like x (written into
    `out` when given). vLLM's arguments (docs/ops/mamba2.md "Decode slots"): read slots
    `state_batch_indices` and write slots `dst_state_batch_indices`, entries equal to
    `pad_slot_id` mark padding; with `cu_seqlens` x holds every row's tokens, and with
    `num_accepted_tokens` the 2-D index tables are vLLM's speculative-decoding tables (read
    slot [b, max(k - 1, 0)], the state after token j stored in slot dst[b, j])."""
    headless = x.ndim == 2
    if headless:
        state, x, dt, A, B, C = state[:, None], x[:, None], dt[:, None], A[None], B[:, None], C[:, None]
        D = D[None] if D is not None else None
        z = z[:, None] if z is not None else None
        dt_bias = dt_bias[None] if dt_bias is not None else None
        out = out[:, None] if out is not None else None
    if D is not None and D.ndim == 1:
        D = D[:, None].expand(-1, x.shape[2]) if _tensors.is_torch(D) else _broadcast(D[:, None], (D.shape[0], x.shape[2]))
    if num_accepted_tokens is None:
        # without speculative decoding vLLM reads column 0 and writes the final state to column 0
        state_batch_indices = _column0(state_batch_indices)
        dst_state_batch_indices = _column0(dst_state_batch_indices)
    state_batch_indices = _pad_to_negative(state_batch_indices, pad_slot_id)
    dst_state_batch_indices = _pad_to_negative(dst_state_batch_indices, pad_slot_id)
    res = ssmops.mamba2_step(x, dt, A, B, C, d=D, z=z, dt_bias=dt_bias, state=state, final_state=state,
                             state_batch_indices=state_batch_indices,
                             dst_state_batch_indices=dst_state_batch_indices, cu_seqlens=cu_seqlens,
                             num_accepted_tokens=num_accepted_tokens, out=out if out is not None else True,
                             dt_softplus=int(bool(dt_softplus)))
    y = res[0]
    return y[:, 0] if headless else y


def _column0(idx):
    """A 2-D slot table's first column (vLLM's (batch, 1) form of a slot list)."""
    return idx[:, 0] if idx is not None and idx.ndim == 2 else idx


def _pad_to_negative(idx, pad_slot_id):
    """ssmops marks padding rows with any negative slot: a non-negative pad_slot_id becomes -1
    (in a copy)."""
    if idx is None or pad_slot_id is None or pad_slot_id < 0:
        return idx
    if _tensors.is_torch(idx):
        return idx.masked_fill(idx == pad_slot_id, -1)
    import numpy as np
    return np.where(idx == pad_slot_id, -1, idx).astype(idx.dtype)


def _broadcast(a, shape):
    import numpy as np
    return np.broadcast_to(a, shape)


def _activation(activation):
    if activation in (None, False):
        return 0
    if activation in ("silu", "swish", True):
        return 1
    raise ValueError("activation must be None, 'silu' or 'swish', got %r" % (activation,))


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False,
                     final_states_out=None, activation=None):
    """x (batch, dim, seqlen), weight (dim, width); returns out, and final_states (batch, dim,
    width - 1) when asked (written into final_states_out when given)."""
    grad = _grad_enabled(x, weight, bias, initial_states)
    f = ssmops.autograd.causal_conv1d if grad else ssmops.causal_conv1d
    final = (final_states_out if final_states_out is not None else True) if return_final_states else None
    res = f(x, weight, bias=bias, seq_idx=seq_idx, initial_states=initial_states, final_states=final,
            activation=_activation(activation))
    return res


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    """x (batch, dim) or (batch, dim, 1); conv_state (batch or slots, dim, state_len) updated in
    place; returns out shaped like x."""
    if cache_seqlens is not None:
        raise NotImplementedError("causal_conv1d_update: cache_seqlens (a circular conv state) is not supported")
    squeeze = x.ndim == 3
    if squeeze:
        if x.shape[2] != 1:
            raise NotImplementedError("causal_conv1d_update: one token per call (x of seqlen %d)" % x.shape[2])
        x = x[:, :, 0]
    out, _ = ssmops.causal_conv1d_update(x, weight, bias=bias, conv_state=conv_state, final_conv_state=conv_state,
                                         state_batch_indices=conv_state_indices,
                                         activation=_activation(activation))
    return out[:, :, None] if squeeze else out


def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True, upcast=True):
    """Gated RMSNorm over the last dim of x (any leading dims); bias must be None (RMSNorm)."""
    if bias is not None:
        raise NotImplementedError("rmsnorm_fn: a bias (LayerNorm) is not supported; ssmops has the RMSNorm form")
    del upcast  # ssmops always computes in fp32
    lead = x.shape[:-1]
    m = int(math.prod(lead)) if lead else 1
    x2 = x.reshape(m, x.shape[-1])
    z2 = z.reshape(m, z.shape[-1]) if z is not None else None
    grad = _grad_enabled(x, weight, z)
    f = ssmops.autograd.rmsnorm_gated if grad else ssmops.rmsnorm_gated
    out = f(x2, z=z2, weight=weight, eps=float(eps), group_size=int(group_size or 0),
            norm_before_gate=int(bool(norm_before_gate)))
    return out.reshape(x.shape)


# ---- Mamba-3 (state-spaces/mamba: mamba_ssm/ops/triton/mamba3, ops/tilelang/mamba3, ops/cute/mamba3)
def _siso_fn(*ts):
    return ssmops.autograd.mamba3_siso if _grad_enabled(*ts) else ssmops.mamba3_siso


def mamba3_siso_combined(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, Input_States=None,
                         chunk_size=64, return_final_states=False, cu_seqlens=None):
    """Q/K (batch, seqlen, nheads_qk, headdim_qk), V (batch, seqlen, nheads, headdim_v), ADT/DT/
    Trap (batch, nheads, seqlen), Q_bias/K_bias (nheads, headdim_qk), Angles (batch, seqlen,
    nheads, headdim_angles) raw rates, D (nheads), Z like V, Input_States (angle, ssm, k, v)
    states or None. Returns out, or (out, final_angle_state, final_ssm_state, final_k_state,
    final_v_state) with return_final_states."""
    states = tuple(Input_States) if Input_States is not None else (None, None, None, None)
    if any(s is None for s in states) and any(s is not None for s in states):
        raise ValueError("Input states must be provided together or all be None.")
    if cu_seqlens is not None and Q.shape[0] != 1:
        raise ValueError("Batch size must be 1 with variable-length sequences (cu_seqlens), got %d." % Q.shape[0])
    f = _siso_fn(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, *states)
    want = True if return_final_states else None
    res = f(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, d=D, z=Z, angle_state=states[0], ssm_state=states[1],
            k_state=states[2], v_state=states[3], cu_seqlens=cu_seqlens, final_angle_state=want,
            final_ssm_state=want, final_k_state=want, final_v_state=want, chunk_size=int(chunk_size))
    return tuple(res) if return_final_states else res


def mamba3_siso_step(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, Input_States=None):
    """One decode token: Q/K (batch, nheads_qk, headdim_qk), V (batch, nheads, headdim_v),
    ADT/DT/Trap (batch, nheads), Angles (batch, nheads, headdim_angles), Input_States (angle,
    ssm, k, v) (required). Returns (out, [angle_state, ssm_state, k_state, v_state]): new
    states (the inputs are not written), the last one V itself, as upstream's."""
    if Input_States is None:
        raise ValueError("mamba3_siso_step needs Input_States (angle, ssm, k, v states; zeros for a new sequence)")
    angle, ssm, k, v = Input_States
    out, fa, fs, fk = ssmops.mamba3_siso_step(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, d=D, z=Z,
                                              angle_state=angle, ssm_state=ssm, k_state=k, v_state=v,
                                              final_angle_state=True, final_ssm_state=True, final_k_state=True)
    return out, [fa, fs, fk, V]


def _mimo_fn(*ts):
    return ssmops.autograd.mamba3_mimo if _grad_enabled(*ts) else ssmops.mamba3_mimo


def mamba3_mimo(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, Angles, D, Z, chunk_size,
                rotary_dim_divisor, dtype, return_state=False, cu_seqlens=None, fuse_pregate_headwise_rms_norm=False,
                outproj_norm_weight=None, outproj_norm_eps=1e-5):
    """Q/K (batch, seqlen, mimo_rank, nheads_qk, headdim_qk), V (batch, seqlen, nheads,
    headdim_v), ADT/DT/Trap (batch, nheads, seqlen; Trap pre-sigmoid), Q_bias/K_bias (nheads,
    mimo_rank, headdim_qk), MIMO_V/MIMO_Z/MIMO_Out (nheads, mimo_rank, headdim_v; MIMO_Z and
    MIMO_Out may be None), Angles (batch, seqlen, nheads, headdim_qk // rotary_dim_divisor) raw
    rates, D (nheads) or None, Z like V or None. Returns out ((batch, seqlen, nheads, headdim_v)
    with MIMO_Out, else (batch, seqlen, mimo_rank, nheads, headdim_v)), and with return_state
    (out, (final_angle_state, final_ssm_state, final_k_state, final_v_state)). `dtype` (the
    kernels' low-precision dtype upstream) is accepted and ignored: ssmops computes in fp32."""
    del dtype
    if outproj_norm_weight is not None and outproj_norm_weight.ndim == 1:  # upstream takes it flattened too
        outproj_norm_weight = outproj_norm_weight.reshape(V.shape[2], V.shape[3])
    if fuse_pregate_headwise_rms_norm and outproj_norm_weight is None:
        outproj_norm_weight = (_tensors.torch.ones(V.shape[2], V.shape[3], dtype=_tensors.torch.float32,
                                                   device=V.device) if _tensors.is_torch(V) else None)
    if not fuse_pregate_headwise_rms_norm:
        outproj_norm_weight = None
    if Z is None or MIMO_Z is None:  # the gate needs both (upstream passes both or neither)
        Z = MIMO_Z = None
    f = _mimo_fn(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, Angles, D, Z,
                 outproj_norm_weight)
    want = True if return_state else None
    res = f(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, Angles, mimo_z=MIMO_Z, mimo_o=MIMO_Out, d=D, z=Z,
            outproj_norm_weight=outproj_norm_weight, cu_seqlens=cu_seqlens, final_angle_state=want,
            final_ssm_state=want, final_k_state=want, final_v_state=want, chunk_size=int(chunk_size),
            rotary_dim_divisor=int(rotary_dim_divisor), fuse_pregate_norm=int(bool(fuse_pregate_headwise_rms_norm)),
            norm_eps=float(outproj_norm_eps))
    return (res[0], tuple(res[1:])) if return_state else res


def mamba3_step_fn(state, Bstate, Xstate, A, B, C, D, x, dt, trap, xproj, outproj=None, state_out=None, out=None,
                   z=None, zproj=None, tile_D=64, num_warps=2):
    """The MIMO decode step of upstream's Mamba3.step (ops/cute/mamba3/mamba3_step_fn.py): one
    token with B/C already rotated and biased (apply_rotary_qk_inference_fwd), A (batch,
    nheads) the decay rate (alpha = exp(A·dt)), trap (batch, nheads) the mixing factor after
    the sigmoid. state (batch, nheads, headdim, dstate) is updated in place unless state_out
    is given; Bstate (batch, R, nheads, dstate) and Xstate (batch, nheads, headdim) are read
    only. Writes out ((batch, nheads, headdim) with outproj, else (batch, R, nheads, headdim))
    and returns it (made when None). tile_D and num_warps are kernel tuning: ignored."""
    del tile_D, num_warps
    torch = _tensors.torch
    batch, nheads, _, dstate = state.shape
    rank = Bstate.shape[1]
    # ssmops' MIMO step rotates by theta = angle_state + pi*tanh(angles)*dt and adds biases:
    # zero angles, zero angle state and zero biases make both the identity on the given B, C.
    zeros_angles = torch.zeros(1, 1, 1, dtype=torch.float32, device=state.device).expand(batch, nheads, dstate // 4)
    zeros_bias = torch.zeros(1, 1, 1, dtype=torch.float32, device=state.device).expand(nheads, rank, dstate)
    lam = trap.float()
    logit = torch.log(lam) - torch.log1p(-lam)  # ssmops takes the pre-sigmoid trap
    target = state if state_out is None else state_out
    res = ssmops.mamba3_mimo_step(
        C, B, x, A * dt, dt, logit, zeros_angles, zeros_bias, zeros_bias,
        xproj.permute(1, 0, 2), z=z if zproj is not None else None,
        mimo_z=zproj.permute(1, 0, 2) if (z is not None and zproj is not None) else None,
        mimo_o=outproj.permute(1, 0, 2) if outproj is not None else None, d=D, angle_state=zeros_angles,
        ssm_state=state, k_state=Bstate, v_state=Xstate, out=out if out is not None else True,
        final_ssm_state=target, rotary_dim_divisor=4)
    return res[0] if isinstance(res, tuple) else res
