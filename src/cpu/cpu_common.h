/*
 * cpu_common.h — what the Mamba-2 CPU drivers share: the kernel table chosen by the
 * context ISA, dt processing, index reads and per-thread scratch carving.
 */
#ifndef SSMI_CPU_COMMON_H
#define SSMI_CPU_COMMON_H

#include <math.h>

#include "../core/ssmi.h"
#include "../core/ssmi_scalar.h"
#include "kernels/gemm/gemm.h"
#include "kernels/layer/layer.h"
#include "kernels/vec/vec.h"

/* One table per ISA: scalar entries first, overridden by the best the context allows. */
typedef struct ssmi_cpu_kernels {
    const char *           name;
    ssmi_f32_gemm_fn       gemm;
    ssmi_f32_vexp_fn       vexp;
    ssmi_f32_decay_rows_fn decay_rows;
    ssmi_f32_silu_gate_fn  silu_gate;
    ssmi_load_row_fn       load_row;
    ssmi_store_row_fn      store_row;
} ssmi_cpu_kernels;

const ssmi_cpu_kernels * ssmi_cpu_kernels_for(const ssm_context * ctx);
/* The two tables themselves, for tables that extend them (mamba3_common.c). */
extern const ssmi_cpu_kernels ssmi_cpu_scalar_kernels;
extern const ssmi_cpu_kernels ssmi_cpu_avx2_kernels;
extern const ssmi_cpu_kernels ssmi_cpu_avx512_kernels;

/* Sequence s of a varlen-capable call: batch row s from token 0 (len = seqlen), or with
 * cu_seqlens row 0 from cu[s] (len = cu[s+1] − cu[s]). */
void ssmi_cpu_sequence(const ssm_tensor * cu_seqlens, int64_t seqlen, int64_t s, int64_t * row, int64_t * t0,
                       int64_t * len);
/* The rows of chunk_states (one per chunk of chunk tokens, sequence after sequence): the first
 * row of each of the nseq sequences, in an array from ssmi_alloc (the caller frees it), or NULL
 * with OUT_OF_MEMORY set on ctx. */
int64_t * ssmi_cpu_chunk_rows(ssm_context * ctx, const char * op, const ssm_tensor * cu_seqlens, int64_t seqlen,
                              int64_t nseq, int64_t chunk);


/* The layer ops' row kernels (kernels/layer), chosen the same way. A table of its own so
 * the tables that extend ssmi_cpu_kernels (mamba3_common.c) need none of these. */
typedef struct ssmi_cpu_layer_kernels {
    ssmi_f32_conv_weights_fn    conv_weights;
    ssmi_f32_conv_row_fn        conv_row;
    ssmi_f32_conv_grad_row_fn   conv_grad_row;
    ssmi_f32_conv_wgrad_row_fn  conv_wgrad_row;
    ssmi_f32_conv_dx_row_fn     conv_dx_row;
    ssmi_f32_add_row_fn         add_row;
    ssmi_f32_rmsnorm_row_fn     rmsnorm_row;
    ssmi_f32_rmsnorm_bwd_row_fn rmsnorm_bwd_row;
} ssmi_cpu_layer_kernels;

const ssmi_cpu_layer_kernels * ssmi_cpu_layer_kernels_for(const ssm_context * ctx);

/* Valid tokens of chunk c (of Q = d->chunk tokens from c·Q): min(Q, S − c·Q), at least 0. */
static inline int64_t ssmi_cpu_chunk_len(const ssmi_mamba2_dims * d, int64_t c) {
    const int64_t len = d->seqlen - c * d->chunk;
    return len < 0 ? 0 : (len > d->chunk ? d->chunk : len);
}

/* Spec §2.1, the shared rule of ssmi_scalar.h: softplus only for v ≤ 20, then the clamp,
 * always; a NaN stays NaN. */
static inline float ssmi_cpu_process_dt(float v, int softplus, float lo, float hi) {
    return ssmi_dt_rule_f32(v, softplus, lo, hi);
}

/* seq_idx[b, t] (I32 or I64). */
static inline int64_t ssmi_cpu_seq_at(const ssm_tensor * seq_idx, int64_t b, int64_t t) {
    return ssmi_get_i64(seq_idx, ssmi_off2(seq_idx, b, t));
}

/* The run of equal seq_idx ids of row b that starts at token t0 < S: sets *id to its id and returns its end (the
 * first later token with another id, or S). The scan drivers make one segment of each run. */
static inline int64_t ssmi_cpu_seq_run(const ssm_tensor * seq_idx, int64_t b, int64_t t0, int64_t S, int64_t * id) {
    *id = ssmi_cpu_seq_at(seq_idx, b, t0);
    int64_t t = t0 + 1;
    while (t < S && ssmi_cpu_seq_at(seq_idx, b, t) == *id) ++t;
    return t;
}

/* The heads per task of a driver that runs one task per (unit, block of heads) over `heads` heads: halved from `start`
 * while the tasks (units × blocks) number fewer than min_tasks and a block holds more than one head. */
static inline int64_t ssmi_cpu_head_block(int64_t heads, int64_t start, int64_t units, int64_t min_tasks) {
    int64_t hb = start;
    while (hb > 1 && units * ((heads + hb - 1) / hb) < min_tasks) hb = (hb + 1) / 2;
    return hb;
}

/* Floats rounded up to a whole cache line, so every carved buffer stays 64-byte aligned. */
static inline int64_t ssmi_cpu_lines(int64_t floats) { return (floats + 15) & ~(int64_t) 15; }

/* One buffer of a scratch carver, which carves a block of floats or, with base NULL, only counts
 * them: dst->field = base + used (NULL when counting; nothing when dst is NULL), then used grows by
 * cnt floats rounded up to whole cache lines. A carver names it TAKE over its own variables. */
#define SSMI_CPU_TAKE(dst, base, used, field, cnt)                     \
    do {                                                               \
        if (dst) (dst)->field = (base) != NULL ? (base) + (used) : NULL; \
        (used) += ssmi_cpu_lines(cnt);                                 \
    } while (0)

/* Per-thread scratch for the standalone ops (which take no workspace): one block of
 * `floats_per_thread` floats per context thread from the context allocator. NULL with an
 * OUT_OF_MEMORY error set on failure. */
float * ssmi_cpu_thread_scratch(ssm_context * ctx, const char * op, int64_t floats_per_thread);

#endif
