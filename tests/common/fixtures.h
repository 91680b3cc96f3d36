/*
 * fixtures.h — every public operator as a ready-to-run fixture (tests/common/fixtures.c), for
 * the tests that treat all operators alike: allocation failure at every site
 * (test_alloc_failure.c) and concurrent callers (test_concurrency.c).
 *
 * A fixture owns one small problem: valid, seeded random inputs and NaN-poisoned outputs, with
 * every optional input and output of its variant present. ssmt_fixture_run calls the operator
 * with a context; `outs` lists the output views, so that a test can fill, save, compare and
 * restore their bytes. No fixture shares a buffer with another, and no input is also an output
 * (decode steps write a separate final pool), so a fixture run twice gives the same bytes, and
 * fixtures built from the same seed are byte-identical: one set per thread for concurrent runs.
 */
#ifndef SSMOPS_FIXTURES_H
#define SSMOPS_FIXTURES_H

#include "testutil.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SSMT_FIXTURE_MAX_OUTS 20
#define SSMT_FIXTURE_MAX_HOSTS 24

typedef struct ssmt_fixture ssmt_fixture;
typedef ssm_status (*ssmt_fixture_fn)(ssm_context * ctx, const ssmt_fixture * f);

struct ssmt_fixture {
    char            name[64];                         /* "mamba2_scan/varlen": operator, then the variant            */
    const char *    op;                               /* the operator's name without ssm_, as its messages name it  */
    ssm_tensor      outs[SSMT_FIXTURE_MAX_OUTS];      /* output views (present ones only)  */
    const char *    out_names[SSMT_FIXTURE_MAX_OUTS]; /* their argument names ("dq", ...)  */
    int             nouts;
    ssmt_fixture_fn run;
    /* what the run passes: */
    union {
        ssm_mamba2_params      m2;
        ssm_conv1d_params      conv;
        ssm_rmsnorm_params     norm;
        ssm_mamba3_params      m3;
        ssm_mamba3_mimo_params mimo;
    } params;
    union {
        ssm_mamba2_chunk_cumsum_args     cumsum;
        ssm_mamba2_chunk_state_args      chunk_state;
        ssm_mamba2_state_passing_args    passing;
        ssm_mamba2_bmm_args              bmm;
        ssm_mamba2_chunk_scan_args       chunk_scan;
        ssm_mamba2_scan_args             scan;
        ssm_mamba2_scan_bwd_args         scan_bwd;
        ssm_mamba2_step_args             m2_step;
        ssm_causal_conv1d_args           conv;
        ssm_causal_conv1d_bwd_args       conv_bwd;
        ssm_causal_conv1d_update_args    conv_update;
        ssm_rmsnorm_gated_args           norm;
        ssm_rmsnorm_gated_bwd_args       norm_bwd;
        ssm_mamba3_angle_cumsum_args     angle;
        ssm_mamba3_angle_cumsum_bwd_args angle_bwd;
        ssm_mamba3_siso_fwd_args         siso_fwd;
        ssm_mamba3_siso_args             siso;
        ssm_mamba3_siso_bwd_args         siso_bwd;
        ssm_mamba3_siso_step_args        siso_step;
        ssm_mamba3_mimo_bwd_fwd_args     mimo_bwd_fwd;
        ssm_mamba3_mimo_args             mimo;
        ssm_mamba3_mimo_bwd_args         mimo_bwd;
        ssm_mamba3_mimo_step_args        mimo_step;
    } args;
    int     caller_workspace; /* mamba2_scan: pass a caller workspace of the exact size        */
    int32_t ref_mode;         /* the ssm_ref_mode to create contexts with (mamba3_mimo_bwd_fwd
                                 reads it on the reference and the CPU backend)              */
    /* what the fixture owns: */
    ssmt_host hosts[SSMT_FIXTURE_MAX_HOSTS];
    int       nhosts;
    void *    problem[2];
    void (*problem_free[2])(void * problem);
};

/* Number of fixtures: every public operator at least once, some in several variants
 * (mamba2_scan dense, varlen and with a caller workspace; decode steps with a slot pool). */
int ssmt_fixture_count(void);
/* Builds fixture i (0 ≤ i < count) from seed. Returns 0, or −1 (nothing left to free) when
 * an allocation or an input-preparing call fails. */
int  ssmt_fixture_make(int i, uint64_t seed, ssmt_fixture * f);
void ssmt_fixture_free(ssmt_fixture * f);
/* ssm_status of one run of the fixture's operator under ctx (NULL allowed). */
ssm_status ssmt_fixture_run(ssm_context * ctx, const ssmt_fixture * f);

/* Bytes from a view's first element to the end of its last (non-negative strides); 0 when
 * it is empty or absent. */
size_t ssmt_view_bytes(const ssm_tensor * t);
/* Total bytes of the fixture's outputs. */
size_t ssmt_fixture_out_bytes(const ssmt_fixture * f);
/* Every byte of every output set to `byte`. */
void ssmt_fixture_fill(const ssmt_fixture * f, unsigned char byte);
/* The outputs' bytes, one after the other, into dst (ssmt_fixture_out_bytes long). */
void ssmt_fixture_save(const ssmt_fixture * f, void * dst);
/* The reverse of ssmt_fixture_save. */
void ssmt_fixture_load(const ssmt_fixture * f, const void * src);
/* Index of the first output whose bytes differ from the saved ones, or −1. */
int ssmt_fixture_diff(const ssmt_fixture * f, const void * saved);

/* ---- Mamba-3 forward arguments, SISO and MIMO alike (the macros take either args struct) ---- */

/* s gets a's tokens [t0, t0+len): q, k, v, z, angles, out sliced along dim 1, adt, dt, trap along dim 2. */
#define SSMT_M3_TOKEN_SLICE(s, a, t0, len)                                                                    \
    do {                                                                                                      \
        (s).q = ssmt_slice(&(a).q, 1, t0, len), (s).k = ssmt_slice(&(a).k, 1, t0, len);                      \
        (s).v = ssmt_slice(&(a).v, 1, t0, len), (s).z = ssmt_slice(&(a).z, 1, t0, len);                      \
        (s).angles = ssmt_slice(&(a).angles, 1, t0, len), (s).out = ssmt_slice(&(a).out, 1, t0, len);        \
        (s).adt = ssmt_slice(&(a).adt, 2, t0, len), (s).dt = ssmt_slice(&(a).dt, 2, t0, len);                \
        (s).trap = ssmt_slice(&(a).trap, 2, t0, len);                                                         \
    } while (0)

/* The names of those inputs, in the order of the stored cases' file lists. */
#define SSMT_M3_INPUT_NAMES "q", "k", "v", "adt", "dt", "trap", "q_bias", "k_bias", "angles", "d", "z"

/* Designated initialisers of the inputs that every Mamba-3 forward and step names alike, from the ssmt_bag *g. */
#define SSMT_M3_BAG_INPUTS(g)                                                                                 \
    .q = ssmt_bag_get(g, "q"), .k = ssmt_bag_get(g, "k"), .v = ssmt_bag_get(g, "v"),                          \
    .adt = ssmt_bag_get(g, "adt"), .dt = ssmt_bag_get(g, "dt"), .trap = ssmt_bag_get(g, "trap"),              \
    .q_bias = ssmt_bag_get(g, "q_bias"), .k_bias = ssmt_bag_get(g, "k_bias"),                                 \
    .angles = ssmt_bag_get(g, "angles"), .d = ssmt_bag_get(g, "d"), .z = ssmt_bag_get(g, "z")

/* Designated initialisers of the five forward or step outputs from o[0..4]: out, then the final angle, ssm, k and
 * v states. */
#define SSMT_M3_OUTS_FROM(o)                                                                                  \
    .out = (o)[0].t, .final_angle_state = (o)[1].t, .final_ssm_state = (o)[2].t, .final_k_state = (o)[3].t,   \
    .final_v_state = (o)[4].t

/* Step args s get forward args a's token t: q, k, v, z, angles picked along dim 1, adt, dt, trap along dim 2;
 * q_bias, k_bias and d as they are. */
#define SSMT_M3_STEP_AT(s, a, t)                                                                              \
    do {                                                                                                      \
        (s).q = ssmt_pick(&(a).q, 1, t), (s).k = ssmt_pick(&(a).k, 1, t), (s).v = ssmt_pick(&(a).v, 1, t);    \
        (s).z = ssmt_pick(&(a).z, 1, t), (s).angles = ssmt_pick(&(a).angles, 1, t);                           \
        (s).adt = ssmt_pick(&(a).adt, 2, t), (s).dt = ssmt_pick(&(a).dt, 2, t);                               \
        (s).trap = ssmt_pick(&(a).trap, 2, t), (s).q_bias = (a).q_bias, (s).k_bias = (a).k_bias, (s).d = (a).d; \
    } while (0)

/* Step args s read and write their four states (angle, ssm, k, v) in place in pool[0..3]. */
#define SSMT_M3_STEP_IN_PLACE(s, pool)                                                                        \
    do {                                                                                                      \
        (s).angle_state = (s).final_angle_state = (pool)[0].t, (s).ssm_state = (s).final_ssm_state = (pool)[1].t; \
        (s).k_state = (s).final_k_state = (pool)[2].t, (s).v_state = (s).final_v_state = (pool)[3].t;         \
    } while (0)

/* s reads its four initial states (angle, ssm, k, v) from h[0..3]. */
#define SSMT_M3_STATES_FROM(s, h) \
    ((s).angle_state = (h)[0].t, (s).ssm_state = (h)[1].t, (s).k_state = (h)[2].t, (s).v_state = (h)[3].t)

/* s writes its four final states (angle, ssm, k, v) to h[0..3]. */
#define SSMT_M3_FINALS_TO(s, h)                                                                  \
    ((s).final_angle_state = (h)[0].t, (s).final_ssm_state = (h)[1].t, (s).final_k_state = (h)[2].t, \
     (s).final_v_state = (h)[3].t)

/* Initialiser of an array of the four final-state views of a (angle, ssm, k, v). */
#define SSMT_M3_FINALS(a) {&(a).final_angle_state, &(a).final_ssm_state, &(a).final_k_state, &(a).final_v_state}

/* ssmt_expect_close(tol) of got[i] vs want[i], labelled "<what> out", "<what> final_angle", "<what> final_ssm",
 * "<what> final_k", "<what> final_v" in that order; the angle with angle_check instead where it is not NULL. */
void ssmt_m3_expect_outs(const char * what, const ssm_tensor * const got[5], const ssm_tensor * const want[5],
                         double tol, void (*angle_check)(const char *, const ssm_tensor *, const ssm_tensor *));

/* h[i]: an F32 tensor shaped like *like[i] (contents undefined). */
void ssmt_f32_alloc(ssmt_host * h, const ssm_tensor * const * like, int n);

/* pool[i]: an F32 tensor shaped like *like[i] holding a copy of *init[i], or zeros where init is NULL. */
void ssmt_f32_pools(ssmt_host * pool, const ssm_tensor * const * like, const ssm_tensor * const * init, int n);

#ifdef __cplusplus
}
#endif

#endif /* SSMOPS_FIXTURES_H */
