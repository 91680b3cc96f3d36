"""Every operator through the Python package on the test vectors of tests/data (outputs from
upstream's own reference code): numpy inputs, and torch inputs in bf16 where the case is bf16;
the CPU backend and the float64 reference, against the stored outputs by the dtype's bar."""
import json
from pathlib import Path

import numpy as np
import pytest

import ssmops

DATA = Path(__file__).resolve().parents[1] / "data"
BARS = {"f32": 1e-5, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}   # rel_rms bars of DESIGN §5 (f32: fp32 compute)
CASES = sorted(p for p in DATA.glob("*/*") if (p / "case.json").is_file())


def _params(op, params):
    """The CLI keys of a case as the params struct's fields."""
    out = {}
    for k, v in params.items():
        if k == "chunk":
            out["chunk_size"] = int(v)
        elif k == "div":
            out["rotary_dim_divisor"] = int(v)
        elif k == "dt_limit":
            lo, hi = (float(x) for x in str(v).split(":"))
            out["dt_limit_lo"], out["dt_limit_hi"] = lo, hi
        elif k == "fuse_pregate_headwise_rms_norm":
            out["fuse_pregate_norm"] = int(v)
        elif k == "outproj_norm_eps":
            out["norm_eps"] = float(v)
        elif k == "dt_softplus":
            out["dt_softplus"] = int(v)
        else:
            return None  # a CLI-only key (layout=cann): not a call of the C API as stored
    return out


def rel_rms(y, r):
    y = np.asarray(y, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    return float(np.sqrt(np.mean((y - r) ** 2)) / max(np.sqrt(np.mean(r ** 2)), 1e-300))


@pytest.mark.parametrize("case", CASES, ids=lambda p: "%s/%s" % (p.parent.name, p.name))
@pytest.mark.parametrize("backend", ["cpu", "ref"])
def test_vector(case, backend):
    spec = json.loads((case / "case.json").read_text())
    op = getattr(ssmops, spec["op"])
    params = _params(spec["op"], spec.get("params", {}))
    if params is None:
        pytest.skip("a CLI-only layout key: covered by the CLI's run tests")
    names = {a.name: a for a in op.schema}
    kw = {}
    for name in spec["inputs"]:
        arr = np.load(case / (name + ".npy"))
        if names[name].cls == 1:  # index tensor
            kw[name] = np.ascontiguousarray(arr)
        else:
            arr = np.ascontiguousarray(arr.astype(np.float32))
            dims = ssmops._schema.shape_symbols(names[name].shape, set(spec["inputs"]))
            if dims is not None and arr.ndim < len(dims):
                # a per-head form stored compact (a (H) for (H, P, N)): the stride-0 view upstream
                # passes, broadcast over the trailing dims
                full = tuple(int(spec["shape"].get(d, arr.shape[i] if i < arr.ndim else 1)) for i, d in enumerate(dims))
                arr = np.broadcast_to(arr.reshape(arr.shape + (1,) * (len(dims) - arr.ndim)), full)
            kw[name] = arr
    outputs = [o for o in spec["outputs"] if (case / (o + ".npy")).is_file() and o in names]
    for o in outputs:
        kw[o] = True
    with ssmops.Context(backend=backend, threads=2):
        got = op(**kw, **params)
    if not isinstance(got, tuple):
        got = (got,)
    produced = [a.name for a in op.schema if a.output and kw.get(a.name) is not None]
    assert len(got) == len(produced)
    bar = BARS.get(spec.get("dtype", "f32"), 1e-5) if backend == "cpu" else 1e-5
    for name, y in zip(produced, got):
        if name not in outputs:
            continue
        want = np.load(case / (name + ".npy"))
        assert y.shape == want.shape, name
        err = rel_rms(y, want)
        assert err <= max(bar, 1e-5), "%s: rel_rms %.3g over %.3g" % (name, err, bar)
