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
