"""Hugging Face transformers' Mamba2 model run twice on the same random weights and tokens:
with transformers' own pure-torch mixer path, and with the mixer's kernel path (its
`cuda_kernels_forward`) running on ssmops.compat's causal_conv1d_fn and
mamba_chunk_scan_combined; prints max |Δlogits| and the comparison against the bf16 bar of
DESIGN §5 (max_rel ≤ 2⁻⁴, rel_rms ≤ 2⁻⁸, relative to the torch path's logits).

transformers picks its path per call: the kernel path where its module-level kernel names
(causal_conv1d_fn, mamba_chunk_scan_combined, ...) were found and the weights are on CUDA,
else the torch path. This script sets those names to ssmops.compat's functions and points
each mixer's forward at the kernel path (on any device), so the only change between the two
runs is the conv + scan implementation (the gated norm and projections stay transformers').

    python3 examples/python/hf_mamba2_compare.py [--device cpu|cuda] [--dtype float32|bfloat16]
        [--layers 24] [--seqlen 256] [--batch 1]

Exits 0 with a message when transformers is not installed; 1 when the bar is not met.
"""
import argparse
import inspect
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # a checkout's package
from ssmops import compat  # noqa: E402

BAR_MAX_REL, BAR_REL_RMS = 2.0 ** -4, 2.0 ** -8   # DESIGN §5, bf16


def kernel_path_unavailable(*args, **kwargs):
    raise NotImplementedError("ssmops has no fused mamba_split_conv1d_scan_combined (training path): run in eval mode")


def use_ssmops(model, modeling):
    """Points transformers' kernel names at ssmops.compat and every mixer at its kernel path."""
    names = {"causal_conv1d_fn": compat.causal_conv1d_fn, "causal_conv1d_update": compat.causal_conv1d_update,
             "mamba_chunk_scan_combined": compat.mamba_chunk_scan_combined,
             "selective_state_update": compat.selective_state_update,
             "mamba_split_conv1d_scan_combined": kernel_path_unavailable, "is_fast_path_available": True}
    for k, v in names.items():
        setattr(modeling, k, v)
    mixers = [m for m in model.modules() if isinstance(m, modeling.Mamba2Mixer)]
    for mixer in mixers:
        accepted = set(inspect.signature(mixer.cuda_kernels_forward).parameters)

        def forward(hidden_states, *args, _mixer=mixer, _accepted=accepted, **kw):
            # transformers' versions differ in the arguments between hidden_states and
            # attention_mask: pass by name the ones this version's kernel path takes
            return _mixer.cuda_kernels_forward(hidden_states, *args, **{k: v for k, v in kw.items() if k in _accepted})

        mixer.forward = forward
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
    model = Mamba2ForCausalLM(cfg).to(device=a.device, dtype=dtype).eval()
    tokens = torch.randint(0, cfg.vocab_size, (a.batch, a.seqlen), device=a.device)
    with torch.no_grad():
        # transformers' torch path: its kernel names cleared (the path check reads them per call)
        modeling.is_fast_path_available = False
        ref = model(tokens, use_cache=False).logits.float()
        n = use_ssmops(model, modeling)
        got = model(tokens, use_cache=False).logits.float()
    diff = (got - ref).abs()
    rms = ref.square().mean().sqrt().item()
    max_abs = diff.max().item()
    max_rel, rel_rms = max_abs / rms, (got - ref).norm().item() / ref.norm().item()
    ok = math.isfinite(max_abs) and max_rel <= BAR_MAX_REL and rel_rms <= BAR_REL_RMS
    print("transformers %s, torch %s, %s %s: %d layers on ssmops, logits %s" % (
        transformers.__version__, torch.__version__, a.device, a.dtype, n, tuple(ref.shape)))
    print("max |dlogits| = %.6g  (rms of logits %.6g)" % (max_abs, rms))
    print("max_rel = %.6g  (bf16 bar %.6g)   rel_rms = %.6g  (bf16 bar %.6g)   %s" % (
        max_rel, BAR_MAX_REL, rel_rms, BAR_REL_RMS, "PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
