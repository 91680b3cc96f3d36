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

/* ssm_mamba3_siso_bwd */
#define SSMT_SISO_NGRADS 15
extern const char * const ssmt_siso_grad_names[SSMT_SISO_NGRADS];
ssm_tensor *              ssmt_siso_grad_slot(ssm_mamba3_siso_bwd_args * a, int i);

/* ssm_mamba3_mimo_bwd */
#define SSMT_MIMO_NGRADS 19
extern const char * const ssmt_mimo_grad_names[SSMT_MIMO_NGRADS];
ssm_tensor *              ssmt_mimo_grad_slot(ssm_mamba3_mimo_bwd_args * a, int i);

/* ssmt_free of h[0..n) */
void ssmt_free_all(ssmt_host * h, int n);

#endif /* SSMT_GRADS_H */
