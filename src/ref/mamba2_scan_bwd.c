/* Reference of mamba2_scan_bwd (spec §2.7) in float64, by reverse mode through the
 * token-by-token recurrence of §1.1/§1.4 (backpropagation through time). It shares nothing
 * with the chunked algorithm of the CPU backend, so the two check each other.
 *
 * Per run of tokens [t0, t1) of one batch row (or one varlen sequence) and head h:
 *   forward:  dt_t = clamp(φ(dt[t,h] + bias)), keep_t = [seq_t == seq_{t−1}] (seq_{t0−1} := 0,
 *             1 without seq_idx), h_t = keep_t·exp(dt_t·A)·h_{t−1} + dt_t·x_t B_tᵀ; every h_t
 *             is kept (O(len·P·N) doubles of scratch).
 *   backward: G = ∂L/∂h_t, starting from dfinal_states (or 0) after the last token, then per
 *             token t from the last to the first:
 *               y = h_t·C_t + D·x_t;  δy = dout·silu(z) (dz = dout·y·σ(z)(1 + z(1−σ(z)))) or dout
 *               dC_t += Σ_p δy_p·h_t[p,:];  G += δy ⊗ C_t;  dD += δy·x_t
 *               dx_t = D·δy + dt_t·G·B_t;  dB_t += dt_t·Gᵀx_t;  ∂L/∂dt_t = x_tᵀ·G·B_t
 *               ∂L/∂a_t = keep_t·exp(a_t)·<G, h_{t−1}>   (a_t = dt_t·A)
 *               G ← keep_t·exp(a_t)·G                     (now ∂L/∂h_{t−1})
 *             and the dt chain of §2.1: g = ∂L/∂a_t·A + ∂L/∂dt_t, 0 where the clamp is
 *             active (tested before clamping), times σ(pre) under softplus with pre ≤ 20;
 *             ddt = g, ddt_bias += g, dA += ∂L/∂a_t·dt_t.
 *   dinitial_states = G after the first token (0 when keep_{t0} = 0).
 * Varlen: every sequence on its own, with its own initial/final slot; an empty sequence
 * passes dfinal_states straight to dinitial_states. Group sums (dB, dC) and the reductions
 * (dA, dD, ddt_bias) accumulate in float64 and are rounded once at the end. */
#include <string.h>

#include "ref_common.h"
#include "ssmi_ref.h"

static const char op_name[] = "mamba2_scan_bwd";

/* a·b in size_t; *ok = 0 on overflow. */
static size_t mul_sz(size_t a, size_t b, int * ok) {
    if (a != 0 && b > SIZE_MAX / a) {
        *ok = 0;
        return 0;
    }
    return a * b;
}

/* Float64 accumulators of the summed gradients and the per-head scratch. */
typedef struct bwd_scratch {
    double * db;    /* (batch, S, G, N)            */
    double * dc;    /* (batch, S, G, N)            */
    double * da;    /* (H)                         */
    double * dd;    /* (H, P)                      */
    double * dbias; /* (H)                         */
    double * hist;  /* (maxlen + 1, P, N) states   */
    double * g;     /* (P, N) state gradient       */
    double * dy;    /* (P) δy of one token         */
    double * bn;    /* (N) B_t                     */
    double * cn;    /* (N) C_t                     */
    double * xp;    /* (P) x_t                     */
} bwd_scratch;

static ssm_status scratch_alloc(ssm_context * ctx, const ssmi_mamba2_dims * d, int64_t maxlen, bwd_scratch * s,
                                double ** block) {
    const int64_t P = d->headdim, N = d->dstate;
    int           ok = 1;
    size_t        part[11];
    const size_t  bsgn = mul_sz(mul_sz(mul_sz((size_t)d->batch, (size_t)d->seqlen, &ok), (size_t)d->ngroups, &ok),
                                (size_t)d->dstate, &ok);
    const size_t  pn = mul_sz((size_t)P, (size_t)N, &ok);
    part[0] = bsgn;
    part[1] = bsgn;
    part[2] = (size_t)d->nheads;
    part[3] = mul_sz((size_t)d->nheads, (size_t)P, &ok);
    part[4] = (size_t)d->nheads;
    part[5] = mul_sz((size_t)maxlen + 1, pn, &ok);
    part[6] = pn;
    part[7] = (size_t)P;
    part[8] = (size_t)N;
    part[9] = (size_t)N;
    part[10] = (size_t)P;
    size_t total = 0;
    for (int i = 0; i < 11; ++i) {
        if (part[i] > SIZE_MAX / sizeof(double) - total) ok = 0;
        total += part[i] + 1; /* +1: no zero-sized piece shares an address with the next */
    }
    memset(s, 0, sizeof *s);
    *block = NULL;
    SSM_RETURN_IF(!ok || total > SIZE_MAX / sizeof(double), ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "%s: reference scratch size overflows size_t", op_name);
    *block = ssmi_alloc(ctx, total * sizeof(double));
    SSM_RETURN_IF(*block == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes of reference scratch",
                  op_name, total * sizeof(double));
    memset(*block, 0, total * sizeof(double));
    double *  q = *block;
    double ** dst[11] = {&s->db, &s->dc, &s->da, &s->dd, &s->dbias, &s->hist, &s->g, &s->dy, &s->bn, &s->cn, &s->xp};
    for (int i = 0; i < 11; ++i) {
        *dst[i] = q;
        q += part[i] + 1;
    }
    return SSM_STATUS_OK;
}

/* Loads n elements of a row of t (dims (…, n) with the last stride) as doubles. */
static void load_row(double * dst, const ssm_tensor * t, int64_t off, int64_t n) {
    const int64_t st = t->strides[t->ndim - 1];
    for (int64_t i = 0; i < n; ++i) dst[i] = ssmi_get_f64(t, off + i * st);
}

/* One run of tokens [t0, t1) of row b, every head: initial state from initial_states[ii]
 * (ii < 0: zeros), final-state gradient from dfinal_states[fi] (fi < 0: zeros), and
 * dinitial_states[ii] written at the end when requested. */
static void backprop_run(const ssm_mamba2_params * p, const ssmi_mamba2_dims * d, const ssm_mamba2_scan_bwd_args * a,
                         int64_t b, int64_t t0, int64_t t1, int64_t ii, int64_t fi, const bwd_scratch * s) {
    const int64_t      P = d->headdim, N = d->dstate, G = d->ngroups, S = d->seqlen, ratio = d->nheads / d->ngroups;
    const int64_t      PN = P * N;
    const ssm_tensor * seq = ssmi_present(&a->seq_idx) ? &a->seq_idx : NULL;
    const ssm_tensor * init = &a->initial_states;
    const int          has_z = ssmi_present(&a->z);
    for (int64_t hh = 0; hh < d->nheads; ++hh) {
        const int64_t g = hh / ratio;
        const double  ah = ssmi_get_f64(&a->a, ssmi_off1(&a->a, hh));
        const double  bias = ssmi_ref_bias(&a->dt_bias, hh);
        double *      hist = s->hist;
        for (int64_t e = 0; e < PN; ++e) {
            const int64_t pp = e / N, n = e % N;
            hist[e] = (ii >= 0 && ssmi_present(init)) ? ssmi_get_f64(init, ssmi_off4(init, ii, hh, pp, n)) : 0.0;
        }
        /* forward: every state kept */
        for (int64_t t = t0; t < t1; ++t) {
            const double dt = ssmi_ref_process_dt(p, ssmi_get_f64(&a->dt, ssmi_off3(&a->dt, b, t, hh)), bias);
            const double decay = exp(dt * ah);
            const int      keep = ssmi_ref_seq_keeps(seq, b, t0, t);
            const double * hp = hist + (t - t0) * PN;
            double *       hc = hist + (t - t0 + 1) * PN;
            load_row(s->bn, &a->b, ssmi_off4(&a->b, b, t, g, 0), N);
            load_row(s->xp, &a->x, ssmi_off4(&a->x, b, t, hh, 0), P);
            for (int64_t pp = 0; pp < P; ++pp)
                for (int64_t n = 0; n < N; ++n)
                    hc[pp * N + n] = (keep ? decay * hp[pp * N + n] : 0.0) + dt * s->xp[pp] * s->bn[n];
        }
        /* backward */
        double * gs = s->g;
        for (int64_t e = 0; e < PN; ++e) {
            const int64_t pp = e / N, n = e % N;
            gs[e] = (fi >= 0 && ssmi_present(&a->dfinal_states))
                        ? ssmi_get_f64(&a->dfinal_states, ssmi_off4(&a->dfinal_states, fi, hh, pp, n))
                        : 0.0;
        }
        for (int64_t t = t1 - 1; t >= t0; --t) {
            const double raw = ssmi_get_f64(&a->dt, ssmi_off3(&a->dt, b, t, hh));
            const double pre = raw + bias;
            const double vsp = p->dt_softplus ? ssmi_ref_softplus_thresh(pre) : pre; /* before the clamp */
            const double dt = ssmi_ref_process_dt(p, raw, bias);
            const double decay = exp(dt * ah);
            const int      keep = ssmi_ref_seq_keeps(seq, b, t0, t);
            const double * hp = hist + (t - t0) * PN;
            const double * hc = hist + (t - t0 + 1) * PN;
            load_row(s->bn, &a->b, ssmi_off4(&a->b, b, t, g, 0), N);
            load_row(s->cn, &a->c, ssmi_off4(&a->c, b, t, g, 0), N);
            load_row(s->xp, &a->x, ssmi_off4(&a->x, b, t, hh, 0), P);
            double *       dcrow = s->dc + ((b * S + t) * G + g) * N;
            double *       dbrow = s->db + ((b * S + t) * G + g) * N;
            /* output of token t: δy, dz, dD, dC, and G += δy ⊗ C */
            for (int64_t pp = 0; pp < P; ++pp) {
                const double dh = ssmi_ref_d(&a->d, hh, pp);
                double       y = dh * s->xp[pp];
                for (int64_t n = 0; n < N; ++n) y += hc[pp * N + n] * s->cn[n];
                const double dout = ssmi_get_f64(&a->dout, ssmi_off4(&a->dout, b, t, hh, pp));
                double       dy = dout;
                if (has_z) {
                    const double zv = ssmi_get_f64(&a->z, ssmi_off4(&a->z, b, t, hh, pp));
                    const double sg = ssmi_ref_sigmoid(zv);
                    dy = dout * zv * sg;
                    if (ssmi_present(&a->dz))
                        ssmi_set_f64(&a->dz, ssmi_off4(&a->dz, b, t, hh, pp), dout * y * sg * (1.0 + zv * (1.0 - sg)));
                }
                s->dy[pp] = dy;
                s->dd[hh * P + pp] += dy * s->xp[pp];
                for (int64_t n = 0; n < N; ++n) {
                    dcrow[n] += dy * hc[pp * N + n];
                    gs[pp * N + n] += dy * s->cn[n];
                }
            }
            /* input of token t: dx, dB, ∂L/∂dt through the input term and through the decay */
            double ddt_in = 0.0, dadt = 0.0;
            for (int64_t pp = 0; pp < P; ++pp) {
                double gb = 0.0;
                for (int64_t n = 0; n < N; ++n) gb += gs[pp * N + n] * s->bn[n];
                ddt_in += gb * s->xp[pp];
                if (ssmi_present(&a->dx))
                    ssmi_set_f64(&a->dx, ssmi_off4(&a->dx, b, t, hh, pp),
                                 ssmi_ref_d(&a->d, hh, pp) * s->dy[pp] + dt * gb);
            }
            for (int64_t n = 0; n < N; ++n) {
                double gx = 0.0;
                for (int64_t pp = 0; pp < P; ++pp) gx += gs[pp * N + n] * s->xp[pp];
                dbrow[n] += dt * gx;
            }
            if (keep) {
                double gh = 0.0;
                for (int64_t e = 0; e < PN; ++e) gh += gs[e] * hp[e];
                dadt = decay * gh;
                for (int64_t e = 0; e < PN; ++e) gs[e] *= decay;
            } else {
                for (int64_t e = 0; e < PN; ++e) gs[e] = 0.0;
            }
            /* dt processing backward (§2.1) */
            double gvec = dadt * ah + ddt_in;
            if (vsp < p->dt_limit_lo || vsp > p->dt_limit_hi) gvec = 0.0;
            if (p->dt_softplus && pre <= SSMI_SOFTPLUS_THRESHOLD) gvec *= ssmi_ref_sigmoid(pre);
            if (ssmi_present(&a->ddt)) ssmi_set_f64(&a->ddt, ssmi_off3(&a->ddt, b, t, hh), gvec);
            s->da[hh] += dadt * dt;
            s->dbias[hh] += gvec;
        }
        if (ii >= 0 && ssmi_present(&a->dinitial_states)) {
            const ssm_tensor * di = &a->dinitial_states;
            for (int64_t e = 0; e < PN; ++e) ssmi_set_f64(di, ssmi_off4(di, ii, hh, e / N, e % N), gs[e]);
        }
    }
}

static int64_t cu_at(const ssm_mamba2_scan_bwd_args * a, int64_t s) {
    return ssmi_get_i64(&a->cu_seqlens, ssmi_off1(&a->cu_seqlens, s));
}

/* Rounds the float64 sums into the reduction outputs. */
static void write_sums(const ssmi_mamba2_dims * d, const ssm_mamba2_scan_bwd_args * a, const bwd_scratch * s) {
    const int64_t H = d->nheads, P = d->headdim, G = d->ngroups, N = d->dstate;
    for (int64_t b = 0; b < d->batch; ++b)
        for (int64_t t = 0; t < d->seqlen; ++t)
            for (int64_t g = 0; g < G; ++g)
                for (int64_t n = 0; n < N; ++n) {
                    const int64_t k = ((b * d->seqlen + t) * G + g) * N + n;
                    if (ssmi_present(&a->db)) ssmi_set_f64(&a->db, ssmi_off4(&a->db, b, t, g, n), s->db[k]);
                    if (ssmi_present(&a->dc)) ssmi_set_f64(&a->dc, ssmi_off4(&a->dc, b, t, g, n), s->dc[k]);
                }
    for (int64_t h = 0; h < H; ++h) {
        if (ssmi_present(&a->da)) ssmi_set_f64(&a->da, ssmi_off1(&a->da, h), s->da[h]);
        if (ssmi_present(&a->ddt_bias)) ssmi_set_f64(&a->ddt_bias, ssmi_off1(&a->ddt_bias, h), s->dbias[h]);
        if (!ssmi_present(&a->dd)) continue;
        if (a->dd.ndim == 2) {
            for (int64_t pp = 0; pp < P; ++pp) ssmi_set_f64(&a->dd, ssmi_off2(&a->dd, h, pp), s->dd[h * P + pp]);
        } else {
            double sum = 0.0;
            for (int64_t pp = 0; pp < P; ++pp) sum += s->dd[h * P + pp];
            ssmi_set_f64(&a->dd, ssmi_off1(&a->dd, h), sum);
        }
    }
}

ssm_status ssmi_ref_mamba2_scan_bwd(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                    const ssm_mamba2_scan_bwd_args * a) {
    int64_t maxlen = d->seqlen;
    if (d->nseq > 0) {
        maxlen = 0;
        for (int64_t q = 0; q < d->nseq; ++q)
            if (cu_at(a, q + 1) - cu_at(a, q) > maxlen) maxlen = cu_at(a, q + 1) - cu_at(a, q);
    }
    bwd_scratch s;
    double *    block;
    SSM_FORWARD_IF_ERROR(scratch_alloc(ctx, d, maxlen, &s, &block));
    const int has_init = ssmi_present(&a->initial_states);
    if (d->nseq == 0) {
        for (int64_t b = 0; b < d->batch; ++b) backprop_run(p, d, a, b, 0, d->seqlen, has_init ? b : -1, b, &s);
    } else {
        for (int64_t q = 0; q < d->nseq; ++q) backprop_run(p, d, a, 0, cu_at(a, q), cu_at(a, q + 1), has_init ? q : -1, q, &s);
    }
    write_sums(d, a, &s);
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}
