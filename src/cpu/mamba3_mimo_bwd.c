/*
 * Mamba-3 MIMO backward on the CPU (spec §4): every gradient of ssm_mamba3_mimo, the
 * forward recomputed from the inputs, all fp32.
 *
 * Pass 1, one task per (sequence, Q/K group, block of value heads of the group), the
 * block's heads one after the other. Per head:
 *   1. per-token scalars of the whole sequence (λ, γ, c = γ + σ̄, dt), the angle cumsum θ
 *      (wrapped, as the forward) and its cos/sin;
 *   2. forward over the chunks keeping only the state entering each chunk, Ŝ_c (N×P, in
 *      per-thread scratch), from Ŝ_0 = ssm_stateᵀ + the §2.3 fold, or 0 — or, given the
 *      forward's chunk_states at this backward's chunk length, those rows read instead;
 *   3. reverse over the chunks carrying dŜ (seeded by dfinal_ssm_state), spec §4.2: the
 *      chunk's y (ssmi_mimo_chunk_y, which also leaves the decayed score matrix), the
 *      output stage backward to dY (gate, fused norm, mimo_o; dz and the dmimo_o/z and norm
 *      weight partials), then with M the matrix chunk_y leaves (strict decayed scores plus
 *      the diagonal blocks γ·qkdot + D) and D2 = E ⊙ mask ⊙ dY·Uᵀ (strict):
 *        dq̃ = diag(e^{cs})·dY·Ŝᵀ + D2·K̂ + γ·dqk·K̃,  dk̂ = diag(e^{rev})·U·dŜᵀ + D2ᵀ·Q̃,
 *        dU = diag(e^{rev})·K̂·dŜ + Mᵀ·dY,  dŜ ← e^{cs_last}·dŜ + Q̃ᵀ·diag(e^{cs})·dY
 *      (dqk[r][r'] = dY_r·u_r', the diagonal blocks of dY·Uᵀ);
 *      the decay gradients go through dcs (the gradient w.r.t. the chunk-local inclusive
 *      cumsum of adt) and dADT = the reverse cumsum of dcs inside the chunk (equal to the
 *      four-term formula of §4.3); then, token by token in reverse, c-scaling (dfactor),
 *      Rotᵀ, dθ and the angle cumsum backward (§3.1), the bias and mimo_v chains;
 *   4. the trapezoid scalars (ddt, dtrap) once every dfactor is known, and the initial-state
 *      gradients (the fold's dt_0·(1−λ_0) included).
 *   Products that cost L·N·P or L²·N go through the GEMM microkernel; D2ᵀ·Q̃ runs on the
 *   reversed view, which is strictly lower again (causal cut-off), Mᵀ·dY on an explicit
 *   transpose in block rows from each block's diagonal on.
 *   dq̄, dk̄ of a block's heads are summed in head order into the block's fp32 workspace slot
 *   (B, S, R, G, N); with one head per group they go straight to dq, dk.
 * Pass 2 (H > G): dq, dk = Σ over the blocks of the group in block order, one task per
 *   (batch row, token block).
 * Pass 3: the parameter gradients = Σ over sequences, in order, of the per-(sequence,
 *   head) partials (each summed over tokens in a fixed order).
 * Every output element is produced by one task in a fixed order: the same bits for any
 * thread count. The chunk is BWD_ROWS/R tokens whatever params->chunk_size says (the chunk
 * only changes rounding).
 */
#include <math.h>
#include <string.h>

#include "kernels/bwd/bwd-tables.h"
#include "mimo_common.h"
#include "ssmi_cpu_mimo.h"

#define BWD_ROWS 64         /* fused rows (tokens × rank) per chunk                        */
#define BWD_MIN_TASKS 2     /* fewest pass-1 tasks the head blocking aims for (plan)       */
#define BWD_PI 3.14159265358979323846f

static const char k_op[] = "mamba3_mimo_bwd";

typedef struct bwd_plan {
    int64_t C;             /* tokens per chunk                                  */
    int64_t max_len;       /* longest sequence                                   */
    int64_t max_chunks;    /* chunks of the longest sequence                      */
    int64_t thread_floats; /* one thread's scratch                                */
    int64_t head_block;    /* value heads per pass-1 task (divides H/G)           */
    int64_t nblocks;       /* (H/G) / head_block                                  */
    int     use_ws;        /* dq̄/dk̄ go through the workspace (H > G)             */
} bwd_plan;

typedef struct bwd_job {
    const ssm_mamba3_mimo_bwd_args * a;
    const ssm_mamba3_mimo_params *   p;
    const ssmi_mimo_dims *           d;
    const ssmi_mimo_kernels *        k;
    const ssmi_cpu_bwd_kernels *     bk; /* transpose */
    bwd_plan                         l;
    float *                          scratch;        /* threads × thread_floats     */
    float *                          dq_ws, *dk_ws;  /* nblocks × (B,S,R,G,N) or NULL */
    float *                          dqb, *dkb;      /* (NS,H,R,N) partials           */
    float *                          dmv, *dmz, *dmo; /* (NS,H,R,P)                  */
    float *                          dw;              /* (NS,H,P)                      */
    float *                          dd;              /* (NS,H)                        */
    const int64_t *                  cs_row0;         /* chunk_states: each sequence's first row, or NULL */
} bwd_job;

/* One thread's scratch. */
typedef struct bwd_scratch {
    ssmi_mimo_tile tl;
    ssmi_mimo_head hd;
    /* whole sequence */
    float *dtv, *lam, *gam, *cf, *tmp; /* [L+1], [L+1], [L], [L], [2(L+1)]              */
    float *adt, *dfac, *dgd, *dda, *dadt; /* [L]: adt, dfactor, dgamma_diag, ddt angle, dADT */
    float *theta, *cosv, *sinv;           /* [L][A]                                       */
    float *states;                        /* [NC][N][P] Ŝ entering each chunk             */
    /* one chunk */
    float *kt, *dqt, *dkh;           /* [C·R][N]  k̃, dq̃, dk̂ (then dk̃)                     */
    float *dy, *dye, *du;            /* [C·R][P]  dY, diag(e^{cs})·dY, dU                 */
    float *uT;                       /* [P][C·R]  Uᵀ                                      */
    float *d2;                       /* [C·R][C·R] D2                                      */
    float *wrow;                     /* [C·R] e^{rev} per row                             */
    float *mT;                       /* [C·R][C·R] Mᵀ                                      */
    float *cs, *dcs, *dqkc;          /* [C], [C], [C][R][R] γ·dY_r·u_r' per token          */
    float *st, *ds, *dst;            /* [P][N] Ŝᵀ, [N][P] dŜ, [P][N] dŜᵀ                   */
    float *qraw, *kraw;              /* [R][N]                                            */
    float *vrow, *zrow, *dout, *zz, *sg, *dzrow; /* [P], [P], [R][P], [R][P], [R][P], [P]   */
    float *tp1, *tp2;                /* [P] each                                          */
    float *gth, *raw, *pairs, *buf;  /* [A], [A], [4A+16], [max(N,P)]                     */
    float *kst, *ust;                /* [R][N], [R][P] initial k̃_{−1}, u_{−1}               */
    /* per-head partial sums */
    float *qbacc, *kbacc;            /* [R][N]                                            */
    float *mvacc, *mzacc, *moacc;    /* [R][P]                                            */
    float *wacc;                     /* [P]                                               */
    float *hdbase;                   /* head parameters                                   */
} bwd_scratch;

static int64_t carve(const ssmi_mimo_dims * d, const bwd_plan * l, float * base, bwd_scratch * s) {
    const int64_t C = l->C, R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles, L = l->max_len;
    const int64_t CR = C * R, NPmax = N > P ? N : P;
    int64_t       used = 0;
#define TAKE(field, n) SSMI_CPU_TAKE(s, base, used, field, n)
    TAKE(dtv, L + 1);
    TAKE(lam, L + 1);
    TAKE(gam, L);
    TAKE(cf, L);
    TAKE(tmp, 2 * (L + 1));
    TAKE(adt, L);
    TAKE(dfac, L);
    TAKE(dgd, L);
    TAKE(dda, L);
    TAKE(dadt, L);
    TAKE(theta, L * A);
    TAKE(cosv, L * A);
    TAKE(sinv, L * A);
    TAKE(states, l->max_chunks * N * P);
    TAKE(kt, CR * N);
    TAKE(dqt, CR * N);
    TAKE(dkh, CR * N);
    TAKE(dy, CR * P);
    TAKE(dye, CR * P);
    TAKE(du, CR * P);
    TAKE(uT, P * CR);
    TAKE(d2, CR * CR);
    TAKE(wrow, CR);
    TAKE(cs, C);
    TAKE(dcs, C);
    TAKE(dqkc, C * R * R);
    TAKE(mT, CR * CR);
    TAKE(st, P * N);
    TAKE(ds, N * P);
    TAKE(dst, P * N);
    TAKE(qraw, R * N);
    TAKE(kraw, R * N);
    TAKE(vrow, P);
    TAKE(zrow, P);
    TAKE(dout, R * P);
    TAKE(zz, R * P);
    TAKE(sg, R * P);
    TAKE(dzrow, P);
    TAKE(tp1, P);
    TAKE(tp2, P);
    TAKE(gth, A);
    TAKE(raw, A);
    TAKE(pairs, 4 * A + 16);
    TAKE(buf, NPmax);
    TAKE(kst, R * N);
    TAKE(ust, R * P);
    TAKE(qbacc, R * N);
    TAKE(kbacc, R * N);
    TAKE(mvacc, R * P);
    TAKE(mzacc, R * P);
    TAKE(moacc, R * P);
    TAKE(wacc, P);
    TAKE(hdbase, ssmi_mimo_head_floats(R, N, P));
#undef TAKE
    const int64_t tile = ssmi_mimo_tile_floats(R, N, P, C);
    if (base) {
        ssmi_mimo_tile_carve(&s->tl, base + used, R, N, P, C);
        ssmi_mimo_head_carve(&s->hd, s->hdbase, R, N, P);
    }
    return used + ssmi_cpu_lines(tile);
}

/* ---- per task ------------------------------------------------------------------------- */
typedef struct bwd_task_ctx {
    const bwd_job * job;
    bwd_scratch     s;
    int64_t         n, row, t0, len; /* sequence                                    */
    int64_t         i0;              /* first token of the current chunk             */
    int64_t         g, blk, h;       /* group, head block, head                     */
    int             first_in_block;
    float *         slot_q, *slot_k; /* workspace slots of this block (or NULL)     */
} bwd_task_ctx;

/* e^{cs_last} by the vector exp, as the forward computes it (fw_chunk), so that step 2 recomputes
 * the forward's states and the gradients are the same bytes with or without the forward's
 * chunk_states (the test checks it on its saved-results cases). */
static float chunk_decay(const ssmi_cpu_kernels * k, float last) {
    float e = last;
    k->vexp(1, &e, &e);
    return e;
}

/* Chunk-local decay quantities of tokens [i0, i0+n): cs (inclusive cumsum of adt), the
 * tile's e[i][j] = e^{cs_i − cs_j} (j < i), ecs per row, wrev = e^{cs_last − cs_i} per token
 * and per row; returns e^{cs_last}. The forward state pass (full = 0) needs only wrev and
 * e^{cs_last}. */
static float chunk_decays(bwd_task_ctx * x, int64_t i0, int64_t n, int full) {
    bwd_scratch *            s = &x->s;
    ssmi_mimo_tile *         tl = &s->tl;
    const ssmi_cpu_kernels * k = x->job->k->base;
    const int64_t            C = tl->C, R = tl->R;
    float                    run = 0.0f;
    for (int64_t i = 0; i < n; ++i) s->cs[i] = run += s->adt[i0 + i];
    const float last = s->cs[n - 1];
    if (!full) {
        for (int64_t i = 0; i < n; ++i) tl->wrev[i] = last - s->cs[i];
        k->vexp(n, tl->wrev, tl->wrev);
        return chunk_decay(k, last);
    }
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < C; ++j) tl->e[i * C + j] = j < i ? s->cs[i] - s->cs[j] : 0.0f;
    k->vexp(n * C, tl->e, tl->e);
    for (int64_t i = 0; i < n; ++i) {
        s->dcs[i] = s->cs[i];
        tl->wrev[i] = last - s->cs[i];
    }
    k->vexp(n, s->dcs, s->dcs);
    k->vexp(n, tl->wrev, tl->wrev);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < R; ++r) {
            tl->ecs[i * R + r] = s->dcs[i];
            s->wrow[i * R + r] = tl->wrev[i];
        }
    for (int64_t i = 0; i < n; ++i) {
        tl->gamma[i] = s->gam[i0 + i];
        s->dcs[i] = 0.0f;
    }
    return chunk_decay(k, last);
}

/* k̂ and u of tokens [i0, i0+n) into the tile; in the reverse pass also q̃, k̃ and qkdot. */
static void chunk_tokens(bwd_task_ctx * x, int64_t i0, int64_t n, int reverse) {
    const ssm_mamba3_mimo_bwd_args * a = x->job->a;
    const ssmi_mimo_dims *           d = x->job->d;
    const ssmi_cpu_kernels *         k = x->job->k->base;
    bwd_scratch *                    s = &x->s;
    ssmi_mimo_tile *                 tl = &s->tl;
    const int64_t                    R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = x->t0 + i0 + i;
        for (int64_t r = 0; r < R; ++r) {
            if (reverse)
                k->load_row(s->qraw + r * N, a->q.data, a->q.dtype, ssmi_off5(&a->q, x->row, t, r, x->g, 0),
                            a->q.strides[4], N);
            k->load_row(s->kraw + r * N, a->k.data, a->k.dtype, ssmi_off5(&a->k, x->row, t, r, x->g, 0), a->k.strides[4],
                        N);
        }
        if (!reverse) { /* the state pass needs k̂ only: the same steps as ssmi_mimo_prep_token */
            for (int64_t r = 0; r < R; ++r) {
                float *       kk = tl->kh + (i * R + r) * N;
                const float * kb = s->hd.kb + r * N;
                for (int64_t nn = 0; nn < N; ++nn) kk[nn] = s->kraw[r * N + nn] + kb[nn];
                ssmi_mimo_rotate(N, A, s->cosv + (i0 + i) * A, s->sinv + (i0 + i) * A, kk);
                for (int64_t nn = 0; nn < N; ++nn) kk[nn] *= s->cf[i0 + i];
            }
        } else {
            ssmi_mimo_prep_token(R, N, A, s->qraw, s->kraw, &s->hd, s->cosv + (i0 + i) * A, s->sinv + (i0 + i) * A,
                                 s->cf[i0 + i], tl->qt + i * R * N, tl->kh + i * R * N, s->kt + i * R * N, N,
                                 tl->qkd + i * R * R);
        }
        k->load_row(s->vrow, a->v.data, a->v.dtype, ssmi_off4(&a->v, x->row, t, x->h, 0), a->v.strides[3], P);
        ssmi_mimo_make_u(R, P, s->vrow, s->hd.mv, tl->u + i * R * P, P);
    }
}

/* Cache hints for n elements from element `off` of a tensor with a unit inner stride (the
 * per-token rows are small and stall on their first touch otherwise). */
static void prefetch_elems(const ssm_tensor * t, int64_t off, int64_t n) {
    if (!ssmi_present(t) || t->strides[t->ndim - 1] != 1) return;
    const size_t esz   = ssm_dtype_size((ssm_dtype)t->dtype);
    const char * p     = (const char *)t->data + (size_t)off * esz;
    const size_t bytes = (size_t)n * esz;
    for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
    if (bytes > 0) __builtin_prefetch(p + bytes - 1, 0, 3);
}

/* Hints for the per-token inputs (q, k, v, dout, z) of tokens [i0, i0+n) of the sequence
 * and, in the reverse pass, the workspace rows of their dq̄/dk̄ sums, issued one chunk
 * ahead of their use. */
static void prefetch_chunk(const bwd_task_ctx * x, int64_t i0, int64_t n, int with_dout) {
    const ssm_mamba3_mimo_bwd_args * a = x->job->a;
    const ssmi_mimo_dims *           d = x->job->d;
    const int64_t                    R = d->rank, N = d->dstate, P = d->headdim;
    if (i0 < 0 || n <= 0) return;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = x->t0 + i0 + i;
        for (int64_t r = 0; r < R; ++r) {
            if (with_dout) prefetch_elems(&a->q, ssmi_off5(&a->q, x->row, t, r, x->g, 0), N);
            prefetch_elems(&a->k, ssmi_off5(&a->k, x->row, t, r, x->g, 0), N);
        }
        prefetch_elems(&a->v, ssmi_off4(&a->v, x->row, t, x->h, 0), P);
        if (!with_dout) continue;
        if (x->slot_q && !x->first_in_block) /* the block's dq̄/dk̄ sums, read and written */
            for (int64_t r = 0; r < R; ++r) {
                const int64_t off = (((x->row * d->seqlen + t) * R + r) * d->ngroups + x->g) * N;
                for (int64_t e = 0; e < N; e += 16) {
                    __builtin_prefetch(x->slot_q + off + e, 1, 3);
                    __builtin_prefetch(x->slot_k + off + e, 1, 3);
                }
            }
        if (ssmi_present(&a->z)) prefetch_elems(&a->z, ssmi_off4(&a->z, x->row, t, x->h, 0), P);
        if (d->reduce_o) prefetch_elems(&a->dout, ssmi_off4(&a->dout, x->row, t, x->h, 0), P);
        else
            for (int64_t r = 0; r < R; ++r)
                prefetch_elems(&a->dout, ssmi_off5(&a->dout, x->row, t, r, x->h, 0), P);
    }
}

/* Step 2: Ŝ_c entering every chunk into s->states. */
static void forward_states(bwd_task_ctx * x) {
    const ssm_mamba3_mimo_bwd_args * a = x->job->a;
    const ssmi_mimo_dims *           d = x->job->d;
    const ssmi_mimo_kernels *        k = x->job->k;
    bwd_scratch *                    s = &x->s;
    const int64_t                    C = s->tl.C, R = d->rank, N = d->dstate, P = d->headdim, NP = N * P;
    float *                          cur = s->states;
    if (d->has_states) {
        /* Ŝ_0 = ssm_stateᵀ + dt_0·(1−λ_0)·Σ_r k_state[r] ⊗ (v_state ⊙ mimo_v[r]) */
        ssmi_mimo_load_state_np(k, &a->ssm_state, x->n, x->h, N, P, cur);
        const float c0 = s->dtv[0] * (1.0f - s->lam[0]);
        for (int64_t r = 0; r < R; ++r)
            for (int64_t nn = 0; nn < N; ++nn) {
                const float kn = c0 * s->kst[r * N + nn];
                float *     row = cur + nn * P;
                for (int64_t p = 0; p < P; ++p) row[p] += kn * s->ust[r * P + p];
            }
    } else {
        memset(cur, 0, (size_t)NP * sizeof(float));
    }
    const int64_t nchunks = (x->len + C - 1) / C;
    for (int64_t c = 0; c + 1 < nchunks; ++c) {
        const int64_t i0 = c * C, n = C;
        prefetch_chunk(x, i0 + C, c + 2 < nchunks ? C : 0, 0);
        const float ecl = chunk_decays(x, i0, n, 0);
        chunk_tokens(x, i0, n, 0);
        float * next = s->states + (c + 1) * NP;
        memcpy(next, s->states + c * NP, (size_t)NP * sizeof(float));
        ssmi_mimo_state_update(k, &s->tl, n, ecl, next);
    }
}

/* Step 2 from the forward's chunk_states: the rows of this sequence and head into s->states (the
 * forward writes Ŝ entering each of its chunks, chunk_size tokens, with the same fold). */
static void saved_states(bwd_task_ctx * x) {
    const ssm_tensor *       cs = &x->job->a->chunk_states;
    const ssmi_cpu_kernels * kb = x->job->k->base;
    const ssmi_mimo_dims *   d = x->job->d;
    const int64_t            C = x->s.tl.C, N = d->dstate, P = d->headdim, row0 = x->job->cs_row0[x->n];
    const int64_t            nchunks = (x->len + C - 1) / C;
    for (int64_t c = 0; c < nchunks; ++c)
        for (int64_t nn = 0; nn < N; ++nn)
            kb->load_row(x->s.states + (c * N + nn) * P, cs->data, cs->dtype, ssmi_off4(cs, row0 + c, x->h, nn, 0),
                         cs->strides[3], P);
}

/* dY of the chunk's rows from dout through the mimo_o reduction, the gate and the fused
 * norm; stores dz and adds to the dmimo_o, dmimo_z, norm weight partials. Straight loops
 * over P per (token, rank), one per term, so that they vectorise. */
static void chunk_dy(bwd_task_ctx * x, int64_t i0, int64_t n) {
    const ssm_mamba3_mimo_bwd_args * a = x->job->a;
    const ssmi_mimo_dims *           d = x->job->d;
    const ssmi_cpu_kernels *         k = x->job->k->base;
    bwd_scratch *                    s = &x->s;
    const int64_t                    R = d->rank, P = d->headdim, RP = R * P;
    const int                        has_z = ssmi_present(&a->z), fused = x->job->p->fuse_pregate_norm != 0;
    const int                        reduce = d->reduce_o != 0;
    const float                      eps = (float)x->job->p->norm_eps;
    float *                          gate = s->zz, *gsd = s->sg, *pre = s->tp1, *dyp = s->tp2;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = x->t0 + i0 + i;
        if (reduce)
            k->load_row(s->dout, a->dout.data, a->dout.dtype, ssmi_off4(&a->dout, x->row, t, x->h, 0),
                        a->dout.strides[3], P);
        else
            for (int64_t r = 0; r < R; ++r)
                k->load_row(s->dout + r * P, a->dout.data, a->dout.dtype, ssmi_off5(&a->dout, x->row, t, r, x->h, 0),
                            a->dout.strides[4], P);
        if (has_z) {
            /* gate = silu(zz), gsd = silu'(zz) = σ(zz)·(1 + zz·(1 − σ(zz))) */
            k->load_row(s->zrow, a->z.data, a->z.dtype, ssmi_off4(&a->z, x->row, t, x->h, 0), a->z.strides[3], P);
            for (int64_t r = 0; r < R; ++r)
                for (int64_t p = 0; p < P; ++p) gsd[r * P + p] = -s->zrow[p] * s->hd.mz[r * P + p];
            k->vexp(RP, gsd, gsd);
            for (int64_t r = 0; r < R; ++r)
                for (int64_t p = 0; p < P; ++p) {
                    const float zz = s->zrow[p] * s->hd.mz[r * P + p], sg = 1.0f / (1.0f + gsd[r * P + p]);
                    gate[r * P + p] = zz * sg;
                    gsd[r * P + p] = sg * (1.0f + zz * (1.0f - sg));
                }
            memset(s->dzrow, 0, (size_t)P * sizeof(float));
        }
        for (int64_t r = 0; r < R; ++r) {
            const float * yr = s->tl.y + (i * R + r) * P;
            const float * dor = reduce ? s->dout : s->dout + r * P;
            const float * gr = gate + r * P;
            float *       dYr = s->dy + (i * R + r) * P;
            float         rstd = 1.0f;
            if (fused) {
                rstd = 1.0f / sqrtf(ssmi_mimo_dot(P, yr, yr) / (float)P + eps);
                for (int64_t p = 0; p < P; ++p) pre[p] = yr[p] * rstd * s->hd.nw[p];
            } else {
                memcpy(pre, yr, (size_t)P * sizeof(float));
            }
            if (reduce) {
                const float * mo = s->hd.mo + r * P;
                float *       acc = s->moacc + r * P;
                for (int64_t p = 0; p < P; ++p) dyp[p] = dor[p] * mo[p];
                if (has_z)
                    for (int64_t p = 0; p < P; ++p) acc[p] += dor[p] * pre[p] * gr[p];
                else
                    for (int64_t p = 0; p < P; ++p) acc[p] += dor[p] * pre[p];
            } else {
                memcpy(dyp, dor, (size_t)P * sizeof(float));
            }
            if (has_z) {
                const float * mz = s->hd.mz + r * P;
                const float * gd = gsd + r * P;
                float *       acc = s->mzacc + r * P;
                for (int64_t p = 0; p < P; ++p) {
                    const float dzz = dyp[p] * pre[p] * gd[p];
                    s->dzrow[p] += dzz * mz[p];
                    acc[p] += dzz * s->zrow[p];
                }
                for (int64_t p = 0; p < P; ++p) dyp[p] *= gr[p];
            }
            if (fused) {
                /* dx̂ = dpre ⊙ w; dY = rstd·(dx̂ − x̂·mean(dx̂ ⊙ x̂)), x̂ = y·rstd */
                for (int64_t p = 0; p < P; ++p) {
                    s->wacc[p] += dyp[p] * yr[p] * rstd;
                    dyp[p] *= s->hd.nw[p];
                }
                const float dm = ssmi_mimo_dot(P, dyp, yr) * rstd / (float)P;
                for (int64_t p = 0; p < P; ++p) dYr[p] = rstd * (dyp[p] - yr[p] * rstd * dm);
            } else {
                memcpy(dYr, dyp, (size_t)P * sizeof(float));
            }
        }
        if (has_z && ssmi_present(&a->dz))
            k->store_row(a->dz.data, a->dz.dtype, ssmi_off4(&a->dz, x->row, t, x->h, 0), a->dz.strides[3], s->dzrow, P);
    }
}

/* The L×L products of the chunk: D2 = E ⊙ mask ⊙ dY·Uᵀ (its diagonal blocks, dY_r·u_r', go
 * to dqkc[i] scaled by γ_i), Mᵀ (the matrix ssmi_mimo_chunk_y left: strict decayed scores
 * plus the diagonal blocks γ·qkdot + D), and the pair terms of dcs. */
static void chunk_pairs(bwd_task_ctx * x, int64_t n) {
    const ssmi_cpu_kernels * k = x->job->k->base;
    bwd_scratch *            s = &x->s;
    ssmi_mimo_tile *         tl = &s->tl;
    const int64_t            R = tl->R, P = tl->P, C = tl->C, ld = tl->ld, L = n * R;
    x->job->bk->transpose(L, P, tl->u, P, NULL, s->uT, ld);
    x->job->bk->transpose(L, L, tl->m, ld, NULL, s->mT, ld);
    const int64_t tb = R >= 12 ? 1 : 12 / R;
    for (int64_t i0 = 0; i0 < n; i0 += tb) {
        const int64_t i1 = i0 + tb < n ? i0 + tb : n, x0 = i0 * R;
        k->gemm((i1 - i0) * R, i1 * R, P, s->dy + x0 * P, P, 1, s->uT, ld, s->d2 + x0 * ld, ld, NULL, 0.0f, 0);
        for (int64_t i = i0; i < i1; ++i) {
            const float * e = tl->e + i * C;
            const float   g = tl->gamma[i];
            float         wrow = 0.0f;
            for (int64_t r = 0; r < R; ++r) {
                float *       dr = s->d2 + (i * R + r) * ld;
                const float * mr = tl->m + (i * R + r) * ld;
                for (int64_t j = 0; j < i; ++j) {
                    float wij = 0.0f;
                    for (int64_t r2 = 0; r2 < R; ++r2) {
                        wij += mr[j * R + r2] * dr[j * R + r2];
                        dr[j * R + r2] *= e[j];
                    }
                    wrow += wij;
                    s->dcs[j] -= wij;
                }
                for (int64_t r2 = 0; r2 < R; ++r2) s->dqkc[(i * R + r) * R + r2] = dr[i * R + r2];
                for (int64_t c = i * R; c < i1 * R; ++c) dr[c] = 0.0f;
            }
            s->dcs[i] += wrow;
            float dgd = 0.0f;
            for (int64_t j = 0; j < R * R; ++j) {
                dgd += tl->qkd[i * R * R + j] * s->dqkc[i * R * R + j];
                s->dqkc[i * R * R + j] *= g;
            }
            s->dgd[x->i0 + i] = dgd;
        }
    }
}

/* The gradients of one chunk (spec §4.2) given dY, M, D2 and Ŝ_c; updates dŜ. */
static void chunk_grads(bwd_task_ctx * x, int64_t i0, int64_t n, const float * sc, float ecl) {
    const ssmi_cpu_kernels * k = x->job->k->base;
    bwd_scratch *            s = &x->s;
    ssmi_mimo_tile *         tl = &s->tl;
    const int64_t            R = tl->R, N = tl->N, P = tl->P, ld = tl->ld, L = n * R, NP = N * P;
    /* dq̃ = diag(e^{cs})·dY·Ŝᵀ (its dot with q̃ is the inter term of dcs) + D2·K̂ */
    x->job->bk->transpose(N, P, sc, P, NULL, s->st, N);
    k->gemm(L, N, P, s->dy, P, 1, s->st, N, s->dqt, N, tl->ecs, 0.0f, 0);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < R; ++r)
            s->dcs[i] += ssmi_mimo_dot(N, tl->qt + (i * R + r) * N, s->dqt + (i * R + r) * N);
    k->gemm(L, N, L, s->d2, ld, 1, tl->kh, N, s->dqt, N, NULL, 1.0f, 1);
    /* dk̂ = diag(e^{rev})·U·dŜᵀ (its dot with k̂: the state-update term of dcs) + D2ᵀ·Q̃ */
    x->job->bk->transpose(N, P, s->ds, P, NULL, s->dst, N);
    k->gemm(L, N, P, tl->u, P, 1, s->dst, N, s->dkh, N, s->wrow, 0.0f, 0);
    float xs = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        float xi = 0.0f;
        for (int64_t r = 0; r < R; ++r) xi += ssmi_mimo_dot(N, tl->kh + (i * R + r) * N, s->dkh + (i * R + r) * N);
        s->dcs[i] -= xi;
        xs += xi;
    }
    /* ddA: e^{cs_last}·<Ŝ_c, dŜ> */
    s->dcs[n - 1] += xs + ecl * ssmi_mimo_dot(NP, sc, s->ds);
    ssmi_cpu_m3_gemm_lower_t(k, L, N, s->d2, ld, tl->qt, N, s->dkh, N);

    /* dU = diag(e^{rev})·K̂·dŜ + Mᵀ·dY (Mᵀ block-upper: each token block from its own
     * diagonal block on) */
    k->gemm(L, P, N, tl->kh, N, 1, s->ds, P, s->du, P, s->wrow, 0.0f, 0);
    const int64_t tb = R >= 12 ? 1 : 12 / R;
    for (int64_t j0 = 0; j0 < n; j0 += tb) {
        const int64_t j1 = j0 + tb < n ? j0 + tb : n, x0 = j0 * R;
        k->gemm((j1 - j0) * R, P, L - x0, s->mT + x0 * ld + x0, ld, 1, s->dy + x0 * P, P, s->du + x0 * P, P, NULL,
                1.0f, 0);
    }
    for (int64_t i = 0; i < n; ++i) {
        const int64_t xi = i * R;
        const float * dqk = s->dqkc + i * R * R; /* γ·dqk[r][r'] */
        /* the diagonal's q̃ gradient in the rotated frame (q̃·k̃ = q̄·k̄): γ·dqk·K̃ */
        k->gemm(R, N, R, dqk, R, 1, s->kt + xi * N, N, s->dqt + xi * N, N, NULL, 1.0f, 0);
        /* dfactor = Σ k̃·dk̂; dk̃ = c·dk̂ + γ·dqkᵀ·Q̃ */
        float dfac = 0.0f;
        for (int64_t r = 0; r < R; ++r) dfac += ssmi_mimo_dot(N, s->kt + (xi + r) * N, s->dkh + (xi + r) * N);
        s->dfac[i0 + i] = dfac;
        const float cfi = s->cf[i0 + i];
        for (int64_t j = 0; j < R * N; ++j) s->dkh[xi * N + j] *= cfi;
        k->gemm(R, N, R, dqk, 1, R, tl->qt + xi * N, N, s->dkh + xi * N, N, NULL, 1.0f, 0);
    }
    /* dŜ ← e^{cs_last}·dŜ + Q̃ᵀ·diag(e^{cs})·dY */
    for (int64_t xr = 0; xr < L; ++xr) {
        const float   e = tl->ecs[xr];
        const float * src = s->dy + xr * P;
        float *       dst = s->dye + xr * P;
        for (int64_t p = 0; p < P; ++p) dst[p] = e * src[p];
    }
    k->gemm(N, P, L, tl->qt, 1, N, s->dye, P, s->ds, P, NULL, ecl, 0);
}

/* Token by token in reverse: dADT of the chunk, Rotᵀ and dθ, the angle cumsum backward,
 * dq̄/dk̄ (workspace or output, bias partials), dv and the mimo_v partials. */
static void chunk_token_grads(bwd_task_ctx * x, int64_t i0, int64_t n) {
    const ssm_mamba3_mimo_bwd_args * a = x->job->a;
    const ssmi_mimo_dims *           d = x->job->d;
    const ssmi_mimo_kernels *        mk = x->job->k;
    const ssmi_cpu_kernels *         k = mk->base;
    bwd_scratch *                    s = &x->s;
    ssmi_mimo_tile *                 tl = &s->tl;
    const int64_t                    R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles, G = d->ngroups;
    const int64_t                    half = N / 2;
    float                            run = 0.0f;
    for (int64_t i = n - 1; i >= 0; --i) s->dadt[i0 + i] = run += s->dcs[i];
    for (int64_t i = n - 1; i >= 0; --i) {
        const int64_t ti = i0 + i, t = x->t0 + ti;
        const float * cv = s->cosv + ti * A, *sv = s->sinv + ti * A;
        if (ti == x->len - 1 && ssmi_present(&a->dfinal_k_state))
            for (int64_t r = 0; r < R; ++r) {
                k->load_row(s->buf, a->dfinal_k_state.data, a->dfinal_k_state.dtype,
                            ssmi_off4(&a->dfinal_k_state, x->n, r, x->h, 0), a->dfinal_k_state.strides[3], N);
                float * dk = s->dkh + (i * R + r) * N;
                for (int64_t nn = 0; nn < N; ++nn) dk[nn] += s->buf[nn];
            }
        /* dθ_a = Σ (dx'_{a+N/2}·x'_a − dx'_a·x'_{a+N/2}) over the rotated q̃ and k̃ rows */
        for (int64_t j = 0; j < A; ++j) s->raw[j] = 0.0f;
        for (int64_t r = 0; r < R; ++r) {
            const float *q = tl->qt + (i * R + r) * N, *dq = s->dqt + (i * R + r) * N;
            const float *kk = s->kt + (i * R + r) * N, *dk = s->dkh + (i * R + r) * N;
            for (int64_t j = 0; j < A; ++j)
                s->raw[j] += (dq[j + half] * q[j] - dq[j] * q[j + half]) + (dk[j + half] * kk[j] - dk[j] * kk[j + half]);
        }
        for (int64_t r = 0; r < R; ++r) {
            float *dq = s->dqt + (i * R + r) * N, *dk = s->dkh + (i * R + r) * N;
            ssmi_mimo_rotate_t(N, A, cv, sv, dq);
            ssmi_mimo_rotate_t(N, A, cv, sv, dk);
            float *qb = s->qbacc + r * N, *kb = s->kbacc + r * N;
            for (int64_t nn = 0; nn < N; ++nn) {
                qb[nn] += dq[nn];
                kb[nn] += dk[nn];
            }
            if (x->slot_q) {
                const int64_t off = (((x->row * d->seqlen + t) * R + r) * G + x->g) * N;
                float *       wq = x->slot_q + off, *wk = x->slot_k + off;
                if (x->first_in_block) {
                    memcpy(wq, dq, (size_t)N * sizeof(float));
                    memcpy(wk, dk, (size_t)N * sizeof(float));
                } else {
                    for (int64_t nn = 0; nn < N; ++nn) {
                        wq[nn] += dq[nn];
                        wk[nn] += dk[nn];
                    }
                }
            } else {
                if (ssmi_present(&a->dq))
                    k->store_row(a->dq.data, a->dq.dtype, ssmi_off5(&a->dq, x->row, t, r, x->g, 0), a->dq.strides[4],
                                 dq, N);
                if (ssmi_present(&a->dk))
                    k->store_row(a->dk.data, a->dk.dtype, ssmi_off5(&a->dk, x->row, t, r, x->g, 0), a->dk.strides[4],
                                 dk, N);
            }
        }
        /* angle cumsum backward: G_t = Σ_{t'≥t} dθ_{t'} + dθ_final */
        k->load_row(s->buf, a->angles.data, a->angles.dtype, ssmi_off4(&a->angles, x->row, t, x->h, 0),
                    a->angles.strides[3], A);
        float dda = 0.0f;
        mk->vtanh(A, s->buf, s->buf);
        for (int64_t j = 0; j < A; ++j) {
            s->gth[j] += s->raw[j];
            const float th = s->buf[j];
            s->raw[j] = BWD_PI * s->dtv[ti] * (1.0f - th * th) * s->gth[j];
            dda += BWD_PI * th * s->gth[j];
        }
        s->dda[ti] = dda;
        if (ssmi_present(&a->dangles))
            k->store_row(a->dangles.data, a->dangles.dtype, ssmi_off4(&a->dangles, x->row, t, x->h, 0),
                         a->dangles.strides[3], s->raw, A);
        /* u = v ⊙ mimo_v: dv = Σ_r dU ⊙ mimo_v (+ dfinal_v at the last token) */
        k->load_row(s->vrow, a->v.data, a->v.dtype, ssmi_off4(&a->v, x->row, t, x->h, 0), a->v.strides[3], P);
        if (ti == x->len - 1 && ssmi_present(&a->dfinal_v_state))
            k->load_row(s->dzrow, a->dfinal_v_state.data, a->dfinal_v_state.dtype,
                        ssmi_off3(&a->dfinal_v_state, x->n, x->h, 0), a->dfinal_v_state.strides[2], P);
        else
            memset(s->dzrow, 0, (size_t)P * sizeof(float));
        for (int64_t r = 0; r < R; ++r) {
            const float *du = s->du + (i * R + r) * P, *mv = s->hd.mv + r * P;
            float *      acc = s->mvacc + r * P;
            for (int64_t p = 0; p < P; ++p) {
                s->dzrow[p] += du[p] * mv[p];
                acc[p] += du[p] * s->vrow[p];
            }
        }
        if (ssmi_present(&a->dv))
            k->store_row(a->dv.data, a->dv.dtype, ssmi_off4(&a->dv, x->row, t, x->h, 0), a->dv.strides[3], s->dzrow, P);
    }
}

/* Initial-state gradients from dŜ_0 (in s->ds) and the final angle carry; returns
 * <dŜ_0, Σ_r k_state[r] ⊗ u_state[r]>, the gradient of the fold's dt_0·(1−λ_0). */
static float initial_state_grads(bwd_task_ctx * x) {
    const ssm_mamba3_mimo_bwd_args * a = x->job->a;
    const ssmi_mimo_dims *           d = x->job->d;
    const ssmi_mimo_kernels *        mk = x->job->k;
    const ssmi_cpu_kernels *         k = mk->base;
    bwd_scratch *                    s = &x->s;
    const int64_t                    R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles;
    const float                      c0 = s->dtv[0] * (1.0f - s->lam[0]);
    if (ssmi_present(&a->dssm_state)) ssmi_mimo_store_state_np(mk, &a->dssm_state, x->n, x->h, N, P, s->ds);
    if (ssmi_present(&a->dangle_state))
        ssmi_cpu_m3_store_row3(mk, &a->dangle_state, x->n, x->h, A, s->gth);
    float dc = 0.0f;
    memset(s->dzrow, 0, (size_t)P * sizeof(float));
    ssmi_cpu_m3_load_row3(mk, &a->v_state, x->n, x->h, P, s->vrow);
    for (int64_t r = 0; r < R; ++r) {
        const float *kr = s->kst + r * N, *ur = s->ust + r * P;
        /* dk_state[r] = c0·dŜ·u[r];  du[r] = c0·dŜᵀ·k[r] */
        for (int64_t nn = 0; nn < N; ++nn) {
            const float gn = ssmi_mimo_dot(P, s->ds + nn * P, ur);
            s->buf[nn] = c0 * gn;
            dc += gn * kr[nn];
        }
        if (ssmi_present(&a->dk_state))
            k->store_row(a->dk_state.data, a->dk_state.dtype, ssmi_off4(&a->dk_state, x->n, r, x->h, 0),
                         a->dk_state.strides[3], s->buf, N);
        float * du = s->sg; /* P floats of scratch */
        memset(du, 0, (size_t)P * sizeof(float));
        for (int64_t nn = 0; nn < N; ++nn) {
            const float   kn = c0 * kr[nn];
            const float * row = s->ds + nn * P;
            for (int64_t p = 0; p < P; ++p) du[p] += kn * row[p];
        }
        const float * mv = s->hd.mv + r * P;
        float *       acc = s->mvacc + r * P;
        for (int64_t p = 0; p < P; ++p) {
            s->dzrow[p] += du[p] * mv[p];
            acc[p] += du[p] * s->vrow[p];
        }
    }
    if (ssmi_present(&a->dv_state)) ssmi_cpu_m3_store_row3(mk, &a->dv_state, x->n, x->h, P, s->dzrow);
    return dc;
}

/* ddt and dtrap of the sequence: γ = dt·λ, σ̄_{t−1} = dt_t·(1−λ_t) (the fold's c0 at t = 0
 * with initial states), dtrap = dλ·λ(1−λ); plus the angle part of ddt; stores dadt too. */
static void sequence_trapezoid(bwd_task_ctx * x, float dc) {
    const ssm_mamba3_mimo_bwd_args * a = x->job->a;
    const ssmi_cpu_kernels *         k = x->job->k->base;
    bwd_scratch *                    s = &x->s;
    const int64_t                    L = x->len;
    float *                          ddt = s->tmp, *dtr = s->tmp + L + 1;
    for (int64_t t = 0; t < L; ++t) {
        const float lam = s->lam[t], dt = s->dtv[t];
        const float dgam = s->dfac[t] + s->dgd[t];
        const float dsg = t > 0 ? s->dfac[t - 1] : dc;
        ddt[t] = dgam * lam + dsg * (1.0f - lam) + s->dda[t];
        dtr[t] = (dgam * dt - dsg * dt) * lam * (1.0f - lam);
    }
    if (ssmi_present(&a->ddt))
        k->store_row(a->ddt.data, a->ddt.dtype, ssmi_off3(&a->ddt, x->row, x->h, x->t0), a->ddt.strides[2], ddt, L);
    if (ssmi_present(&a->dtrap))
        k->store_row(a->dtrap.data, a->dtrap.dtype, ssmi_off3(&a->dtrap, x->row, x->h, x->t0), a->dtrap.strides[2], dtr,
                     L);
    if (ssmi_present(&a->dadt))
        k->store_row(a->dadt.data, a->dadt.dtype, ssmi_off3(&a->dadt, x->row, x->h, x->t0), a->dadt.strides[2], s->dadt,
                     L);
}

/* An empty sequence: every initial-state gradient is its final-state gradient (or 0). */
static void empty_sequence(bwd_task_ctx * x) {
    const ssm_mamba3_mimo_bwd_args * a = x->job->a;
    const ssmi_mimo_dims *           d = x->job->d;
    const ssmi_mimo_kernels *        mk = x->job->k;
    bwd_scratch *                    s = &x->s;
    const int64_t                    R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles;
    if (ssmi_present(&a->dangle_state)) {
        ssmi_cpu_m3_load_row3(mk, &a->dfinal_angle_state, x->n, x->h, A, s->buf);
        ssmi_cpu_m3_store_row3(mk, &a->dangle_state, x->n, x->h, A, s->buf);
    }
    if (ssmi_present(&a->dv_state)) {
        ssmi_cpu_m3_load_row3(mk, &a->dfinal_v_state, x->n, x->h, P, s->buf);
        ssmi_cpu_m3_store_row3(mk, &a->dv_state, x->n, x->h, P, s->buf);
    }
    if (ssmi_present(&a->dssm_state)) {
        if (ssmi_present(&a->dfinal_ssm_state))
            ssmi_mimo_load_state_np(mk, &a->dfinal_ssm_state, x->n, x->h, N, P, s->ds);
        else
            memset(s->ds, 0, (size_t)(N * P) * sizeof(float));
        ssmi_mimo_store_state_np(mk, &a->dssm_state, x->n, x->h, N, P, s->ds);
    }
    if (ssmi_present(&a->dk_state))
        for (int64_t r = 0; r < R; ++r) {
            const ssm_tensor * in = &a->dfinal_k_state;
            if (ssmi_present(in))
                mk->base->load_row(s->buf, in->data, in->dtype, ssmi_off4(in, x->n, r, x->h, 0), in->strides[3], N);
            else
                memset(s->buf, 0, (size_t)N * sizeof(float));
            mk->base->store_row(a->dk_state.data, a->dk_state.dtype, ssmi_off4(&a->dk_state, x->n, r, x->h, 0),
                                a->dk_state.strides[3], s->buf, N);
        }
}

/* The partial sums of (sequence, head) into the job's arrays. */
static void store_partials(bwd_task_ctx * x, float dd) {
    const bwd_job *        job = x->job;
    const ssmi_mimo_dims * d = job->d;
    const int64_t          R = d->rank, N = d->dstate, P = d->headdim, i = x->n * d->nheads + x->h;
    bwd_scratch *          s = &x->s;
    memcpy(job->dqb + i * R * N, s->qbacc, (size_t)(R * N) * sizeof(float));
    memcpy(job->dkb + i * R * N, s->kbacc, (size_t)(R * N) * sizeof(float));
    memcpy(job->dmv + i * R * P, s->mvacc, (size_t)(R * P) * sizeof(float));
    memcpy(job->dmz + i * R * P, s->mzacc, (size_t)(R * P) * sizeof(float));
    memcpy(job->dmo + i * R * P, s->moacc, (size_t)(R * P) * sizeof(float));
    memcpy(job->dw + i * P, s->wacc, (size_t)P * sizeof(float));
    job->dd[i] = dd;
}

static void head_grads(bwd_task_ctx * x) {
    const bwd_job *                  job = x->job;
    const ssm_mamba3_mimo_bwd_args * a = job->a;
    const ssmi_mimo_dims *           d = job->d;
    const ssmi_mimo_kernels *        mk = job->k;
    const ssmi_cpu_kernels *         k = mk->base;
    bwd_scratch *                    s = &x->s;
    const int64_t                    R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles, C = s->tl.C;
    const int64_t                    L = x->len, NP = N * P;
    memset(s->qbacc, 0, (size_t)(R * N) * sizeof(float));
    memset(s->kbacc, 0, (size_t)(R * N) * sizeof(float));
    memset(s->mvacc, 0, (size_t)(R * P) * sizeof(float));
    memset(s->mzacc, 0, (size_t)(R * P) * sizeof(float));
    memset(s->moacc, 0, (size_t)(R * P) * sizeof(float));
    memset(s->wacc, 0, (size_t)P * sizeof(float));
    if (L == 0) {
        empty_sequence(x);
        store_partials(x, 0.0f);
        return;
    }
    ssmi_mimo_head_load(mk, &s->hd, x->h, R, N, P, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o,
                        &a->outproj_norm_weight, &a->d);
    /* 1. scalars, θ, cos/sin */
    ssmi_mimo_token_scalars(mk, &a->dt, &a->trap, x->row, x->h, x->t0, L, x->t0 + L, s->tmp, s->dtv, s->lam, s->gam,
                            s->cf);
    k->load_row(s->adt, a->adt.data, a->adt.dtype, ssmi_off3(&a->adt, x->row, x->h, x->t0), a->adt.strides[2], L);
    ssmi_cpu_m3_load_row3(mk, d->has_states ? &a->angle_state : NULL, x->n, x->h, A, s->gth);
    for (int64_t t = 0; t < L; ++t) {
        ssmi_cpu_m3_angle_run(mk, &a->angles, x->row, x->h, x->t0 + t, 1, A, s->dtv + t, s->gth, s->raw, NULL);
        memcpy(s->theta + t * A, s->gth, (size_t)A * sizeof(float));
        ssmi_mimo_sincos(mk, A, s->gth, s->cosv + t * A, s->sinv + t * A, s->pairs);
    }
    if (d->has_states) {
        for (int64_t r = 0; r < R; ++r)
            k->load_row(s->kst + r * N, a->k_state.data, a->k_state.dtype, ssmi_off4(&a->k_state, x->n, r, x->h, 0),
                        a->k_state.strides[3], N);
        ssmi_cpu_m3_load_row3(mk, &a->v_state, x->n, x->h, P, s->vrow);
        ssmi_mimo_make_u(R, P, s->vrow, s->hd.mv, s->ust, P);
    }
    /* 2. states entering every chunk */
    if (job->cs_row0 != NULL)
        saved_states(x);
    else
        forward_states(x);
    /* 3. reverse over the chunks */
    if (ssmi_present(&a->dfinal_ssm_state))
        ssmi_mimo_load_state_np(mk, &a->dfinal_ssm_state, x->n, x->h, N, P, s->ds);
    else
        memset(s->ds, 0, (size_t)NP * sizeof(float));
    ssmi_cpu_m3_load_row3(mk, &a->dfinal_angle_state, x->n, x->h, A, s->gth);
    float         dd = 0.0f;
    const int64_t nchunks = (L + C - 1) / C;
    for (int64_t c = nchunks - 1; c >= 0; --c) {
        const int64_t i0 = c * C, n = L - i0 < C ? L - i0 : C;
        const float * sc = s->states + c * NP;
        prefetch_chunk(x, i0 - C, c > 0 ? C : 0, 1);
        const float ecl = chunk_decays(x, i0, n, 1);
        chunk_tokens(x, i0, n, 1);
        memset(s->tl.m, 0, (size_t)(n * R * s->tl.ld) * sizeof(float));
        memset(s->d2, 0, (size_t)(n * R * s->tl.ld) * sizeof(float));
        ssmi_mimo_chunk_y(mk, &s->tl, n, sc, s->hd.d);
        chunk_dy(x, i0, n);
        for (int64_t xr = n * R - 1; xr >= 0; --xr) dd += ssmi_mimo_dot(P, s->dy + xr * P, s->tl.u + xr * P);
        x->i0 = i0;
        chunk_pairs(x, n);
        chunk_grads(x, i0, n, sc, ecl);
        chunk_token_grads(x, i0, n);
    }
    /* 4. initial states, trapezoid scalars, partials */
    const float dc = d->has_states ? initial_state_grads(x) : 0.0f;
    sequence_trapezoid(x, dc);
    store_partials(x, dd);
}

/* Task (sequence n, group g, head block blk): the block's heads one after the other. */
static void bwd_task(void * arg, int64_t task, int32_t thread) {
    const bwd_job *        job = (const bwd_job *)arg;
    const ssmi_mimo_dims * d = job->d;
    const int64_t          G = d->ngroups, Hg = d->nheads / G, nb = job->l.nblocks, hb = job->l.head_block;
    bwd_task_ctx           x;
    x.job = job;
    x.n = task / (G * nb);
    x.g = (task / nb) % G;
    x.blk = task % nb;
    ssmi_cpu_sequence(&job->a->cu_seqlens, d->seqlen, x.n, &x.row, &x.t0, &x.len);
    carve(d, &job->l, job->scratch + (int64_t)thread * job->l.thread_floats, &x.s);
    const int64_t slot = d->batch * d->seqlen * d->rank * G * d->dstate;
    x.slot_q = job->l.use_ws ? job->dq_ws + x.blk * slot : NULL;
    x.slot_k = job->l.use_ws ? job->dk_ws + x.blk * slot : NULL;
    for (int64_t j = 0; j < hb; ++j) {
        x.h = x.g * Hg + x.blk * hb + j;
        x.first_in_block = j == 0;
        head_grads(&x);
    }
}

/* Pass 2: dq, dk = Σ over the head blocks of each group, in block order. */
static void reduce_task(void * arg, int64_t task, int32_t thread) {
    const bwd_job *        job = (const bwd_job *)arg;
    const ssmi_mimo_dims * d = job->d;
    const int64_t          S = d->seqlen, R = d->rank, G = d->ngroups, N = d->dstate, nb = job->l.nblocks;
    const int64_t          slot = d->batch * S * R * G * N;
    int64_t                tb, te;
    const int64_t          b = ssmi_cpu_m3_reduce_span(task, S, &tb, &te);
    float *                acc = job->scratch + (int64_t)thread * job->l.thread_floats;
    for (int which = 0; which < 2; ++which) {
        const float *      ws = which == 0 ? job->dq_ws : job->dk_ws;
        const ssm_tensor * out = which == 0 ? &job->a->dq : &job->a->dk;
        if (!ssmi_present(out)) continue;
        for (int64_t t = tb; t < te; ++t)
            for (int64_t r = 0; r < R; ++r)
                for (int64_t g = 0; g < G; ++g) {
                    ssmi_cpu_m3_sum_slots(acc, ws + (((b * S + t) * R + r) * G + g) * N, nb, slot, N);
                    job->k->base->store_row(out->data, out->dtype, ssmi_off5(out, b, t, r, g, 0), out->strides[4], acc, N);
                }
    }
}

/* Pass 3: the parameter gradients, summed over sequences in order. */
static void reduce_params(const bwd_job * job) {
    const ssm_mamba3_mimo_bwd_args * a = job->a;
    const ssmi_mimo_dims *           d = job->d;
    const ssmi_cpu_kernels *         k = job->k->base;
    const int64_t                    H = d->nheads, R = d->rank, N = d->dstate, P = d->headdim, NS = d->nseq;
    float *                          acc = job->scratch; /* every task is done */
    const struct {
        const ssm_tensor * out;
        const float *      part;
        int64_t            width;
    } sums[5] = {{&a->dq_bias, job->dqb, N}, {&a->dk_bias, job->dkb, N}, {&a->dmimo_v, job->dmv, P},
                 {&a->dmimo_z, job->dmz, P}, {&a->dmimo_o, job->dmo, P}};
    for (int i = 0; i < 5; ++i) {
        const ssm_tensor * out = sums[i].out;
        const int64_t      X = sums[i].width;
        if (!ssmi_present(out)) continue;
        for (int64_t h = 0; h < H; ++h)
            for (int64_t r = 0; r < R; ++r) {
                for (int64_t e = 0; e < X; ++e) acc[e] = 0.0f;
                for (int64_t n = 0; n < NS; ++n) {
                    const float * src = sums[i].part + ((n * H + h) * R + r) * X;
                    for (int64_t e = 0; e < X; ++e) acc[e] += src[e];
                }
                k->store_row(out->data, out->dtype, ssmi_off3(out, h, r, 0), out->strides[2], acc, X);
            }
    }
    for (int64_t h = 0; h < H; ++h) {
        if (ssmi_present(&a->dd)) {
            float s = 0.0f;
            for (int64_t n = 0; n < NS; ++n) s += job->dd[n * H + h];
            ssmi_set_f32(&a->dd, ssmi_off1(&a->dd, h), s);
        }
        if (ssmi_present(&a->doutproj_norm_weight)) {
            const ssm_tensor * out = &a->doutproj_norm_weight;
            for (int64_t p = 0; p < P; ++p) acc[p] = 0.0f;
            for (int64_t n = 0; n < NS; ++n)
                for (int64_t p = 0; p < P; ++p) acc[p] += job->dw[(n * H + h) * P + p];
            const int64_t off = out->ndim == 1 ? h * P * out->strides[0] : ssmi_off2(out, h, 0);
            k->store_row(out->data, out->dtype, off, out->strides[out->ndim - 1], acc, P);
        }
    }
}

static bwd_plan plan_bwd(const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_args * a) {
    bwd_plan l;
    l.C = BWD_ROWS / d->rank > 0 ? BWD_ROWS / d->rank : 1;
    l.max_len = 0;
    for (int64_t s = 0; s < d->nseq; ++s) {
        int64_t row, t0, len;
        ssmi_cpu_sequence(&a->cu_seqlens, d->seqlen, s, &row, &t0, &len);
        if (len > l.max_len) l.max_len = len;
    }
    l.max_chunks = (l.max_len + l.C - 1) / l.C;
    if (l.max_chunks < 1) l.max_chunks = 1;
    const int64_t Hg = d->nheads / d->ngroups;
    l.use_ws = Hg > 1 && (ssmi_present(&a->dq) || ssmi_present(&a->dk));
    l.nblocks = ssmi_cpu_m3_head_blocks(Hg, d->nseq * d->ngroups, BWD_MIN_TASKS);
    l.head_block = Hg / l.nblocks;
    bwd_scratch s;
    l.thread_floats = ssmi_cpu_lines(carve(d, &l, NULL, &s));
    if (l.thread_floats < ssmi_cpu_lines(d->dstate > d->headdim ? d->dstate : d->headdim))
        l.thread_floats = ssmi_cpu_lines(d->dstate > d->headdim ? d->dstate : d->headdim);
    return l;
}

ssm_status ssmi_cpu_mamba3_mimo_bwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                   const ssm_mamba3_mimo_bwd_args * a) {
    bwd_job job;
    memset(&job, 0, sizeof job);
    job.a = a;
    job.p = p;
    job.d = d;
    job.k = ssmi_mimo_kernels_for(ctx);
    job.bk = ssmi_cpu_bwd_kernels_for(ctx);
    job.l = plan_bwd(d, a);
    const int64_t H = d->nheads, R = d->rank, N = d->dstate, P = d->headdim, NS = d->nseq;
    const int64_t slot = d->batch * d->seqlen * R * d->ngroups * N;
    const int64_t ws = job.l.use_ws ? 2 * job.l.nblocks * slot : 0;
    const int64_t part = NS * H * (2 * R * N + 3 * R * P + P + 1);
    const int64_t total = ssmi_cpu_lines(ws) + ssmi_cpu_lines(part);
    float *       big = (float *)ssmi_alloc(ctx, (size_t)(total > 0 ? total : 16) * sizeof(float));
    SSM_RETURN_IF(big == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes of workspace", k_op,
                  (size_t)total * sizeof(float));
    job.scratch = ssmi_cpu_thread_scratch(ctx, k_op, job.l.thread_floats);
    if (job.scratch == NULL) {
        ssmi_free(ctx, big);
        return SSM_STATUS_OUT_OF_MEMORY;
    }
    float * q = big;
    if (job.l.use_ws) {
        job.dq_ws = q;
        job.dk_ws = q + job.l.nblocks * slot;
        q += ssmi_cpu_lines(ws);
    }
    job.dqb = q, q += NS * H * R * N;
    job.dkb = q, q += NS * H * R * N;
    job.dmv = q, q += NS * H * R * P;
    job.dmz = q, q += NS * H * R * P;
    job.dmo = q, q += NS * H * R * P;
    job.dw = q, q += NS * H * P;
    job.dd = q;
    /* the forward's chunk_states replace step 2 where its chunks are this backward's (chunk_size
     * = the backward's C): one row per chunk, sequence after sequence */
    int64_t * row0 = NULL;
    if (ssmi_present(&a->chunk_states) && d->chunk == job.l.C) {
        row0 = ssmi_cpu_chunk_rows(ctx, k_op, &a->cu_seqlens, d->seqlen, NS, d->chunk);
        if (row0 == NULL) {
            ssmi_free(ctx, job.scratch);
            ssmi_free(ctx, big);
            return SSM_STATUS_OUT_OF_MEMORY;
        }
        job.cs_row0 = row0;
    }
    ssmi_parallel_for(ctx, NS * d->ngroups * job.l.nblocks, bwd_task, &job);
    if (job.l.use_ws) ssmi_parallel_for(ctx, ssmi_cpu_m3_reduce_tasks(d->batch, d->seqlen), reduce_task, &job);
    reduce_params(&job);
    ssmi_free(ctx, row0);
    ssmi_free(ctx, job.scratch);
    ssmi_free(ctx, big);
    return SSM_STATUS_OK;
}
