/*
 * step_plan.cuh — the rows of a decode step on the device, for the general forms of the three
 * steps (mamba2_step, mamba3_siso_step, mamba3_mimo_step): several tokens per row
 * (cu_seqlens), separate write slots (dst_state_batch_indices), vLLM's 2-D slot tables with
 * num_accepted_tokens (core/step_slots.h says where each row reads and writes).
 *
 * The plan is one int32 device buffer: tok (B+1) token offsets, read (B) slots (−1: a padding
 * row), write (B) slots without a token table (−1: none), col (B) the read column of a 2-D
 * read table, then the token table (B × LC, −1: none) when there is one. The host fills it
 * from its index views and uploads it (ssmi_cuda_memcpy_async: capturable in a CUDA graph,
 * the values kept by the graph). When state_batch_indices is in device memory, a small kernel
 * then fills read (and write, and the table, where they come from state_batch_indices) from it
 * on the device: no host copy, the slots may change between graph replays; an index outside
 * [0, slots) is padding (read) or no write (write, table). Every other index tensor is a host
 * view here (the dispatcher copies device ones, which synchronises).
 */
#ifndef SSMI_CUDA_STEP_PLAN_CUH
#define SSMI_CUDA_STEP_PLAN_CUH

extern "C" {
#include "../../core/step_slots.h"
}
#include "cuda_common.cuh"

/* The rows of a step as the kernels read them (device pointers into one buffer). */
struct ssmi_cu_step_plan {
    const int * tok;   /* (B+1): row b has the tokens [tok[b], tok[b+1])             */
    const int * read;  /* (B): the slot row b reads; −1: a padding row                */
    const int * write; /* (B): without a table, the slot row b writes last; −1: none  */
    const int * table; /* (B × LC): the slot the state after token j goes to; NULL: no table */
    int         LC;    /* the table's columns                                         */
};

/* Builds the plan of B rows over T tokens and `slots` pool slots on stream s into *plan; *mem
 * is its device buffer (free it with ssmi_cuda_free_async on s after the kernels that read it;
 * NULL when B == 0). *max_tokens: the most tokens of a row. UNSUPPORTED when T or a slot does
 * not fit int32; OUT_OF_MEMORY or DEVICE_ERROR from the allocation, upload or fill kernel. */
ssm_status ssmi_cuda_step_plan(ssm_context * ctx, const char * op, const ssmi_step_slots * slots, int64_t B, int64_t T,
                               int64_t nslots, cudaStream_t s, ssmi_cu_step_plan * plan, void ** mem, int * max_tokens);

#endif /* SSMI_CUDA_STEP_PLAN_CUH */
