#!/bin/bash
# S28: SISO gradient kernel's load: main vs stage (no plane zeros for whole chunks, cp.async stage) vs stagenext (stage + the next head's copies issued after A2)
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/out}/r40
mkdir -p "$out"
nvidia-smi --query-gpu=name --format=csv,noheader > "$out/gpu.txt" 2>&1
export SSMOPS_TREES_TEST="test_cuda_mamba3_siso_bwd"
export SSMOPS_TREES_BENCH="mamba3_siso_bwd --backend cuda --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1"
export SSMOPS_TREES_KERNELS="grads|sums|chain"
export SSMOPS_TREES_TRAIN="main stagenext"
export SSMOPS_TREES_TRAIN_ARGS="--only siso --rounds 3 --kernels --memory"
export SSMOPS_TREES_SANITIZE="stagenext"
export SSMOPS_TREES_CHECKS="mamba3_siso_bwd --backend cuda --dtype bf16 --shape B=1,S=150,H=4,Hq=1,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1;mamba3_siso_bwd --backend cuda --dtype bf16 --shape B=1,S=300,H=12,Hq=2,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1,has_final=1"
timeout ${LIMIT:-585} bash gpu/compare_trees.sh "$out" main=.scratch/trees/main stage=.scratch/trees/stage.patch stagenext=.scratch/trees/stagenext.patch
echo "rc=$?" >> "$out/summary.txt"
