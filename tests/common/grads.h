/* grads.h — the gradient outputs of the backward operators by index: their names and their slots in
 * the args struct (for Mamba-2 also the forward input each belongs to), shared by each operator's
 * CPU and CUDA tests. */
#ifndef SSMT_GRADS_H
#define SSMT_GRADS_H

#include "testutil.h"

/* ssm_mamba2_scan_bwd: dx, ddt, da, db, dc, dd, dz, ddt_bias, dinitial_states */
enum { GX, GDT, GA, GB, GC, GD, GZ, GBIAS, GINIT, NGRAD };
extern const char * const ssmt_m2_grad_names[NGRAD];
ssm_tensor *              ssmt_m2_grad_slot(ssm_mamba2_scan_bwd_args * a, int k);
ssm_tensor *              ssmt_m2_grad_input(ssm_mamba2_scan_bwd_args * a, int k); /* the input of gradient k */
/* Host outputs (poisoned) for every gradient whose input is present, in dtype, set into a's slots;
 * the others absent. strided_dx: dx in a padded layout. */
void ssmt_m2_alloc_grads(ssm_mamba2_scan_bwd_args * a, ssm_dtype dtype, ssmt_host h[NGRAD], int strided_dx);
/* The backward call on a random problem's tensors (as they are now: a caller may have changed their
 * strides): *p for chunk with cfg's dt_softplus and, with limit, dt_limit [0.002, 0.08]; *dout
 * N(0, 1) in cfg's dtype; *dfinal N(0, 1) F32 with with_dfinal, else absent (drawn in that order);
 * *a over the problem's inputs, dout and dfinal, no gradient requested. The caller frees dout and
 * dfinal. */
void ssmt_m2_bwd_args(ssmt_rng * rng, const ssmt_mamba2_config * cfg, const ssmt_mamba2_problem * prob, int64_t chunk,
                      int limit, int with_dfinal, ssm_mamba2_params * p, ssmt_host * dout, ssmt_host * dfinal,
                      ssm_mamba2_scan_bwd_args * a);

/* ssm_mamba3_siso_bwd */
#define SSMT_SISO_NGRADS 15
extern const char * const ssmt_siso_grad_names[SSMT_SISO_NGRADS];
ssm_tensor *              ssmt_siso_grad_slot(ssm_mamba3_siso_bwd_args * a, int i);
/* A random backward problem for cfg (ssmt_mamba3_random_args, then ssmt_mamba3_bwd_alloc with
 * has_dfinal) with its params in *p and its args in *args (only dv, ddt, dq_bias and dangles
 * requested when only_some), and the reference backward run on them in ref, its status
 * checked. Returns 0, or -1 after a counted failure "name: allocation failed" (nothing to free). */
int ssmt_siso_bwd_reference(ssmt_rng * rng, ssm_context * ref, const char * name, const ssmt_mamba3_config * cfg,
                            int has_dfinal, int only_some, ssmt_mamba3_problem * prob, ssmt_mamba3_bwd_problem * bwd,
                            ssm_mamba3_params * p, ssm_mamba3_siso_bwd_args * args);

/* ssm_mamba3_mimo_bwd */
#define SSMT_MIMO_NGRADS 19
extern const char * const ssmt_mimo_grad_names[SSMT_MIMO_NGRADS];
ssm_tensor *              ssmt_mimo_grad_slot(ssm_mamba3_mimo_bwd_args * a, int i);

/* A backward operator seen through its gradients, for ssmt_bwd_cpu_variants. */
typedef struct ssmt_bwd_op {
    int                  ngrads;
    const char * const * names;
    ssm_tensor * (*slot)(void * args, int g);                               /* gradient g's slot     */
    ssm_status (*run)(ssm_context * ctx, const void * params, void * args); /* the backward operator */
    size_t args_size;                                                       /* sizeof its args struct */
} ssmt_bwd_op;
extern const ssmt_bwd_op ssmt_siso_bwd_op, ssmt_mimo_bwd_op;

/* The CPU backward with 1, 2 and 3 threads (cpu[1..3]) and the scalar ISA (scalar; skipped when
 * NULL), each on a copy of args whose present gradients are poisoned F32 outputs (padded when
 * strided): 1 thread and scalar within bar of the reference gradients in args (worst[g] raised
 * to their rel_rms, a NaN kept), 2 and 3 threads bitwise equal to 1 thread. first[g] keeps the
 * 1-thread gradient g (absent where not requested); the caller frees them. */
void ssmt_bwd_cpu_variants(const ssmt_bwd_op * op, const char * name, const void * params, void * args, int strided,
                           ssmt_bar bar, ssm_context * const cpu[4], ssm_context * scalar, double * worst,
                           ssmt_host * first);

/* ssmt_free of h[0..n) */
void ssmt_free_all(ssmt_host * h, int n);

#endif /* SSMT_GRADS_H */
