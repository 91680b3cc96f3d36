set -u
O=$OUT/r; mkdir -p $O
B=build-gpu
cmake -S . -B $B -DSSMOPS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release > $O/cfg.txt 2>&1
cmake --build $B -j16 > $O/build.txt 2>&1 || { grep -E "error" $O/build.txt | head; exit 1; }
echo built
(cd $B && ctest -R '^(test_cuda_mamba3_mimo|test_cuda_mamba2_bwd)$' --output-on-failure > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|FAIL" $O/ctest.txt | head -20)
export SSMOPS_LIBRARY=$B/libssmops.so PYTHONPATH=python:.upstream
timeout 100 ncu --clock-control none -k regex:'step' --launch-skip 4 --launch-count 4 python3 tools/compare_upstream.py --only siso_step --rounds 1 > $O/ncu_siso_step.txt 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Block Size|Grid Size|Theoretical Occ|Dynamic Shared|Static Shared" $O/ncu_siso_step.txt | head -60
timeout 150 ncu --clock-control none --set full -k regex:'bwd_chunk_kernel' -c 1 python3 gpu/bench_train.py --profile --only mamba2 > $O/ncu_bwd.txt 2>&1
grep -E "Duration|Throughput|Registers Per|Achieved Occupancy|Block Size|Grid Size|Dynamic Shared|Warp Cycles|Issue Slots|Executed Ipc|L1/TEX Hit|L2 Hit|Stall|smsp__pcsamp" $O/ncu_bwd.txt | head -40
