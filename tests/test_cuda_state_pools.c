/*
 * test_cuda_state_pools.c — the state pools of the sequence operators (mamba2_scan,
 * causal_conv1d, mamba3_siso, mamba3_mimo: initial_state_indices / final_state_indices) and
 * causal_conv1d's cu_seqlens on the CUDA backend: test_state_pools.c's checks with every
 * tensor in device memory (see there): pooled call = the dense call's bytes, every other slot
 * untouched, in place, against REF within the bars, two runs (host and device index tensors)
 * the same bytes, invalid indices (out of range, a final slot twice, a slot read and written
 * by two sequences in place, another length, indices without their pool) failing without a
 * write, poisoned outputs. Label cuda; exits 77 without a CUDA device.
 */
#define SSMT_POOLS_ON_CUDA 1
#include "test_state_pools.c"
