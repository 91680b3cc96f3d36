/*
 * Mamba-2 combined backward on the CPU (spec §2.7), fused like the forward
 * (mamba2_scan.c): "per (unit, group, head block), recompute forward, then walk back".
 *
 * Units and segments. A unit is a batch row (a sequence with cu_seqlens). Its tokens are
 * cut into segments inside which the recurrence never resets (one per row; with seq_idx
 * one per run of equal ids, the first starting from initial_states[b] only if its id is 0
 * and the last receiving dfinal_states[b]; with cu_seqlens the sequence itself). Chunks of
 * BWD_CHUNK tokens are aligned to the segment start, so no seq_idx mask is ever needed.
 *
 * Tasks. One task per (unit, group, block of BWD_HEAD_BLOCK heads of the group). Per
 * segment it computes CB = C·Bᵀ of every chunk once, then for each head of the block:
 *   forward:  dt, cm and the dt chain of every chunk (kept for the walk back);
 *             S_0 = initial state (or 0), S_{c+1} = e^{cl}·S_c + Σ_j e^{cl−cm_j}dt_j·B_j x_jᵀ;
 *             every S_c is kept (states are N×P fp32, P contiguous).
 *   backward, chunks in reverse with G = ∂L/∂S_{c+1} (dfinal_states or 0 at the end):
 *     (dz)   y recomputed as in the forward, dz = dout·y·σ(z)(1 + z(1 − σ(z))), in the same
 *            pass over z and dout as δx (each is read once per head)
 *     δx   = dout·silu(z) (or dout)                         dD += Σ δx·x
 *     acc  = diag(e^{cl−cm})·B·G + M0ᵀ·δx,  M0[k][i] = CB[k][i]·e^{cm_k−cm_i} (i ≤ k)
 *     dx   = acc·dt + D·δx,   ddt_loc[i] = Σ_p acc[i][p]·x[i][p]
 *     r[j] = dt_j·Σ_p x[j][p]·(state part of acc)[j][p]   (= Σ_n dB_st[j][n]·B[j][n])
 *     dB_stᵀ = G·(x·e^{cl−cm}·dt)ᵀ,  dC_stᵀ = S_c·(δx·e^{cm})ᵀ,  q[i] = Σ_n dC_st[i][n]·C[i][n]
 *     dCB_h[i][j] = e^{cm_i−cm_j}·dt_j·Σ_p δx_i·x_j (j ≤ i), summed over the block's heads
 *     ddA[k] = Σ_{i≥k} q[i] + e^{cl}·<G, S_c> + Σ_{j<k} r[j] + Σ_{i≥k} Σ_{j<k} CB[i][j]·dCB_h[i][j]
 *              (the stable form of §2.7 step 6: one suffix sum, one prefix sum, the segment
 *              sum of the intra-chunk term; never "<out, dout> − ddt·dt, reverse cumsum")
 *     ddt  = dt chain of §2.1 applied to ddA·A + ddt_loc;  dA += ddA·dt;  ddt_bias += ddt
 *     G    ← e^{cl}·G + (C·e^{cm})ᵀ·δx             (now ∂L/∂S_c)
 *   and dinitial_states = G after the first chunk. Then per chunk, once for the block:
 *     dB = Σ_h dB_st + dCBᵀ·C,   dC = Σ_h dC_st + dCB·B.
 *
 * Determinism. Every dx, ddt, dz element and every dinitial_states row is written by one
 * task. The block size BWD_HEAD_BLOCK does not depend on the thread count, so the group
 * sums of dB/dC have one fixed shape: heads in order inside a block (into fp32 tiles),
 * then blocks in order (per-block fp32 partials, reduced by a second pass). dA, dD and
 * ddt_bias are per-(unit, head) float64 partials summed over units in order at the end.
 * So the results are bitwise identical for any thread count.
 *
 * Costs. GEMMs are about 60% of the time; the rest is mostly memory: the chunk states (one
 * head's, written forward, read back), and the x/dout/z rows, H·P elements apart, which the
 * walks prefetch a chunk ahead. Transposes, dots and column sums go through kernels/bwd.
 *
 * Memory. Per thread: the chunk-entry states of one head and the CB/dCB/dBᵀ/dCᵀ tiles of
 * one segment (O(segment length·(N·P/Q + Q + 2N)) floats) plus small tiles; globally the
 * dB/dC block partials (blocks × batch·S·G·N floats, only with more than one block).
 */
#include <string.h>

#include "cpu_common.h"
#include "kernels/bwd/bwd-tables.h"
#include "ssmi_cpu.h"

#define BWD_CHUNK      32 /* internal chunk: the exact decomposition lets us choose (see mamba2_scan.c) */
#define BWD_HEAD_BLOCK 8  /* heads per task; fixed so the dB/dC group sums never depend on threads  */

static const char bwd_op[] = "mamba2_scan_bwd";

typedef struct bwd_segment {
    int64_t unit;  /* row, or sequence with cu_seqlens               */
    int64_t row;   /* batch row                                      */
    int64_t t0;    /* first token                                    */
    int64_t len;   /* tokens                                         */
    int64_t init;  /* initial_states index feeding it, −1 = zeros    */
    int64_t dinit; /* dinitial_states index it owns, −1 = none       */
    int64_t final; /* dfinal_states index reaching it, −1 = none     */
} bwd_segment;

/* Per-thread tiles, carved from one block (sizes in floats, each rounded to lines). */
typedef struct bwd_tiles {
    float *states, *cbs, *dcbs, *dbt, *dct, *bts, *cts;       /* per segment: [nc] × tile       */
    float *gst;                                               /* state gradient [N][P]          */
    float *ct, *br;                                           /* [Q][N] row staging             */
    float *xt, *dy, *acc, *yt;                                /* [Q][P]                         */
    float *xtr, *xts, *dyte;                                  /* [P][Q] transposed              */
    float *m0, *dxx, *dcbh;                                   /* [Q][Q]                         */
    float *tmpt;                                              /* [N][Q]                         */
    float *sdtv, *scm, *sdfac;                                /* per segment: [nc][Q] dt, cm, dt chain */
    float *dtv, *cm, *ecm, *eclm, *wexp, *ones, *dfac, *r, *q, *dda, *dtl, *intra; /* [Q] */
    float *dvec, *zrow, *ddrow, *orow;                        /* [P]                            */
} bwd_tiles;

/* Carves the tiles out of base (NULL: only counts) and returns the floats used. */
static int64_t carve_tiles(float * base, int64_t N, int64_t P, int64_t ncm, bwd_tiles * t) {
    const int64_t Q   = BWD_CHUNK;
    int64_t       off = 0;
#define TAKE(field, floats) SSMI_CPU_TAKE(t, base, off, field, floats)
    TAKE(states, ncm * ssmi_cpu_lines(N * P));
    TAKE(cbs, ncm * Q * Q);
    TAKE(dcbs, ncm * Q * Q);
    TAKE(dbt, ncm * ssmi_cpu_lines(N * Q));
    TAKE(dct, ncm * ssmi_cpu_lines(N * Q));
    TAKE(bts, ncm * ssmi_cpu_lines(N * Q));
    TAKE(cts, ncm * ssmi_cpu_lines(N * Q));
    TAKE(gst, N * P);
    TAKE(ct, Q * N);
    TAKE(br, Q * N);
    TAKE(xt, Q * P);
    TAKE(dy, Q * P);
    TAKE(acc, Q * P);
    TAKE(yt, Q * P);
    TAKE(xtr, P * Q);
    TAKE(xts, P * Q);
    TAKE(dyte, P * Q);
    TAKE(m0, Q * Q);
    TAKE(dxx, Q * Q);
    TAKE(dcbh, Q * Q);
    TAKE(tmpt, N * Q);
    TAKE(dtv, Q);
    TAKE(cm, Q);
    TAKE(ecm, Q);
    TAKE(eclm, Q);
    TAKE(wexp, Q);
    TAKE(ones, Q);
    TAKE(dfac, Q);
    TAKE(r, Q);
    TAKE(q, Q);
    TAKE(dda, Q);
    TAKE(dtl, Q);
    TAKE(intra, Q);
    TAKE(sdtv, ncm * Q);
    TAKE(scm, ncm * Q);
    TAKE(sdfac, ncm * Q);
    TAKE(dvec, P);
    TAKE(zrow, P);
    TAKE(ddrow, P);
    TAKE(orow, P > N ? P : N);
#undef TAKE
    return off;
}

typedef struct bwd_job {
    const ssm_mamba2_params *        params;
    const ssmi_mamba2_dims *         dims;
    const ssm_mamba2_scan_bwd_args * args;
    const ssmi_cpu_kernels *         kernels;
    const ssmi_cpu_bwd_kernels *     bwdk; /* transpose (kernels/bwd) */
    const bwd_segment *              segments;
    const int64_t *                  unit_start; /* segments of unit u: [unit_start[u], unit_start[u+1]) */
    int64_t                          head_block, blocks; /* blocks per group */
    int64_t                          ncm;                /* chunks of the longest segment        */
    float *                          scratch;
    int64_t                          thread_floats;
    float *                          dbp, *dcp; /* block partials of db/dc (NULL: write the output)  */
    double *                         da_part, *dbias_part, *dd_part; /* [unit][H], [unit][H][P]  */
} bwd_job;

/* ---- segments ------------------------------------------------------------------------ */

static int64_t max_segments(const ssmi_mamba2_dims * d, const ssm_mamba2_scan_bwd_args * a) {
    if (ssmi_present(&a->cu_seqlens)) return d->nseq;
    if (ssmi_present(&a->seq_idx)) return d->batch * (d->seqlen > 0 ? d->seqlen : 1);
    return d->batch;
}

/* Fills seg[] and unit_start[] (units + 1 entries); returns the segment count. */
static int64_t build_segments(const ssmi_mamba2_dims * d, const ssm_mamba2_scan_bwd_args * a, bwd_segment * seg,
                              int64_t * unit_start) {
    const int has_init = ssmi_present(&a->initial_states), has_dfinal = ssmi_present(&a->dfinal_states);
    int64_t   count    = 0;
    if (ssmi_present(&a->cu_seqlens)) {
        const ssm_tensor * cu = &a->cu_seqlens;
        for (int64_t s = 0; s < d->nseq; ++s) {
            const int64_t st = ssmi_get_i64(cu, ssmi_off1(cu, s)), en = ssmi_get_i64(cu, ssmi_off1(cu, s + 1));
            unit_start[s]    = count;
            seg[count++]     = (bwd_segment) { s, 0, st, en - st, has_init ? s : -1, has_init ? s : -1,
                                               has_dfinal ? s : -1 };
        }
        unit_start[d->nseq] = count;
        return count;
    }
    for (int64_t b = 0; b < d->batch; ++b) {
        unit_start[b] = count;
        if (!ssmi_present(&a->seq_idx) || d->seqlen == 0) {
            seg[count++] = (bwd_segment) { b, b, 0, d->seqlen, has_init ? b : -1, has_init ? b : -1,
                                           has_dfinal ? b : -1 };
            continue;
        }
        for (int64_t t0 = 0, t1, id; t0 < d->seqlen; t0 = t1) {
            t1 = ssmi_cpu_seq_run(&a->seq_idx, b, t0, d->seqlen, &id);
            /* the recurrence starts with seq_{−1} := 0: the initial state feeds id 0 only */
            seg[count++] = (bwd_segment) { b, b, t0, t1 - t0, (t0 == 0 && has_init && id == 0) ? b : -1,
                                           (t0 == 0 && has_init) ? b : -1, (t1 == d->seqlen && has_dfinal) ? b : -1 };
        }
    }
    unit_start[d->batch] = count;
    return count;
}

/* ---- per-chunk helpers ----------------------------------------------------------------- */

/* Processed dt, its fp32 inclusive cumsum, and the dt chain factor of §2.1 backward:
 * 0 where the clamp is active (tested before clamping), σ(pre) under softplus below the
 * threshold, else 1. dtv/cm are computed exactly as the forward computes them. */
static void chunk_dt(const bwd_job * job, int64_t row, int64_t t0, int64_t len, int64_t h, float ah, float bias,
                     float * dtv, float * cm, float * dfac) {
    const ssm_mamba2_scan_bwd_args * a   = job->args;
    const ssm_mamba2_params *        prm = job->params;
    const float lo = (float) prm->dt_limit_lo, hi = (float) prm->dt_limit_hi;
    float       run = 0.0f;
    for (int64_t i = 0; i < len; ++i) {
        const float pre = ssmi_get_f32(&a->dt, ssmi_off3(&a->dt, row, t0 + i, h)) + bias;
        /* ssmi_cpu_process_dt, with the softplus value kept for the chain factor */
        const int sp = prm->dt_softplus && pre <= (float)SSMI_SOFTPLUS_THRESHOLD;
        const float u  = sp ? log1pf(expf(pre)) : pre; /* before the clamp */
        float       v  = u;
        if (v < lo) v = lo;
        if (v > hi) v = hi;
        if (dfac != NULL) {
            float f = sp ? 1.0f / (1.0f + expf(-pre)) : 1.0f;
            if (u < lo || u > hi) f = 0.0f;
            dfac[i] = f;
        }
        run += v * ah;
        dtv[i] = v;
        cm[i]  = run;
    }
}

/* Loads L rows [L][n] of a (batch, S, K, n) tensor at (row, t0.., k). */
static void load_rows(const ssmi_cpu_kernels * k, const ssm_tensor * t, int64_t row, int64_t t0, int64_t L, int64_t kk,
                      int64_t n, float * dst, int64_t dst_stride) {
    for (int64_t i = 0; i < L; ++i)
        k->load_row(dst + i * dst_stride, t->data, t->dtype, ssmi_off4(t, row, t0 + i, kk, 0), t->strides[3], n);
}

/* Asks for rows [t0, t0 + L) of head kk of a (batch, S, H, n) tensor ahead of their use:
 * they are H·n elements apart (a page or more), which the hardware prefetchers do not
 * follow, and loading them cold costs about 20% of the backward. Absent tensors, empty ranges
 * and rows with a non-unit last stride are skipped. */
static void prefetch_rows(const ssm_tensor * t, int64_t row, int64_t t0, int64_t L, int64_t kk, int64_t n) {
    if (t->data == NULL || L <= 0 || t->strides[3] != 1) return;
    const int64_t es = (int64_t) ssm_dtype_size((ssm_dtype) t->dtype);
    for (int64_t i = 0; i < L; ++i) {
        const char * p = (const char *) t->data + ssmi_off4(t, row, t0 + i, kk, 0) * es;
        for (int64_t b = 0; b < n * es; b += 64) __builtin_prefetch(p + b, 0, 3);
    }
}

/* The per-head values D_h(p) into dvec; returns whether D is present. */
static int load_d(const ssmi_cpu_kernels * k, const ssm_tensor * dten, int64_t h, int64_t P, float * dvec) {
    if (!ssmi_present(dten)) return 0;
    if (dten->ndim == 2) {
        k->load_row(dvec, dten->data, dten->dtype, ssmi_off2(dten, h, 0), dten->strides[1], P);
    } else {
        const float dh = ssmi_get_f32(dten, ssmi_off1(dten, h));
        for (int64_t p = 0; p < P; ++p) dvec[p] = dh;
    }
    return 1;
}

/* ---- one head of one segment ------------------------------------------------------------ */

typedef struct head_ctx {
    const bwd_segment * seg;
    int64_t             g, h, nc;
    float               ah, bias;
    int                 has_d;
} head_ctx;

/* Forward recompute: the chunk-entry states, and dz when z is given. */
static void head_forward(const bwd_job * job, const head_ctx * hc, const bwd_tiles * w) {
    const ssm_mamba2_scan_bwd_args * a = job->args;
    const ssmi_mamba2_dims *         d = job->dims;
    const ssmi_cpu_kernels *         k = job->kernels;
    const int64_t P = d->headdim, N = d->dstate, Q = BWD_CHUNK, sst = ssmi_cpu_lines(N * P);
    const int64_t tq = ssmi_cpu_lines(N * Q);
    const bwd_segment *              seg = hc->seg;
    if (hc->nc == 0) return; /* an empty run has no chunk states (and no tiles for them) */

    float * s0 = w->states;
    if (seg->init >= 0) {
        const ssm_tensor * init = &a->initial_states;
        for (int64_t n = 0; n < N; ++n)
            k->load_row(s0 + n * P, init->data, init->dtype, ssmi_off4(init, seg->init, hc->h, 0, n),
                        init->strides[2], P);
    } else {
        memset(s0, 0, (size_t) (N * P) * sizeof(float));
    }
    /* dt, cm and the dt chain of every chunk, once for both walks */
    for (int64_t c = 0; c < hc->nc; ++c) {
        const int64_t L = seg->len - c * Q < Q ? seg->len - c * Q : Q;
        chunk_dt(job, seg->row, seg->t0 + c * Q, L, hc->h, hc->ah, hc->bias, w->sdtv + c * Q, w->scm + c * Q,
                 w->sdfac + c * Q);
    }
    for (int64_t c = 0; c + 1 < hc->nc; ++c) { /* the last chunk's state is not needed */
        const int64_t L = seg->len - c * Q < Q ? seg->len - c * Q : Q, t0 = seg->t0 + c * Q;
        float *       sc = w->states + c * sst;
        memcpy(w->dtv, w->sdtv + c * Q, (size_t) L * sizeof(float));
        memcpy(w->cm, w->scm + c * Q, (size_t) L * sizeof(float));
        const float cl = w->cm[L - 1];
        job->bwdk->exp_sub(L, cl, w->cm, w->eclm);
        for (int64_t j = 0; j < L; ++j) w->wexp[j] = w->eclm[j] * w->dtv[j];
        load_rows(k, &a->x, seg->row, t0, L, hc->h, P, w->xt, P);
        if (c + 2 < hc->nc) { /* the next chunk's rows arrive while this one computes */
            const int64_t ln = seg->len - (c + 1) * Q < Q ? seg->len - (c + 1) * Q : Q;
            prefetch_rows(&a->x, seg->row, t0 + Q, ln, hc->h, P);
        }
        {
            /* S_{c+1} = e^{cl}·S_c + Σ_j B_j (e^{cl−cm_j}·dt_j·x_j)ᵀ */
            float * sn = sc + sst;
            for (int64_t j = 0; j < L; ++j)
                for (int64_t p = 0; p < P; ++p) w->acc[j * P + p] = w->xt[j * P + p] * w->wexp[j];
            float ecl = cl;
            k->vexp(1, &ecl, &ecl);
            memcpy(sn, sc, (size_t) (N * P) * sizeof(float));
            k->gemm(N, P, L, w->bts + c * tq, Q, 1, w->acc, P, sn, P, NULL, ecl, 0);
        }
    }
}

/* δx rows of chunk c: dout·silu(z) or dout; with dz asked for, also the pre-gate output
 * y = diag(e^{cm})·C·S_c + Mdiag·X + D·x, computed as the forward computes it (x rows, dt,
 * cm, e^{cm} of the chunk loaded), and dz = dout·y·σ(z)(1 + z(1 − σ(z))). Doing this here
 * rather than in the forward recompute reads z and dout once per head, not twice. */
static void load_dy(const bwd_job * job, const head_ctx * hc, int64_t c, int64_t t0, int64_t L, const float * sc,
                    const bwd_tiles * w) {
    const ssm_mamba2_scan_bwd_args * a = job->args;
    const ssmi_cpu_kernels *         k = job->kernels;
    const int64_t P = job->dims->headdim, N = job->dims->dstate, Q = BWD_CHUNK, row = hc->seg->row;
    const int64_t tq = ssmi_cpu_lines(N * Q);
    const int     want_dz = ssmi_present(&a->dz);
    load_rows(k, &a->dout, row, t0, L, hc->h, P, w->dy, P);
    if (!ssmi_present(&a->z)) return;
    if (want_dz) {
        /* Mdiag = M0·diag(dt) (M0 is CB⊙decay times 1, so this is the forward's product) */
        for (int64_t i = 0; i < L; ++i)
            for (int64_t j = 0; j < L; ++j) w->dxx[i * Q + j] = j <= i ? w->m0[i * Q + j] * w->dtv[j] : 0.0f;
        k->gemm(L, P, N, w->cts + c * tq, 1, Q, sc, P, w->yt, P, w->ecm, 0.0f, 0);
        k->gemm(L, P, L, w->dxx, Q, 1, w->xt, P, w->yt, P, NULL, 1.0f, 1);
    }
    for (int64_t i = 0; i < L; ++i) {
        float * dy = w->dy + i * P;
        k->load_row(w->zrow, a->z.data, a->z.dtype, ssmi_off4(&a->z, row, t0 + i, hc->h, 0), a->z.strides[3], P);
        if (want_dz) {
            float *       y = w->yt + i * P;
            const float * x = w->xt + i * P;
            if (hc->has_d)
                for (int64_t p = 0; p < P; ++p) y[p] += w->dvec[p] * x[p];
            /* dz and δx = dout·z·σ(z) from one σ(z) */
            job->bwdk->gate_grads(P, w->zrow, dy, dy, y, NULL);
            k->store_row(a->dz.data, a->dz.dtype, ssmi_off4(&a->dz, row, t0 + i, hc->h, 0), a->dz.strides[3], y,
                         P);
            continue;
        }
        k->silu_gate(P, dy, w->zrow, dy);
    }
}

/* Backward walk of one head over the chunks of its segment (see the file comment). */
static void head_backward(const bwd_job * job, const head_ctx * hc, const bwd_tiles * w) {
    const ssm_mamba2_scan_bwd_args * a = job->args;
    const ssmi_mamba2_dims *         d = job->dims;
    const ssmi_cpu_kernels *         k = job->kernels;
    const int64_t H = d->nheads, P = d->headdim, N = d->dstate, Q = BWD_CHUNK, sst = ssmi_cpu_lines(N * P);
    const int64_t tq = ssmi_cpu_lines(N * Q);
    const ssmi_cpu_bwd_kernels * bk = job->bwdk;
    const bwd_segment * seg = hc->seg;
    const int64_t       row = seg->row, h = hc->h;
    const int           want_db = ssmi_present(&a->db);
    double *            dd_acc  = job->dd_part + (seg->unit * H + h) * P;
    double              da_acc = 0.0, dbias_acc = 0.0;
    float *             gst = w->gst;

    if (seg->final >= 0) {
        const ssm_tensor * df = &a->dfinal_states;
        for (int64_t n = 0; n < N; ++n)
            k->load_row(gst + n * P, df->data, df->dtype, ssmi_off4(df, seg->final, h, 0, n), df->strides[2], P);
    } else {
        memset(gst, 0, (size_t) (N * P) * sizeof(float));
    }

    for (int64_t c = hc->nc - 1; c >= 0; --c) {
        const int64_t L = seg->len - c * Q < Q ? seg->len - c * Q : Q, t0 = seg->t0 + c * Q;
        const float * sc = w->states + c * sst;
        const float * cbc = w->cbs + c * Q * Q;
        memcpy(w->dtv, w->sdtv + c * Q, (size_t) L * sizeof(float));
        memcpy(w->cm, w->scm + c * Q, (size_t) L * sizeof(float));
        memcpy(w->dfac, w->sdfac + c * Q, (size_t) L * sizeof(float));
        const float cl = w->cm[L - 1];
        float       ecl = cl;
        k->vexp(1, &ecl, &ecl);
        k->vexp(L, w->cm, w->ecm);
        job->bwdk->exp_sub(L, cl, w->cm, w->eclm);
        for (int64_t j = 0; j < L; ++j) w->wexp[j] = w->eclm[j] * w->dtv[j];
        const float * btc = w->bts + c * tq; /* Bᵀ, Cᵀ of the chunk: [N][Q] */
        const float * ctc = w->cts + c * tq;
        load_rows(k, &a->x, row, t0, L, h, P, w->xt, P);
        /* M0[k][i] = CB[k][i]·e^{cm_k − cm_i} (i ≤ k, zeros above): the intra part of acc,
         * and times dt_i the forward's decay matrix for y */
        for (int64_t j = 0; j < L; ++j) w->ones[j] = 1.0f;
        k->decay_rows(L, L, cbc, Q, w->cm, w->ones, w->m0, Q);
        load_dy(job, hc, c, t0, L, sc, w);
        if (c > 0) { /* the previous chunk (next in this walk) is always whole */
            prefetch_rows(&a->x, row, t0 - Q, Q, h, P);
            prefetch_rows(&a->dout, row, t0 - Q, Q, h, P);
            prefetch_rows(&a->z, row, t0 - Q, Q, h, P);
        }

        /* dD: fp32 over the chunk, float64 across chunks */
        for (int64_t p = 0; p < P; ++p) w->ddrow[p] = 0.0f;
        for (int64_t i = 0; i < L; ++i)
            for (int64_t p = 0; p < P; ++p) w->ddrow[p] += w->dy[i * P + p] * w->xt[i * P + p];
        for (int64_t p = 0; p < P; ++p) dd_acc[p] += (double) w->ddrow[p];

        /* state part of acc, and r */
        k->gemm(L, P, N, btc, 1, Q, gst, P, w->acc, P, w->eclm, 0.0f, 0);
        for (int64_t j = 0; j < L; ++j) w->r[j] = w->dtv[j] * bk->dot(P, w->xt + j * P, w->acc + j * P);
        /* dB_stᵀ = G·(x·e^{cl−cm}·dt)ᵀ into this chunk's block tile */
        job->bwdk->transpose(L, P, w->xt, P, NULL, w->xtr, Q);
        if (want_db) {
            job->bwdk->transpose(L, P, w->xt, P, w->wexp, w->xts, Q);
            k->gemm(N, L, P, gst, P, 1, w->xts, Q, w->dbt + c * tq, Q, NULL, 1.0f, 0);
        }
        /* e^{cl}·<G, S_c>: the chunk-total part of ddA */
        const float chunk_total = ecl * bk->dot(N * P, gst, sc);

        /* intra part of acc: acc[i] += Σ_{k≥i} M0[k][i]·δx[k], run as a causal GEMM on the
         * reversed index (i' = L−1−i), so the kernel skips the zero half */
        k->gemm(L, P, L, w->m0 + (L - 1) * Q + (L - 1), -1, -Q, w->dy + (L - 1) * P, -P, w->acc + (L - 1) * P, -P,
                NULL, 1.0f, 1);

        /* dx, ddt_loc */
        const int want_dx = ssmi_present(&a->dx);
        for (int64_t i = 0; i < L; ++i) {
            float *       ac = w->acc + i * P;
            const float * x  = w->xt + i * P;
            const float * dy = w->dy + i * P;
            w->dtl[i]        = bk->dot(P, ac, x);
            if (!want_dx) continue;
            for (int64_t p = 0; p < P; ++p) w->orow[p] = ac[p] * w->dtv[i] + (hc->has_d ? w->dvec[p] * dy[p] : 0.0f);
            k->store_row(a->dx.data, a->dx.dtype, ssmi_off4(&a->dx, row, t0 + i, h, 0), a->dx.strides[3], w->orow, P);
        }

        /* dCB of this head, its sum over the block, and the intra part of ddA */
        for (int64_t i0 = 0; i0 < L; i0 += 8) { /* row blocks up to the diagonal: the rest is masked */
            const int64_t i1 = i0 + 8 < L ? i0 + 8 : L;
            k->gemm(i1 - i0, i1, P, w->dy + i0 * P, P, 1, w->xtr, Q, w->dxx + i0 * Q, Q, NULL, 0.0f, 0);
        }
        k->decay_rows(L, L, w->dxx, Q, w->cm, w->dtv, w->dcbh, Q);
        float * dcb = w->dcbs + c * Q * Q;
        for (int64_t i = 0; i < L; ++i)
            for (int64_t j = 0; j <= i; ++j) dcb[i * Q + j] += w->dcbh[i * Q + j];
        for (int64_t i = 0; i < L; ++i) w->intra[i] = 0.0f;
        for (int64_t i = 0; i < L; ++i) {
            float run = 0.0f;
            for (int64_t kk = 0; kk <= i; ++kk) {
                w->intra[kk] += run;
                if (kk < i) run += cbc[i * Q + kk] * w->dcbh[i * Q + kk];
            }
        }

        /* dC_stᵀ = S_c·(δx·e^{cm})ᵀ, q, and the block tile of dC */
        job->bwdk->transpose(L, P, w->dy, P, w->ecm, w->dyte, Q);
        k->gemm(N, L, P, sc, P, 1, w->dyte, Q, w->tmpt, Q, NULL, 0.0f, 0);
        for (int64_t i = 0; i < L; ++i) w->q[i] = 0.0f;
        bk->colsum_dot(N, L, w->tmpt, Q, ctc, Q, w->q, ssmi_present(&a->dc) ? w->dct + c * tq : NULL, Q);

        /* ddA = suffix(q) + chunk total + exclusive prefix(r) + intra; then the dt chain */
        float suf = chunk_total;
        for (int64_t kk = L - 1; kk >= 0; --kk) {
            suf += w->q[kk];
            w->dda[kk] = suf;
        }
        float pre = 0.0f;
        for (int64_t kk = 0; kk < L; ++kk) {
            w->dda[kk] += pre + w->intra[kk];
            pre += w->r[kk];
        }
        for (int64_t i = 0; i < L; ++i) {
            const float gv = (w->dda[i] * hc->ah + w->dtl[i]) * w->dfac[i];
            if (ssmi_present(&a->ddt)) ssmi_set_f32(&a->ddt, ssmi_off3(&a->ddt, row, t0 + i, h), gv);
            da_acc += (double) w->dda[i] * (double) w->dtv[i];
            dbias_acc += (double) gv;
        }

        /* G ← e^{cl}·G + Cᵀ·(e^{cm}·δx) */
        for (int64_t i = 0; i < L; ++i)
            for (int64_t p = 0; p < P; ++p) w->yt[i * P + p] = w->dy[i * P + p] * w->ecm[i];
        k->gemm(N, P, L, ctc, Q, 1, w->yt, P, gst, P, NULL, ecl, 0);
    }

    if (seg->dinit >= 0 && ssmi_present(&a->dinitial_states)) {
        const ssm_tensor * di = &a->dinitial_states;
        if (seg->init < 0) memset(gst, 0, (size_t) (N * P) * sizeof(float)); /* the run does not start from it */
        for (int64_t n = 0; n < N; ++n)
            k->store_row(di->data, di->dtype, ssmi_off4(di, seg->dinit, h, 0, n), di->strides[2], gst + n * P, P);
    }
    job->da_part[seg->unit * H + h] += da_acc;
    job->dbias_part[seg->unit * H + h] += dbias_acc;
}

/* ---- group part of one segment: CB before the heads, dB/dC after them ---------------- */

static void segment_cb(const bwd_job * job, const bwd_segment * seg, int64_t g, int64_t nc, const bwd_tiles * w) {
    const ssm_mamba2_scan_bwd_args * a = job->args;
    const ssmi_cpu_kernels *         k = job->kernels;
    const int64_t N = job->dims->dstate, Q = BWD_CHUNK, tq = ssmi_cpu_lines(N * Q);
    for (int64_t c = 0; c < nc; ++c) {
        const int64_t L = seg->len - c * Q < Q ? seg->len - c * Q : Q, t0 = seg->t0 + c * Q;
        load_rows(k, &a->c, seg->row, t0, L, g, N, w->ct, N);
        load_rows(k, &a->b, seg->row, t0, L, g, N, w->br, N);
        job->bwdk->transpose(L, N, w->br, N, NULL, w->bts + c * tq, Q);
        job->bwdk->transpose(L, N, w->ct, N, NULL, w->cts + c * tq, Q);
        k->gemm(L, L, N, w->ct, N, 1, w->bts + c * tq, Q, w->cbs + c * Q * Q, Q, NULL, 0.0f, 0);
        memset(w->dcbs + c * Q * Q, 0, (size_t) (Q * Q) * sizeof(float));
        memset(w->dbt + c * tq, 0, (size_t) tq * sizeof(float));
        memset(w->dct + c * tq, 0, (size_t) tq * sizeof(float));
    }
}

/* Writes an [N][Q] transposed tile's L columns as rows of out (the output, or this block's
 * fp32 partial, whose rows are G·N floats apart and take the transpose directly). */
static void store_tile(const bwd_job * job, const ssm_tensor * out, float * partial, int64_t blk, int64_t row,
                       int64_t t0, int64_t L, int64_t g, const float * tile, const bwd_tiles * w) {
    const ssmi_mamba2_dims * d = job->dims;
    const int64_t            N = d->dstate, Q = BWD_CHUNK, G = d->ngroups, S = d->seqlen;
    if (partial != NULL) {
        job->bwdk->transpose(N, L, tile, Q, NULL, partial + (((blk * d->batch + row) * S + t0) * G + g) * N, G * N);
        return;
    }
    job->bwdk->transpose(N, L, tile, Q, NULL, w->ct, N); /* [Q][N] staging, free after segment_cb */
    for (int64_t j = 0; j < L; ++j)
        job->kernels->store_row(out->data, out->dtype, ssmi_off4(out, row, t0 + j, g, 0), out->strides[3],
                                w->ct + j * N, N);
}

static void segment_dbdc(const bwd_job * job, const bwd_segment * seg, int64_t g, int64_t blk, int64_t nc,
                         const bwd_tiles * w) {
    const ssm_mamba2_scan_bwd_args * a = job->args;
    const ssmi_cpu_kernels *         k = job->kernels;
    const int64_t N = job->dims->dstate, Q = BWD_CHUNK, tq = ssmi_cpu_lines(N * Q);
    for (int64_t c = 0; c < nc; ++c) {
        const int64_t L = seg->len - c * Q < Q ? seg->len - c * Q : Q, t0 = seg->t0 + c * Q;
        const float * dcb = w->dcbs + c * Q * Q;
        if (ssmi_present(&a->db)) {
            /* dBᵀ[n][j] += Σ_i C[i][n]·dCB[i][j] */
            k->gemm(N, L, L, w->cts + c * tq, Q, 1, dcb, Q, w->dbt + c * tq, Q, NULL, 1.0f, 0);
            store_tile(job, &a->db, job->dbp, blk, seg->row, t0, L, g, w->dbt + c * tq, w);
        }
        if (ssmi_present(&a->dc)) {
            /* dCᵀ[n][i] += Σ_j B[j][n]·dCB[i][j] */
            job->bwdk->transpose(L, L, dcb, Q, NULL, w->m0, Q);
            k->gemm(N, L, L, w->bts + c * tq, Q, 1, w->m0, Q, w->dct + c * tq, Q, NULL, 1.0f, 0);
            store_tile(job, &a->dc, job->dcp, blk, seg->row, t0, L, g, w->dct + c * tq, w);
        }
    }
}

static void bwd_task(void * arg, int64_t task, int32_t thread) {
    const bwd_job *                  job = (const bwd_job *) arg;
    const ssm_mamba2_scan_bwd_args * a   = job->args;
    const ssmi_mamba2_dims *         d   = job->dims;
    const int64_t G = d->ngroups, R = d->nheads / G, Q = BWD_CHUNK;
    const int64_t per_unit = G * job->blocks;
    const int64_t unit = task / per_unit, g = (task % per_unit) / job->blocks, blk = task % job->blocks;
    const int64_t h0 = g * R + blk * job->head_block;
    const int64_t nh = (g + 1) * R - h0 < job->head_block ? (g + 1) * R - h0 : job->head_block;
    bwd_tiles     w;
    carve_tiles(job->scratch + (int64_t) thread * job->thread_floats, d->dstate, d->headdim, job->ncm, &w);

    for (int64_t si = job->unit_start[unit]; si < job->unit_start[unit + 1]; ++si) {
        const bwd_segment * seg = &job->segments[si];
        const int64_t       nc  = (seg->len + Q - 1) / Q;
        segment_cb(job, seg, g, nc, &w);
        for (int64_t hh = 0; hh < nh; ++hh) {
            head_ctx hc;
            hc.seg   = seg;
            hc.g     = g;
            hc.h     = h0 + hh;
            hc.nc    = nc;
            hc.ah    = ssmi_get_f32(&a->a, ssmi_off1(&a->a, hc.h));
            hc.bias  = ssmi_present(&a->dt_bias) ? ssmi_get_f32(&a->dt_bias, ssmi_off1(&a->dt_bias, hc.h)) : 0.0f;
            hc.has_d = load_d(job->kernels, &a->d, hc.h, d->headdim, w.dvec);
            head_forward(job, &hc, &w);
            head_backward(job, &hc, &w);
        }
        segment_dbdc(job, seg, g, blk, nc, &w);
    }
}

/* ---- reduction of the db/dc block partials ------------------------------------------------ */

#define REDUCE_TOKENS 64

typedef struct reduce_job {
    const bwd_job * job;
    int64_t         tokens; /* batch·S */
} reduce_job;

static void reduce_one(const bwd_job * job, const ssm_tensor * out, const float * part, int64_t bt, float * row) {
    const ssmi_mamba2_dims * d = job->dims;
    const int64_t            G = d->ngroups, N = d->dstate, S = d->seqlen, total = d->batch * S;
    const int64_t            b = bt / S, t = bt % S;
    for (int64_t g = 0; g < G; ++g) {
        const float * p0 = part + (bt * G + g) * N;
        for (int64_t n = 0; n < N; ++n) row[n] = p0[n];
        for (int64_t blk = 1; blk < job->blocks; ++blk) {
            const float * pb = p0 + blk * total * G * N;
            for (int64_t n = 0; n < N; ++n) row[n] += pb[n];
        }
        job->kernels->store_row(out->data, out->dtype, ssmi_off4(out, b, t, g, 0), out->strides[3], row, N);
    }
}

static void reduce_task(void * arg, int64_t task, int32_t thread) {
    const reduce_job * rj  = (const reduce_job *) arg;
    const bwd_job *    job = rj->job;
    float *            row = job->scratch + (int64_t) thread * job->thread_floats;
    const int64_t      end = (task + 1) * REDUCE_TOKENS < rj->tokens ? (task + 1) * REDUCE_TOKENS : rj->tokens;
    for (int64_t bt = task * REDUCE_TOKENS; bt < end; ++bt) {
        if (job->dbp != NULL) reduce_one(job, &job->args->db, job->dbp, bt, row);
        if (job->dcp != NULL) reduce_one(job, &job->args->dc, job->dcp, bt, row);
    }
}

/* dA, ddt_bias and dD: the per-unit float64 partials summed over units in order. */
static void write_reductions(const bwd_job * job, int64_t units) {
    const ssm_mamba2_scan_bwd_args * a = job->args;
    const int64_t H = job->dims->nheads, P = job->dims->headdim;
    for (int64_t h = 0; h < H; ++h) {
        double da = 0.0, db = 0.0;
        for (int64_t u = 0; u < units; ++u) {
            da += job->da_part[u * H + h];
            db += job->dbias_part[u * H + h];
        }
        if (ssmi_present(&a->da)) ssmi_set_f64(&a->da, ssmi_off1(&a->da, h), da);
        if (ssmi_present(&a->ddt_bias)) ssmi_set_f64(&a->ddt_bias, ssmi_off1(&a->ddt_bias, h), db);
        if (!ssmi_present(&a->dd)) continue;
        double all = 0.0;
        for (int64_t p = 0; p < P; ++p) {
            double s = 0.0;
            for (int64_t u = 0; u < units; ++u) s += job->dd_part[(u * H + h) * P + p];
            if (a->dd.ndim == 2) ssmi_set_f64(&a->dd, ssmi_off2(&a->dd, h, p), s);
            all += s;
        }
        if (a->dd.ndim == 1) ssmi_set_f64(&a->dd, ssmi_off1(&a->dd, h), all);
    }
}

/* db/dc = 0 when there are no heads (H = 0 with G ≥ 1). */
static void zero_bc(const ssmi_mamba2_dims * d, const ssm_tensor * t) {
    if (!ssmi_present(t)) return;
    for (int64_t b = 0; b < d->batch; ++b)
        for (int64_t s = 0; s < d->seqlen; ++s)
            for (int64_t g = 0; g < d->ngroups; ++g)
                for (int64_t n = 0; n < d->dstate; ++n) ssmi_set_f32(t, ssmi_off4(t, b, s, g, n), 0.0f);
}

ssm_status ssmi_cpu_mamba2_scan_bwd(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                    const ssm_mamba2_scan_bwd_args * a) {
    if (d->nheads == 0) {
        zero_bc(d, &a->db);
        zero_bc(d, &a->dc);
        return SSM_STATUS_OK;
    }
    const int64_t H = d->nheads, P = d->headdim, N = d->dstate, G = d->ngroups, R = H / G;
    const int64_t units   = ssmi_present(&a->cu_seqlens) ? d->nseq : d->batch;
    const int64_t hb      = R < BWD_HEAD_BLOCK ? R : BWD_HEAD_BLOCK;
    const int64_t blocks  = (R + hb - 1) / hb;
    const int64_t maxseg  = max_segments(d, a);
    const int64_t threads = ssmi_num_threads(ctx);

    /* the segment list first: its longest segment sizes the per-thread tiles */
    const size_t seg_bytes  = (size_t) maxseg * sizeof(bwd_segment) + (size_t) (units + 1) * sizeof(int64_t);
    void *       seg_block  = ssmi_alloc(ctx, seg_bytes > 0 ? seg_bytes : 1);
    SSM_RETURN_IF(seg_block == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes of scratch",
                  bwd_op, seg_bytes);
    bwd_segment * segs       = (bwd_segment *) seg_block;
    int64_t *     unit_start = (int64_t *) (segs + maxseg);
    const int64_t nseg       = build_segments(d, a, segs, unit_start);
    int64_t       maxlen     = 0;
    for (int64_t s = 0; s < nseg; ++s)
        if (segs[s].len > maxlen) maxlen = segs[s].len;

    bwd_job job;
    memset(&job, 0, sizeof job);
    job.params        = p;
    job.dims          = d;
    job.args          = a;
    job.kernels       = ssmi_cpu_kernels_for(ctx);
    job.bwdk          = ssmi_cpu_bwd_kernels_for(ctx);
    job.segments      = segs;
    job.unit_start    = unit_start;
    job.head_block    = hb;
    job.blocks        = blocks;
    job.ncm           = (maxlen + BWD_CHUNK - 1) / BWD_CHUNK;
    bwd_tiles probe;
    job.thread_floats = carve_tiles(NULL, N, P, job.ncm, &probe);

    const int64_t part_floats = blocks > 1 ? ssmi_cpu_lines(blocks * d->batch * d->seqlen * G * N) : 0;
    const int64_t red_doubles = ssmi_cpu_lines(units * H * (2 + P));
    const size_t  bytes = ((size_t) threads * (size_t) job.thread_floats +
                          (size_t) part_floats * (size_t) (ssmi_present(&a->db) + ssmi_present(&a->dc))) *
                             sizeof(float) +
                         (size_t) red_doubles * sizeof(double);
    void * block = ssmi_alloc(ctx, bytes);
    if (block == NULL) {
        ssmi_free(ctx, seg_block);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes of scratch", bwd_op, bytes);
    }
    double * red    = (double *) block;
    job.da_part     = red;
    job.dbias_part  = red + units * H;
    job.dd_part     = red + 2 * units * H;
    memset(red, 0, (size_t) red_doubles * sizeof(double));
    float * fl       = (float *) (red + red_doubles);
    job.scratch      = fl;
    fl += (size_t) threads * (size_t) job.thread_floats;
    if (blocks > 1 && ssmi_present(&a->db)) {
        job.dbp = fl;
        fl += part_floats;
    }
    if (blocks > 1 && ssmi_present(&a->dc)) job.dcp = fl;

    ssmi_parallel_for(ctx, units * G * blocks, bwd_task, &job);
    if (job.dbp != NULL || job.dcp != NULL) {
        reduce_job rj = { &job, d->batch * d->seqlen };
        ssmi_parallel_for(ctx, (rj.tokens + REDUCE_TOKENS - 1) / REDUCE_TOKENS, reduce_task, &rj);
    }
    write_reductions(&job, units);
    ssmi_free(ctx, block);
    ssmi_free(ctx, seg_block);
    return SSM_STATUS_OK;
}
