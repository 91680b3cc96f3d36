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
