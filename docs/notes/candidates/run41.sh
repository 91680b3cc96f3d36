#!/bin/bash
# S28: one call for both: main vs all (Mamba-2 + SISO forward epilogues and fix marks) vs allnext (all + SISO gradient kernel's stagenext)
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/out}/r41
mkdir -p "$out"
nvidia-smi --query-gpu=name --format=csv,noheader > "$out/gpu.txt" 2>&1
export SSMOPS_TREES_TEST="test_cuda_mamba2 test_cuda_mamba2_bwd test_cuda_mamba3_siso test_cuda_mamba3_siso_bwd"
export SSMOPS_TREES_BENCH="mamba3_siso_bwd --backend cuda --dtype bf16 --shape B=1,S=8192,H=64,Hq=1,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1"
export SSMOPS_TREES_KERNELS="grads|sums|chain|output|fix"
export SSMOPS_TREES_TRAIN="main allnext"
export SSMOPS_TREES_TRAIN_ARGS="--only mamba2,siso --rounds 3 --kernels --memory"
export SSMOPS_TREES_SANITIZE="allnext"
export SSMOPS_TREES_CHECKS="mamba3_siso_bwd --backend cuda --dtype bf16 --shape B=1,S=300,H=12,Hq=2,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1,has_final=1;mamba2_scan --backend cuda --dtype bf16 --out-dtype f32 --shape B=1,S=333,H=2,P=72,N=40,G=1,chunk=64 --param nseq=2,has_d=1,has_z=1,has_init=1;mamba3_siso --backend cuda --dtype bf16 --shape B=1,S=333,H=4,Hq=2,K=64,V=40,A=16,chunk=64 --param has_d=1,has_z=1;mamba3_siso_bwd --backend cuda --dtype bf16 --shape B=1,S=150,H=4,Hq=1,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1;mamba2_scan --backend cuda --dtype bf16 --shape B=2,S=200,H=4,P=64,N=128,G=2,chunk=64 --param has_d=1,has_z=1,has_init=1"
timeout ${LIMIT:-585} bash gpu/compare_trees.sh "$out" main=.scratch/trees/main all=.scratch/trees/all.patch allnext=.scratch/trees/allnext.patch
echo "rc=$?" >> "$out/summary.txt"
