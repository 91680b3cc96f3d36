#!/bin/sh
# gpu/upstream_copy.sh GIT_DIR — the side-by-side copy of upstream state-spaces/mamba (shared
# GPU.md): from a git directory of it (e.g. what the `fetch` tool returns), the files the
# benchmarks import — mamba_ssm/ops, mamba_ssm/utils, mamba_ssm/modules/ssd_minimal.py and
# tests/ops/triton — exported into .upstream/ of this tree with an empty mamba_ssm/__init__.py
# (the real one imports a CUDA extension that is not built here), and .upstream/ listed in
# .git/info/exclude so it is never committed. Carry .upstream to the GPU machine and put it on
# PYTHONPATH (gpu/bench_train.py).
set -eu
git_dir=${1:?usage: gpu/upstream_copy.sh GIT_DIR}
src=$(cd "$(dirname "$0")/.." && pwd)
dst=$src/.upstream
rm -rf "$dst"
mkdir -p "$dst"
git --git-dir="$git_dir" archive HEAD mamba_ssm/ops mamba_ssm/utils mamba_ssm/modules/ssd_minimal.py tests/ops/triton |
    tar -x -C "$dst"
: >"$dst/mamba_ssm/__init__.py"
exclude=$(git -C "$src" rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '.upstream/' "$exclude" 2>/dev/null || echo '.upstream/' >>"$exclude"
echo "upstream $(git --git-dir="$git_dir" log -1 --format=%h HEAD) in $dst"
