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


def test_selective_state_update_vllm_slots():
    """vLLM's speculative-decoding call: per-token slot tables, num_accepted_tokens, cu_seqlens;
    then the next step reads the accepted prefix's slot. Checked token by token."""
    H, P, N, slots = 2, 4, 8, 12
    pool = t(slots, H, P, N)
    starts, lens = [0, 2, 2], [2, 0, 3]
    cu = torch.tensor([0, 2, 2, 5], dtype=torch.int32)
    x, dt, b, c = t(5, H, P), t(5, H, P), t(5, 1, N), t(5, 1, N)
    A = (-torch.rand(H, 1, 1) - 0.5).expand(H, P, N)
    src = torch.tensor([[0, -1, -1], [1, -1, -1], [2, -1, -1]], dtype=torch.int32)
    dst = torch.tensor([[3, 4, -1], [5, -1, -1], [6, 7, 8]], dtype=torch.int32)
    acc = torch.ones(3, dtype=torch.int32)
    before = pool.clone()
    out = torch.empty_like(x)
    got = compat.selective_state_update(pool, x, dt, A, b, c, dt_softplus=True, state_batch_indices=src,
                                        dst_state_batch_indices=dst, num_accepted_tokens=acc, cu_seqlens=cu, out=out)
    assert got.data_ptr() == out.data_ptr()
    for r in range(3):
        st = before[int(src[r, 0])].clone()[None]
        for j in range(lens[r]):
            k = starts[r] + j
            y = ssmops.mamba2_step(x[k:k + 1], dt[k:k + 1], A, b[k:k + 1], c[k:k + 1], state=st, final_state=st,
                                   dt_softplus=1)[0]
            assert torch.equal(out[k], y[0]) and torch.equal(pool[int(dst[r, j])], st[0])
    assert torch.equal(pool[:3], before[:3]) and torch.equal(pool[9:], before[9:])
    # the next step: row 2 accepted 2 of its 3 tokens, so it resumes from dst[2, 1]
    acc2 = torch.tensor([2, 1, 2], dtype=torch.int32)
    x2, dt2, b2, c2 = t(3, H, P), t(3, H, P), t(3, 1, N), t(3, 1, N)
    cu2 = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    dst2 = torch.tensor([[9], [10], [11]], dtype=torch.int32)
    mid = pool.clone()
    y2 = compat.selective_state_update(pool, x2, dt2, A, b2, c2, dt_softplus=True, state_batch_indices=dst,
                                       dst_state_batch_indices=dst2, num_accepted_tokens=acc2, cu_seqlens=cu2)
    st = mid[7].clone()[None]
    y = ssmops.mamba2_step(x2[2:], dt2[2:], A, b2[2:], c2[2:], state=st, final_state=st, dt_softplus=1)[0]
    assert torch.equal(y2[2], y[0]) and torch.equal(pool[11], st[0])
    # a non-negative pad_slot_id marks padding rows: out 0, no slot touched
    x3, dt3, b3, c3 = t(2, H, P), t(2, H, P), t(2, 1, N), t(2, 1, N)
    mid = pool.clone()
    y3 = compat.selective_state_update(pool, x3, dt3, A, b3, c3, state_batch_indices=torch.tensor([11, 0]),
                                       dst_state_batch_indices=torch.tensor([11, 1]), pad_slot_id=11)
    assert torch.equal(y3[0], torch.zeros_like(y3[0])) and torch.equal(pool[11], mid[11])
    assert not torch.equal(pool[1], mid[1]) and torch.equal(pool[0], mid[0])


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


# ---- Mamba-3: upstream's names and conventions over ssmops' calls --------------------------
def siso_inputs(B=2, S=19, Hq=1, H=2, K=8, V=4, A=2):
    q, k, v = t(B, S, Hq, K), t(B, S, Hq, K), t(B, S, H, V)
    adt, dt, trap = -torch.rand(B, H, S) * 0.5, torch.rand(B, H, S) * 0.5, t(B, H, S)
    return q, k, v, adt, dt, trap, t(H, K, scale=0.3), t(H, K, scale=0.3), t(B, S, H, A, scale=0.5)


def test_mamba3_siso_combined():
    q, k, v, adt, dt, trap, qb, kb, ang = siso_inputs()
    D, Z = t(2), t(2, 19, 2, 4)
    states = (torch.rand(2, 2, 2) * 6, t(2, 2, 4, 8), t(2, 2, 8), t(2, 2, 4))
    res = compat.mamba3_siso_combined(q, k, v, adt, dt, trap, qb, kb, ang, D=D, Z=Z, Input_States=states,
                                      chunk_size=8, return_final_states=True)
    want = ssmops.mamba3_siso(q, k, v, adt, dt, trap, qb, kb, ang, d=D, z=Z, angle_state=states[0],
                              ssm_state=states[1], k_state=states[2], v_state=states[3], final_angle_state=True,
                              final_ssm_state=True, final_k_state=True, final_v_state=True, chunk_size=8)
    assert isinstance(res, tuple) and len(res) == 5
    for got, ref in zip(res, want):
        assert torch.equal(got, ref)
    only = compat.mamba3_siso_combined(q, k, v, adt, dt, trap, qb, kb, ang)
    assert isinstance(only, torch.Tensor) and torch.equal(only, ssmops.mamba3_siso(q, k, v, adt, dt, trap, qb, kb,
                                                                                     ang, chunk_size=64))
    with pytest.raises(ValueError):
        compat.mamba3_siso_combined(q, k, v, adt, dt, trap, qb, kb, ang, Input_States=(states[0], None, None, None))


def test_mamba3_siso_combined_varlen_and_grad():
    q, k, v, adt, dt, trap, qb, kb, ang = siso_inputs(B=1, S=23)
    cu = torch.tensor([0, 9, 23], dtype=torch.int32)
    out, fa, fs, fk, fv = compat.mamba3_siso_combined(q, k, v, adt, dt, trap, qb, kb, ang, chunk_size=8,
                                                      return_final_states=True, cu_seqlens=cu)
    assert fs.shape == (2, 2, 4, 8) and torch.equal(fv[0], v[0, 8]) and torch.equal(fv[1], v[0, 22])
    qb.requires_grad_(True)
    compat.mamba3_siso_combined(q, k, v, adt, dt, trap, qb, kb, ang).square().sum().backward()
    assert qb.grad is not None and torch.isfinite(qb.grad).all()
    with pytest.raises(ValueError):
        q2, k2, v2, adt2, dt2, trap2, qb2, kb2, ang2 = siso_inputs(B=2)
        compat.mamba3_siso_combined(q2, k2, v2, adt2, dt2, trap2, qb2, kb2, ang2, cu_seqlens=cu)


def test_mamba3_siso_step():
    B, Hq, H, K, V, A = 2, 1, 2, 8, 4, 2
    q, k, v, z = t(B, Hq, K), t(B, Hq, K), t(B, H, V), t(B, H, V)
    adt, dt, trap = -torch.rand(B, H) * 0.5, torch.rand(B, H) * 0.5, t(B, H)
    qb, kb, ang, D = t(H, K, scale=0.3), t(H, K, scale=0.3), t(B, H, A), t(H)
    states = [torch.rand(B, H, A) * 6, t(B, H, V, K), t(B, H, K), t(B, H, V)]
    before = [s.clone() for s in states]
    out, new = compat.mamba3_siso_step(q, k, v, adt, dt, trap, qb, kb, ang, D=D, Z=z, Input_States=states)
    assert isinstance(new, list) and len(new) == 4 and new[3] is v
    for s, b in zip(states, before):  # upstream's step returns new states, its inputs untouched
        assert torch.equal(s, b)
    ref = ssmops.mamba3_siso_step(q, k, v, adt, dt, trap, qb, kb, ang, d=D, z=z, angle_state=states[0],
                                  ssm_state=states[1], k_state=states[2], v_state=states[3],
                                  final_angle_state=True, final_ssm_state=True, final_k_state=True)
    for got, want in zip([out] + new[:3], ref):
        assert torch.equal(got, want)
    with pytest.raises(ValueError):
        compat.mamba3_siso_step(q, k, v, adt, dt, trap, qb, kb, ang)


def mimo_inputs(B=2, S=12, R=2, G=1, H=2, N=8, P=4, div=4):
    q, k, v, z = t(B, S, R, G, N), t(B, S, R, G, N), t(B, S, H, P), t(B, S, H, P)
    adt, dt, trap = -torch.rand(B, H, S) * 0.5, torch.rand(B, H, S) * 0.5, t(B, H, S)
    qb, kb = t(H, R, N, scale=0.3), t(H, R, N, scale=0.3)
    mv, mz, mo = t(H, R, P, scale=0.5), t(H, R, P, scale=0.5), t(H, R, P, scale=0.5)
    return q, k, v, adt, dt, trap, qb, kb, mv, mz, mo, t(B, S, H, N // div, scale=0.5), t(H), z


def test_mamba3_mimo():
    q, k, v, adt, dt, trap, qb, kb, mv, mz, mo, ang, D, z = mimo_inputs()
    out, states = compat.mamba3_mimo(q, k, v, adt, dt, trap, qb, kb, mv, mz, mo, ang, D, z, 4, 4, torch.bfloat16,
                                     return_state=True)
    want = ssmops.mamba3_mimo(q, k, v, adt, dt, trap, qb, kb, mv, ang, mimo_z=mz, mimo_o=mo, d=D, z=z,
                              final_angle_state=True, final_ssm_state=True, final_k_state=True,
                              final_v_state=True, chunk_size=4, rotary_dim_divisor=4)
    assert isinstance(states, tuple) and len(states) == 4
    for got, ref in zip((out,) + states, want):
        assert torch.equal(got, ref)
    per_rank = compat.mamba3_mimo(q, k, v, adt, dt, trap, qb, kb, mv, None, None, ang, None, None, 4, 4, None)
    assert per_rank.shape == (2, 12, 2, 2, 4)
    w = torch.rand(8) + 0.5  # flattened (nheads * headdim_v), as upstream accepts it
    fused = compat.mamba3_mimo(q, k, v, adt, dt, trap, qb, kb, mv, mz, mo, ang, D, z, 4, 4, None,
                               fuse_pregate_headwise_rms_norm=True, outproj_norm_weight=w)
    ref = ssmops.mamba3_mimo(q, k, v, adt, dt, trap, qb, kb, mv, ang, mimo_z=mz, mimo_o=mo, d=D, z=z,
                             outproj_norm_weight=w.reshape(2, 4), chunk_size=4, fuse_pregate_norm=1)
    assert torch.equal(fused, ref)


def test_mamba3_step_fn_matches_upstream_math():
    """upstream's MIMO decode step (B/C already rotated, A the rate, trap after the sigmoid),
    against its recurrence written out here in float64."""
    Bz, R, H, N, P = 2, 2, 3, 8, 4
    state, Bstate, Xstate = t(Bz, H, P, N), t(Bz, R, H, N), t(Bz, H, P)
    A, dt, trap = -torch.rand(Bz, H) - 0.5, torch.rand(Bz, H) * 0.5, torch.rand(Bz, H) * 0.8 + 0.1
    Bm, Cm, D, x, z = t(Bz, R, H, N), t(Bz, R, H, N), t(H), t(Bz, H, P), t(Bz, H, P)
    xproj, zproj, outproj = t(R, H, P, scale=0.5), t(R, H, P, scale=0.5), t(R, H, P, scale=0.5)
    f = {k: v.double() for k, v in dict(s=state, bs=Bstate, xs=Xstate, A=A, dt=dt, tr=trap, B=Bm, C=Cm, D=D, x=x,
                                         z=z, xp=xproj, zp=zproj, op=outproj).items()}
    alpha = torch.exp(f["A"] * f["dt"])
    beta, gamma = (1 - f["tr"]) * f["dt"] * alpha, f["tr"] * f["dt"]
    xv, xsv = f["x"][:, None] * f["xp"][None], f["xs"][:, None] * f["xp"][None]           # (b, r, h, p)
    new = (f["s"] * alpha[:, :, None, None]
           + torch.einsum("brhp,brhn->bhpn", xv * gamma[:, None, :, None], f["B"])
           + torch.einsum("brhp,brhn->bhpn", xsv * beta[:, None, :, None], f["bs"]))
    y = torch.einsum("bhpn,brhn->brhp", new, f["C"]) + xv * f["D"][None, None, :, None]
    zv = f["z"][:, None] * f["zp"][None]
    y = y * zv * torch.sigmoid(zv)
    want = torch.einsum("brhp,rhp->bhp", y, f["op"])
    s0 = state.clone()
    out = torch.empty(Bz, H, P)
    got = compat.mamba3_step_fn(state, Bstate, Xstate, A, Bm, Cm, D, x, dt, trap, xproj, outproj=outproj, out=out,
                                z=z, zproj=zproj)
    assert got is out
    assert rel(out, want) < 1e-5 and rel(state, new) < 1e-5          # state updated in place
    state_out = torch.empty_like(s0)
    per_rank = compat.mamba3_step_fn(s0, Bstate, Xstate, A, Bm, Cm, D, x, dt, trap, xproj, state_out=state_out)
    assert per_rank.shape == (Bz, R, H, P) and rel(state_out, new) < 1e-5
