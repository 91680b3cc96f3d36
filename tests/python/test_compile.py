"""torch.compile(fullgraph=True) through ssmops' torch.library custom ops (torch >= 2.4): the
Mamba-2 block of examples/python and a Mamba-3 SISO block compile without a graph break, and
their outputs and gradients match eager mode. On CUDA where a CUDA device is present (and its
backwards exist), else on the CPU."""
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import ssmops  # noqa: E402
from ssmops import _lib, _torch_ops  # noqa: E402

if not _torch_ops.available():
    pytest.skip("torch %s has no torch.library.custom_op / register_fake / register_autograd (torch >= 2.4): "
                "ssmops.autograd uses torch.autograd.Function there, which torch.compile does not trace"
                % torch.__version__, allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python"))
import mamba2_block  # noqa: E402
import mamba3_block  # noqa: E402


def device():
    if torch.cuda.is_available():
        needed = ("mamba2_scan_bwd", "causal_conv1d_bwd", "rmsnorm_gated_bwd", "mamba3_siso_bwd")
        if all(getattr(ssmops, n).backends & (1 << _lib.BACKENDS["cuda"]) for n in needed):
            return "cuda"
    return "cpu"


def compare(make, seqlen, seed):
    dev = device()
    torch.manual_seed(seed)
    eager = make().to(dev)
    compiled_block = make().to(dev)
    compiled_block.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_block, fullgraph=True)  # fails on any graph break
    u = torch.randn(2, seqlen, 64, device=dev)
    y_eager = eager(u)
    y_compiled = compiled(u)
    # the same kernels in the same order: only torch's own fused elementwise code may round
    # differently, so fp32 agreement to 1e-5 relative (far below any real discrepancy)
    scale = y_eager.abs().max().item()
    assert (y_compiled - y_eager).abs().max().item() <= 1e-5 * scale
    y_eager.square().mean().backward()
    y_compiled.square().mean().backward()
    for (name, p), q in zip(eager.named_parameters(), compiled_block.parameters()):
        assert q.grad is not None, name
        tol = 1e-4 * max(p.grad.abs().max().item(), 1e-12)
        assert (q.grad - p.grad).abs().max().item() <= tol, name


def test_compile_mamba2_block():
    compare(mamba2_block.Mamba2Block, 96, 0)


def test_compile_mamba3_block():
    compare(mamba3_block.Mamba3SisoBlock, 80, 1)


def test_custom_ops_registered():
    for name in ("mamba2_scan", "causal_conv1d", "rmsnorm_gated", "mamba3_angle_cumsum", "mamba3_siso",
                 "mamba3_mimo"):
        assert hasattr(torch.ops.ssmops, name) and hasattr(torch.ops.ssmops, name + "_bwd")
