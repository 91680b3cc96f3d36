"""The Python examples run: a Mamba-2 block on ssmops trains (every parameter gets a finite
gradient, the loss falls), and its gradients match a finite-difference probe (float64 on the
reference backend) for parameters of each stage: conv, dt bias, A, D, norm, projections."""
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python"))
import mamba2_block  # noqa: E402
import mamba3_block  # noqa: E402


def test_mamba2_block_trains():
    block, losses = mamba2_block.train_steps(steps=4)
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    for name, p in block.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_mamba2_block_gradient_probe():
    import ssmops
    with ssmops.Context(backend="ref"):  # float64 end to end: a finite difference resolves it
        probe()


def probe():
    torch.manual_seed(3)
    block = mamba2_block.Mamba2Block().double()
    u = torch.randn(1, 40, 64, dtype=torch.float64)
    block.zero_grad()
    block(u).square().sum().backward()
    for name in ("conv_weight", "conv_bias", "dt_bias", "A_log", "D", "norm_weight", "in_proj.weight",
                 "out_proj.weight"):
        w = dict(block.named_parameters())[name]
        flat, gflat = w.detach().view(-1), w.grad.view(-1)
        i = 1 % flat.numel()
        eps = 1e-6
        with torch.no_grad():
            flat[i] += eps
            up = block(u).square().sum().item()
            flat[i] -= 2 * eps
            down = block(u).square().sum().item()
            flat[i] += eps
        fd = (up - down) / (2 * eps)
        assert abs(fd - gflat[i].item()) <= 1e-5 * max(1.0, abs(fd)), (name, fd, gflat[i].item())


def test_mamba3_block_trains():
    block, losses = mamba3_block.train_steps(steps=4)
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    for name, p in block.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_mamba3_block_gradient_probe():
    import ssmops
    with ssmops.Context(backend="ref"):
        torch.manual_seed(4)
        block = mamba3_block.Mamba3SisoBlock().double()
        u = torch.randn(1, 40, 64, dtype=torch.float64)
        block.zero_grad()
        block(u).square().sum().backward()
        for name in ("dt_bias", "A_log", "q_bias", "k_bias", "D", "in_proj.weight", "out_proj.weight"):
            w = dict(block.named_parameters())[name]
            flat, gflat = w.detach().view(-1), w.grad.view(-1)
            i = 1 % flat.numel()
            eps = 1e-6
            with torch.no_grad():
                flat[i] += eps
                up = block(u).square().sum().item()
                flat[i] -= 2 * eps
                down = block(u).square().sum().item()
                flat[i] += eps
            fd = (up - down) / (2 * eps)
            assert abs(fd - gflat[i].item()) <= 1e-5 * max(1.0, abs(fd)), (name, fd, gflat[i].item())
