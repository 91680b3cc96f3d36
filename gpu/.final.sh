set -u
O=$OUT/r; mkdir -p $O
B=build-gpu
t0=$(date +%s); el() { echo "$(($(date +%s) - t0)) s"; }
SSMOPS_GPU_PHASES=none gpu/gpu_check.sh $O/.check > $O/build.txt 2>&1 || { grep -E "error" $O/.check/build.log | head; exit 1; }
echo "built $(el)"
export SSMOPS_LIBRARY=$PWD/$B/libssmops.so PYTHONPATH=$PWD/python:$PWD/.upstream
(cd $B && timeout 300 ctest -j8 -L cuda -R . --output-on-failure > $O/ctest.txt 2>&1; timeout 120 ctest -R '^test_nonfinite$' --output-on-failure >> $O/ctest.txt 2>&1) &
c=$!
(timeout 280 python3 -m pytest -q tests/python -p no:cacheprovider > $O/pytest.txt 2>&1) &
p=$!
(SSMOPS_GPU_PHASES=sanitizer SSMOPS_GPU_QUICK=1 SSMOPS_GPU_OPS="${SANOPS:-mamba2_chunk_state mamba2_step mamba3_siso_step mamba3_mimo_step mamba2_scan_bwd causal_conv1d}" timeout 290 gpu/gpu_check.sh $O/san > $O/san.txt 2>&1) &
s=$!
wait $c; grep -E "tests passed|\(Failed\)|\(Timeout\)|Not Run" $O/ctest.txt; echo "ctest $(el)"
wait $p; tail -2 $O/pytest.txt; echo "pytest $(el)"
wait $s; grep -E "sanitizer" $O/san/summary.txt | head; echo "sanitizer $(el)"
timeout 130 python3 tools/compare_upstream.py --only scan,siso,step,siso_step,chunk_state --rounds 3 --json $O/compare.json > $O/compare.txt 2>&1; cat $O/compare.txt; echo "compare $(el)"
timeout 70 python3 gpu/bench_train.py --only mamba2 --rounds 3 > $O/train.txt 2>&1; cat $O/train.txt | grep -v Warn; echo "train $(el)"
