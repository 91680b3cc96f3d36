"""A Mamba-3 SISO block as a torch.nn.Module on ssmops: in_proj -> (q, k, v, z, dt, trap,
rotary rates) -> mamba3_siso (D, z gate, q/k biases, data-dependent rotary angles, the
trapezoidal mix) -> out_proj. The projections' split follows the operator's inputs (docs/ops/
mamba3_siso.md), not a particular checkpoint's layout. `python3 examples/python/mamba3_block.py`
trains it for a few steps on random data and prints the loss."""
import math
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # a checkout's package
import ssmops  # noqa: E402


class Mamba3SisoBlock(nn.Module):
    def __init__(self, d_model=64, nheads=4, headdim=16, d_state=32, nq_heads=1, angles=8, chunk_size=32):
        super().__init__()
        self.h, self.v, self.k, self.hq, self.a, self.chunk_size = nheads, headdim, d_state, nq_heads, angles, chunk_size
        self.sizes = [nheads * headdim, nheads * headdim, nq_heads * d_state, nq_heads * d_state, nheads, nheads,
                      nheads * angles]  # z, v, q, k, dt, trap, angle rates
        self.in_proj = nn.Linear(d_model, sum(self.sizes), bias=False)
        dt = torch.exp(torch.rand(nheads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.empty(nheads).uniform_(1, 16)))
        self.q_bias = nn.Parameter(torch.zeros(nheads, d_state))
        self.k_bias = nn.Parameter(torch.zeros(nheads, d_state))
        self.D = nn.Parameter(torch.ones(nheads))
        self.out_proj = nn.Linear(nheads * headdim, d_model, bias=False)

    def forward(self, u):  # u (batch, seqlen, d_model)
        b, s, _ = u.shape
        z, v, q, k, dd_dt, trap, ang = torch.split(self.in_proj(u), self.sizes, dim=-1)
        dt = F.softplus(dd_dt + self.dt_bias)                          # (b, s, h)
        adt = dt * -torch.exp(self.A_log)
        y = ssmops.autograd.mamba3_siso(
            q.reshape(b, s, self.hq, self.k).contiguous(), k.reshape(b, s, self.hq, self.k).contiguous(),
            v.reshape(b, s, self.h, self.v).contiguous(), adt.transpose(1, 2).contiguous(),
            dt.transpose(1, 2).contiguous(), trap.transpose(1, 2).contiguous(),
            q_bias=self.q_bias, k_bias=self.k_bias, angles=ang.reshape(b, s, self.h, self.a).contiguous(),
            d=self.D, z=z.reshape(b, s, self.h, self.v).contiguous(), chunk_size=self.chunk_size)
        return self.out_proj(y.reshape(b, s, self.h * self.v))


def train_steps(steps=3, seed=0, device="cpu"):
    """A few AdamW steps on random data; parameters and data are made on the CPU from the seed,
    then moved to `device`, so every device starts from the same numbers."""
    torch.manual_seed(seed)
    block = Mamba3SisoBlock()
    u, target = torch.randn(2, 80, 64), torch.randn(2, 80, 64)
    block, u, target = block.to(device), u.to(device), target.to(device)
    opt = torch.optim.AdamW(block.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = (block(u) - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return block, losses

if __name__ == "__main__":
    _, losses = train_steps()
    print("Mamba-3 SISO block on ssmops, training losses:", " ".join("%.5f" % x for x in losses))
