"""A Mamba-2 block as a torch.nn.Module on ssmops: in_proj -> causal conv1d (+SiLU) -> chunked
scan (D, z gate, dt bias, softplus) -> gated RMSNorm -> out_proj, with the layout of
upstream's Mamba2 module. Runs on CPU (and CUDA tensors for the forward). `python3
examples/python/mamba2_block.py` trains it for a few steps on random data and prints the loss.
"""
import math
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # a checkout's package
from ssmops import compat  # noqa: E402


class Mamba2Block(nn.Module):
    def __init__(self, d_model=64, d_state=32, headdim=16, expand=2, ngroups=1, d_conv=4, chunk_size=64):
        super().__init__()
        self.d_inner = expand * d_model
        self.nheads = self.d_inner // headdim
        self.headdim, self.d_state, self.ngroups, self.chunk_size = headdim, d_state, ngroups, chunk_size
        conv_dim = self.d_inner + 2 * ngroups * d_state
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner + 2 * ngroups * d_state + self.nheads, bias=False)
        self.conv_weight = nn.Parameter(torch.randn(conv_dim, d_conv) / math.sqrt(d_conv))
        self.conv_bias = nn.Parameter(torch.zeros(conv_dim))
        dt = torch.exp(torch.rand(self.nheads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.A_log = nn.Parameter(torch.log(torch.empty(self.nheads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.nheads))
        self.norm_weight = nn.Parameter(torch.ones(self.d_inner))
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, u):  # u (batch, seqlen, d_model)
        return self.out_proj(self.core(self.in_proj(u)))

    def core(self, zxbcdt):
        """The block between its projections: conv, scan and gated norm of in_proj's output."""
        batch, seqlen, _ = zxbcdt.shape
        z, xbc, dt = torch.split(zxbcdt, [self.d_inner, self.d_inner + 2 * self.ngroups * self.d_state,
                                          self.nheads], dim=-1)
        xbc = compat.causal_conv1d_fn(xbc.transpose(1, 2).contiguous(), self.conv_weight, self.conv_bias,
                                      activation="silu").transpose(1, 2)
        x, b, c = torch.split(xbc, [self.d_inner, self.ngroups * self.d_state, self.ngroups * self.d_state], dim=-1)
        y = compat.mamba_chunk_scan_combined(
            x.reshape(batch, seqlen, self.nheads, self.headdim), dt.contiguous(), -torch.exp(self.A_log),
            b.reshape(batch, seqlen, self.ngroups, self.d_state), c.reshape(batch, seqlen, self.ngroups, self.d_state),
            self.chunk_size, D=self.D, dt_bias=self.dt_bias, dt_softplus=True)
        return compat.rmsnorm_fn(y.reshape(batch, seqlen, self.d_inner), self.norm_weight, None, z=z, eps=1e-5,
                                 norm_before_gate=False)


def train_steps(steps=3, seed=0, device="cpu"):
    """A few AdamW steps on random data; parameters and data are made on the CPU from the seed,
    then moved to `device`, so every device starts from the same numbers."""
    torch.manual_seed(seed)
    block = Mamba2Block()
    u, target = torch.randn(2, 96, 64), torch.randn(2, 96, 64)
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
    print("Mamba-2 block on ssmops, training losses:", " ".join("%.5f" % x for x in losses))
