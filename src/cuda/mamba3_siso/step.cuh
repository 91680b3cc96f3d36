/*
 * step.cuh — the SISO decode step's kernel arguments, the constants its selection rules read, and
 * the launchers of step.cu (used by the host file siso.cu).
 */
#ifndef SSMI_CUDA_SISO_STEP_CUH
#define SSMI_CUDA_SISO_STEP_CUH

#include "../common/step_plan.cuh"
#include "siso.cuh"

namespace ssmi_siso {

const int kStepThreads = 128;     /* step_warp_kernel                                       */
const int kPrefetchThreads = 256; /* step_prefetch_kernel                                   */
const int kPrefetchMaxPer = 16;   /* its float4s per thread: V·K ≤ 4·256·16 = 16384          */
const int kStepInlineSlots = 256; /* slots in the kernel parameters up to this batch        */
const int kLanesMaxThreads = 256; /* step_lanes_kernel                                      */
const int kLanesVectors = 8;      /* its float4s of state per thread (rows per lane group)  */

struct m3_step_args {
    int          H, G, K, V, A, has_d, has_z, vec;
    const int *  slots; /* (B) slot of each row, or NULL: slot = row */
    ssmi_cu_view q, k, v, adt, dt, trap, qb, kb, ang, d, z;
    ssmi_cu_view ang_in, ssm_in, k_in, v_in;
    m3_out       out, fin_ang, fin_ssm, fin_k, fin_v;
    /* The general form (several tokens per row, write slots, slot tables, intermediate_*): the
     * rows from plan (common/step_plan.cuh), step_warp_kernel only. keep: some row has more
     * than one token, so the block keeps the V×K state in shared memory between tokens. */
    int               general, keep;
    ssmi_cu_step_plan plan;
    m3_out            inter_ang, inter_ssm, inter_k, inter_v;
};

/* The arguments of the vectorised-pool kernels: the slots travel in the kernel parameters when
 * B ≤ kStepInlineSlots (no allocation, no copy); larger batches use the uploaded list base.slots. */
struct m3_step_slots_args {
    m3_step_args base;         /* vec is implied; base.slots used when inline_slots == 0 */
    int          inline_slots; /* 1: row b uses islots[b]                               */
    int          islots[kStepInlineSlots];
};
static_assert(sizeof(m3_step_slots_args) <= 4000, "the step parameters must fit the 4 KB kernel parameter space");

/* step_warp_kernel (any layout; smem: q̂, k̂, old k, v, old v, θ, and with P.keep the V×K state);
 * P.general: the general form over B plan rows. */
cudaError_t launch_step_warp(const m3_step_args & P, int B, size_t smem, cudaStream_t s);
/* step_prefetch_kernel for `per` float4s per thread (a power of two ≤ kPrefetchMaxPer). */
cudaError_t launch_step_prefetch(const m3_step_slots_args & A2, int per, int B, size_t smem, cudaStream_t s);
/* step_lanes_kernel with `threads` threads; cls: the input class (0 activations fp32, 1 activations
 * bf16, the rest fp32 in both; 2 anything else). */
cudaError_t launch_step_lanes(const m3_step_slots_args & A2, int cls, int B, int threads, cudaStream_t s);

} /* namespace ssmi_siso */

#endif /* SSMI_CUDA_SISO_STEP_CUH */
