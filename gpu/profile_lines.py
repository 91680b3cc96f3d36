#!/usr/bin/env python3
"""gpu/profile_lines.py SRC.csv.gz [--kernel REGEX] [--top N] — where a kernel's warps wait, by CUDA
source line (developer tool).

Reads the source view that gpu/gpu_profile.sh writes (OUTDIR/src_<case>.csv.gz: Nsight Compute's
SASS interleaved with the source lines of a line-info build, one section per source file and
kernel) and prints, per kernel, its stall samples ('Warp Stall Sampling (All Samples)') in total and
the N source lines holding the most of them: the share of the kernel's samples, the samples, the
three largest stall reasons of the line, file:line and the source text. A line's row in the view
already sums the samples of its SASS instructions; the instructions themselves are not read.

Example: python3 gpu/profile_lines.py OUT/src_sisobwd.csv.gz --kernel grads --top 25
"""
import argparse
import csv
import gzip
import io
import os
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def sections(path):
    """Yields (file, function, header, rows) for each section of the source view."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        text = f.read()
    fpath = func = header = None
    rows = []
    for rec in csv.reader(io.StringIO(text)):
        if not rec:
            continue
        if rec[0] == "File Path":
            if header is not None:
                yield fpath, func, header, rows
            fpath, func, header, rows = rec[1] if len(rec) > 1 else "?", None, None, []
        elif rec[0] == "Function Name":
            func = rec[1] if len(rec) > 1 else "?"
        elif rec[0] == "Line No" and header is None:
            header = rec
        elif header is not None:
            rows.append(rec)
    if header is not None:
        yield fpath, func, header, rows


def number(s):
    try:
        return float(s)
    except ValueError:
        return 0.0


def short_name(func):
    """The kernel's name without namespaces and parameter list, template arguments kept."""
    name = func.split("(")[0] if "(" in func and "<" not in func.split("(")[0] else func
    name = re.sub(r"^void\s+", "", name)
    name = re.sub(r"\(ssmi_\w+::\w+\)$", "", name)
    name = re.sub(r"(\w+::)+(<unnamed>::)?", "", name)
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="src_<case>.csv.gz of gpu/gpu_profile.sh")
    ap.add_argument("--kernel", default=".", help="regex on the kernel's name (default: every kernel)")
    ap.add_argument("--top", type=int, default=20, help="source lines per kernel (default 20)")
    args = ap.parse_args()
    want = re.compile(args.kernel)
    kernels = {}  # function -> list of (samples, file, line, source, reasons)
    for fpath, func, header, rows in sections(args.src):
        if func is None or not want.search(func):
            continue
        try:
            col = header.index(SAMPLES)
        except ValueError:
            sys.exit("%s: no column '%s' (a source view of gpu/gpu_profile.sh?)" % (args.src, SAMPLES))
        stalls = [(i, h) for i, h in enumerate(header) if h.startswith("stall_") and "(Not Issued)" not in h]
        for r in rows:
            if len(r) <= col or not r[0]:  # SASS rows have no line number
                continue
            n = number(r[col])
            if n <= 0:
                continue
            reasons = sorted(((number(r[i]), h[len("stall_"):]) for i, h in stalls if i < len(r)), reverse=True)
            kernels.setdefault(func, []).append((n, fpath, r[0], r[1], reasons[:3]))
    if not kernels:
        sys.exit("%s: no kernel matches '%s'" % (args.src, args.kernel))
    for func, lines in sorted(kernels.items(), key=lambda kv: -sum(x[0] for x in kv[1])):
        total = sum(x[0] for x in lines)
        print("%s: %d stall samples on %d source lines" % (short_name(func), total, len(lines)))
        for n, fpath, line, src, reasons in sorted(lines, key=lambda x: -x[0])[: args.top]:
            why = " ".join("%s %d%%" % (h, 100.0 * v / n) for v, h in reasons if v > 0)
            print("  %5.1f%% %8d  %-34s %s:%s  %s" % (100.0 * n / total, n, why, os.path.basename(fpath), line,
                                                   " ".join(src.split())[:90]))
        print()


if __name__ == "__main__":
    main()
