"""The package on CUDA tensors (skipped without a GPU): outputs made on the inputs' device,
torch's current stream, results against the CPU backend, in-place decode pools, errors for
mixed devices, and the backward's clear NotImplementedError while it has no CUDA path."""
import pytest

import ssmops

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or ssmops.cuda_device_count() == 0,
                                reason="no CUDA device (or a build without the CUDA backend)")


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def scan_inputs(B=2, S=300, H=4, P=64, N=64, G=1, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return dict(x=r(B, S, H, P).to(dtype), dt=r(B, S, H), a=-torch.rand(H, generator=g) - 0.5,
                b=r(B, S, G, N).to(dtype), c=r(B, S, G, N).to(dtype), z=r(B, S, H, P).to(dtype), d=r(H))


def test_scan_on_cuda_matches_cpu():
    kw = scan_inputs()
    with ssmops.Context(backend="ref"):
        want = ssmops.mamba2_scan(**kw, chunk_size=64, dt_softplus=1)
    dev = {k: v.cuda() for k, v in kw.items()}
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        got = ssmops.mamba2_scan(**dev, chunk_size=64, dt_softplus=1)
    s.synchronize()
    assert got.is_cuda and got.dtype == torch.bfloat16 and got.shape == want.shape
    assert rel(got, want) < 2.0 ** -8


def test_siso_on_cuda_matches_cpu():
    B, S, H, Hq, K, V, A = 1, 200, 4, 1, 64, 64, 16
    g = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    kw = dict(q=r(B, S, Hq, K).bfloat16(), k=r(B, S, Hq, K).bfloat16(), v=r(B, S, H, V).bfloat16(),
              adt=-torch.rand(B, H, S, generator=g) * 0.5, dt=torch.rand(B, H, S, generator=g) * 0.5 + 0.1,
              trap=r(B, H, S), q_bias=r(H, K), k_bias=r(H, K), angles=r(B, S, H, A))
    with ssmops.Context(backend="ref"):
        want = ssmops.mamba3_siso(**kw, chunk_size=64)
    got = ssmops.mamba3_siso(**{k: v.cuda() for k, v in kw.items()}, chunk_size=64)
    torch.cuda.synchronize()
    assert got.is_cuda and rel(got, want) < 2.0 ** -8


def test_decode_pool_in_place_on_cuda():
    from ssmops import compat
    B, H, P, N, slots = 4, 8, 64, 128, 6
    g = torch.Generator().manual_seed(2)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    state = r(slots, H, P, N)
    x, dt, b, c = r(B, H, P), r(B, H, P), r(B, 1, N), r(B, 1, N)
    A = (-torch.rand(H, 1, 1, generator=g) - 0.5).expand(H, P, N)
    idx = torch.tensor([5, 0, 3, 1], dtype=torch.int32)
    cpu_state = state.clone()
    want = compat.selective_state_update(cpu_state, x, dt, A, b, c, dt_softplus=True, state_batch_indices=idx)
    dstate = state.cuda()
    got = compat.selective_state_update(dstate, x.cuda(), dt.cuda(), A.cuda(), b.cuda(), c.cuda(),
                                        dt_softplus=True, state_batch_indices=idx.cuda())
    torch.cuda.synchronize()
    assert rel(got, want) < 1e-5 and rel(dstate, cpu_state) < 1e-5


def test_mixed_devices_raise():
    kw = scan_inputs(S=64)
    kw["x"] = kw["x"].cuda()
    with pytest.raises(ValueError):
        ssmops.mamba2_scan(**kw)


def test_backward_on_cuda_runs_or_says_not_implemented():
    """The backward on CUDA tensors: where the schema has no CUDA path for mamba2_scan_bwd, a
    clear NotImplementedError; where it has one, the gradient matches the CPU's."""
    from ssmops import _lib
    kw = {k: v.cuda() for k, v in scan_inputs(S=64).items()}
    kw["x"].requires_grad_(True)
    y = ssmops.autograd.mamba2_scan(**kw, chunk_size=64)
    if not ssmops.mamba2_scan_bwd.backends & (1 << _lib.BACKENDS["cuda"]):
        with pytest.raises(NotImplementedError, match="mamba2_scan_bwd"):
            y.float().sum().backward()
        return
    y.float().sum().backward()
    host = {k: v.detach().cpu() for k, v in kw.items()}
    host["x"].requires_grad_(True)
    ssmops.autograd.mamba2_scan(**host, chunk_size=64).float().sum().backward()
    g, want = kw["x"].grad.cpu().double(), host["x"].grad.double()
    # bf16 inputs, so dx is bf16: each backend within DESIGN §5's bf16 rel_rms bar (2^-8) of
    # float64, so within twice that of each other
    assert float((g - want).norm() / want.norm()) <= 2 * 2.0 ** -8


def test_decode_step_in_a_cuda_graph():
    """selective_state_update with device state_batch_indices captured by torch.cuda.graph, its
    device memory from torch's caching allocator; replayed after new inputs and new slots (one
    out of range: a padding row), it gives the bytes of a direct call on the same inputs."""
    from ssmops import compat
    B, H, P, N, slots = 4, 8, 64, 128, 6
    g = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=g).cuda()  # noqa: E731
    pool = r(slots, H, P, N)
    x, dt, b, c = r(B, H, P), r(B, H, P), r(B, 1, N), r(B, 1, N)
    A = (-torch.rand(H, 1, 1, generator=g) - 0.5).cuda().expand(H, P, N)
    idx = torch.tensor([5, 0, 3, 1], dtype=torch.int32, device="cuda")
    state = pool.clone()
    with ssmops.Context(device_allocator="torch"):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # a warm-up outside the capture, as torch advises
            compat.selective_state_update(state, x, dt, A, b, c, dt_softplus=True, state_batch_indices=idx)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = compat.selective_state_update(state, x, dt, A, b, c, dt_softplus=True, state_batch_indices=idx)
        x.copy_(r(B, H, P))
        b.copy_(r(B, 1, N))
        idx.copy_(torch.tensor([2, 4, -1, 7], dtype=torch.int32))  # 7 ≥ slots: padding, as −1
        state.copy_(pool)
        graph.replay()
        torch.cuda.synchronize()
        got_out, got_state = out.clone(), state.clone()
        state.copy_(pool)
        want = compat.selective_state_update(state, x, dt, A, b, c, dt_softplus=True, state_batch_indices=idx)
        torch.cuda.synchronize()
    assert torch.equal(got_out, want) and torch.equal(got_state, state)
    assert torch.count_nonzero(got_out[2:]) == 0  # the padding rows' outputs are zeroed
