/*
 * step.h — the streaming kernels of the decode steps: one pass over a block of state rows,
 * reading each row once and writing it back once (in place allowed), with the output dot
 * product fused in. The state traffic is the whole cost of a decode step, so nothing else
 * touches the state.
 */
#ifndef SSMI_CPU_STEP_H
#define SSMI_CPU_STEP_H

#include <stdint.h>

/* For rows r < rows and columns n < cols, with one decay for the whole block:
 *   s = in[r][n]·decay + coef[r]·b[n];   out[r][n] = s (if out != NULL);   y[r] = Σ_n s·c[n]
 * Rows are in_stride / out_stride floats apart; out may equal in (in place: each element
 * is read before it is written). The sum over n runs in a fixed order. */
typedef void (*ssmi_f32_step_block_fn)(int64_t rows, int64_t cols, const float * in, int64_t in_stride, float * out,
                                       int64_t out_stride, float decay, const float * coef, const float * b,
                                       const float * c, float * y);

/* One row with a decay per column: s[n] = in[n]·decay[n] + coef·b[n]; out[n] = s (if out
 * != NULL, may equal in); returns Σ_n s[n]·c[n]. */
typedef float (*ssmi_f32_step_row_fn)(int64_t cols, const float * in, float * out, const float * decay, float coef,
                                      const float * b, const float * c);

void  ssmi_f32_step_block__scalar(int64_t rows, int64_t cols, const float * in, int64_t in_stride, float * out,
                                  int64_t out_stride, float decay, const float * coef, const float * b, const float * c,
                                  float * y);
float ssmi_f32_step_row__scalar(int64_t cols, const float * in, float * out, const float * decay, float coef,
                                const float * b, const float * c);
void  ssmi_f32_step_block__avx2(int64_t rows, int64_t cols, const float * in, int64_t in_stride, float * out,
                                int64_t out_stride, float decay, const float * coef, const float * b, const float * c,
                                float * y);
float ssmi_f32_step_row__avx2(int64_t cols, const float * in, float * out, const float * decay, float coef,
                              const float * b, const float * c);
void  ssmi_f32_step_block__avx512(int64_t rows, int64_t cols, const float * in, int64_t in_stride, float * out,
                                  int64_t out_stride, float decay, const float * coef, const float * b, const float * c,
                                  float * y);
float ssmi_f32_step_row__avx512(int64_t cols, const float * in, float * out, const float * decay, float coef,
                                const float * b, const float * c);

#endif
