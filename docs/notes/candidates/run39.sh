#!/bin/bash
# S27: main vs epi (Mamba-2 output epilogue) vs all (epi + Mamba-2 fix marks + SISO epilogue + SISO fix marks)
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/out}/r39
mkdir -p "$out"
nvidia-smi --query-gpu=name --format=csv,noheader > "$out/gpu.txt" 2>&1
export SSMOPS_TREES_TEST="test_cuda_mamba2 test_cuda_mamba2_bwd test_cuda_mamba3_siso"
export SSMOPS_TREES_BENCH="mamba2_scan --backend cuda --dtype bf16 --shape B=1,S=8192,H=80,P=64,N=128,G=1,chunk=256 --param has_d=1,has_z=1,has_dt_bias=1,dt_softplus=1"
export SSMOPS_TREES_KERNELS="output|fix|state"
export SSMOPS_TREES_TRAIN="main all"
export SSMOPS_TREES_TRAIN_ARGS="--only mamba2,siso --rounds 3 --kernels --memory"
export SSMOPS_TREES_SANITIZE="all"
export SSMOPS_TREES_CHECKS="mamba2_scan --backend cuda --dtype bf16 --out-dtype f32 --shape B=1,S=333,H=2,P=72,N=40,G=1,chunk=64 --param nseq=2,has_d=1,has_z=1,has_init=1;mamba2_scan --backend cuda --dtype bf16 --shape B=2,S=200,H=4,P=64,N=128,G=2,chunk=64 --param has_d=1,has_z=1,has_init=1;mamba3_siso --backend cuda --dtype bf16 --shape B=1,S=333,H=4,Hq=2,K=64,V=40,A=16,chunk=64 --param has_d=1,has_z=1;mamba3_siso --backend cuda --dtype bf16 --shape B=1,S=300,H=4,Hq=1,K=128,V=64,A=32,chunk=64 --param has_d=1,has_z=1,has_final=1"
timeout 585 bash gpu/compare_trees.sh "$out" main=.scratch/trees/main epi=.scratch/trees/epi.patch all=.scratch/trees/all.patch
echo "rc=$?" >> "$out/summary.txt"
