"""Hugging Face transformers' Mamba2 model run twice on the same random weights and tokens:
with transformers' own pure-torch mixer path, and with every mixer's forward replaced by the
same layer on ssmops (ssmops.compat's causal_conv1d_fn and mamba_chunk_scan_combined; the
projections and the gated norm stay transformers' modules); prints max |Δlogits| and the
comparison against the bf16 bar of DESIGN §5 (max_rel ≤ 2⁻⁴, rel_rms ≤ 2⁻⁸), relative to the
logits of transformers' torch path in float32. With --dtype bfloat16 it also prints, against the
same reference, ssmops' kernels in bfloat16 inside the float32 model (the kernels' own precision)
and transformers' own bfloat16 run (what bf16 projections and norms cost in any implementation).

The replacement forward reads only the mixer's parameters and sizes (in_proj, conv1d, A_log,
D, dt_bias, norm, out_proj, num_heads, head_dim, n_groups, ssm_state_size, ...), not its
kernel-path method, whose name and arguments change between transformers versions. Prefill
without a cache, eval mode.

    python3 examples/python/hf_mamba2_compare.py [--device cpu|cuda] [--dtype float32|bfloat16]
        [--layers 24] [--seqlen 256] [--batch 1]

Verdicts. In float32: ssmops' logits within the bf16 bar of transformers' (a float32 model has
no rounding of 16-bit tensors; the two differ by fp32 summation orders only). In bfloat16 the
bar cannot be the verdict: with random weights every layer amplifies rounding, and transformers'
own bfloat16 run misses the bar by far (rel_rms 0.03 at 4 layers, 0.3 at 24, measured on an
H200); the script prints every row against the bar and passes when ssmops' bfloat16 logits are
no farther from the float32 logits than transformers' own bfloat16 logits are (within 5%).

Exits 0 with a message when transformers is not installed; 1 when the verdict fails.
"""
import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # a checkout's package
from ssmops import compat  # noqa: E402

BAR_MAX_REL, BAR_REL_RMS = 2.0 ** -4, 2.0 ** -8   # DESIGN §5, bf16


def mixer_forward(mixer, hidden_states, kernel_dtype=None):
    """transformers' Mamba2Mixer forward (prefill, no cache) on ssmops: in_proj, split, conv1d
    + activation, the chunked scan with D, dt_bias, softplus and the dt limit, the gated norm,
    out_proj. With kernel_dtype, the conv and the scan get their inputs in that dtype and the
    scan's output goes back to the model's dtype (the kernels' own precision inside a model that
    keeps its projections and norm in float32)."""
    bsz, seqlen, _ = hidden_states.shape
    H, P, G, N = mixer.num_heads, mixer.head_dim, mixer.n_groups, mixer.ssm_state_size
    proj = mixer.in_proj(hidden_states)
    d_mlp = (proj.shape[-1] - 2 * mixer.intermediate_size - 2 * G * N - H) // 2
    _, _, gate, xbc, dt = proj.split([d_mlp, d_mlp, mixer.intermediate_size, mixer.conv_dim, H], dim=-1)
    if kernel_dtype is not None:
        xbc, dt = xbc.to(kernel_dtype), dt.to(kernel_dtype)
    xbc = compat.causal_conv1d_fn(xbc.transpose(1, 2), mixer.conv1d.weight.squeeze(1), mixer.conv1d.bias,
                                  activation=mixer.activation).transpose(1, 2)
    x, b, c = xbc.split([mixer.intermediate_size, G * N, G * N], dim=-1)
    y = compat.mamba_chunk_scan_combined(x.reshape(bsz, seqlen, H, P), dt, -torch.exp(mixer.A_log.float()),
                                         b.reshape(bsz, seqlen, G, N), c.reshape(bsz, seqlen, G, N),
                                         chunk_size=mixer.chunk_size, D=mixer.D, dt_bias=mixer.dt_bias,
                                         dt_softplus=True, dt_limit=tuple(mixer.time_step_limit))
    return mixer.out_proj(mixer.norm(y.reshape(bsz, seqlen, H * P).to(hidden_states.dtype), gate))


def use_ssmops(model, modeling, kernel_dtype=None):
    """Points every mixer's forward at mixer_forward."""
    mixers = [m for m in model.modules() if isinstance(m, modeling.Mamba2Mixer)]
    for mixer in mixers:
        mixer.forward = lambda hidden_states, *args, _m=mixer, **kw: mixer_forward(_m, hidden_states, kernel_dtype)
    return len(mixers)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--seqlen", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    # transformers runs mamba_ssm's / causal_conv1d's kernels instead of its torch path when it
    # can import them: hide them, so the reference is its pure-torch path
    for name in ("mamba_ssm", "causal_conv1d"):
        sys.modules.setdefault(name, None)
    try:
        import transformers
        from transformers import Mamba2Config, Mamba2ForCausalLM
        from transformers.models.mamba2 import modeling_mamba2 as modeling
    except ImportError as e:
        print("hf_mamba2_compare: transformers is not installed (%s): nothing to compare" % e)
        return 0
    dtype = getattr(torch, a.dtype)
    cfg = Mamba2Config(vocab_size=1024, hidden_size=768, num_hidden_layers=a.layers, num_heads=24, head_dim=64,
                       state_size=128, n_groups=1, chunk_size=256, expand=2, conv_kernel=4,
                       use_cache=False)
    torch.manual_seed(a.seed)
    model = Mamba2ForCausalLM(cfg).to(device=a.device).eval()
    tokens = torch.randint(0, cfg.vocab_size, (a.batch, a.seqlen), device=a.device)
    with torch.no_grad():
        # transformers' own path in float32 (without the mamba_ssm / causal_conv1d packages:
        # pure torch) is the reference: in bfloat16 both implementations round, and the
        # question is whether ssmops' bf16 run stays within the bf16 bar of the fp32 result
        ref = model(tokens, use_cache=False).logits.float()
        rows = []
        if dtype != torch.float32:
            use_ssmops(model, modeling, kernel_dtype=dtype)
            rows.append(("ssmops kernels in %s, model float32" % a.dtype, model(tokens, use_cache=False).logits.float()))
            for mixer in (m for m in model.modules() if isinstance(m, modeling.Mamba2Mixer)):
                del mixer.forward  # transformers' own forward again
            model = model.to(dtype)
            rows.append(("transformers %s vs float32" % a.dtype, model(tokens, use_cache=False).logits.float()))
        n = use_ssmops(model, modeling)
        got = model(tokens, use_cache=False).logits.float()
        rows.insert(0, ("ssmops %s vs float32" % a.dtype, got))
    rms = ref.square().mean().sqrt().item()
    print("transformers %s, torch %s, %s %s: %d layers on ssmops, logits %s, rms of the float32 logits %.6g" % (
        transformers.__version__, torch.__version__, a.device, a.dtype, n, tuple(ref.shape), rms))
    errs = []
    for label, x in rows:
        max_abs = (x - ref).abs().max().item()
        max_rel, rel_rms = max_abs / rms, (x - ref).norm().item() / ref.norm().item()
        in_bar = math.isfinite(max_abs) and max_rel <= BAR_MAX_REL and rel_rms <= BAR_REL_RMS
        errs.append((rel_rms, max_rel) if math.isfinite(max_abs) else (math.inf, math.inf))
        print("%-40s max |dlogits| = %.6g  max_rel = %.6g (bar %.6g)  rel_rms = %.6g (bar %.6g)  %s" % (
            label, max_abs, max_rel, BAR_MAX_REL, rel_rms, BAR_REL_RMS, "within the bar" if in_bar else "outside the bar"))
    if dtype == torch.float32:
        ok = errs[0][0] <= BAR_REL_RMS and errs[0][1] <= BAR_MAX_REL
        print("verdict (float32: ssmops within the bf16 bar of transformers): %s" % ("PASS" if ok else "FAIL"))
    else:
        ours, theirs = errs[0], errs[-1]
        ok = ours[0] <= 1.05 * theirs[0] and ours[1] <= 1.05 * theirs[1]
        print("verdict (%s: ssmops no farther from the float32 logits than transformers' own %s run, "
              "rel_rms %.4g vs %.4g, max_rel %.4g vs %.4g): %s" % (a.dtype, a.dtype, ours[0], theirs[0], ours[1],
                                                                    theirs[1], "PASS" if ok else "FAIL"))
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
