"""ssmops.compat: upstream's call conventions give the same numbers as the direct calls, the
float64 reference agrees, and gradients flow through the training entry points."""
import numpy as np
import pytest

import ssmops
from ssmops import compat

torch = pytest.importorskip("torch")


def t(*shape, seed=[0], scale=1.0):
    seed[0] += 1
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed[0])) * scale


def rel(a, b):
    a, b = a.double(), b.double()
    return float(((a - b).norm() / b.norm()))


def test_mamba_chunk_scan_combined():
    B, S, H, P, N, G = 2, 37, 4, 8, 16, 2
    x, dt, b, c, z = t(B, S, H, P), t(B, S, H), t(B, S, G, N), t(B, S, G, N), t(B, S, H, P)
    A, D, bias, init = -torch.rand(H) - 0.5, t(H), t(H, scale=0.3), t(B, H, P, N)
    out, fs = compat.mamba_chunk_scan_combined(x, dt, A, b, c, 16, D=D, z=z, dt_bias=bias, initial_states=init,
                                               dt_softplus=True, dt_limit=(0.0, 5.0), return_final_states=True)
    with ssmops.Context(backend="ref"):
        r, rf = ssmops.mamba2_scan(x, dt, A, b, c, d=D, z=z, dt_bias=bias, initial_states=init, final_states=True,
                                   chunk_size=16, dt_softplus=1, dt_limit_hi=5.0)
    assert rel(out, r) < 1e-5 and rel(fs, rf) < 1e-5
    only = compat.mamba_chunk_scan_combined(x, dt, A, b, c, 16)
    assert isinstance(only, torch.Tensor) and only.shape == x.shape


def test_varlen_states():
    S, H, P, N = 30, 2, 4, 8
    x, dt, b, c = t(1, S, H, P), t(1, S, H), t(1, S, 1, N), t(1, S, 1, N)
    A = -torch.rand(H) - 0.5
    cu = torch.tensor([0, 7, 19, 30], dtype=torch.int32)
    seq_idx = torch.repeat_interleave(torch.arange(3, dtype=torch.int32), torch.tensor([7, 12, 11]))[None]
    out, fs, vs = compat.mamba_chunk_scan_combined(x, dt, A, b, c, 8, seq_idx=seq_idx, cu_seqlens=cu,
                                                   return_final_states=True, return_varlen_states=True)
    assert vs.shape == (3, H, P, N) and fs.shape == (1, H, P, N) and torch.equal(fs[0], vs[-1])


def test_scan_gradients_flow():
    B, S, H, P, N = 1, 20, 2, 4, 8
    x = t(B, S, H, P).requires_grad_(True)
    dt, b, c = t(B, S, H), t(B, S, 1, N), t(B, S, 1, N)
    A = (-torch.rand(H) - 0.5).requires_grad_(True)
    compat.mamba_chunk_scan_combined(x, dt, A, b, c, 8).square().sum().backward()
    assert x.grad is not None and A.grad is not None and torch.isfinite(x.grad).all()


def test_selective_state_update_in_place():
    B, H, P, N, slots = 3, 4, 8, 16, 5
    state = t(slots, H, P, N)
    x, dt, b, c = t(B, H, P), t(B, H, P), t(B, 2, N), t(B, 2, N)
    A = (-torch.rand(H, 1, 1) - 0.5).expand(H, P, N)
    idx = torch.tensor([4, 0, 2], dtype=torch.int32)
    s0 = state.clone()
    out = compat.selective_state_update(state, x, dt, A, b, c, D=t(H), dt_softplus=True, state_batch_indices=idx)
    assert out.shape == x.shape
    assert not torch.equal(state[4], s0[4]) and torch.equal(state[1], s0[1]) and torch.equal(state[3], s0[3])


def test_conv_and_norm():
    x, w, bias = t(2, 6, 11), t(6, 4), t(6)
    out, fs = compat.causal_conv1d_fn(x, w, bias, activation="silu", return_final_states=True)
    ref = torch.nn.functional.conv1d(torch.nn.functional.pad(x, (3, 0)), w[:, None, :], bias, groups=6)
    assert rel(out, torch.nn.functional.silu(ref)) < 1e-5 and torch.equal(fs, x[:, :, -3:])
    state = torch.zeros(2, 6, 3)
    y = compat.causal_conv1d_update(x[:, :, 0], state, w, bias, activation="silu")
    assert rel(y, out[:, :, 0]) < 1e-5 and torch.equal(state[:, :, -1], x[:, :, 0])
    xn, zn, wn = t(3, 5, 8), t(3, 5, 8), t(8)
    y = compat.rmsnorm_fn(xn, wn, None, z=zn, eps=1e-6, norm_before_gate=False)
    g = xn * torch.nn.functional.silu(zn)
    want = g * torch.rsqrt(g.square().mean(-1, keepdim=True) + 1e-6) * wn
    assert y.shape == xn.shape and rel(y, want) < 1e-5
    with pytest.raises(NotImplementedError):
        compat.rmsnorm_fn(xn, wn, t(8))
