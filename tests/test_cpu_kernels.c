/*
 * test_cpu_kernels.c — the CPU backend's per-ISA kernels called directly, for every ISA the
 * host has (scalar, AVX2, AVX-512), against float64:
 *  - the GEMM microkernels (kernels/gemm) over row and column tails of every tile, k = 0,
 *    transposed and negative-stride A, row scales, beta = 0 over a NaN-filled C and beta ≠ 0,
 *    causal calls, and causal calls with ±Inf/NaN in B (the rows whose own terms are finite
 *    stay finite and right); every element within its fp32 error bound
 *    (k + 3)·2⁻²⁴·(Σ|a·b|·|scale| + |beta·c|). The AVX2 and AVX-512 kernels run the same
 *    FMA chain per element, so they must agree bit for bit;
 *  - the decode-step kernels (kernels/step): block (one decay) and row (a decay per column)
 *    forms over column tails, in place and into a separate row, with out = NULL; the new
 *    state within 2 roundings, y within those errors times |c| plus (cols + 3)·2⁻²⁴·Σ|s·c|; in place = separate, bit
 *    for bit; the same call twice gives the same bits (a fixed reduction order);
 *  - the row conversions (kernels/vec) fp32/f16/bf16 both ways: the vector ISAs store the
 *    same bits as the scalar conversion (ties, subnormals, ±Inf, NaN, tails).
 * Seed: SSMOPS_TEST_SEED (default 20261230).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/ssmi.h"
#include "cpu/kernels/gemm/gemm.h"
#include "cpu/kernels/step/step.h"
#include "cpu/kernels/vec/vec.h"
#include "testutil.h"

typedef struct isa_kernels {
    const char *           name;
    ssm_isa                isa;
    ssmi_f32_gemm_fn       gemm;
    ssmi_f32_step_block_fn block;
    ssmi_f32_step_row_fn   row;
    ssmi_load_row_fn       load_row;
    ssmi_store_row_fn      store_row;
} isa_kernels;

static const isa_kernels all_isas[3] = {
    {"scalar", SSM_ISA_SCALAR, ssmi_f32_gemm_ukernel__scalar, ssmi_f32_step_block__scalar, ssmi_f32_step_row__scalar,
     ssmi_load_row__scalar, ssmi_store_row__scalar},
    {"avx2", SSM_ISA_AVX2, ssmi_f32_gemm_ukernel__avx2_6x16, ssmi_f32_step_block__avx2, ssmi_f32_step_row__avx2,
     ssmi_load_row__avx2, ssmi_store_row__avx2},
    {"avx512", SSM_ISA_AVX512, ssmi_f32_gemm_ukernel__avx512_8x32, ssmi_f32_step_block__avx512,
     ssmi_f32_step_row__avx512, ssmi_load_row__avx512, ssmi_store_row__avx512},
};
static int nisas; /* all_isas[0 .. nisas) run on this host */

static const double U = 5.9604644775390625e-08; /* 2^-24 */

static float * falloc(int64_t n) {
    float * p = (float *) malloc((size_t) (n > 0 ? n : 1) * sizeof(float));
    if (p == NULL) abort();
    return p;
}

static void fill(ssmt_rng * rng, float * p, int64_t n) {
    for (int64_t i = 0; i < n; ++i) p[i] = (float) ssmt_normal(rng);
}

/* ---- GEMM -------------------------------------------------------------------------------- */
typedef struct gemm_case {
    int64_t m, n, k;
    int     a_layout; /* 0 row-major, 1 transposed (a_row_stride 1), 2 both strides negative */
    int     scaled, causal, beta_mode; /* beta_mode: 0 → 0 (C holds NaN), 1 → 0.75 */
    int     nonfinite;                 /* 1: a +Inf, a −Inf and a NaN in B (causal cases) */
} gemm_case;

/* A[i][kk] of the case through its strides, at base pointer a (see run_gemm). */
static void gemm_strides(const gemm_case * g, int64_t * lda_r, int64_t * lda_k, int64_t * a0) {
    if (g->a_layout == 0) *lda_r = g->k, *lda_k = 1, *a0 = 0;
    else if (g->a_layout == 1) *lda_r = 1, *lda_k = g->m, *a0 = 0;
    else *lda_r = -g->k, *lda_k = -1, *a0 = g->m * g->k - 1; /* element (i, kk) at a0 − i·k − kk */
}

static void run_gemm(ssmt_rng * rng, const gemm_case * g) {
    const int64_t m = g->m, n = g->n, k = g->k;
    const int64_t ldb = n + 3, ldc = n + 5;
    float *       a     = falloc(m * k);
    float *       b     = falloc(k * ldb);
    float *       scale = falloc(m);
    float *       c0    = falloc(m * ldc);
    float *       c[3];
    fill(rng, a, m * k), fill(rng, b, k * ldb), fill(rng, c0, m * ldc);
    for (int64_t i = 0; i < m; ++i) scale[i] = (float) ssmt_uniform(rng, 0.25, 2.0);
    int64_t lr, lk, a0;
    gemm_strides(g, &lr, &lk, &a0);
    if (g->causal) /* the contract: A[i][kk] = 0 for kk > i */
        for (int64_t i = 0; i < m; ++i)
            for (int64_t kk = i + 1; kk < k; ++kk) a[a0 + i * lr + kk * lk] = 0.0f;
    int64_t bad_row = -1;
    if (g->nonfinite && k > 2) {
        bad_row               = k / 2;
        b[bad_row * ldb]      = INFINITY;
        b[bad_row * ldb + n / 2] = -INFINITY;
        b[bad_row * ldb + n - 1] = NAN;
    }
    const float beta = g->beta_mode ? 0.75f : 0.0f;
    char        tag[160];
    snprintf(tag, sizeof tag, "gemm m%lld n%lld k%lld A%d scale%d causal%d beta%d nonfinite%d", (long long) m,
             (long long) n, (long long) k, g->a_layout, g->scaled, g->causal, g->beta_mode, g->nonfinite);
    for (int v = 0; v < nisas; ++v) {
        c[v] = falloc(m * ldc);
        for (int64_t i = 0; i < m * ldc; ++i) c[v][i] = beta != 0.0f ? c0[i] : NAN;
        all_isas[v].gemm(m, n, k, a + a0, lr, lk, b, ldb, c[v], ldc, g->scaled ? scale : NULL, beta, g->causal);
        int bad = 0;
        for (int64_t i = 0; i < m && bad < 3; ++i) {
            const int64_t kr  = ssmi_gemm_row_k(k, i, g->causal);
            const int     inf_row = bad_row >= 0 && bad_row < kr; /* row i's own terms reach the Inf/NaN row */
            for (int64_t j = 0; j < n && bad < 3; ++j) {
                double sum = 0.0, mag = 0.0;
                for (int64_t kk = 0; kk < kr; ++kk) {
                    const double t = (double) a[a0 + i * lr + kk * lk] * (double) b[kk * ldb + j];
                    sum += t, mag += fabs(t);
                }
                const double s   = g->scaled ? scale[i] : 1.0;
                const double ref = sum * s + (double) beta * c0[i * ldc + j];
                const double tol = (double) (k + 3) * U * (mag * fabs(s) + fabs((double) beta * c0[i * ldc + j])) + 1e-37;
                const float  got = c[v][i * ldc + j];
                if (inf_row) continue; /* its value is whatever Inf/NaN arithmetic gives */
                if (!(fabs((double) got - ref) <= tol)) {
                    ++bad;
                    TEST_CHECK(0, "%s %s: C[%lld][%lld] = %.9g, float64 %.9g (bound %.3g)", tag, all_isas[v].name,
                               (long long) i, (long long) j, (double) got, ref, tol);
                }
            }
            /* the padding columns of C are never written */
            for (int64_t j = n; j < ldc && bad < 3; ++j) {
                const float want = beta != 0.0f ? c0[i * ldc + j] : NAN;
                if (memcmp(&c[v][i * ldc + j], &want, sizeof want) != 0) {
                    ++bad;
                    TEST_CHECK(0, "%s %s: padding C[%lld][%lld] written", tag, all_isas[v].name, (long long) i,
                               (long long) j);
                }
            }
        }
        TEST_CHECK(bad == 0, "%s %s: %d wrong elements", tag, all_isas[v].name, bad);
    }
    /* AVX2 and AVX-512: one FMA chain per element in k order, so the same bits */
    if (nisas == 3) {
        int differ = 0;
        for (int64_t i = 0; i < m; ++i) {
            const int64_t kr = ssmi_gemm_row_k(k, i, g->causal);
            if (bad_row >= 0 && bad_row < kr) continue;
            differ += memcmp(c[1] + i * ldc, c[2] + i * ldc, (size_t) n * sizeof(float)) != 0;
        }
        TEST_CHECK(differ == 0, "%s: avx2 and avx512 differ in %d rows", tag, differ);
    }
    for (int v = 0; v < nisas; ++v) free(c[v]);
    free(a), free(b), free(scale), free(c0);
}

static void test_gemm(ssmt_rng * rng) {
    static const int64_t ms[] = {1, 2, 5, 6, 7, 8, 9, 13, 16, 17, 64};
    static const int64_t ns[] = {1, 7, 15, 16, 17, 31, 32, 33, 48, 64, 80};
    static const int64_t ks[] = {0, 1, 2, 9, 64, 65};
    int                  idx  = 0;
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; ++mi)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ++ni)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ++ki, ++idx) {
                gemm_case g;
                g.m = ms[mi], g.n = ns[ni], g.k = ks[ki];
                g.a_layout  = idx % 3;
                g.scaled    = (idx / 3) % 2;
                g.causal    = (idx / 2) % 2;
                g.beta_mode = (idx / 5) % 2;
                g.nonfinite = 0;
                run_gemm(rng, &g);
                if (g.causal && (idx % 4) == 1) {
                    g.nonfinite = 1;
                    run_gemm(rng, &g);
                }
            }
    /* the scan's shapes: chunk 256, P 64 / 80, N 128 */
    static const int64_t big[][3] = {{256, 64, 128}, {256, 80, 256}, {128, 64, 256}, {200, 80, 200}};
    for (int i = 0; i < 4; ++i) {
        gemm_case g = {big[i][0], big[i][1], big[i][2], 0, i % 2, i >= 2, i % 2, 0};
        run_gemm(rng, &g);
    }
}

/* ---- decode step ------------------------------------------------------------------------- */
static void run_step(ssmt_rng * rng, int64_t rows, int64_t cols, int per_column, int with_out) {
    const int64_t ld = cols + 7;
    float *       in = falloc(rows * ld), *sep = falloc(rows * ld), *inpl = falloc(rows * ld);
    float *       b = falloc(cols), *c = falloc(cols), *dv = falloc(cols), *coef = falloc(rows);
    float *       y1 = falloc(rows), *y2 = falloc(rows), *y3 = falloc(rows);
    fill(rng, in, rows * ld), fill(rng, b, cols), fill(rng, c, cols), fill(rng, coef, rows);
    for (int64_t n = 0; n < cols; ++n) dv[n] = (float) ssmt_uniform(rng, 0.3, 1.0);
    const float decay = (float) ssmt_uniform(rng, 0.3, 1.0);
    char        tag[120];
    snprintf(tag, sizeof tag, "step %s rows%lld cols%lld out%d", per_column ? "row" : "block", (long long) rows,
             (long long) cols, with_out);
    for (int v = 0; v < nisas; ++v) {
        const isa_kernels * K = &all_isas[v];
        for (int64_t i = 0; i < rows * ld; ++i) sep[i] = NAN, inpl[i] = in[i];
        /* separate output (or none), then in place, then the separate call again */
        for (int pass = 0; pass < 3; ++pass) {
            float * out = pass == 1 ? inpl : (with_out ? sep : NULL);
            float * y   = pass == 0 ? y1 : pass == 1 ? y2 : y3;
            if (pass == 1 && !with_out) break;
            const float * src = pass == 1 ? inpl : in;
            if (per_column) {
                for (int64_t r = 0; r < rows; ++r)
                    y[r] = K->row(cols, src + r * ld, out ? out + r * ld : NULL, dv, coef[r], b, c);
            } else {
                K->block(rows, cols, src, ld, out, out ? ld : 0, decay, coef, b, c, y);
            }
        }
        int bad = 0;
        for (int64_t r = 0; r < rows && bad < 3; ++r) {
            double sum = 0.0, mag = 0.0, serr = 0.0; /* Σ s·c, Σ |s·c|, Σ (state error)·|c| */
            for (int64_t n = 0; n < cols; ++n) {
                const double d = per_column ? dv[n] : decay;
                const double s = (double) in[r * ld + n] * d + (double) coef[r] * b[n];
                const double e = 2.0 * U * (fabs((double) in[r * ld + n] * d) + fabs((double) coef[r] * b[n])) + 1e-37;
                if (with_out && !(fabs((double) sep[r * ld + n] - s) <= e)) {
                    ++bad;
                    TEST_CHECK(0, "%s %s: state[%lld][%lld] = %.9g, float64 %.9g", tag, K->name, (long long) r,
                               (long long) n, (double) sep[r * ld + n], s);
                }
                sum += s * c[n], mag += fabs(s * c[n]) + e * fabs((double) c[n]), serr += e * fabs((double) c[n]);
            }
            const double tol = serr + (double) (cols + 3) * U * mag + 1e-37;
            if (!(fabs((double) y1[r] - sum) <= tol)) {
                ++bad;
                TEST_CHECK(0, "%s %s: y[%lld] = %.9g, float64 %.9g (bound %.3g)", tag, K->name, (long long) r,
                           (double) y1[r], sum, tol);
            }
            if (with_out) {
                TEST_CHECK(memcmp(sep + r * ld, inpl + r * ld, (size_t) cols * sizeof(float)) == 0 &&
                               memcmp(&y1[r], &y2[r], sizeof(float)) == 0,
                           "%s %s: row %lld in place differs from separate", tag, K->name, (long long) r);
                TEST_CHECK(memcmp(&y1[r], &y3[r], sizeof(float)) == 0, "%s %s: row %lld: y not reproducible", tag,
                           K->name, (long long) r);
                for (int64_t n = cols; n < ld; ++n) /* padding past the row is never written */
                    bad += !isnan(sep[r * ld + n]) || memcmp(&inpl[r * ld + n], &in[r * ld + n], sizeof(float)) != 0;
            }
        }
        TEST_CHECK(bad == 0, "%s %s: %d wrong", tag, K->name, bad);
    }
    free(in), free(sep), free(inpl), free(b), free(c), free(dv), free(coef), free(y1), free(y2), free(y3);
}

/* A decay of +Inf over a state of ones: every column's new state is +Inf, so y = +Inf. A
 * vector tail must not add its unused lanes (0·Inf = NaN there) to the sum. */
static void test_step_inf_decay(void) {
    enum { COLS = 19 };
    float in[COLS], out[COLS], b[COLS], c[COLS], dv[COLS], coef = 0.0f;
    for (int n = 0; n < COLS; ++n) in[n] = 1.0f, b[n] = 0.0f, c[n] = 1.0f, dv[n] = INFINITY;
    for (int v = 0; v < nisas; ++v) {
        for (int64_t cols = 1; cols <= COLS; cols += 6) {
            float y = 0.0f;
            all_isas[v].block(1, cols, in, 0, out, 0, INFINITY, &coef, b, c, &y);
            TEST_CHECK(isinf(y) && y > 0, "%s block cols %lld: Inf decay gives y = %g", all_isas[v].name,
                       (long long) cols, (double) y);
            y = all_isas[v].row(cols, in, out, dv, coef, b, c);
            TEST_CHECK(isinf(y) && y > 0, "%s row cols %lld: Inf decay gives y = %g", all_isas[v].name,
                       (long long) cols, (double) y);
        }
    }
}

static void test_step(ssmt_rng * rng) {
    static const int64_t rows[] = {1, 2, 3, 5, 64};
    static const int64_t cols[] = {0, 1, 7, 15, 16, 17, 31, 32, 33, 48, 64, 100, 128};
    int                  i      = 0;
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ++ri)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ++ci, ++i) {
            run_step(rng, rows[ri], cols[ci], 0, 1);
            run_step(rng, rows[ri], cols[ci], 1, 1);
            if (i % 3 == 0) run_step(rng, rows[ri], cols[ci], i % 2, 0);
        }
    test_step_inf_decay();
}

/* ---- row conversions --------------------------------------------------------------------- */
static void test_rows(ssmt_rng * rng) {
    static const int64_t lens[] = {0, 1, 7, 8, 15, 16, 17, 33, 100};
    static const int32_t dts[]  = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16};
    enum { MAXN = 100 };
    float src[MAXN], got[MAXN], want[MAXN];
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li) {
        const int64_t n = lens[li];
        for (int64_t i = 0; i < n; ++i) {
            const int   kind = (int) ssmt_randint(rng, 0, 9);
            const float odd  = (float) (2 * ssmt_randint(rng, 0, 7) + 1);
            /* f16 and bf16 rounding ties, f16 subnormals, f32 subnormals, ±Inf, NaN, f16
             * overflow, normal values */
            src[i] = kind == 0   ? 1.0f + 0x1p-11f * odd
                     : kind == 1 ? 1.0f + 0x1p-8f * odd
                     : kind == 2 ? (float) ssmt_normal(rng) * 1e-6f
                     : kind == 3 ? (float) ssmt_normal(rng) * 1e-40f
                     : kind == 4 ? (ssmt_randint(rng, 0, 1) ? INFINITY : -INFINITY)
                     : kind == 5 ? NAN
                     : kind == 6 ? (float) ssmt_normal(rng) * 7e4f
                                 : (float) ssmt_normal(rng);
        }
        for (size_t d = 0; d < 3; ++d) {
            const int32_t dt = dts[d];
            unsigned char ref_bytes[4 * MAXN + 16], got_bytes[4 * MAXN + 16];
            memset(ref_bytes, 0xA5, sizeof ref_bytes);
            ssmi_store_row__scalar(ref_bytes, dt, 1, 1, src, n); /* from element 1: an odd offset */
            ssmi_load_row__scalar(want, ref_bytes, dt, 1, 1, n);
            for (int v = 1; v < nisas; ++v) {
                memset(got_bytes, 0xA5, sizeof got_bytes);
                all_isas[v].store_row(got_bytes, dt, 1, 1, src, n);
                TEST_CHECK(memcmp(ref_bytes, got_bytes, sizeof ref_bytes) == 0,
                           "%s store_row dtype %d n %lld: bytes differ from the scalar conversion", all_isas[v].name,
                           (int) dt, (long long) n);
                for (int64_t i = 0; i < n; ++i) got[i] = -1.0f;
                all_isas[v].load_row(got, ref_bytes, dt, 1, 1, n);
                TEST_CHECK(n == 0 || memcmp(got, want, (size_t) n * sizeof(float)) == 0,
                           "%s load_row dtype %d n %lld: differs from the scalar conversion", all_isas[v].name, (int) dt,
                           (long long) n);
            }
        }
    }
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261230u);
    const ssm_isa best = ssmi_best_isa(ssm_cpu_features());
    nisas              = best == SSM_ISA_AVX512 ? 3 : best == SSM_ISA_AVX2 ? 2 : 1;
    printf("test_cpu_kernels: ISAs up to %s\n", ssm_isa_name(all_isas[nisas - 1].isa));
    test_gemm(&rng);
    test_step(&rng);
    test_rows(&rng);
    TEST_EXIT();
}
