/*
 * vec.h — elementwise fp32 kernels of the Mamba-2 CPU drivers: exp, the causal decay
 * matrix, the silu gate, and row conversion between any float dtype and packed fp32.
 * Each has a scalar version (plain C, libm expf) and an AVX2+FMA+F16C version whose exp
 * is a Cody–Waite reduction with a degree-7 polynomial (within ~1 ulp of expf over the
 * whole range, subnormal results included; NaN and ±Inf behave as in expf).
 */
#ifndef SSMI_CPU_VEC_H
#define SSMI_CPU_VEC_H

#include <stdint.h>

/* y[i] = exp(x[i]) for i < n (in place allowed). */
typedef void (*ssmi_f32_vexp_fn)(int64_t n, const float * x, float * y);

/* The decay-weighted causal block of one chunk:
 *   m[i][j] = cb[i][j] · exp(cm[i] − cm[j]) · dt[j]     j ≤ i
 *   m[i][j] = 0                                          i < j < cols
 * for i < rows (rows ≤ cols). exp is only evaluated for j ≤ i. */
typedef void (*ssmi_f32_decay_rows_fn)(int64_t rows, int64_t cols, const float * cb, int64_t cb_row_stride,
                                       const float * cm, const float * dt, float * m, int64_t m_row_stride);

/* out[i] = y[i] · z[i] · sigmoid(z[i]) = y·silu(z) (in place on y allowed). */
typedef void (*ssmi_f32_silu_gate_fn)(int64_t n, const float * y, const float * z, float * out);

/* n elements of any float dtype, `stride` elements apart from element `off` of base, to
 * contiguous fp32 (load) and back with round-to-nearest-even (store). */
typedef void (*ssmi_load_row_fn)(float * dst, const void * base, int32_t dtype, int64_t off, int64_t stride,
                                 int64_t n);
typedef void (*ssmi_store_row_fn)(void * base, int32_t dtype, int64_t off, int64_t stride, const float * src,
                                  int64_t n);

void ssmi_f32_vexp__scalar(int64_t n, const float * x, float * y);
void ssmi_f32_decay_rows__scalar(int64_t rows, int64_t cols, const float * cb, int64_t cb_row_stride,
                                 const float * cm, const float * dt, float * m, int64_t m_row_stride);
void ssmi_f32_silu_gate__scalar(int64_t n, const float * y, const float * z, float * out);
void ssmi_load_row__scalar(float * dst, const void * base, int32_t dtype, int64_t off, int64_t stride, int64_t n);
void ssmi_store_row__scalar(void * base, int32_t dtype, int64_t off, int64_t stride, const float * src, int64_t n);

void ssmi_f32_vexp__avx2(int64_t n, const float * x, float * y);
void ssmi_f32_decay_rows__avx2(int64_t rows, int64_t cols, const float * cb, int64_t cb_row_stride,
                               const float * cm, const float * dt, float * m, int64_t m_row_stride);
void ssmi_f32_silu_gate__avx2(int64_t n, const float * y, const float * z, float * out);
void ssmi_load_row__avx2(float * dst, const void * base, int32_t dtype, int64_t off, int64_t stride, int64_t n);
void ssmi_store_row__avx2(void * base, int32_t dtype, int64_t off, int64_t stride, const float * src, int64_t n);

/* AVX-512 row conversions (16 lanes, masked tails); the other entries of the AVX-512
 * table are the AVX2 ones. */
void ssmi_load_row__avx512(float * dst, const void * base, int32_t dtype, int64_t off, int64_t stride, int64_t n);
void ssmi_store_row__avx512(void * base, int32_t dtype, int64_t off, int64_t stride, const float * src, int64_t n);

#endif
