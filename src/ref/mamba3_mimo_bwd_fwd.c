/* Reference of mamba3_mimo_bwd_fwd (backward phase 1, spec §3.4, §4.1), two modes:
 *  - exact (ctx NULL or ref_mode SSM_REF_EXACT): float64 from the inputs as given;
 *  - upstream bf16 (ref_mode SSM_REF_UPSTREAM_BF16): float32 arithmetic that rounds to the
 *    activation dtype (v's dtype; bf16 in practice) at exactly the points of spec §5.1,
 *    including the rounded DT and parameters, the sequential per-rank rounded sums of the
 *    diagonal and of dz, and the states stored rounded.
 * Per (b, h) the chunks run in order from Ŝ_0 = 0; da_cs, da_cs_rev and segsum are used as
 * given (never recomputed, never clamped). Tokens t ≥ S read as 0 (spec §0): they have
 * Δ = 0, so c = γ = 0 there and they enter nothing; only valid rows are computed. */
#include "ref_mimo_common.h"
#include "ssmi_ref_mimo.h"

/* ---- exact float64 --------------------------------------------------------------------- */

typedef struct bf_scratch {
    double *qbar, *kbar, *qt, *kh, *u;      /* C·R·N, C·R·N, C·R·N, C·R·N (k̂), C·R·P          */
    double *gam, *theta, *hs, *y, *dout, *z, *dzz, *dmo, *dmz, *v, *dzrow, *qk;
    double *qb, *kb, *mv, *mz, *mo, *w;
} bf_scratch;

static ssmi_ref_mimo_head exact_head_params(const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a,
                                            int64_t h, const bf_scratch * w) {
    ssmi_ref_mimo_head hp = {w->qb, w->kb, w->mv, w->mz, w->mo, w->w, 0.0, 0, 0, 0};
    ssmi_ref_mimo_load_head(&hp, d, h, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o, NULL, &a->d);
    return hp;
}

/* dout of token t, rank r (P values): reduced dout is shared by the ranks. */
static int64_t dout_off(const ssm_tensor * dout, int reduced, int64_t b, int64_t t, int64_t r, int64_t h) {
    return reduced ? ssmi_off4(dout, b, t, h, 0) : ssmi_off5(dout, b, t, r, h, 0);
}

static void exact_head(const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a, int64_t b, int64_t h,
                       const bf_scratch * w) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles, C = d->chunk, S = d->seqlen;
    const int64_t g = ssmi_ref_mimo_group(d, h);
    const ssmi_ref_mimo_head hp = exact_head_params(d, a, h, w);
    const int has_z = ssmi_present(&a->z), red = d->reduce_o;
    memset(w->hs, 0, (size_t)(N * P) * sizeof(double));
    memset(w->dmo, 0, (size_t)(R * P) * sizeof(double));
    memset(w->dmz, 0, (size_t)(R * P) * sizeof(double));
    for (int64_t c = 0; c < d->nchunks; ++c) {
        const int64_t cs = c * C, Lc = S - cs < C ? S - cs : C;
        /* per-token values of the chunk */
        for (int64_t i = 0; i < Lc; ++i) {
            const int64_t t = cs + i;
            const double  dt = ssmi_get_f64(&a->dt, ssmi_off3(&a->dt, b, h, t));
            const double  lam = ssmi_ref_sigmoid(ssmi_get_f64(&a->trap, ssmi_off3(&a->trap, b, h, t)));
            double        sbar = 0.0;
            if (t + 1 < S) {
                const double dt1 = ssmi_get_f64(&a->dt, ssmi_off3(&a->dt, b, h, t + 1));
                sbar = dt1 * ssmi_ref_sigmoid(-ssmi_get_f64(&a->trap, ssmi_off3(&a->trap, b, h, t + 1)));
            }
            w->gam[i] = dt * lam;
            const double cf = w->gam[i] + sbar;
            ssmi_ref_mimo_load_qk_token(w->qbar + i * R * N, w->kbar + i * R * N, &a->q, &a->k, &hp, b, t, g, R, N);
            if (A > 0) ssmi_ref_m3_read(w->theta, &a->angles, ssmi_off4(&a->angles, b, t, h, 0), A);
            for (int64_t r = 0; r < R; ++r) {
                const int64_t x = (i * R + r) * N;
                ssmi_ref_mimo_rotate(w->qt + x, w->qbar + x, w->theta, N, A, 1.0);
                ssmi_ref_mimo_rotate(w->kh + x, w->kbar + x, w->theta, N, A, 1.0);
                for (int64_t n = 0; n < N; ++n) w->kh[x + n] *= cf;
            }
            ssmi_ref_m3_read(w->v, &a->v, ssmi_off4(&a->v, b, t, h, 0), P);
            ssmi_ref_mimo_lift_v(w->u + i * R * P, w->v, &hp, R, P);
            for (int64_t r = 0; r < R; ++r)
                for (int64_t r2 = 0; r2 < R; ++r2)
                    w->qk[(i * R + r) * R + r2] =
                        ssmi_ref_m3_dot(w->qbar + (i * R + r) * N, w->kbar + (i * R + r2) * N, N);
            if (ssmi_present(&a->qk_dot))
                for (int64_t r = 0; r < R; ++r)
                    for (int64_t r2 = 0; r2 < R; ++r2)
                        ssmi_set_f64(&a->qk_dot, ssmi_off5(&a->qk_dot, b, h, t, r, r2), w->qk[(i * R + r) * R + r2]);
        }
        if (ssmi_present(&a->states))
            for (int64_t n = 0; n < N; ++n)
                ssmi_ref_m3_write(&a->states, ssmi_off5(&a->states, b, h, c, n, 0), w->hs + n * P, P);
        /* outputs y and the phase-1 gradients, token by token */
        for (int64_t i = 0; i < Lc; ++i) {
            const int64_t t = cs + i;
            const double  einter = exp(ssmi_get_f64(&a->da_cs, ssmi_off3(&a->da_cs, b, h, t)));
            for (int64_t r = 0; r < R; ++r) {
                const double * qt = w->qt + (i * R + r) * N;
                double *       y = w->y + r * P;
                for (int64_t p = 0; p < P; ++p) {
                    double sp = 0.0;
                    for (int64_t n = 0; n < N; ++n) sp += w->hs[n * P + p] * qt[n];
                    y[p] = einter * sp + hp.dskip * w->u[(i * R + r) * P + p];
                }
                for (int64_t j = 0; j < i; ++j) {
                    const double e = exp(ssmi_get_f64(&a->segsum, ssmi_off5(&a->segsum, b, h, c, i, j)));
                    for (int64_t r2 = 0; r2 < R; ++r2) {
                        const double sc = e * ssmi_ref_m3_dot(qt, w->kh + (j * R + r2) * N, N);
                        for (int64_t p = 0; p < P; ++p) y[p] += sc * w->u[(j * R + r2) * P + p];
                    }
                }
                for (int64_t r2 = 0; r2 < R; ++r2) {
                    const double sc = w->gam[i] * w->qk[(i * R + r) * R + r2];
                    for (int64_t p = 0; p < P; ++p) y[p] += sc * w->u[(i * R + r2) * P + p];
                }
            }
            if (has_z) ssmi_ref_m3_read(w->z, &a->z, ssmi_off4(&a->z, b, t, h, 0), P);
            for (int64_t p = 0; p < P; ++p) w->dzrow[p] = 0.0;
            for (int64_t r = 0; r < R; ++r) {
                if (!red && !has_z) break;
                ssmi_ref_m3_read(w->dout, &a->dout, dout_off(&a->dout, red, b, t, r, h), P);
                for (int64_t p = 0; p < P; ++p) {
                    const double y = w->y[r * P + p], zz = has_z ? w->z[p] * hp.mz[r * P + p] : 0.0;
                    const double gate = has_z ? ssmi_ref_m3_silu(zz) : 1.0;
                    double       dg = 0.0;
                    if (red) {
                        w->dmo[r * P + p] += gate * y * w->dout[p];
                        dg = w->dout[p] * hp.mo[r * P + p] * y;
                    } else {
                        dg = w->dout[p] * y;
                    }
                    if (has_z) {
                        const double dzz = dg * ssmi_ref_silu_grad(zz);
                        w->dzrow[p] += dzz * hp.mz[r * P + p];
                        w->dmz[r * P + p] += dzz * w->z[p];
                    }
                }
            }
            if (has_z && ssmi_present(&a->dz)) ssmi_ref_m3_write(&a->dz, ssmi_off4(&a->dz, b, t, h, 0), w->dzrow, P);
        }
        /* Ŝ_{c+1} = e^{da_cs[last]}·Ŝ + Σ_j Σ_r e^{da_cs_rev[j]}·k̂[j,r] ⊗ u[j,r] */
        const double edecay = exp(ssmi_get_f64(&a->da_cs, ssmi_off3(&a->da_cs, b, h, cs + Lc - 1)));
        for (int64_t x = 0; x < N * P; ++x) w->hs[x] *= edecay;
        for (int64_t j = 0; j < Lc; ++j) {
            const double e = exp(ssmi_get_f64(&a->da_cs_rev, ssmi_off3(&a->da_cs_rev, b, h, cs + j)));
            for (int64_t r = 0; r < R; ++r)
                for (int64_t n = 0; n < N; ++n) {
                    const double kn = e * w->kh[(j * R + r) * N + n];
                    for (int64_t p = 0; p < P; ++p) w->hs[n * P + p] += kn * w->u[(j * R + r) * P + p];
                }
        }
    }
    if (ssmi_present(&a->dmimo_o))
        for (int64_t r = 0; r < R; ++r)
            ssmi_ref_m3_write(&a->dmimo_o, ssmi_off4(&a->dmimo_o, b, h, r, 0), w->dmo + r * P, P);
    if (ssmi_present(&a->dmimo_z))
        for (int64_t r = 0; r < R; ++r)
            ssmi_ref_m3_write(&a->dmimo_z, ssmi_off4(&a->dmimo_z, b, h, r, 0), w->dmz + r * P, P);
}

static ssm_status run_exact(ssm_context * ctx, const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a) {
    int          ok = 1;
    const size_t R = (size_t)d->rank, N = (size_t)d->dstate, P = (size_t)d->headdim, C = (size_t)d->chunk;
    const size_t A = (size_t)d->nangles;
    const size_t CRN = ssmi_ref_m3_mul(C * R, N, &ok), CRP = ssmi_ref_m3_mul(C * R, P, &ok);
    const size_t sizes[23] = {CRN,   CRN, CRN, CRN, CRP, C,     A,     N * P, R * P, P,     P,    R * P,
                              R * P, R * P, P, P,   C * R * R, R * N, R * N, R * P, R * P, R * P, P};
    bf_scratch   w;
    double **    ptrs[23] = {&w.qbar, &w.kbar, &w.qt,  &w.kh, &w.u,   &w.gam, &w.theta, &w.hs,
                             &w.y,    &w.dout, &w.z,   &w.dzz, &w.dmo, &w.dmz, &w.v,     &w.dzrow,
                             &w.qk,   &w.qb,   &w.kb,  &w.mv,  &w.mz,  &w.mo,  &w.w};
    double *     block = NULL;
    SSM_RETURN_IF(!ok, ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba3_mimo_bwd_fwd: reference scratch size overflows size_t");
    SSM_FORWARD_IF_ERROR(ssmi_ref_m3_scratch(ctx, "mamba3_mimo_bwd_fwd", 23, sizes, ptrs, &block));
    for (int64_t b = 0; b < d->batch; ++b)
        for (int64_t h = 0; h < d->nheads; ++h) exact_head(d, a, b, h, &w);
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}

/* ---- upstream bf16 rounding (spec §5.1) ------------------------------------------------ */

/* ρ: round a float32 value to the activation dtype and back. */
static float rho(int32_t act, float x) {
    switch (act) {
        case SSM_DTYPE_BF16: return ssmi_bf16_to_f32(ssmi_f32_to_bf16(x));
        case SSM_DTYPE_F16: return ssmi_f16_to_f32(ssmi_f32_to_f16(x));
        default: return x;
    }
}

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Float32 scratch carved from one allocation (counts in floats, each ≥ 1). */
typedef struct bf16_scratch {
    float *qbar, *kbar, *qt, *kh, *u, *gam, *theta, *hs, *sb, *y, *dout, *z, *dmo, *dmz, *v, *dzacc, *qk;
    float *qb, *kb, *mv, *mz, *mo, *dzz;
} bf16_scratch;

/* One float32 value of a tensor (f64 inputs are rounded to f32 first). */
static float getf(const ssm_tensor * t, int64_t off) { return ssmi_get_f32(t, off); }

/* Loads an (H, R, X) parameter of head h as float, rounded with ρ when round_it. */
static void load_param_f(float * dst, const ssm_tensor * t, int64_t h, int64_t R, int64_t X, int32_t act,
                         int round_it) {
    for (int64_t r = 0; r < R; ++r)
        for (int64_t x = 0; x < X; ++x) {
            const float v = getf(t, ssmi_off3(t, h, r, x));
            dst[r * X + x] = round_it ? rho(act, v) : v;
        }
}

/* The rotated pairs are ρ(cos·x1 − sin·x2), ρ(sin·x1 + cos·x2) in f32 (§5.1 item 8). */
static void rotate_f(float * y, const float * x, const float * theta, int64_t N, int64_t A, int32_t act) {
    const int64_t half = N / 2;
    for (int64_t a = 0; a < half; ++a) {
        const float x1 = x[a], x2 = x[a + half];
        if (a < A) {
            const float c = cosf(theta[a]), s = sinf(theta[a]);
            y[a] = rho(act, c * x1 - s * x2);
            y[a + half] = rho(act, s * x1 + c * x2);
        } else {
            y[a] = x1;
            y[a + half] = x2;
        }
    }
}

static float dotf(const float * a, const float * b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

/* Per-token values of chunk c in the §5.1 roundings (items 2-9): γ, q̄, k̄, qk_dot, q̃, k̂, u. */
static void bf16_tokens(const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a, int64_t b, int64_t h,
                        int64_t cs, int64_t Lc, int32_t act, const bf16_scratch * w) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles, S = d->seqlen;
    const int64_t g = ssmi_ref_mimo_group(d, h);
    for (int64_t i = 0; i < Lc; ++i) {
        const int64_t t = cs + i;
        const float   dtb = rho(act, getf(&a->dt, ssmi_off3(&a->dt, b, h, t)));
        w->gam[i] = dtb * sigmoidf_(getf(&a->trap, ssmi_off3(&a->trap, b, h, t)));
        float sbar = 0.0f;
        if (t < S - 1) {
            const float dt1 = rho(act, getf(&a->dt, ssmi_off3(&a->dt, b, h, t + 1)));
            sbar = rho(act, dt1 * sigmoidf_(-getf(&a->trap, ssmi_off3(&a->trap, b, h, t + 1))));
        }
        const float cf = rho(act, w->gam[i] + sbar);
        float *     qbar = w->qbar + i * R * N;
        float *     kbar = w->kbar + i * R * N;
        for (int64_t r = 0; r < R; ++r)
            for (int64_t n = 0; n < N; ++n) {
                qbar[r * N + n] = rho(act, getf(&a->q, ssmi_off5(&a->q, b, t, r, g, n)) + w->qb[r * N + n]);
                kbar[r * N + n] = rho(act, getf(&a->k, ssmi_off5(&a->k, b, t, r, g, n)) + w->kb[r * N + n]);
            }
        for (int64_t r = 0; r < R; ++r)
            for (int64_t r2 = 0; r2 < R; ++r2)
                w->qk[(i * R + r) * R + r2] = rho(act, dotf(qbar + r * N, kbar + r2 * N, N));
        for (int64_t x = 0; x < A; ++x) w->theta[x] = getf(&a->angles, ssmi_off4(&a->angles, b, t, h, x));
        for (int64_t r = 0; r < R; ++r) {
            const int64_t x = (i * R + r) * N;
            rotate_f(w->qt + x, w->qbar + x, w->theta, N, A, act);
            rotate_f(w->kh + x, w->kbar + x, w->theta, N, A, act);
            for (int64_t n = 0; n < N; ++n) w->kh[x + n] = rho(act, w->kh[x + n] * cf);
        }
        for (int64_t p = 0; p < P; ++p) w->v[p] = getf(&a->v, ssmi_off4(&a->v, b, t, h, p));
        for (int64_t r = 0; r < R; ++r)
            for (int64_t p = 0; p < P; ++p) w->u[(i * R + r) * P + p] = rho(act, w->v[p] * w->mv[r * P + p]);
    }
}

/* y of token i of the chunk, every rank (items 10-13), into w->y (R·P, f32). */
static void bf16_y(const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a, int64_t b, int64_t h, int64_t c,
                   int64_t i, int32_t act, float dskip, const bf16_scratch * w) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, t = c * d->chunk + i;
    const float   einter = expf(getf(&a->da_cs, ssmi_off3(&a->da_cs, b, h, t)));
    for (int64_t r = 0; r < R; ++r) {
        const float * qt = w->qt + (i * R + r) * N;
        float *       y = w->y + r * P;
        for (int64_t p = 0; p < P; ++p) {
            float sp = 0.0f;
            for (int64_t n = 0; n < N; ++n) sp += qt[n] * w->sb[n * P + p];
            y[p] = einter * sp;
        }
        for (int64_t j = 0; j < i; ++j) {
            const float e = expf(getf(&a->segsum, ssmi_off5(&a->segsum, b, h, c, i, j)));
            for (int64_t r2 = 0; r2 < R; ++r2) {
                const float sc = rho(act, dotf(qt, w->kh + (j * R + r2) * N, N) * e);
                for (int64_t p = 0; p < P; ++p) y[p] += sc * w->u[(j * R + r2) * P + p];
            }
        }
        for (int64_t p = 0; p < P; ++p) {
            float acc = 0.0f; /* sequential per-rank act sum (item 12) */
            for (int64_t r2 = 0; r2 < R; ++r2)
                acc = rho(act, acc + rho(act, w->qk[(i * R + r) * R + r2] * w->u[(i * R + r2) * P + p]));
            y[p] += rho(act, acc * w->gam[i]);
            y[p] += dskip * w->u[(i * R + r) * P + p];
        }
    }
}

/* The gate side of token t (items 14-17): dmimo_o, dz, dmimo_z. */
static void bf16_gate(const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a, int64_t b, int64_t h,
                      int64_t t, int32_t act, const bf16_scratch * w) {
    const int64_t R = d->rank, P = d->headdim;
    const int     has_z = ssmi_present(&a->z), red = d->reduce_o;
    if (!red && !has_z) return;
    if (has_z)
        for (int64_t p = 0; p < P; ++p) w->z[p] = getf(&a->z, ssmi_off4(&a->z, b, t, h, p));
    for (int64_t r = 0; r < R; ++r) {
        const int64_t od = dout_off(&a->dout, red, b, t, r, h), sd = a->dout.strides[a->dout.ndim - 1];
        for (int64_t p = 0; p < P; ++p) {
            const float dout = getf(&a->dout, od + p * sd);
            const float yb = rho(act, w->y[r * P + p]);
            float       dg = 0.0f;
            float       zz = 0.0f;
            if (has_z) zz = w->z[p] * w->mz[r * P + p];
            if (red) {
                const float half = 0.5f * zz;
                const float gate = has_z ? half * tanhf(half) + half : 1.0f;
                w->dmo[r * P + p] += gate * yb * dout;
                if (has_z) dg = rho(act, rho(act, dout * w->mo[r * P + p]) * yb);
            } else {
                dg = rho(act, dout * yb);
            }
            if (has_z) {
                const float sz = sigmoidf_(zz);
                w->dzz[r * P + p] = dg * sz * (1.0f + zz * sigmoidf_(-zz));
                w->dmz[r * P + p] += w->dzz[r * P + p] * w->z[p];
            }
        }
    }
    if (!has_z || !ssmi_present(&a->dz)) return;
    for (int64_t p = 0; p < P; ++p) {
        float acc = 0.0f; /* sequential per-rank act sum (item 17) */
        for (int64_t r = 0; r < R; ++r) acc = rho(act, acc + w->dzz[r * P + p] * w->mz[r * P + p]);
        ssmi_set_f64(&a->dz, ssmi_off4(&a->dz, b, t, h, p), (double)acc);
    }
}

static void bf16_head(const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a, int64_t b, int64_t h,
                      int32_t act, const bf16_scratch * w) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, C = d->chunk, S = d->seqlen;
    /* item 1: the per-head parameters in act fragments; mimo_z stays f32 */
    load_param_f(w->qb, &a->q_bias, h, R, N, act, 1);
    load_param_f(w->kb, &a->k_bias, h, R, N, act, 1);
    load_param_f(w->mv, &a->mimo_v, h, R, P, act, 1);
    if (d->reduce_o) load_param_f(w->mo, &a->mimo_o, h, R, P, act, 1);
    if (ssmi_present(&a->mimo_z)) load_param_f(w->mz, &a->mimo_z, h, R, P, act, 0);
    const float dskip = ssmi_present(&a->d) ? getf(&a->d, ssmi_off1(&a->d, h)) : 0.0f;
    memset(w->hs, 0, (size_t)(N * P) * sizeof(float));
    memset(w->dmo, 0, (size_t)(R * P) * sizeof(float));
    memset(w->dmz, 0, (size_t)(R * P) * sizeof(float));
    for (int64_t c = 0; c < d->nchunks; ++c) {
        const int64_t cs = c * C, Lc = S - cs < C ? S - cs : C;
        bf16_tokens(d, a, b, h, cs, Lc, act, w);
        if (ssmi_present(&a->qk_dot))
            for (int64_t i = 0; i < Lc; ++i)
                for (int64_t r = 0; r < R; ++r)
                    for (int64_t r2 = 0; r2 < R; ++r2)
                        ssmi_set_f64(&a->qk_dot, ssmi_off5(&a->qk_dot, b, h, cs + i, r, r2),
                                     (double)w->qk[(i * R + r) * R + r2]);
        for (int64_t x = 0; x < N * P; ++x) w->sb[x] = rho(act, w->hs[x]); /* item 10 */
        if (ssmi_present(&a->states))
            for (int64_t n = 0; n < N; ++n)
                for (int64_t p = 0; p < P; ++p)
                    ssmi_set_f64(&a->states, ssmi_off5(&a->states, b, h, c, n, p), (double)w->sb[n * P + p]);
        for (int64_t i = 0; i < Lc; ++i) {
            bf16_y(d, a, b, h, c, i, act, dskip, w);
            bf16_gate(d, a, b, h, cs + i, act, w);
        }
        /* item 18: ks = ρ(k̂·e^{da_cs_rev}), Ŝ ← e^{da_cs[last]}·Ŝ + ksᵀ·u in f32 */
        const float edecay = expf(getf(&a->da_cs, ssmi_off3(&a->da_cs, b, h, cs + Lc - 1)));
        for (int64_t x = 0; x < N * P; ++x) w->hs[x] *= edecay;
        for (int64_t j = 0; j < Lc; ++j) {
            const float e = expf(getf(&a->da_cs_rev, ssmi_off3(&a->da_cs_rev, b, h, cs + j)));
            for (int64_t r = 0; r < R; ++r)
                for (int64_t n = 0; n < N; ++n) {
                    const float ks = rho(act, w->kh[(j * R + r) * N + n] * e);
                    for (int64_t p = 0; p < P; ++p) w->hs[n * P + p] += ks * w->u[(j * R + r) * P + p];
                }
        }
    }
    if (ssmi_present(&a->dmimo_o))
        for (int64_t r = 0; r < R; ++r)
            for (int64_t p = 0; p < P; ++p)
                ssmi_set_f64(&a->dmimo_o, ssmi_off4(&a->dmimo_o, b, h, r, p), (double)w->dmo[r * P + p]);
    if (ssmi_present(&a->dmimo_z))
        for (int64_t r = 0; r < R; ++r)
            for (int64_t p = 0; p < P; ++p)
                ssmi_set_f64(&a->dmimo_z, ssmi_off4(&a->dmimo_z, b, h, r, p), (double)w->dmz[r * P + p]);
}

static ssm_status run_bf16(ssm_context * ctx, const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a) {
    const size_t R = (size_t)d->rank, N = (size_t)d->dstate, P = (size_t)d->headdim, C = (size_t)d->chunk;
    const size_t A = (size_t)d->nangles;
    const size_t CRN = C * R * N, CRP = C * R * P; /* C·R ≤ 128, N, P ≤ 128: no overflow */
    const size_t sizes[23] = {CRN, CRN,   CRN,   CRN, CRP, C, A + 1, N * P, N * P, R * P, P, P, R * P, R * P,
                              P,   P,     C * R * R, R * N, R * N, R * P, R * P, R * P, R * P};
    bf16_scratch w;
    float **     ptrs[23] = {&w.qbar, &w.kbar, &w.qt, &w.kh,  &w.u,  &w.gam, &w.theta, &w.hs,
                             &w.sb,   &w.y,    &w.dout, &w.z, &w.dmo, &w.dmz, &w.v,    &w.dzacc,
                             &w.qk,   &w.qb,   &w.kb, &w.mv,  &w.mz, &w.mo,  &w.dzz};
    size_t       total = 0;
    for (int i = 0; i < 23; ++i) total += sizes[i] > 0 ? sizes[i] : 1;
    float * block = ssmi_alloc(ctx, total * sizeof(float));
    SSM_RETURN_IF(block == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "mamba3_mimo_bwd_fwd: could not allocate %zu bytes of reference scratch", total * sizeof(float));
    float * q = block;
    for (int i = 0; i < 23; ++i) {
        *ptrs[i] = q;
        q += sizes[i] > 0 ? sizes[i] : 1;
    }
    const int32_t act = a->v.dtype;
    for (int64_t b = 0; b < d->batch; ++b)
        for (int64_t h = 0; h < d->nheads; ++h) bf16_head(d, a, b, h, act, &w);
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}

ssm_status ssmi_ref_mamba3_mimo_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                        const ssm_mamba3_mimo_bwd_fwd_args * a) {
    (void)p;
    const int bf16 = ctx != NULL && ctx->ref_mode == SSM_REF_UPSTREAM_BF16;
    return bf16 ? run_bf16(ctx, d, a) : run_exact(ctx, d, a);
}
