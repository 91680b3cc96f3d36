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


def _grad_enabled(*ts):
    t = _tensors.torch
    return t is not None and t.is_grad_enabled() and any(_tensors.is_torch(x) and x.requires_grad for x in ts
                                                          if x is not None)


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
                           state_batch_indices=None):
    """One decode token; state (batch or slots, nheads, dim, dstate) updated in place (also the
    headless (batch, dim, dstate) form with x (batch, dim)); returns out shaped like x."""
    headless = x.ndim == 2
    if headless:
        state, x, dt, A, B, C = state[:, None], x[:, None], dt[:, None], A[None], B[:, None], C[:, None]
        D = D[None] if D is not None else None
        z = z[:, None] if z is not None else None
        dt_bias = dt_bias[None] if dt_bias is not None else None
    if D is not None and D.ndim == 1:
        D = D[:, None].expand(-1, x.shape[2]) if _tensors.is_torch(D) else _broadcast(D[:, None], (D.shape[0], x.shape[2]))
    out, _ = ssmops.mamba2_step(x, dt, A, B, C, d=D, z=z, dt_bias=dt_bias, state=state, final_state=state,
                                state_batch_indices=state_batch_indices, dt_softplus=int(bool(dt_softplus)))
    return out[:, 0] if headless else out


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
