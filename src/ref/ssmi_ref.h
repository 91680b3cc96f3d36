/* Float64 reference backend: plain loops straight from the spec (docs/ops/mamba2.md).
 * Arguments arrive validated by ops/; these may only fail with OUT_OF_MEMORY. */
#ifndef SSMI_REF_H
#define SSMI_REF_H

#include "../core/ssmi.h"

ssm_status ssmi_ref_mamba2_chunk_cumsum(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                        const ssm_mamba2_chunk_cumsum_args * a);
ssm_status ssmi_ref_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                       const ssm_mamba2_chunk_state_args * a);
ssm_status ssmi_ref_mamba2_state_passing(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                         const ssm_mamba2_state_passing_args * a);
ssm_status ssmi_ref_mamba2_bmm(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                               const ssm_mamba2_bmm_args * a);
ssm_status ssmi_ref_mamba2_chunk_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                      const ssm_mamba2_chunk_scan_args * a);
/* Chunked: the five stages above chained in float64 (per sequence with cu_seqlens). */
ssm_status ssmi_ref_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                const ssm_mamba2_scan_args * a);
/* Token-by-token recurrence of spec §1.1/§1.4 in float64: an independent check of the
 * chunked reference (same arguments and semantics as ssmi_ref_mamba2_scan). */
ssm_status ssmi_ref_mamba2_scan_recurrent(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                          const ssm_mamba2_scan_args * a);

/* Every gradient of the combined scan (spec §2.7). */
ssm_status ssmi_ref_mamba2_scan_bwd(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                   const ssm_mamba2_scan_bwd_args * a);
/* Decode step (spec §2.9); d->slots = rows of the pool. */
ssm_status ssmi_ref_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                               const ssm_mamba2_step_args * a);

#endif
