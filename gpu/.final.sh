set -u
O=$OUT/r; mkdir -p $O
B=build-gpu
t0=$(date +%s); el() { echo "$(($(date +%s) - t0)) s"; }
cmake -S . -B $B -DSSMOPS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release > $O/cfg.txt 2>&1
cmake --build $B -j16 > $O/build.txt 2>&1 || { grep -E "error" $O/build.txt | head; exit 1; }
echo "built $(el)"
export SSMOPS_LIBRARY=$PWD/$B/libssmops.so PYTHONPATH=$PWD/python:$PWD/.upstream
(cd $B && timeout 70 ctest -j4 -R '^(test_cuda_mamba3_siso|test_cuda_decode_slots|test_cuda_mamba3_siso_portable|test_cuda_graph)$' --output-on-failure > $O/ctest.txt 2>&1) &
c=$!
(for op in mamba2_chunk_state mamba2_step mamba3_siso_step mamba3_mimo_step mamba2_scan_bwd; do echo "== memcheck $op"; timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ssmops check $op --backend cuda --dtype bf16; echo "rc=$?"; done > $O/san.txt 2>&1) &
s=$!
wait $c; grep -E "tests passed|\(Failed\)|\(Timeout\)|Not Run" $O/ctest.txt; echo "ctest $(el)"
wait $s; grep -E "^== |^rc=|ERROR SUMMARY" $O/san.txt; echo "sanitizer $(el)"
timeout 45 python3 gpu/bench_train.py --only mamba2 --rounds 3 > $O/train.txt 2>&1; grep -v -i warn $O/train.txt; echo "train $(el)"
