set -u
O=$OUT/r
export SSMOPS_VT_HF=none SSMOPS_VT_PROFILE=mamba2 SSMOPS_VT_COMPARE=step,siso_step,chunk_state SSMOPS_VT_TRAIN=none
export SSMOPS_VT_CTEST_S=300 SSMOPS_VT_COMPARE_S=120 SSMOPS_VT_PROFILE_S=60 SSMOPS_VT_PYTEST_S=200
gpu/verify_and_time.sh $O
B=build-gpu
export SSMOPS_LIBRARY=$B/libssmops.so PYTHONPATH=python:.upstream
timeout 40 python3 tools/bench_overhead.py --device cuda --pool 8 --rounds 5 --calls 500 > $O/overhead.txt 2>&1
timeout 40 python3 tools/bench_overhead.py --device cuda --pool 512 --shape 256,24,64,128 --rounds 5 --calls 100 >> $O/overhead.txt 2>&1
cat $O/overhead.txt
grep -E "wgmma ran|Failed|FAIL" $O/ctest.txt | head -20
