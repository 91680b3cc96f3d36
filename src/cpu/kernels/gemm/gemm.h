/*
 * gemm.h — the fp32 matrix-multiply microkernels every Mamba-2 CPU driver is built on.
 *
 *   C[i][:] = beta·C[i][:] + row_scale[i] · Σ_k A[i][k] · B[k][:]      i < m, k < k_row(i)
 *
 * - A is read through two strides (a_row_stride, a_k_stride), so a row-major A, a
 *   transposed A (a_row_stride = 1) or any view of a packed tile serves without a copy.
 *   Each element A[i][k] is broadcast, so its stride does not matter for speed.
 * - B and C are row-major with unit column stride: the n columns (the vector dimension)
 *   are contiguous, and rows are b_row_stride / c_row_stride apart.
 * - row_scale may be NULL (= 1). beta == 0 means C is only written, never read (so it
 *   may hold garbage); any other beta scales the old C.
 * - causal != 0 promises A[i][k] == 0 for k > i. Row i is then the sum over k ≤ i only,
 *   also when a later B row holds a NaN or ±Inf (which 0·Inf would spread to the rows
 *   above it): k_row(i) = min(k, i + 1). The kernel may still multiply those zeros by
 *   finite B rows (a tile of rows shares its k loop), which changes no bit of the sum.
 * - k == 0 is allowed (C = beta·C, or 0).
 * The order of every sum is fixed by (m, n, k) alone, so results never depend on threads.
 */
#ifndef SSMI_CPU_GEMM_H
#define SSMI_CPU_GEMM_H

#include <stddef.h>
#include <stdint.h>

/* The k limit of row i (see above). */
static inline int64_t ssmi_gemm_row_k(int64_t k, int64_t i, int causal) { return causal && i + 1 < k ? i + 1 : k; }

typedef void (*ssmi_f32_gemm_fn)(int64_t m, int64_t n, int64_t k, const float * a, int64_t a_row_stride,
                                 int64_t a_k_stride, const float * b, int64_t b_row_stride, float * c,
                                 int64_t c_row_stride, const float * row_scale, float beta, int causal);

/* Plain C loops: SSMOPS_ISA=scalar and hosts without AVX2+FMA. */
void ssmi_f32_gemm_ukernel__scalar(int64_t m, int64_t n, int64_t k, const float * a, int64_t a_row_stride,
                                   int64_t a_k_stride, const float * b, int64_t b_row_stride, float * c,
                                   int64_t c_row_stride, const float * row_scale, float beta, int causal);

/* AVX2+FMA, 6×16 register tile (12 accumulators: 12 independent FMA chains, which hide
 * the FMA latency on two FMA pipes), masked loads/stores for the column tail. */
void ssmi_f32_gemm_ukernel__avx2_6x16(int64_t m, int64_t n, int64_t k, const float * a, int64_t a_row_stride,
                                      int64_t a_k_stride, const float * b, int64_t b_row_stride, float * c,
                                      int64_t c_row_stride, const float * row_scale, float beta, int causal);

#define SSMI_GEMM_AVX2_MR 6
#define SSMI_GEMM_AVX2_NR 16

/* AVX-512, 8×32 register tile (16 zmm accumulators), a one-vector tile for a column tail
 * of at most 16, masked loads/stores for the last vector of a tail. */
void ssmi_f32_gemm_ukernel__avx512_8x32(int64_t m, int64_t n, int64_t k, const float * a, int64_t a_row_stride,
                                        int64_t a_k_stride, const float * b, int64_t b_row_stride, float * c,
                                        int64_t c_row_stride, const float * row_scale, float beta, int causal);

#define SSMI_GEMM_AVX512_MR 8
#define SSMI_GEMM_AVX512_NR 32

#endif
