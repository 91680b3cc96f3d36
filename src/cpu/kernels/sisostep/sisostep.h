/*
 * sisostep.h — the state update of one Mamba-3 SISO decode step for one (row, head)
 * (spec §3.4), fp32, one pass over the V×K state (bandwidth bound):
 *
 *   for p < V:  h'[p][:] = α·h[p][:] + (β·v_prev[p])·k_prev + (γ·v[p])·k̂
 *               y[p]     = h'[p][:] · q̂
 *
 * Rows of h are h_rs floats apart, rows of out o_rs apart (K contiguous in both); out may
 * be h itself (each row is read before it is written) or NULL (only y is wanted). Every
 * dot is summed in a fixed order.
 */
#ifndef SSMI_CPU_SISOSTEP_H
#define SSMI_CPU_SISOSTEP_H

#include <stddef.h>
#include <stdint.h>

typedef void (*ssmi_f32_siso_state_step_fn)(int64_t V, int64_t K, const float * h, int64_t h_rs, float * out,
                                            int64_t o_rs, float alpha, float beta, float gamma,
                                            const float * v_prev, const float * v, const float * k_prev,
                                            const float * k_hat, const float * q_hat, float * y);

void ssmi_f32_siso_state_step__scalar(int64_t V, int64_t K, const float * h, int64_t h_rs, float * out, int64_t o_rs,
                                      float alpha, float beta, float gamma, const float * v_prev, const float * v,
                                      const float * k_prev, const float * k_hat, const float * q_hat, float * y);
void ssmi_f32_siso_state_step__avx2(int64_t V, int64_t K, const float * h, int64_t h_rs, float * out, int64_t o_rs,
                                    float alpha, float beta, float gamma, const float * v_prev, const float * v,
                                    const float * k_prev, const float * k_hat, const float * q_hat, float * y);

#endif
