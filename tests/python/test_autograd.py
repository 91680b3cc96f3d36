"""Autograd through the library's backward: torch.autograd.gradcheck in float64 on the
reference backend (exact float64 forward and backward), for every operator with a backward."""
import numpy as np
import pytest

import ssmops

torch = pytest.importorskip("torch")


def _rand(*shape, scale=1.0, seed=[0]):
    seed[0] += 1
    g = torch.Generator().manual_seed(seed[0])
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).requires_grad_(True)


@pytest.fixture
def ref():
    with ssmops.Context(backend="ref") as ctx:
        yield ctx


def check(f, inputs):
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_mamba2_scan(ref):
    B, S, H, P, N, G = 1, 9, 2, 3, 4, 1
    x, dt, b, c = _rand(B, S, H, P), _rand(B, S, H, scale=0.5), _rand(B, S, G, N), _rand(B, S, G, N)
    a = (-torch.rand(H, dtype=torch.float64) - 0.5).requires_grad_(True)
    d, z, bias = _rand(H), _rand(B, S, H, P), _rand(H, scale=0.3)
    init = _rand(B, H, P, N)

    def f(x, dt, a, b, c, d, z, bias, init):
        return ssmops.autograd.mamba2_scan(x, dt, a, b, c, d=d, z=z, dt_bias=bias, initial_states=init,
                                           final_states=True, chunk_size=4, dt_softplus=1)
    check(f, (x, dt, a, b, c, d, z, bias, init))


def test_causal_conv1d(ref):
    x, w, bias = _rand(2, 3, 7), _rand(3, 4), _rand(3)
    check(lambda x, w, bias: ssmops.autograd.causal_conv1d(x, w, bias=bias), (x, w, bias))


def test_rmsnorm_gated(ref):
    x, z, w = _rand(5, 8), _rand(5, 8), _rand(8)
    check(lambda x, z, w: ssmops.autograd.rmsnorm_gated(x, z=z, weight=w), (x, z, w))


def test_mamba3_siso(ref):
    B, S, H, Hq, K, V, A = 1, 7, 2, 1, 4, 3, 2
    q, k, v = _rand(B, S, Hq, K), _rand(B, S, Hq, K), _rand(B, S, H, V)
    adt = (-torch.rand(B, H, S, dtype=torch.float64) * 0.5).requires_grad_(True)
    dt, trap = (torch.rand(B, H, S, dtype=torch.float64) * 0.5 + 0.1).requires_grad_(True), _rand(B, H, S)
    qb, kb, ang = _rand(H, K), _rand(H, K), _rand(B, S, H, A)

    def f(q, k, v, adt, dt, trap, qb, kb, ang):
        return ssmops.autograd.mamba3_siso(q, k, v, adt, dt, trap, q_bias=qb, k_bias=kb, angles=ang, chunk_size=4)
    check(f, (q, k, v, adt, dt, trap, qb, kb, ang))


def test_mamba3_angle_cumsum(ref):
    """Its main output is angles_cumsum (not out): its gradient reaches the backward, with and
    without the final angle state."""
    ang, dt, state = _rand(1, 6, 2, 3), (torch.rand(1, 2, 6, dtype=torch.float64) * 0.5 + 0.1).requires_grad_(True), \
        (torch.rand(1, 2, 3, dtype=torch.float64) * 2).requires_grad_(True)
    check(lambda ang, dt: ssmops.autograd.mamba3_angle_cumsum(ang, dt), (ang, dt))
    check(lambda ang, dt, state: ssmops.autograd.mamba3_angle_cumsum(ang, dt, angle_state=state, final_angle_state=True),
          (ang, dt, state))


def test_final_states_given_as_an_array_keep_their_gradient(ref):
    """An optional output written into a given array is still an output of the autograd call:
    its gradient reaches the backward as that output's (here dfinal_states)."""
    B, S, H, P, N = 1, 5, 2, 3, 4
    x, dt, b, c = _rand(B, S, H, P), _rand(B, S, H, scale=0.5), _rand(B, S, 1, N), _rand(B, S, 1, N)
    a = (-torch.rand(H, dtype=torch.float64) - 0.5).requires_grad_(True)
    _, made = ssmops.autograd.mamba2_scan(x, dt, a, b, c, final_states=True, chunk_size=4)
    made.sum().backward()
    want = x.grad.clone()
    x.grad = None
    _, given = ssmops.autograd.mamba2_scan(x, dt, a, b, c, final_states=torch.empty(B, H, P, N, dtype=torch.float64),
                                           chunk_size=4)
    given.sum().backward()
    assert torch.equal(x.grad, want)


def test_gradients_are_deterministic():
    with ssmops.Context(backend="cpu", threads=3):
        x = torch.randn(2, 3, 9, dtype=torch.float32, requires_grad=True)
        w = torch.randn(3, 4, dtype=torch.float32, requires_grad=True)
        grads = []
        for _ in range(2):
            x.grad = w.grad = None
            ssmops.autograd.causal_conv1d(x, w).sum().backward()
            grads.append((x.grad.clone(), w.grad.clone()))
        assert all(torch.equal(a, b) for a, b in zip(*grads))


def _spy(name, calls):
    """ssmops.autograd's operator `name` over a backward that records the arrays it is given."""
    real = getattr(ssmops, name + "_bwd")

    def spy(**kw):
        calls.append({k: v for k, v in kw.items() if isinstance(v, torch.Tensor)})
        return real(**kw)
    spy.schema, spy.params_name = real.schema, real.params_name
    return ssmops._autograd_module._make(name, getattr(ssmops, name), spy)


def test_mamba3_siso_keep_saved():
    """keep_pregate_y=True: the forward's pregate_y (fp32, (B, S, H, V)) reaches the backward, the
    output is that of the call without, every gradient but dz is the same bytes and dz (read from
    pregate_y by the CPU backward instead of recomputed) the same up to rounding;
    keep_chunk_states=True: the forward's chunk_states (fp32, (NCS, H, V, K), chunks of chunk_size
    tokens) reach the backward, which reads them (chunk_size a multiple of 32 on the CPU): every
    gradient the same up to rounding; by default the backward gets neither."""
    B, S, H, Hq, K, V, A = 1, 70, 4, 2, 8, 6, 2
    gen = torch.Generator().manual_seed(9)
    rn = lambda *s, scale=1.0: torch.randn(*s, generator=gen) * scale  # noqa: E731
    ins = [rn(B, S, Hq, K), rn(B, S, Hq, K), rn(B, S, H, V), -torch.rand(B, H, S, generator=gen) * 0.5,
           torch.rand(B, H, S, generator=gen) * 0.5 + 0.1, rn(B, H, S), rn(H, K, scale=0.3), rn(H, K, scale=0.3),
           rn(B, S, H, A, scale=0.5)]
    ins += [rn(H), rn(B, S, H, V)]  # d, z
    calls, outs, grads = [], [], []
    siso = _spy("mamba3_siso", calls)
    modes = ((False, False), (True, False), (False, True))
    with ssmops.Context(backend="cpu", threads=2):
        for keep_y, keep_s in modes:
            leaves = [t.clone().requires_grad_(True) for t in ins]
            out = siso(*leaves[:9], d=leaves[9], z=leaves[10], chunk_size=32, keep_pregate_y=keep_y,
                       keep_chunk_states=keep_s)
            out.square().sum().backward()
            outs.append(out.detach())
            grads.append([t.grad for t in leaves])
    assert "pregate_y" not in calls[0] and "chunk_states" not in calls[0]
    assert calls[1]["pregate_y"].shape == (B, S, H, V) and calls[1]["pregate_y"].dtype == torch.float32
    assert not torch.isnan(calls[1]["pregate_y"]).any() and "chunk_states" not in calls[1]
    assert calls[2]["chunk_states"].shape == (B * 3, H, V, K) and calls[2]["chunk_states"].dtype == torch.float32
    assert not torch.isnan(calls[2]["chunk_states"]).any() and "pregate_y" not in calls[2]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    for without, with_ in zip(grads[0][:10], grads[1][:10]):
        assert torch.equal(with_, without)
    assert torch.allclose(grads[1][10], grads[0][10], rtol=1e-5, atol=1e-6)
    for without, with_ in zip(grads[0], grads[2]):
        assert torch.allclose(with_, without, rtol=1e-4, atol=1e-5)


def test_mamba3_mimo_keep_saved():
    """keep_pregate_y=True, keep_chunk_states=True: the forward's pregate_y (fp32, (B, S, H, R, P))
    and chunk_states (fp32, (NCS, H, N, P)) reach the backward, the outputs are those of the call
    without, and the gradients are the same bytes (the CPU backward does not read them); by
    default the backward gets neither; a pregate_y= array of the call is returned, written and
    kept; the public function takes the options."""
    B, S, H, G, R, N, P = 2, 12, 2, 1, 2, 8, 4
    gen = torch.Generator().manual_seed(5)
    rn = lambda *s, scale=1.0: torch.randn(*s, generator=gen) * scale  # noqa: E731
    ins = [rn(B, S, R, G, N), rn(B, S, R, G, N), rn(B, S, H, P), -torch.rand(B, H, S, generator=gen) * 0.5,
           torch.rand(B, H, S, generator=gen) * 0.5, rn(B, H, S), rn(H, R, N, scale=0.3), rn(H, R, N, scale=0.3),
           rn(H, R, P, scale=0.5), rn(B, S, H, N // 4, scale=0.5)]
    extra = dict(mimo_z=rn(H, R, P, scale=0.5), mimo_o=rn(H, R, P, scale=0.5), d=rn(H), z=rn(B, S, H, P))
    calls = []
    mimo = _spy("mamba3_mimo", calls)
    outs, grads = [], []
    with ssmops.Context(backend="cpu", threads=2):
        for keep in (False, True):
            leaves = [t.clone().requires_grad_(True) for t in ins]
            out = mimo(*leaves, **extra, chunk_size=4, keep_pregate_y=keep, keep_chunk_states=keep)
            out.square().sum().backward()
            outs.append(out.detach())
            grads.append([t.grad for t in leaves])
        y = torch.full((B, S, H, R, P), float("nan"))
        leaves = [t.clone().requires_grad_(True) for t in ins]
        res = mimo(*leaves, **extra, pregate_y=y, chunk_size=4, keep_pregate_y=True)
        assert len(res) == 2 and res[1] is y and not torch.isnan(y).any()
        res[0].sum().backward()
        assert calls[2]["pregate_y"].data_ptr() == y.data_ptr()
        plain = ssmops.autograd.mamba3_mimo(*ins, **extra, chunk_size=4, keep_pregate_y=False,
                                            keep_chunk_states=False)
        assert torch.equal(plain, outs[0])
    assert "pregate_y" not in calls[0] and "chunk_states" not in calls[0] and "chunk_states" not in calls[2]
    assert calls[1]["pregate_y"].shape == (B, S, H, R, P) and calls[1]["pregate_y"].dtype == torch.float32
    assert calls[1]["chunk_states"].shape == (B * 3, H, N, P) and calls[1]["chunk_states"].dtype == torch.float32
    assert torch.equal(outs[0], outs[1])
    for without, with_ in zip(*grads):
        assert torch.equal(with_, without)
    with pytest.raises(TypeError, match="pregate_y"):
        ssmops.autograd.causal_conv1d(torch.randn(1, 4, 8), torch.randn(4, 3), keep_pregate_y=True)
    with pytest.raises(TypeError, match="chunk_states"):
        ssmops.autograd.causal_conv1d(torch.randn(1, 4, 8), torch.randn(4, 3), keep_chunk_states=True)
