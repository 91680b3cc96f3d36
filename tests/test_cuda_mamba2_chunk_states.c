/*
 * test_cuda_mamba2_chunk_states.c — mamba2_scan's chunk_states and num_computed_tokens (prefix
 * caching) on the CUDA backend: test_mamba2_chunk_states.c's cases with every tensor in device
 * memory (see there): rows against cut float64 reference runs within the bars (f32 and bf16
 * rows, f32 and bf16 inputs), chunk sizes of 8 and 96 (the CUDA scan's own chunk is 256),
 * empty sequences, mid-chunk starts, poisoned outputs, two runs the same bytes (host and device
 * index tensors), with state pools, invalid calls writing nothing. Label cuda; exits 77
 * without a CUDA device.
 */
#define SSMT_CHUNKS_ON_CUDA 1
#include "test_mamba2_chunk_states.c"
