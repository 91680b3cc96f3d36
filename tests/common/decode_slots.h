/*
 * decode_slots.h — the decode-step problems of tests/test_decode_slots.c (docs/ops/mamba2.md
 * "Decode slots"), shared with tests/test_cuda_decode_slots.c: Mamba-2 and Mamba-3 steps with
 * several tokens per row, padding rows, read slots ≠ write slots, and the engine's loop with
 * slot tables. The runs go through ssmt_ds_run_*: on a CUDA context every tensor (host
 * tensors, as the problems make them) is mirrored to the device and the outputs copied back
 * over the host buffers (ssmt_run_on_device), so the same checks read the same host tensors.
 */
#ifndef SSMT_DECODE_SLOTS_H
#define SSMT_DECODE_SLOTS_H

#include "testutil.h"

/* The params the runs pass (set by the problem builders, or by the caller). */
extern ssm_mamba2_params      ssmt_ds_m2_params;
extern ssm_mamba3_params      ssmt_ds_siso_params;
extern ssm_mamba3_mimo_params ssmt_ds_mimo_params;
/* 1: the runs on a CUDA context put the index tensors on the device too (else on the host). */
extern int ssmt_ds_index_dev;

ssm_status ssmt_ds_run_m2(ssm_context * c, void * args);
ssm_status ssmt_ds_run_siso(ssm_context * c, void * args);
ssm_status ssmt_ds_run_mimo(ssm_context * c, void * args);

/* A random permutation of 0..n−1 into perm. */
void ssmt_ds_shuffle(ssmt_rng * rng, int64_t * perm, int64_t n);

/* ---- mamba2_step ------------------------------------------------------------------------ */
typedef struct ssmt_ds_m2 {
    int64_t              R, T, H, P, N, G, slots;
    int64_t              lens[16];
    ssmt_host            x, dt, a, b, c, d, z, bias, state, cu, rd, wr;
    ssm_mamba2_step_args args; /* inputs */
} ssmt_ds_m2;

void ssmt_ds_m2_free(ssmt_ds_m2 * q);
/* R rows of lens[] tokens (cu_seqlens when varlen, else one token each), a pool of 2R + 2
 * slots: row b reads slot perm[b] and writes slot perm[R + b] (read ≠ write); every fourth
 * row (b % 4 == 1) is padding, and row 2 (when R > 2) computes without writing (write −1). */
void ssmt_ds_m2_make(ssmt_rng * rng, ssmt_ds_m2 * q, int64_t R, const int64_t * lens, int varlen, int64_t H, int64_t P,
                     int64_t N, int64_t G, ssm_dtype dtype, ssm_dtype sdt, int per_head, int has_z);
/* The first token of row b. */
int64_t ssmt_ds_m2_cu(const ssmt_ds_m2 * q, int64_t b);
/* The engine's loop with vLLM's slot tables on ctx (pools of dtype cdt): step A writes the
 * state after each token of row b to slot tabA[b, j]; step B reads tabA[b, max(k_b − 1, 0)]
 * through num_accepted_tokens. */
void ssmt_ds_m2_tables(ssmt_rng * rng, ssm_context * ctx, ssm_dtype cdt);

/* ---- Mamba-3 steps ------------------------------------------------------------------------ */
/* The fields of a Mamba-3 step's args struct that this file touches. */
typedef struct ssmt_ds_fields {
    ssm_tensor *in[4], *fin[4], *out, *idx, *dst;
} ssmt_ds_fields;

#define SSMT_DS_FIELDS(a)                                                                                          \
    (ssmt_ds_fields) {                                                                                             \
        {&(a)->angle_state, &(a)->ssm_state, &(a)->k_state, &(a)->v_state},                                        \
            {&(a)->final_angle_state, &(a)->final_ssm_state, &(a)->final_k_state, &(a)->final_v_state}, &(a)->out, \
            &(a)->state_batch_indices, &(a)->dst_state_batch_indices                                               \
    }

/* One Mamba-3 step problem (args: inputs with separate final buffers, poisoned; B rows, a
 * pool of `slots`, state_batch_indices with padding rows). Sets dst: each non-padding row a
 * slot no row reads, row 0 none (−1). */
void ssmt_ds_set_dst(ssmt_rng * rng, const ssmt_ds_fields * f, ssmt_host * dst, int64_t B, int64_t slots);

/* Where a Mamba-3 step's args struct keeps the fields these tests touch: the two structs
 * name them alike, so one layout per operator serves every test below. */
typedef struct ssmt_ds_layout {
    const char * op;
    ssmt_run_fn  run;
    size_t       size;
    unsigned     angle_outs; /* outputs compared modulo 2π (ssmt_op_case)                */
    size_t       tok[8];     /* q, k, v, adt, dt, trap, angles, z: T tokens in dim 0      */
    size_t       in[4], fin[4], inter[4], out, idx, dst, cu, acc;
} ssmt_ds_layout;

extern const ssmt_ds_layout ssmt_ds_siso_layout, ssmt_ds_mimo_layout;

/* Storage for either step's args. */
typedef union ssmt_ds_args {
    ssm_mamba3_siso_step_args siso;
    ssm_mamba3_mimo_step_args mimo;
} ssmt_ds_args;

static inline ssm_tensor * ssmt_ds_fld(ssmt_ds_args * a, size_t off) { return (ssm_tensor *)((char *)a + off); }

typedef struct ssmt_ds_tokens {
    const ssmt_ds_layout *   L;
    int64_t                  R, T, slots, lens[16];
    ssmt_mamba3_step_problem siso; /* T token rows; its pools have `slots` rows (SISO)    */
    ssmt_mimo_step_problem   mimo; /* the same for MIMO                                   */
    ssmt_host                cu, rd, wr;
    ssmt_ds_args             args; /* inputs, cu_seqlens, read and write slots            */
} ssmt_ds_tokens;

/* The shape of intermediate state i: pool i's with T rows. */
ssmt_host ssmt_ds_inter_alloc(const ssm_tensor * pool, int64_t T, ssm_dtype dt);
/* Shapes: SISO {H, Hq, K, V, A, z}; MIMO {H, G, R, N, P, reduce_o, z}. */
extern const int64_t ssmt_ds_siso_shapes[3][7], ssmt_ds_mimo_shapes[3][7];
/* R rows of lens[] tokens of operator L (shape shp); row b reads slot perm[b] and writes
 * perm[R + b]; every fourth row (b % 4 == 1) is padding and row 2 writes nothing. Returns
 * nonzero on failure. */
int  ssmt_ds_tokens_make(ssmt_rng * rng, ssmt_ds_tokens * q, const ssmt_ds_layout * L, int64_t R, const int64_t * lens,
                         const int64_t * shp, ssm_dtype dtype);
void ssmt_ds_tokens_free(ssmt_ds_tokens * q);
/* Case k of the several-tokens sweep of operator L: shape *shp (k % 3 of L's shapes), R = 3 +
 * k % 5 rows of 0..4 tokens (row 0 none, the last ≥ 1), dtype *dt (bf16 for k % 3 = 1, else
 * f32), made by ssmt_ds_tokens_make. Returns nonzero on failure. */
int ssmt_ds_tokens_case(ssmt_rng * rng, ssmt_ds_tokens * q, const ssmt_ds_layout * L, int k, const int64_t ** shp,
                        ssm_dtype * dt);
/* The engine's loop with slot tables on ctx (pools of dtype cdt, in place): step A stores
 * the states after each token of row b in slot tab[b, j] (equal to its intermediate
 * states); step B reads tab[b, max(k_b − 1, 0)] through num_accepted_tokens and equals the
 * same step with 1-D read slots. Then the table rules; failed calls write nothing. */
void ssmt_ds_m3_tables(ssmt_rng * rng, const ssmt_ds_layout * L, ssm_context * ctx, ssm_dtype cdt);

#endif /* SSMT_DECODE_SLOTS_H */
