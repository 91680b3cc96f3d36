"""Trains the Mamba-2 block and the Mamba-3 SISO block of this folder for a few steps (fixed
seed, float32, AdamW) on one device and prints each step's loss on its own line:

    mamba2 <step> <loss>
    mamba3 <step> <loss>

The parameters and data are made on the CPU from the seed and then moved, so every device
starts from the same numbers and the losses can be compared across devices.

    python3 examples/python/train_steps.py --device cpu|cuda [--steps 10]
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mamba2_block  # noqa: E402
import mamba3_block  # noqa: E402

BLOCKS = {"mamba2": mamba2_block, "mamba3": mamba3_block}


def train(kind, device, steps, seed=0):
    return BLOCKS[kind].train_steps(steps, seed, device)[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args(argv)
    for kind in BLOCKS:
        for i, loss in enumerate(train(kind, a.device, a.steps)):
            print("%s %d %.9e" % (kind, i, loss))


if __name__ == "__main__":
    main()
