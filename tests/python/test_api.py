"""The package's API: names from the schema, errors with the library's message (and nothing
written), out= arrays, torch and numpy inputs, strided and broadcast views, DLPack objects,
contexts, threads."""
import threading

import numpy as np
import pytest

import ssmops

torch = pytest.importorskip("torch")


def scan_inputs(rng, B=2, S=40, H=4, P=8, N=16, G=2):
    return dict(x=rng.standard_normal((B, S, H, P)).astype(np.float32),
                dt=rng.standard_normal((B, S, H)).astype(np.float32),
                a=-np.exp(rng.standard_normal(H)).astype(np.float32),
                b=rng.standard_normal((B, S, G, N)).astype(np.float32),
                c=rng.standard_normal((B, S, G, N)).astype(np.float32))


def ref_scan(**kw):
    with ssmops.Context(backend="ref"):
        return ssmops.mamba2_scan(**kw)


def rel(y, r):
    y, r = np.asarray(y, np.float64), np.asarray(r, np.float64)
    return np.sqrt(np.mean((y - r) ** 2) / np.mean(r ** 2))


def test_every_operator_is_a_function():
    assert len(ssmops.OPERATORS) >= 23
    for name in ssmops.OPERATORS:
        f = getattr(ssmops, name)
        assert callable(f) and f.__name__ == name and f.__doc__.startswith("ssm_" + name)
    assert ssmops.__version__.count(".") == 2


def test_numpy_torch_and_out():
    rng = np.random.default_rng(1)
    kw = scan_inputs(rng)
    want = ref_scan(**kw, chunk_size=16, dt_softplus=1)
    got = ssmops.mamba2_scan(**kw, chunk_size=16, dt_softplus=1)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and rel(got, want) < 1e-5
    tkw = {k: torch.from_numpy(v) for k, v in kw.items()}
    tkw["x"] = tkw["x"].to(torch.bfloat16)
    got = ssmops.mamba2_scan(**tkw, chunk_size=16, dt_softplus=1)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    assert rel(got.float().numpy(), want) < 2.0 ** -8
    out = np.full(kw["x"].shape, np.nan, np.float64)
    res = ssmops.mamba2_scan(**kw, out=out, chunk_size=16, dt_softplus=1)
    assert res is out and rel(out, want) < 1e-5


def test_strided_and_broadcast_views():
    rng = np.random.default_rng(2)
    kw = scan_inputs(rng)
    want = ref_scan(**kw)
    big = np.zeros((2, 40, 4, 16), np.float32)
    big[..., ::2] = kw["x"]
    xs = big[..., ::2]                               # a stride-2 last dim
    assert not xs.flags.c_contiguous
    got = ssmops.mamba2_scan(xs, kw["dt"], kw["a"], kw["b"], kw["c"])
    assert rel(got, want) < 1e-5
    d = np.broadcast_to(np.float32(0.5), (4,))       # a stride-0 view
    got = ssmops.mamba2_scan(**kw, d=d)
    want = ref_scan(**kw, d=np.full(4, 0.5, np.float32))
    assert rel(got, want) < 1e-5


def test_dlpack_object():
    class Capsule:  # only __dlpack__, as CuPy or JAX arrays present themselves
        def __init__(self, t):
            self.t = t
            self.shape = tuple(t.shape)

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__()

    rng = np.random.default_rng(3)
    kw = scan_inputs(rng)
    want = ref_scan(**kw)
    tkw = {k: torch.from_numpy(v) for k, v in kw.items()}
    got = ssmops.mamba2_scan(Capsule(tkw["x"]), tkw["dt"], tkw["a"], tkw["b"], tkw["c"])
    assert rel(got.numpy(), want) < 1e-5


def test_errors_carry_the_message_and_write_nothing():
    rng = np.random.default_rng(4)
    kw = scan_inputs(rng)
    out = np.full(kw["x"].shape, 7.0, np.float32)
    with pytest.raises(ValueError) as e:
        ssmops.mamba2_scan(kw["x"], kw["dt"][:, :, :3], kw["a"], kw["b"], kw["c"], out=out)
    assert e.value.status == "INVALID_SHAPE" and "mamba2_scan" in str(e.value) and "dt" in str(e.value)
    assert (out == 7.0).all()
    with pytest.raises(ValueError) as e:
        ssmops.mamba2_scan(**kw, chunk_size=0)
    assert "chunk_size" in str(e.value)
    with pytest.raises(ValueError):
        ssmops.mamba2_scan(kw["x"].astype(np.int16), kw["dt"], kw["a"], kw["b"], kw["c"])
    with pytest.raises(TypeError):
        ssmops.mamba2_scan(**kw, no_such_keyword=1)
    with pytest.raises(TypeError):
        ssmops.mamba2_scan(kw["x"])


def test_context_settings():
    with pytest.raises(ValueError):
        ssmops.Context(backend="tpu")
    with pytest.raises(ValueError):
        ssmops.Context(device_allocator="cudaMalloc")
    with pytest.raises(ValueError) as e:  # the CPU backend has no selection tables
        ssmops.Context(backend="cuda", variants={"mamba2_scan": "no_such_variant"})
    assert "no_such_variant" in str(e.value)
    rng = np.random.default_rng(5)
    kw = scan_inputs(rng)
    outs = []
    for threads in (1, 2, 3):
        with ssmops.Context(backend="cpu", threads=threads):
            outs.append(ssmops.mamba2_scan(**kw))
    assert all(np.array_equal(outs[0], o) for o in outs[1:])  # bitwise, any thread count
    with ssmops.Context(backend="cpu", cuda_portable=True):  # a CUDA choice only: CPU results unchanged
        assert np.array_equal(ssmops.mamba2_scan(**kw), outs[0])


def test_python_threads_at_once():
    rng = np.random.default_rng(6)
    kw = scan_inputs(rng)
    want = ssmops.mamba2_scan(**kw)
    bad = []

    def work():
        for _ in range(20):
            if not np.array_equal(ssmops.mamba2_scan(**kw), want):
                bad.append(1)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


def test_every_output_given_as_torch_tensors():
    # a decode step with out= and the pool in place, all torch tensors: nothing to make
    B, H, P, N = 2, 3, 4, 8
    x, dt, b, c = torch.randn(B, H, P), torch.randn(B, H, P), torch.randn(B, 1, N), torch.randn(B, 1, N)
    A = -torch.rand(H, P, N)
    state, out = torch.randn(B, H, P, N), torch.empty(B, H, P)
    want_state = state.clone()
    with ssmops.Context(backend="ref"):
        want, _ = ssmops.mamba2_step(x, dt, A, b, c, state=want_state, final_state=want_state)
    res = ssmops.mamba2_step(x, dt, A, b, c, state=state, final_state=state, out=out)
    assert res[0] is out and res[1] is state
    assert rel(out.numpy(), want.numpy()) < 1e-5 and rel(state.numpy(), want_state.numpy()) < 1e-5


def test_bound_call_reruns_on_the_bound_arrays():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(5)
    B, H, P, N = 2, 3, 4, 8
    x, z = torch.randn(B, H, P, generator=g), torch.randn(B, H, P, generator=g)
    dt = torch.rand(B, H, P, generator=g)
    A = (-torch.rand(H, 1, 1, generator=g)).expand(H, P, N)
    b, c = torch.randn(B, 1, N, generator=g), torch.randn(B, 1, N, generator=g)
    state, out = torch.randn(B, H, P, N, generator=g), torch.empty(B, H, P)
    ref_state = state.clone()
    step = ssmops.mamba2_step.bind(x, dt, A, b, c, z=z, state=state, out=out, final_state=state, dt_softplus=1)
    for i in range(3):
        x.copy_(torch.randn(B, H, P, generator=g))          # a new token, written in place
        got = step()                                     # the outputs it writes, as the direct call
        assert got[0] is out and got[1] is state
        want, ref_state = ssmops.mamba2_step(x, dt, A, b, c, z=z, state=ref_state, final_state=True, dt_softplus=1)
        assert torch.equal(out, want) and torch.equal(state, ref_state), i
    made = ssmops.mamba2_scan.bind(x[:, None], dt[:, None, :, 0], A[:, 0, 0], b[:, None], c[:, None])
    assert torch.equal(made(), ssmops.mamba2_scan(x[:, None], dt[:, None, :, 0], A[:, 0, 0], b[:, None], c[:, None]))
    bad = ssmops.mamba2_scan.bind(x[:, None], dt[:, None, :, 0], A[:, 0, 0], b[:, None], c[:, None], chunk_size=0)
    with pytest.raises(ssmops.SsmValueError):
        bad()


def test_output_specs_match_the_outputs_made():
    """output_specs (what torch.library's fake implementations use) gives the shapes and
    dtype codes of the outputs a real call makes."""
    torch = pytest.importorskip("torch")
    from ssmops import _tensors
    g = torch.Generator().manual_seed(6)
    x, dt = torch.randn(2, 37, 4, 8, generator=g), torch.rand(2, 37, 4, generator=g)
    A, b, c = -torch.rand(4, generator=g), torch.randn(2, 37, 1, 16, generator=g), torch.randn(2, 37, 1, 16, generator=g)
    calls = [(ssmops.mamba2_scan, (x, dt, A, b, c), dict(final_states=True, chunk_size=16)),
             (ssmops.mamba2_scan_bwd, (x, dt, A, b, c, x), dict(dx=True, da=True, dc=True, chunk_size=16)),
             (ssmops.mamba2_scan, (x.double(), dt.double(), A.double(), b.double(), c.double()), {}),
             (ssmops.rmsnorm_gated, (x.reshape(-1, 8), ), dict(weight=torch.ones(8), z=x.reshape(-1, 8)))]
    for f, args, kw in calls:
        specs = f.output_specs(*args, **kw)
        res = f(*args, **kw)
        res = res if isinstance(res, tuple) else (res,)
        assert len(specs) == len(res)
        for (name, shape, code), t in zip(specs, res):
            assert tuple(shape) == tuple(t.shape) and _tensors.dtype_code(t) == code, (f.__name__, name)


def test_required_output_false_is_made():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 8)
    y = ssmops.rmsnorm_gated(x, weight=torch.ones(8), out=False)
    assert y.shape == (3, 8)


def test_torch_device_allocator_context():
    """A context whose CUDA device memory comes from torch's caching allocator is created, and
    host calls under it do not touch the allocator (it serves the CUDA backend only)."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    kw = scan_inputs(rng)
    with ssmops.Context(backend="cpu", device_allocator="torch"):
        got = ssmops.mamba2_scan(**kw)
    with ssmops.Context(backend="cpu"):
        want = ssmops.mamba2_scan(**kw)
    assert np.array_equal(got, want)


def test_outputs_follow_each_calls_inputs():
    """The outputs a call makes follow that call's shapes, dtypes, framework and options, also
    when calls with other signatures came in between (the package reuses the output plan of a
    signature it has seen)."""
    rng = np.random.default_rng(2)
    for B, S, chunk, final, torch_in, bf16 in [(2, 40, 16, 0, False, False), (1, 9, 4, 1, True, False),
                                               (2, 40, 16, 0, True, True), (3, 17, 8, 1, False, False),
                                               (2, 40, 16, 0, False, False), (1, 9, 4, 1, True, False)]:
        kw = scan_inputs(rng, B=B, S=S)
        want = ref_scan(**kw, chunk_size=chunk, dt_softplus=1)
        if torch_in:
            kw = {k: torch.from_numpy(v) for k, v in kw.items()}
            if bf16:
                kw["x"] = kw["x"].to(torch.bfloat16)
        got = ssmops.mamba2_scan(**kw, chunk_size=chunk, dt_softplus=1, final_states=bool(final))
        out = got[0] if final else got
        assert isinstance(out, torch.Tensor if torch_in else np.ndarray)
        assert tuple(out.shape) == (B, S, 4, 8)
        assert out.dtype == (torch.bfloat16 if bf16 else torch.float32 if torch_in else np.float32)
        if final:
            assert tuple(got[1].shape) == (B, 4, 8, 16)
        y = out.float().numpy() if torch_in else out
        assert rel(y, want) < (2.0 ** -8 if bf16 else 1e-5)
