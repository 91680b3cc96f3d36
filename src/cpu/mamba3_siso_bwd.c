/*
 * Mamba-3 SISO backward on the CPU (spec §6): every gradient of ssm_mamba3_siso, with the
 * forward recomputed from the inputs.
 *
 * Pass 1, one task per (sequence, Q/K head, block of V-heads of the group), all fp32. The
 * block's heads go in groups of l.interleave (BWD_INTERLEAVE with GQA, else 1; see
 * plan_bwd): steps 1–2 for each head of the group, then step 3 chunk by chunk, the
 * group's heads in head order inside each chunk, then step 4 for each:
 *   1. per-token scalars of the whole sequence (λ, γ, σ, dt) and the angle cumsum θ
 *      (cos θ, sin θ and tanh of the raw rates are kept: the backward needs them again);
 *   2. forward over the chunks keeping only the state entering every chunk, S_c (V×K):
 *      S ← e^{c_last}·S + Vcᵀ·diag(e^{c_last−c}·σ)·K̂ (spec §3.6), from H_in or 0. Given the
 *      forward's chunk_states with params->chunk_size a multiple of BWD_CHUNK, the chunks
 *      that start a chunk_size chunk take their S_c from its row (converted to fp32) and
 *      only those in between are recomputed from the state before them (none at
 *      chunk_size = BWD_CHUNK): this step is ~8% of the time (below). With another
 *      chunk_size the rows are not at chunk boundaries of this pass and are not read;
 *   3. reverse over the chunks (spec §6.3) with the carry dS (V×K, seeded by
 *      dfinal_ssm_state): E = (dY·Vcᵀ)⊙M, Pm = (Q̂·K̂sᵀ)⊙M, dQ̂, dK̂s, dVc, dADT via
 *      r/m/μ, dS ← e^{c_last}·dS + dYᵀ·diag(e^c)·Q̂; then, token by token in reverse, the
 *      preprocessing chain of §6.2 (dσ, dk̂, dq̃/dk̃ through R(θ)ᵀ, dθ, dγ) and the angle
 *      backward of §6.6 (the reverse cumsum G, seeded by dfinal_angle_state), both in one
 *      kernel call per token (kernels/bwd siso_token);
 *   4. the trapezoid scalars (ddt, dtrap; the t = 0 fold with initial states) once dH_in
 *      and every dσ are known, and the initial-state gradients.
 *   Products that cost C·K·V or C²·K go through the GEMM microkernel. The two products
 *   with a transposed strictly lower factor (Eᵀ·Q̂, Pmᵀ·dY) run on the row- and
 *   column-reversed view, which is strictly lower again, so the causal cut-off applies;
 *   Q̂·K̂sᵀ and dY·Vcᵀ are computed in row blocks up to the diagonal only.
 *   Two shortcuts avoid whole products: e^{c_i}·dy_i·(S_c q̂_i) = q̂_i·(diag(e^c)·dY·S_c)_i
 *   reuses dQ̂'s inter-chunk term, and m_j = v_j·(diag(e^{c_last−c})·K̂s·dSᵀ)_j reuses dV's.
 *   That inter-chunk term of dV is computed transposed, dS·K̂sᵀ (B = the K̂sᵀ already
 *   built for Q̂·K̂sᵀ), and turned back (V×C), so dS needs no V×K transpose per chunk; the
 *   dS update takes its e^c scale on dY (C×V) rather than Q̂ (C×K).
 *   The pre-gate output y (for dz) costs Q̂·S_cᵀ and Pm·Vc and is computed only when dz is
 *   asked for and the forward's pregate_y is not given (given, it is read instead).
 *   dq̃, dk̃ of a block's heads are summed into the block's fp32 workspace slot
 *   (B, S, Hq, K) by the token chain itself: the block's first head writes a row, the
 *   next ones add to it, in head order; with G = 1 they go straight to dq, dk. (Adding a
 *   group's chunk sums into the slot rows in a separate pass costs ~5% more at the
 *   PERF.md shape than the chain's adds with the rows asked for a chunk ahead.)
 * Pass 2 (G > 1): dq, dk = Σ over the blocks of the group, in block order, one task per
 *   (batch row, token block). The block size depends only on the shape (plan_bwd), so
 *   the order of every sum is fixed. Blocks rather than one slot per head keep the
 *   workspace small: at H = 32, Hq = 1 one slot per head would be 2×32 MB per 2048 tokens,
 *   and writing, faulting in and re-reading it costs more than a third of the backward.
 *   The same holds, less strongly, for blocks: BWD_MIN_TASKS = 4 (not 8) halves the slots,
 *   ~3% faster at the shape above.
 * Elementwise work (the q/k preparation of a chunk, the per-token chain, transposes, dots)
 * runs in the kernels/bwd kernels. Rows H·V (H·A) elements apart and the state table are
 * prefetched a chunk ahead, a few lines per token (prefetch_previous_chunk, chunk_qk):
 * v, dout, z, the dv, dz, dangles rows about to be written, the workspace slot rows, S_c
 * (and in the forward pass the next v rows and table slot). Asking for a whole chunk at
 * once stalls the core on full miss buffers; spread out, it is ~5% faster (1 thread).
 * Pass 3: dq_bias, dk_bias, dd = Σ over sequences, in sequence order, of the per-(sequence,
 *   head) partial sums (each itself summed over the tokens in a fixed order).
 * Every output element is produced by exactly one task in a fixed order, so results are
 * bitwise identical for any thread count.
 *
 * The chunk is BWD_CHUNK whatever params->chunk_size says (the header allows it: the chunk
 * only changes rounding; chunk_size only places the chunk_states rows of step 2). 32, not
 * 64: the C²-shaped products (Q̂·K̂sᵀ, dY·Vcᵀ, E·K̂s, Eᵀ·Q̂, Pm·Vc, Pmᵀ·dY: ~30% of the
 * matrix work at C = 64) halve, against twice as many per-chunk V×K steps (state copy, S_c
 * transpose, μ) and a state table twice as long. At B=1 S=2048 H=32 Hq=1 K=128 V=64 A=32
 * (AMD EPYC, AVX2, interleaved A/B, minima) C = 32 takes 105–108 ms on 1 thread and
 * 53–56 ms on 2, C = 64 116 and 61–63 ms.
 *
 * Where the time goes there (f32, 1 thread, rdtsc around each step of a scratch copy,
 * ~100 ms per call): the six C·V·K products run at ~93% of the FMA peak and are ~45% of
 * the time (state recompute 8%, Q̂·S_cᵀ for dz 9%, dY·S_c, Vc·dS, dS·K̂sᵀ with the
 * C²-shaped terms of chunk_grads 11–12% each, the dS update 9%); chunk_scores 7%; the
 * token chain with its workspace adds and prefetches 11%; angle tables 4%, q/k
 * preparation 4% and the rest of the forward recompute 4%; loading v/dout/z and the gate
 * 3.5%. What is left is spread thin (docs/notes/engineering-log.md lists the layouts
 * measured without gain).
 */
#include <math.h>
#include <string.h>

#include "kernels/bwd/bwd-tables.h"
#include "mamba3_common.h"
#include "ssmi_cpu_mamba3.h"

#define BWD_CHUNK 32        /* tokens per chunk                                             */
#define BWD_TRI_BLOCK 16    /* row block of the lower-triangle-only C×C products            */
#define BWD_MIN_TASKS 4     /* fewest pass-1 tasks the GQA head blocking aims for (plan_bwd) */
#define BWD_INTERLEAVE 1    /* heads whose reverse passes go chunk by chunk together (GQA)  */

/* ---- the plan ------------------------------------------------------------------------ */
typedef struct bwd_layout {
    int64_t max_len;       /* longest sequence                                      */
    int64_t max_chunks;    /* chunks of the longest sequence                         */
    int64_t thread_floats; /* one thread's scratch, whole lines                      */
    int64_t head_floats;   /* the per-head part of it (one per interleaved head)     */
    int64_t interleave;    /* heads of a block walked chunk by chunk together        */
    int     gqa_ws;        /* dq̃/dk̃ go through the workspace (G > 1)              */
    int64_t head_block;    /* V-heads per pass-1 task (divides G)                    */
    int64_t nblocks;       /* head blocks per group: G / head_block                  */
} bwd_layout;

typedef struct bwd_job {
    const ssm_mamba3_siso_bwd_args * a;
    const ssmi_mamba3_dims *         d;
    const ssmi_cpu_kernels *         k;  /* gemm, exp, row load/store        */
    const ssmi_cpu_m3_kernels *      m3; /* rotary kernels                     */
    const ssmi_cpu_bwd_kernels *     bk; /* transpose, per-token chains (bwd.h) */
    bwd_layout                       l;
    float *                          scratch;  /* threads × thread_floats            */
    float *                          dq_ws;    /* (nblocks, B, S, Hq, K) or NULL     */
    float *                          dk_ws;    /* (nblocks, B, S, Hq, K) or NULL     */
    float *                          dqb_part; /* (NS, H, K)                         */
    float *                          dkb_part; /* (NS, H, K)                         */
    float *                          dd_part;  /* (NS, H)                            */
    int                              want_y;   /* dz asked for (and z given)         */
    const int64_t *                  cs_row0;  /* chunk_states read: each sequence's first row, or NULL */
} bwd_job;

/* ---- one thread's scratch -------------------------------------------------------------- */
typedef struct bwd_scratch {
    /* one head's (carve_head): whole-sequence tables and the reverse pass's carries */
    float * cos2, *sin2;       /* [L][2A] pair tables of θ (rotary.h)       */
    float * tanhv;             /* [L][A]  tanh of the raw angle rates       */
    float * dtv, *lam;         /* [L+1]   (entry L: 0, no next token)       */
    float * gam, *sig;         /* [L]                                      */
    float * dsig, *dgam, *dda; /* [L]: dσ, dγ, ddt angle part               */
    float * states;            /* [NC][V][K] state entering every chunk     */
    float * ds;                /* [V][K] the carry dS                       */
    float * gacc;              /* [A] the carry G                           */
    float * qbias, *kbias, *qbacc, *kbacc; /* [K]                           */
    /* shared by the interleaved heads (carve_shared): one chunk and temporaries */
    float * row;               /* [2(L+1)] output row / scalar scratch      */
    float * qt, *kt, *qh, *kh, *ks, *dqh, *dks;          /* [C][K]                     */
    float * scr;                                         /* [C][max(K, V)]: raw q, e^c·dY */
    float * kst;                                         /* [K][C]  K̂sᵀ                */
    float * vc, *dy, *dout, *zc, *zs, *yc, *dvc;         /* [C][V]                     */
    float * vct;                                         /* [V][C]  Vcᵀ                */
    float * cb, *ee, *mm;                                /* [C][C]                     */
    float * st, *dvt;                                    /* [K][V], [V][C]             */
    float * cc, *ec, *wv, *dqk, *dcoef, *rr, *mv, *colw; /* [C]                   */
    float * dth, *raw;                                   /* [A]                        */
    float * krow;                                        /* [K]                        */
    float * vrow, *hk;                                   /* [V]                        */
    float * buf;                                         /* [max(K, V)]                */
} bwd_scratch;

#define TAKE(field, n) SSMI_CPU_TAKE(s, base, used, field, n)

/* Carves (or, with base NULL, only counts) the part of a thread's scratch that belongs to
 * one head: its whole-sequence tables and the carries of its reverse pass; returns the
 * floats used. */
static int64_t carve_head(const ssmi_mamba3_dims * d, int64_t max_len, int64_t max_chunks, float * base,
                          bwd_scratch * s) {
    const int64_t K = d->dk, V = d->dv, A = d->nangles, L = max_len;
    int64_t       used = 0;
    TAKE(cos2, L * 2 * A);
    TAKE(sin2, L * 2 * A);
    TAKE(tanhv, L * A);
    TAKE(dtv, L + 1);
    TAKE(lam, L + 1);
    TAKE(gam, L);
    TAKE(sig, L);
    TAKE(dsig, L);
    TAKE(dgam, L);
    TAKE(dda, L);
    TAKE(states, max_chunks * V * K);
    TAKE(ds, V * K);
    TAKE(gacc, A);
    TAKE(qbias, K);
    TAKE(kbias, K);
    TAKE(qbacc, K);
    TAKE(kbacc, K);
    return used;
}

/* Carves (or counts) the part shared by the interleaved heads: one chunk's buffers and
 * temporaries, used by one head at a time. */
static int64_t carve_shared(const ssmi_mamba3_dims * d, int64_t max_len, float * base, bwd_scratch * s) {
    const int64_t C = BWD_CHUNK, K = d->dk, V = d->dv, A = d->nangles, L = max_len;
    int64_t       used = 0;
    TAKE(row, 2 * (L + 1));
    TAKE(qt, C * K);
    TAKE(kt, C * K);
    TAKE(qh, C * K);
    TAKE(kh, C * K);
    TAKE(ks, C * K);
    TAKE(scr, C * (K > V ? K : V));
    TAKE(dqh, C * K);
    TAKE(dks, C * K);
    TAKE(kst, K * C);
    TAKE(vc, C * V);
    TAKE(dy, C * V);
    TAKE(dout, C * V);
    TAKE(zc, C * V);
    TAKE(zs, C * V);
    TAKE(yc, C * V);
    TAKE(dvc, C * V);
    TAKE(vct, V * C);
    TAKE(cb, C * C);
    TAKE(ee, C * C);
    TAKE(mm, C * C);
    TAKE(st, K * V);
    TAKE(dvt, V * C);
    TAKE(cc, C);
    TAKE(ec, C);
    TAKE(wv, C);
    TAKE(dqk, C);
    TAKE(dcoef, C);
    TAKE(rr, C);
    TAKE(mv, C);
    TAKE(colw, C);
    TAKE(dth, A);
    TAKE(raw, A);
    TAKE(krow, K);
    TAKE(vrow, V);
    TAKE(hk, V);
    TAKE(buf, K > V ? K : V);
    return used;
}
#undef TAKE

/* ---- small helpers ---------------------------------------------------------------------- */
static float sum(const float * x, int64_t n) {
    float   acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += x[i + j];
    for (int j = 0; i < n; ++i, ++j) acc[j] += x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* C = A·B restricted to the lower triangle (C[i][j] for j ≤ i, computed in row blocks up
 * to the diagonal; the entries above it inside a block are also written). A is L×k with
 * row stride lda, B is k×L (row stride ldb). */
static void gemm_tri(const ssmi_cpu_kernels * k, int64_t L, int64_t kd, const float * a, int64_t lda, const float * b,
                     int64_t ldb, float * c, int64_t ldc) {
    for (int64_t i0 = 0; i0 < L; i0 += BWD_TRI_BLOCK) {
        const int64_t i1 = i0 + BWD_TRI_BLOCK < L ? i0 + BWD_TRI_BLOCK : L;
        k->gemm(i1 - i0, i1, kd, a + i0 * lda, lda, 1, b, ldb, c + i0 * ldc, ldc, NULL, 0.0f, 0);
    }
}

/* ---- per task ------------------------------------------------------------------------- */
typedef struct bwd_task_ctx {
    const bwd_job * job;
    bwd_scratch     s;
    int64_t         n, h, g, row, t0, len; /* sequence, V-head, Q/K head, tokens      */
    int64_t         blk;                   /* head block of the group                 */
    int             first_in_block;        /* h is the block's first head             */
    float           dh;                    /* D of the head (0 without d)             */
    float           dd;                    /* running dd partial of the head           */
} bwd_task_ctx;

/* λ, γ, σ, dt of every token and the angle cumsum: the pair tables of θ and tanh of the
 * raw rates (θ by the same steps as the forward, ssmi_cpu_m3_angle_run). */
static void sequence_scalars(bwd_task_ctx * x) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const ssmi_cpu_m3_kernels *      m3 = x->job->m3;
    const int64_t                    L = x->len, A = x->job->d->nangles, h = x->h;
    bwd_scratch *                    s = &x->s;
    ssmi_cpu_m3_token_scalars(m3, &a->adt, &a->dt, &a->trap, x->row, h, x->t0, L, x->t0 + L, s->row, NULL, s->dtv,
                              s->lam, s->gam, s->sig);
    if (A == 0) return;
    float * theta = s->gacc; /* borrowed: the running angle */
    if (x->job->d->has_states)
        ssmi_cpu_m3_load_row3(m3, &a->angle_state, x->n, h, A, theta);
    else
        memset(theta, 0, (size_t)A * sizeof(float));
    const int64_t es = (int64_t)ssm_dtype_size((ssm_dtype)a->angles.dtype);
    for (int64_t t = 0; t < L; ++t) {
        if (t + 8 < L && a->angles.strides[3] == 1) { /* rows H·A apart: ask 8 tokens ahead */
            const char * ahead =
                (const char *)a->angles.data + ssmi_off4(&a->angles, x->row, x->t0 + t + 8, h, 0) * es;
            for (int64_t b = 0; b < A * es; b += 64) __builtin_prefetch(ahead + b, 0, 3);
        }
        m3->base->load_row(s->raw, a->angles.data, a->angles.dtype, ssmi_off4(&a->angles, x->row, x->t0 + t, h, 0),
                           a->angles.strides[3], A);
        /* rate = π·tanh(raw) from the tanh kept for the backward: angle_rate's bits */
        const float * th = s->tanhv + t * A;
        m3->vtanh(A, s->raw, s->tanhv + t * A);
        for (int64_t j = 0; j < A; ++j) s->raw[j] = SSMI_PI_F * th[j];
        m3->angle_advance(A, theta, s->raw, s->dtv[t]);
        m3->sincos_pairs(A, theta, s->cos2 + t * 2 * A, s->sin2 + t * 2 * A);
    }
}

/* c (chunk-local inclusive cumsum of adt), e^c, e^{c_last − c}; returns e^{c_last}. */
static float chunk_decays(bwd_task_ctx * x, int64_t i0, int64_t Lc) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const ssmi_cpu_kernels *         k = x->job->k;
    bwd_scratch *                    s = &x->s;
    k->load_row(s->cc, a->adt.data, a->adt.dtype, ssmi_off3(&a->adt, x->row, x->h, x->t0 + i0), a->adt.strides[2], Lc);
    for (int64_t i = 1; i < Lc; ++i) s->cc[i] += s->cc[i - 1];
    const float cl = s->cc[Lc - 1];
    x->job->bk->exp_sub(Lc, cl, s->cc, s->wv);
    k->vexp(Lc, s->cc, s->ec);
    float ecl = cl;
    k->vexp(1, &ecl, &ecl);
    return ecl;
}

/* Row [b, t, g, :] (n floats) of a (B, S, Hq, K) tensor as fp32: the tensor's own memory
 * for fp32 unit-stride rows, else converted into buf. */
static const float * raw_row(const ssmi_cpu_kernels * k, const ssm_tensor * t, int64_t b, int64_t tok, int64_t g,
                             int64_t n, float * buf) {
    const int64_t off = ssmi_off4(t, b, tok, g, 0);
    if (t->dtype == SSM_DTYPE_F32 && t->strides[3] == 1) return (const float *)t->data + off;
    k->load_row(buf, t->data, t->dtype, off, t->strides[3], n);
    return buf;
}

/* Asks for the rows of a (B, S, H, V) tensor for tokens [i0, i0 + Lc) ahead of their use
 * (they are H·V floats apart, a stride the hardware prefetchers follow poorly). */
static void prefetch_tokens(bwd_task_ctx * x, const ssm_tensor * t, int64_t i0, int64_t Lc) {
    if (t->data == NULL || i0 < 0 || t->strides[3] != 1) return; /* only plain rows are worth it */
    const int64_t V = x->job->d->dv, es = (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    for (int64_t i = 0; i < Lc; ++i) {
        const char * row = (const char *)t->data + ssmi_off4(t, x->row, x->t0 + i0 + i, x->h, 0) * es;
        for (int64_t b = 0; b < V * es; b += 64) __builtin_prefetch(row + b, 0, 3);
    }
}

/* The same for rows about to be written (an output): with intent to write, so the store
 * does not wait for the line. n elements per row. */
static void prefetch_out_row(bwd_task_ctx * x, const ssm_tensor * t, int64_t tok, int64_t n) {
    if (t->data == NULL || tok < 0 || t->strides[3] != 1) return;
    const int64_t es = (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    const char *  row = (const char *)t->data + ssmi_off4(t, x->row, x->t0 + tok, x->h, 0) * es;
    for (int64_t b = 0; b < n * es; b += 64) __builtin_prefetch(row + b, 1, 3);
}

/* k̃ = k + k_bias, k̂ = R(θ)k̃, K̂s = σ·k̂ of the chunk; with q also q̃, q̂ and d = q̃·k̃.
 * Without q (the forward recompute) k̂ is not kept and K̂s is scaled by e^{c_last − c};
 * then, spread over the tokens, the v rows of the next chunk and (pf_state not NULL, with
 * intent to write) the V×K state-table slot after it are asked for. */
static void chunk_qk(bwd_task_ctx * x, int64_t i0, int64_t Lc, int with_q, const float * pf_state) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const ssmi_cpu_kernels *         k = x->job->k;
    const ssmi_cpu_bwd_kernels *     bk = x->job->bk;
    const int64_t                    K = x->job->d->dk, A = x->job->d->nangles;
    bwd_scratch *                    s = &x->s;
    for (int64_t i = 0; i < Lc; ++i) {
        const int64_t t = i0 + i;
        const float * cs = s->cos2 + t * 2 * A, *sn = s->sin2 + t * 2 * A;
        float *       kt = s->kt + i * K, *ks = s->ks + i * K;
        /* the raw rows: fp32 unit-stride rows are read in place, others converted into
         * free chunk buffers (scr, dqh: not in use yet) */
        const float * kraw = raw_row(k, &a->k, x->row, x->t0 + t, x->g, K, s->dqh + i * K);
        if (with_q) {
            const float * qraw = raw_row(k, &a->q, x->row, x->t0 + t, x->g, K, s->scr + i * K);
            s->dcoef[i] = bk->siso_prep(K, 2 * A, qraw, kraw, s->qbias, s->kbias, cs, sn, s->sig[t], 1.0f,
                                        s->qt + i * K, kt, s->qh + i * K, s->kh + i * K, ks);
        } else {
            bk->siso_prep(K, 2 * A, NULL, kraw, NULL, s->kbias, cs, sn, s->sig[t], s->wv[i], NULL, kt, NULL, NULL, ks);
            if (t + BWD_CHUNK < x->len) prefetch_tokens(x, &a->v, t + BWD_CHUNK, 1);
            if (pf_state) {
                const int64_t VK = x->job->d->dv * K;
                for (int64_t o = i * VK / Lc / 16 * 16; o < (i + 1) * VK / Lc; o += 16)
                    __builtin_prefetch(pf_state + o, 1, 3);
            }
        }
    }
}

/* Rows of a (B, S, H, V) tensor for the chunk into dst [Lc][V]. */
static void load_tokens(bwd_task_ctx * x, const ssm_tensor * t, int64_t i0, int64_t Lc, float * dst) {
    const int64_t V = x->job->d->dv;
    for (int64_t i = 0; i < Lc; ++i)
        x->job->k->load_row(dst + i * V, t->data, t->dtype, ssmi_off4(t, x->row, x->t0 + i0 + i, x->h, 0),
                            t->strides[3], V);
}

/* Asks for what the previous chunk c − 1 needs, the share of token i of this chunk's Lc:
 * its v, dout, z rows, the dv, dz, dangles rows it writes, 1/Lc of its state S_{c−1} and
 * its workspace slot rows. Spread over the token chain rather than asked for at once: a
 * burst of hundreds of prefetches fills the miss buffers and stalls the core until they
 * drain. */
static void prefetch_previous_chunk(bwd_task_ctx * x, int64_t c, int64_t i, int64_t Lc) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const int64_t                    C = BWD_CHUNK, VK = x->job->d->dv * x->job->d->dk, i0 = (c - 1) * C;
    for (int64_t r = i; r < C; r += Lc) { /* every row once, also when Lc < C */
        prefetch_tokens(x, &a->v, i0 + r, 1);
        prefetch_tokens(x, &a->dout, i0 + r, 1);
        prefetch_tokens(x, &a->z, i0 + r, 1);
        prefetch_out_row(x, &a->dv, i0 + r, x->job->d->dv);
        if (x->job->want_y) prefetch_out_row(x, &a->dz, i0 + r, x->job->d->dv);
        prefetch_out_row(x, &a->dangles, i0 + r, x->job->d->nangles);
    }
    const float * sp = x->s.states + (c - 1) * VK;
    for (int64_t o = i * VK / Lc / 16 * 16; o < (i + 1) * VK / Lc; o += 16) __builtin_prefetch(sp + o, 0, 3);
    if (!x->job->l.gqa_ws) return;
    /* the block's workspace slot rows the token chain adds to (with intent to write) */
    const ssmi_mamba3_dims * d = x->job->d;
    for (int64_t r = i; r < C; r += Lc)
        for (int which = 0; which < 2; ++which) {
            const float * ws = which == 0 ? x->job->dq_ws : x->job->dk_ws;
            if (ws == NULL) continue;
            const int64_t tok = x->t0 + i0 + r;
            const float * w = ws + (((x->blk * d->batch + x->row) * d->seqlen + tok) * d->nheads_qk + x->g) * d->dk;
            for (int64_t j = 0; j < d->dk; j += 16) __builtin_prefetch(w + j, 1, 3);
        }
}

static void store_tokens(bwd_task_ctx * x, const ssm_tensor * t, int64_t i0, int64_t Lc, const float * src) {
    const int64_t V = x->job->d->dv;
    for (int64_t i = 0; i < Lc; ++i)
        x->job->k->store_row(t->data, t->dtype, ssmi_off4(t, x->row, x->t0 + i0 + i, x->h, 0), t->strides[3],
                             src + i * V, V);
}

/* S_c of chunk c from the forward's chunk_states row that holds it (c starts a chunk_size chunk). */
static void saved_state(bwd_task_ctx * x, int64_t c) {
    const ssm_tensor * cs = &x->job->a->chunk_states;
    const int64_t      K = x->job->d->dk, V = x->job->d->dv;
    const int64_t      row = x->job->cs_row0[x->n] + c * BWD_CHUNK / x->job->d->chunk;
    float *            dst = x->s.states + c * V * K;
    for (int64_t v = 0; v < V; ++v)
        x->job->k->load_row(dst + v * K, cs->data, cs->dtype, ssmi_off4(cs, row, x->h, v, 0), cs->strides[3], K);
}

/* States entering every chunk: S_0 = H_in (or 0), S_{c+1} = e^{c_last}·S_c + Vcᵀ·diag(w·σ)·K̂;
 * with chunk_states read, S_c of every chunk that starts a chunk_size chunk is its row. */
static void forward_states(bwd_task_ctx * x) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const ssmi_cpu_kernels *         k = x->job->k;
    const int64_t                    K = x->job->d->dk, V = x->job->d->dv, C = BWD_CHUNK, VK = V * K;
    const int64_t                    per = x->job->cs_row0 ? x->job->d->chunk / C : 0; /* chunks per row */
    bwd_scratch *                    s = &x->s;
    float *                          s0 = s->states;
    if (per > 0) {
        saved_state(x, 0);
    } else if (x->job->d->has_states) {
        const ssm_tensor *st = &a->ssm_state, *ks = &a->k_state, *vs = &a->v_state;
        const float       c0 = s->dtv[0] * (1.0f - s->lam[0]);
        k->load_row(s->krow, ks->data, ks->dtype, ssmi_off3(ks, x->n, x->h, 0), ks->strides[2], K);
        k->load_row(s->vrow, vs->data, vs->dtype, ssmi_off3(vs, x->n, x->h, 0), vs->strides[2], V);
        for (int64_t v = 0; v < V; ++v) {
            float * sr = s0 + v * K;
            k->load_row(sr, st->data, st->dtype, ssmi_off4(st, x->n, x->h, v, 0), st->strides[3], K);
            const float cv = c0 * s->vrow[v];
            for (int64_t j = 0; j < K; ++j) sr[j] += cv * s->krow[j];
        }
    } else {
        memset(s0, 0, (size_t)VK * sizeof(float));
    }
    for (int64_t i0 = 0, c = 0; i0 + C < x->len; i0 += C, ++c) {
        if (per > 0 && (c + 1) % per == 0) {
            saved_state(x, c + 1);
            continue;
        }
        const int64_t Lc = C;
        const float   ecl = chunk_decays(x, i0, Lc);
        chunk_qk(x, i0, Lc, 0, i0 + 2 * C < x->len ? s->states + (c + 2) * VK : NULL);
        load_tokens(x, &a->v, i0, Lc, s->vc);
        float * next = s->states + (c + 1) * VK;
        memcpy(next, s->states + c * VK, (size_t)VK * sizeof(float));
        k->gemm(V, K, Lc, s->vc, 1, V, s->ks, K, next, K, NULL, ecl, 0);
    }
}

/* dy = dout·silu(z) (or dout), dqk = rowsum(dy ⊙ v); the chunk's v, dout, z are loaded. */
static void chunk_dy(bwd_task_ctx * x, int64_t i0, int64_t Lc) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const int64_t                    V = x->job->d->dv;
    bwd_scratch *                    s = &x->s;
    load_tokens(x, &a->v, i0, Lc, s->vc);
    load_tokens(x, &a->dout, i0, Lc, s->dout);
    if (ssmi_present(&a->z)) {
        /* zs = sigmoid(z) = 1/(1 + e^{−z}), kept for dz */
        load_tokens(x, &a->z, i0, Lc, s->zc);
        x->job->bk->gate_grads(Lc * V, s->zc, s->dout, s->dy, NULL, s->zs);
    } else {
        memcpy(s->dy, s->dout, (size_t)(Lc * V) * sizeof(float));
    }
    for (int64_t i = 0; i < Lc; ++i) s->dqk[i] = x->job->bk->dot(V, s->dy + i * V, s->vc + i * V);
}

/* Decay mask M (strictly lower), E = (dY·Vcᵀ)⊙M into ee, Pm = (Q̂·K̂sᵀ)⊙M into cb, and the
 * row sums minus column sums of W = E⊙(Q̂·K̂sᵀ) into rr. */
static void chunk_scores(bwd_task_ctx * x, int64_t Lc) {
    const ssmi_cpu_kernels * k = x->job->k;
    const int64_t            K = x->job->d->dk, V = x->job->d->dv, C = BWD_CHUNK;
    bwd_scratch *            s = &x->s;
    x->job->bk->transpose(Lc, K, s->ks, K, NULL, s->kst, C);
    x->job->bk->transpose(Lc, V, s->vc, V, NULL, s->vct, C);
    gemm_tri(k, Lc, K, s->qh, K, s->kst, C, s->cb, C);
    gemm_tri(k, Lc, V, s->dy, V, s->vct, C, s->ee, C);
    for (int64_t i = 0; i < Lc; ++i) {
        float * m = s->mm + i * C;
        x->job->bk->exp_sub(i, s->cc[i], s->cc, m);
        s->colw[i] = 0.0f;
    }
    for (int64_t i = 0; i < Lc; ++i) {
        float *e = s->ee + i * C, *p = s->cb + i * C, *m = s->mm + i * C;
        /* E = DV⊙M, W = E⊙(Q̂K̂sᵀ) (into m, no longer needed), Pm = (Q̂K̂sᵀ)⊙M */
        for (int64_t j = 0; j < i; ++j) {
            const float ev = e[j] * m[j], pv = p[j];
            e[j] = ev;
            p[j] = pv * m[j];
            m[j] = ev * pv;
        }
        for (int64_t j = i; j < Lc; ++j) e[j] = p[j] = 0.0f;
        for (int64_t j = 0; j < i; ++j) s->colw[j] += m[j];
        s->rr[i] = sum(m, i);
    }
    for (int64_t i = 0; i < Lc; ++i) s->rr[i] -= s->colw[i];
}

/* Pre-gate y of the chunk (the forward's pregate_y where given, else recomputed) and
 * dz = dout·y·σ(z)(1 + z(1 − σ(z))). */
static void chunk_dz(bwd_task_ctx * x, int64_t i0, int64_t Lc, const float * sc) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const ssmi_cpu_kernels *         k = x->job->k;
    const int64_t                    K = x->job->d->dk, V = x->job->d->dv, C = BWD_CHUNK;
    bwd_scratch *                    s = &x->s;
    if (ssmi_present(&a->pregate_y)) {
        load_tokens(x, &a->pregate_y, i0, Lc, s->yc);
        for (int64_t i = 0; i < Lc; ++i) {
            float *       y = s->yc + i * V;
            const float * z = s->zc + i * V, *go = s->dout + i * V, *zs = s->zs + i * V;
            for (int64_t j = 0; j < V; ++j) y[j] = go[j] * y[j] * zs[j] * (1.0f + z[j] * (1.0f - zs[j]));
        }
        store_tokens(x, &a->dz, i0, Lc, s->yc);
        return;
    }
    x->job->bk->transpose(V, K, sc, K, NULL, s->st, V);
    k->gemm(Lc, V, K, s->qh, K, 1, s->st, V, s->yc, V, s->ec, 0.0f, 0);
    k->gemm(Lc, V, Lc, s->cb, C, 1, s->vc, V, s->yc, V, NULL, 1.0f, 1);
    for (int64_t i = 0; i < Lc; ++i) {
        const float  coef = x->dh + s->gam[i0 + i] * s->dcoef[i];
        float *      y = s->yc + i * V;
        const float *v = s->vc + i * V, *z = s->zc + i * V, *go = s->dout + i * V, *zs = s->zs + i * V;
        for (int64_t j = 0; j < V; ++j) y[j] = go[j] * (y[j] + coef * v[j]) * zs[j] * (1.0f + z[j] * (1.0f - zs[j]));
    }
    store_tokens(x, &a->dz, i0, Lc, s->yc);
}

/* dQ̂, dK̂s, dVc (stored), dADT (stored) of the chunk; then the carry dS moves back. */
static void chunk_grads(bwd_task_ctx * x, int64_t i0, int64_t Lc, const float * sc, float ecl, int last_chunk,
                        int update_carry) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const ssmi_cpu_kernels *         k = x->job->k;
    const int64_t                    K = x->job->d->dk, V = x->job->d->dv, C = BWD_CHUNK;
    bwd_scratch *                    s = &x->s;

    /* dQ̂ = diag(e^c)·dY·S_c + E·K̂s; the first term dotted with q̂ is the readout part of r */
    k->gemm(Lc, K, V, s->dy, V, 1, sc, K, s->dqh, K, s->ec, 0.0f, 0);
    for (int64_t i = 0; i < Lc; ++i) s->rr[i] += x->job->bk->dot(K, s->qh + i * K, s->dqh + i * K);
    k->gemm(Lc, K, Lc, s->ee, C, 1, s->ks, K, s->dqh, K, NULL, 1.0f, 1);

    /* dK̂s = diag(w)·Vc·dS + Eᵀ·Q̂ */
    k->gemm(Lc, K, V, s->vc, V, 1, s->ds, K, s->dks, K, s->wv, 0.0f, 0);
    ssmi_cpu_m3_gemm_lower_t(k, Lc, K, s->ee, C, s->qh, K, s->dks, K);

    /* dVc = diag(w)·K̂s·dSᵀ + Pmᵀ·dY + diag(D + γd)·dY (+ dfinal_v at the last token);
     * the first term dotted with v is m. It is computed transposed, dS·K̂sᵀ (V×C, B = the
     * K̂sᵀ of chunk_scores), and turned back: a V×C transpose per chunk instead of a V×K
     * one of dS. */
    k->gemm(V, Lc, K, s->ds, K, 1, s->kst, C, s->dvt, C, NULL, 0.0f, 0);
    x->job->bk->transpose(V, Lc, s->dvt, C, NULL, s->dvc, V);
    for (int64_t i = 0; i < Lc; ++i) {
        float * dv = s->dvc + i * V;
        for (int64_t j = 0; j < V; ++j) dv[j] *= s->wv[i];
        s->mv[i] = x->job->bk->dot(V, s->vc + i * V, dv);
    }
    ssmi_cpu_m3_gemm_lower_t(k, Lc, V, s->cb, C, s->dy, V, s->dvc, V);
    for (int64_t i = 0; i < Lc; ++i) {
        const float   coef = x->dh + s->gam[i0 + i] * s->dcoef[i];
        float *       dv = s->dvc + i * V;
        const float * dy = s->dy + i * V;
        for (int64_t j = 0; j < V; ++j) dv[j] += coef * dy[j];
    }
    if (last_chunk && ssmi_present(&a->dfinal_v_state)) {
        const ssm_tensor * t = &a->dfinal_v_state;
        k->load_row(s->vrow, t->data, t->dtype, ssmi_off3(t, x->n, x->h, 0), t->strides[2], V);
        float * dv = s->dvc + (Lc - 1) * V;
        for (int64_t j = 0; j < V; ++j) dv[j] += s->vrow[j];
    }
    if (ssmi_present(&a->dv)) store_tokens(x, &a->dv, i0, Lc, s->dvc);

    /* dADT_i = Σ_{i'≥i} r_i' + Σ_{j<i} m_j + μ,  μ = e^{c_last}·⟨S_c, dS⟩ */
    const float mu = ecl * x->job->bk->dot(V * K, sc, s->ds);
    float       rev = 0.0f, fwd = 0.0f;
    for (int64_t i = Lc - 1; i >= 0; --i) {
        rev += s->rr[i];
        s->rr[i] = rev;
    }
    for (int64_t i = 0; i < Lc; ++i) {
        s->rr[i] += fwd + mu;
        fwd += s->mv[i];
    }
    if (ssmi_present(&a->dadt))
        k->store_row(a->dadt.data, a->dadt.dtype, ssmi_off3(&a->dadt, x->row, x->h, x->t0 + i0), a->dadt.strides[2],
                     s->rr, Lc);

    /* dS ← e^{c_last}·dS + dYᵀ·diag(e^c)·Q̂ */
    if (!update_carry) return;
    float * dye = s->scr; /* diag(e^c)·dY: the smaller factor takes the scale */
    for (int64_t i = 0; i < Lc; ++i)
        for (int64_t j = 0; j < V; ++j) dye[i * V + j] = s->ec[i] * s->dy[i * V + j];
    k->gemm(V, K, Lc, dye, 1, V, s->qh, K, s->ds, K, NULL, ecl, 0);
}

/* Token by token in reverse: dσ, dk̂, dq̃/dk̃, dθ, dγ, the angle reverse cumsum and its
 * outputs, the bias and d partial sums, and dq̃/dk̃ out. */
static void chunk_preprocess_grads(bwd_task_ctx * x, int64_t c, int64_t i0, int64_t Lc) {
    const bwd_job *                  job = x->job;
    const ssm_mamba3_siso_bwd_args * a = job->a;
    const ssmi_cpu_kernels *         k = job->k;
    const int64_t                    K = job->d->dk, A = job->d->nangles;
    bwd_scratch *                    s = &x->s;
    for (int64_t i = Lc - 1; i >= 0; --i) {
        const int64_t t = i0 + i;
        if (c > 0) prefetch_previous_chunk(x, c, i, Lc);
        const float * cs = s->cos2 + t * 2 * A, *sn = s->sin2 + t * 2 * A, *th = s->tanhv + t * A;
        float *       dq = s->dqh + i * K, *dk = s->dks + i * K;
        const float * qh = s->qh + i * K, *kh = s->kh + i * K, *qt = s->qt + i * K, *kt = s->kt + i * K;
        const float * extra = NULL;
        if (t == x->len - 1 && ssmi_present(&a->dfinal_k_state)) {
            const ssm_tensor * fk = &a->dfinal_k_state;
            k->load_row(s->krow, fk->data, fk->dtype, ssmi_off3(fk, x->n, x->h, 0), fk->strides[2], K);
            extra = s->krow;
        }
        /* dσ = dk̂s·k̂; dk̂ = σ·dk̂s (+ dfinal_k); dθ; dq̃ = R(θ)ᵀdq̂ + dQK·γ·k̃, dk̃ = R(θ)ᵀdk̂ + dQK·γ·q̃ */
        const int64_t tok = x->t0 + t;
        float *       wq = NULL, *wk = NULL; /* the block's workspace slot rows (GQA) */
        if (job->l.gqa_ws) {
            const int64_t row = ((x->blk * job->d->batch + x->row) * job->d->seqlen + tok) * job->d->nheads_qk + x->g;
            if (job->dq_ws) wq = job->dq_ws + row * K;
            if (job->dk_ws) wk = job->dk_ws + row * K;
        }
        /* the block's first head writes the slot rows, the next ones add in head order; the
         * angle backward (G_t = Σ_{u≥t} dθ_u + dθ_final) runs in the same call */
        const float cq   = s->dqk[i] * s->gam[t];
        const float dsig = job->bk->siso_token(K, 2 * A, dq, dk, qh, kh, qt, kt, cs, sn, s->sig[t], extra, cq, th,
                                               s->dtv[t], s->gacc, s->dth, &s->dda[t], s->qbacc, s->kbacc, wq, wk,
                                               !x->first_in_block);
        s->dsig[t] = dsig;
        s->dgam[t] = s->dqk[i] * s->dcoef[i] + dsig;
        if (ssmi_present(&a->dangles) && A > 0)
            k->store_row(a->dangles.data, a->dangles.dtype, ssmi_off4(&a->dangles, x->row, x->t0 + t, x->h, 0),
                         a->dangles.strides[3], s->dth, A);

        if (!job->l.gqa_ws) {
            if (ssmi_present(&a->dq))
                k->store_row(a->dq.data, a->dq.dtype, ssmi_off4(&a->dq, x->row, tok, x->g, 0), a->dq.strides[3], dq, K);
            if (ssmi_present(&a->dk))
                k->store_row(a->dk.data, a->dk.dtype, ssmi_off4(&a->dk, x->row, tok, x->g, 0), a->dk.strides[3], dk, K);
        }
    }
}

/* ddt and dtrap of every token (spec §6.2), dc = ⟨dH_in, V_in K_inᵀ⟩ folded at t = 0. */
static void sequence_trapezoid(bwd_task_ctx * x, float dc) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const ssmi_cpu_kernels *         k = x->job->k;
    const int64_t                    L = x->len;
    bwd_scratch *                    s = &x->s;
    if (ssmi_present(&a->ddt)) {
        for (int64_t t = 0; t < L; ++t) {
            const float prev = t >= 1 ? s->dsig[t - 1] : dc;
            s->row[t] = s->dgam[t] * s->lam[t] + prev * (1.0f - s->lam[t]) + s->dda[t];
        }
        k->store_row(a->ddt.data, a->ddt.dtype, ssmi_off3(&a->ddt, x->row, x->h, x->t0), a->ddt.strides[2], s->row, L);
    }
    if (ssmi_present(&a->dtrap)) {
        for (int64_t t = 0; t < L; ++t) {
            const float prev = t >= 1 ? s->dsig[t - 1] : dc;
            const float dlam = (s->dgam[t] - prev) * s->dtv[t];
            s->row[t] = dlam * s->lam[t] * (1.0f - s->lam[t]);
        }
        k->store_row(a->dtrap.data, a->dtrap.dtype, ssmi_off3(&a->dtrap, x->row, x->h, x->t0), a->dtrap.strides[2],
                     s->row, L);
    }
}

/* Initial-state gradients from dH_in = dS (spec §6.2); returns dc. */
static float initial_state_grads(bwd_task_ctx * x) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const ssmi_cpu_kernels *         k = x->job->k;
    const int64_t                    K = x->job->d->dk, V = x->job->d->dv, A = x->job->d->nangles;
    bwd_scratch *                    s = &x->s;
    const ssm_tensor *               ks = &a->k_state, *vs = &a->v_state;
    const float                      c0 = s->dtv[0] * (1.0f - s->lam[0]);
    k->load_row(s->krow, ks->data, ks->dtype, ssmi_off3(ks, x->n, x->h, 0), ks->strides[2], K);
    k->load_row(s->vrow, vs->data, vs->dtype, ssmi_off3(vs, x->n, x->h, 0), vs->strides[2], V);
    /* dc = V_inᵀ·dH_in·K_in, dV_in = c0·dH_in·K_in, dK_in = c0·dH_inᵀ·V_in */
    float *hk = s->hk, *dkin = s->buf;
    float  dc = 0.0f;
    for (int64_t v = 0; v < V; ++v) {
        hk[v] = x->job->bk->dot(K, s->ds + v * K, s->krow);
        dc += s->vrow[v] * hk[v];
    }
    k->gemm(1, K, V, s->vrow, V, 1, s->ds, K, dkin, K, NULL, 0.0f, 0); /* V_inᵀ·dH_in */
    for (int64_t j = 0; j < K; ++j) dkin[j] *= c0;
    for (int64_t v = 0; v < V; ++v) hk[v] *= c0;
    if (ssmi_present(&a->dssm_state)) {
        const ssm_tensor * t = &a->dssm_state;
        for (int64_t v = 0; v < V; ++v)
            k->store_row(t->data, t->dtype, ssmi_off4(t, x->n, x->h, v, 0), t->strides[3], s->ds + v * K, K);
    }
    if (ssmi_present(&a->dk_state))
        k->store_row(a->dk_state.data, a->dk_state.dtype, ssmi_off3(&a->dk_state, x->n, x->h, 0),
                     a->dk_state.strides[2], dkin, K);
    if (ssmi_present(&a->dv_state))
        k->store_row(a->dv_state.data, a->dv_state.dtype, ssmi_off3(&a->dv_state, x->n, x->h, 0),
                     a->dv_state.strides[2], hk, V);
    if (ssmi_present(&a->dangle_state) && A > 0)
        k->store_row(a->dangle_state.data, a->dangle_state.dtype, ssmi_off3(&a->dangle_state, x->n, x->h, 0),
                     a->dangle_state.strides[2], s->gacc, A);
    return dc;
}

/* An empty sequence is the identity on states: each initial-state gradient is the matching
 * final-state gradient (0 without it). */
static void empty_sequence(bwd_task_ctx * x) {
    const ssm_mamba3_siso_bwd_args * a = x->job->a;
    const ssmi_cpu_kernels *         k = x->job->k;
    const int64_t                    K = x->job->d->dk, V = x->job->d->dv, A = x->job->d->nangles;
    bwd_scratch *                    s = &x->s;
    if (!x->job->d->has_states) return;
    const ssm_tensor * pairs[4][2] = {{&a->dangle_state, &a->dfinal_angle_state},
                                      {&a->dk_state, &a->dfinal_k_state},
                                      {&a->dv_state, &a->dfinal_v_state},
                                      {&a->dssm_state, &a->dfinal_ssm_state}};
    const int64_t      lens[4] = {A, K, V, K};
    for (int p = 0; p < 4; ++p) {
        const ssm_tensor *out = pairs[p][0], *in = pairs[p][1];
        if (!ssmi_present(out) || lens[p] == 0) continue;
        const int64_t rows = p == 3 ? V : 1;
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t oo = p == 3 ? ssmi_off4(out, x->n, x->h, r, 0) : ssmi_off3(out, x->n, x->h, 0);
            if (ssmi_present(in)) {
                const int64_t io = p == 3 ? ssmi_off4(in, x->n, x->h, r, 0) : ssmi_off3(in, x->n, x->h, 0);
                k->load_row(s->buf, in->data, in->dtype, io, in->strides[in->ndim - 1], lens[p]);
            } else {
                memset(s->buf, 0, (size_t)lens[p] * sizeof(float));
            }
            k->store_row(out->data, out->dtype, oo, out->strides[out->ndim - 1], s->buf, lens[p]);
        }
    }
}

/* Passes 1–2 of the file comment for one (sequence, V-head) and the carries of its reverse
 * pass; the sequence is not empty. */
static void head_begin(bwd_task_ctx * x) {
    const bwd_job *                  job = x->job;
    const ssm_mamba3_siso_bwd_args * a = job->a;
    const ssmi_cpu_kernels *         k = job->k;
    const int64_t                    K = job->d->dk, V = job->d->dv, A = job->d->nangles;
    bwd_scratch *                    s = &x->s;
    x->dh = ssmi_present(&a->d) ? ssmi_get_f32(&a->d, ssmi_off1(&a->d, x->h)) : 0.0f;
    k->load_row(s->qbias, a->q_bias.data, a->q_bias.dtype, ssmi_off2(&a->q_bias, x->h, 0), a->q_bias.strides[1], K);
    k->load_row(s->kbias, a->k_bias.data, a->k_bias.dtype, ssmi_off2(&a->k_bias, x->h, 0), a->k_bias.strides[1], K);
    sequence_scalars(x);
    forward_states(x);

    /* carries of the reverse pass: dS, G, bias and d partials */
    if (ssmi_present(&a->dfinal_ssm_state)) {
        const ssm_tensor * t = &a->dfinal_ssm_state;
        for (int64_t v = 0; v < V; ++v)
            k->load_row(s->ds + v * K, t->data, t->dtype, ssmi_off4(t, x->n, x->h, v, 0), t->strides[3], K);
    } else {
        memset(s->ds, 0, (size_t)(V * K) * sizeof(float));
    }
    if (A > 0) {
        if (ssmi_present(&a->dfinal_angle_state))
            k->load_row(s->gacc, a->dfinal_angle_state.data, a->dfinal_angle_state.dtype,
                        ssmi_off3(&a->dfinal_angle_state, x->n, x->h, 0), a->dfinal_angle_state.strides[2], A);
        else
            memset(s->gacc, 0, (size_t)A * sizeof(float));
    }
    memset(s->qbacc, 0, (size_t)K * sizeof(float));
    memset(s->kbacc, 0, (size_t)K * sizeof(float));
    x->dd = 0.0f;
}

/* Chunk c of the reverse pass (pass 3) of one head. */
static void head_chunk(bwd_task_ctx * x, int64_t c) {
    const bwd_job * job = x->job;
    const int64_t   C = BWD_CHUNK, nchunks = (x->len + C - 1) / C;
    const int64_t   i0 = c * C, Lc = x->len - i0 < C ? x->len - i0 : C;
    bwd_scratch *   s = &x->s;
    const float *   sc = s->states + c * job->d->dv * job->d->dk;
    /* S_c (in L3 or memory by now) is first read by chunk_dz / chunk_grads: the previous
     * chunk's token chain asked for it (prefetch_previous_chunk), except for the first */
    if (c == nchunks - 1)
        for (int64_t o = 0; o < job->d->dv * job->d->dk; o += 16) __builtin_prefetch(sc + o, 0, 3);
    const float ecl = chunk_decays(x, i0, Lc);
    chunk_qk(x, i0, Lc, 1, NULL);
    chunk_dy(x, i0, Lc);
    chunk_scores(x, Lc);
    if (job->want_y) chunk_dz(x, i0, Lc, sc);
    chunk_grads(x, i0, Lc, sc, ecl, c == nchunks - 1, c > 0 || job->d->has_states);
    chunk_preprocess_grads(x, c, i0, Lc);
    for (int64_t i = Lc - 1; i >= 0; --i) x->dd += s->dqk[i];
}

/* Pass 4 of one head and its partial sums out. */
static void head_end(bwd_task_ctx * x) {
    const bwd_job * job = x->job;
    const int64_t   H = job->d->nheads, K = job->d->dk;
    const float     dc = job->d->has_states ? initial_state_grads(x) : 0.0f;
    sequence_trapezoid(x, dc);
    memcpy(job->dqb_part + (x->n * H + x->h) * K, x->s.qbacc, (size_t)K * sizeof(float));
    memcpy(job->dkb_part + (x->n * H + x->h) * K, x->s.kbacc, (size_t)K * sizeof(float));
    job->dd_part[x->n * H + x->h] = x->dd;
}

/* Task (sequence n, Q/K head g, head block blk): the block's heads in groups of
 * l.interleave whose reverse passes go chunk by chunk together (head order inside a
 * chunk), so the chunk's workspace rows are added to while still in cache; their dq̃,
 * dk̃ add up in head order in the block's workspace slot whatever the grouping. */
static void bwd_task(void * arg, int64_t task, int32_t thread) {
    const bwd_job *          job = (const bwd_job *)arg;
    const ssmi_mamba3_dims * d = job->d;
    const int64_t            Hq = d->nheads_qk, G = d->nheads / Hq, nb = job->l.nblocks, hb = job->l.head_block;
    const int64_t            P = job->l.interleave, H = d->nheads, K = d->dk;
    float * const            base = job->scratch + (int64_t)thread * job->l.thread_floats;
    bwd_task_ctx             xs[BWD_INTERLEAVE];
    bwd_task_ctx             x;
    memset(&x, 0, sizeof x);
    x.job = job;
    x.n = task / (Hq * nb);
    x.g = (task / nb) % Hq;
    x.blk = task % nb;
    ssmi_cpu_sequence(&job->a->cu_seqlens, d->seqlen, x.n, &x.row, &x.t0, &x.len);
    const int64_t shared = carve_shared(d, job->l.max_len, base, &x.s);
    if (x.len == 0) {
        for (int64_t j = 0; j < hb; ++j) {
            x.h = x.g * G + x.blk * hb + j;
            memset(job->dqb_part + (x.n * H + x.h) * K, 0, (size_t)K * sizeof(float));
            memset(job->dkb_part + (x.n * H + x.h) * K, 0, (size_t)K * sizeof(float));
            job->dd_part[x.n * H + x.h] = 0.0f;
            empty_sequence(&x);
        }
        return;
    }
    const int64_t nchunks = (x.len + BWD_CHUNK - 1) / BWD_CHUNK;
    for (int64_t j0 = 0; j0 < hb; j0 += P) {
        const int64_t np = hb - j0 < P ? hb - j0 : P;
        for (int64_t p = 0; p < np; ++p) {
            xs[p] = x;
            carve_head(d, job->l.max_len, job->l.max_chunks, base + shared + p * job->l.head_floats, &xs[p].s);
            xs[p].h = x.g * G + x.blk * hb + j0 + p;
            xs[p].first_in_block = j0 + p == 0;
            head_begin(&xs[p]);
        }
        for (int64_t c = nchunks - 1; c >= 0; --c) {
            for (int64_t p = 0; p < np; ++p) head_chunk(&xs[p], c);
        }
        for (int64_t p = 0; p < np; ++p) head_end(&xs[p]);
    }
}

/* ---- pass 2: dq, dk summed over the heads of each group, in head order ---------------- */
static void reduce_task(void * arg, int64_t task, int32_t thread) {
    (void)thread;
    const bwd_job *          job = (const bwd_job *)arg;
    const ssmi_mamba3_dims * d = job->d;
    const int64_t            S = d->seqlen, Hq = d->nheads_qk, K = d->dk, nb = job->l.nblocks;
    const int64_t            slot = d->batch * S * Hq * K; /* floats per head-block slot */
    int64_t                  tb, te;
    const int64_t            b = ssmi_cpu_m3_reduce_span(task, S, &tb, &te);
    float *                  acc = job->scratch + (int64_t)thread * job->l.thread_floats;
    for (int which = 0; which < 2; ++which) {
        const float *      ws = which == 0 ? job->dq_ws : job->dk_ws;
        const ssm_tensor * out = which == 0 ? &job->a->dq : &job->a->dk;
        if (ws == NULL) continue;
        for (int64_t t = tb; t < te; ++t)
            for (int64_t g = 0; g < Hq; ++g) {
                ssmi_cpu_m3_sum_slots(acc, ws + ((b * S + t) * Hq + g) * K, nb, slot, K);
                job->k->store_row(out->data, out->dtype, ssmi_off4(out, b, t, g, 0), out->strides[3], acc, K);
            }
    }
}

/* ---- pass 3: bias and d gradients summed over sequences, in sequence order -------------- */
static void reduce_over_sequences(const bwd_job * job) {
    const ssm_mamba3_siso_bwd_args * a = job->a;
    const int64_t                    NS = job->d->nseq, H = job->d->nheads, K = job->d->dk;
    float *                          acc = job->scratch; /* thread 0's scratch, free again */
    for (int which = 0; which < 2; ++which) {
        const ssm_tensor * out = which == 0 ? &a->dq_bias : &a->dk_bias;
        const float *      part = which == 0 ? job->dqb_part : job->dkb_part;
        if (!ssmi_present(out)) continue;
        for (int64_t h = 0; h < H; ++h) {
            memset(acc, 0, (size_t)K * sizeof(float));
            for (int64_t n = 0; n < NS; ++n)
                for (int64_t j = 0; j < K; ++j) acc[j] += part[(n * H + h) * K + j];
            job->k->store_row(out->data, out->dtype, ssmi_off2(out, h, 0), out->strides[1], acc, K);
        }
    }
    if (ssmi_present(&a->dd)) {
        for (int64_t h = 0; h < H; ++h) {
            float acc1 = 0.0f;
            for (int64_t n = 0; n < NS; ++n) acc1 += job->dd_part[n * H + h];
            ssmi_set_f32(&a->dd, ssmi_off1(&a->dd, h), acc1);
        }
    }
}

static bwd_layout plan_bwd(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_bwd_args * a) {
    bwd_layout l;
    l.max_len = 0;
    if (d->varlen) {
        const ssm_tensor * cu = &a->cu_seqlens;
        for (int64_t n = 0; n < d->nseq; ++n) {
            const int64_t len = ssmi_get_i64(cu, ssmi_off1(cu, n + 1)) - ssmi_get_i64(cu, ssmi_off1(cu, n));
            if (len > l.max_len) l.max_len = len;
        }
    } else {
        l.max_len = d->seqlen;
    }
    l.max_chunks = (l.max_len + BWD_CHUNK - 1) / BWD_CHUNK;
    if (l.max_chunks < 1) l.max_chunks = 1;
    l.gqa_ws = d->nheads_qk < d->nheads && (ssmi_present(&a->dq) || ssmi_present(&a->dk));
    /* Heads per task: fewer blocks = a smaller workspace (nb slots of (B, S, Hq, K) fp32
     * instead of G) and fewer partial sums. */
    const int64_t G = d->nheads / d->nheads_qk;
    l.nblocks = l.gqa_ws ? ssmi_cpu_m3_head_blocks(G, d->nseq * d->nheads_qk, BWD_MIN_TASKS) : G;
    l.head_block = G / l.nblocks;
    /* Interleaving lets the heads of a block that share workspace rows add to them while
     * they are in cache, but each interleaved head needs its own whole-sequence tables
     * (~3.3 MB per head at the PERF.md shape). It paid (2) while a separate pass added the
     * chunk sums into the slot; with the adds in the token chain and the rows prefetched,
     * 1 is ~2.5% faster there (1 thread) and 4 ~8% slower. */
    l.interleave = l.gqa_ws && l.head_block > 1 ? BWD_INTERLEAVE : 1;
    if (l.interleave > l.head_block) l.interleave = l.head_block;
    bwd_scratch unused;
    l.head_floats = carve_head(d, l.max_len, l.max_chunks, NULL, &unused);
    l.thread_floats = carve_shared(d, l.max_len, NULL, &unused) + l.interleave * l.head_floats;
    if (l.thread_floats < ssmi_cpu_lines(d->dk)) l.thread_floats = ssmi_cpu_lines(d->dk);
    return l;
}

ssm_status ssmi_cpu_mamba3_siso_bwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                    const ssm_mamba3_siso_bwd_args * a) {
    (void)p;
    if (d->nheads == 0) return SSM_STATUS_OK;
    bwd_job job;
    memset(&job, 0, sizeof job);
    job.a = a;
    job.d = d;
    job.m3 = ssmi_cpu_m3_kernels_for(ctx);
    job.k = job.m3->base;
    job.bk = ssmi_cpu_bwd_kernels_for(ctx);
    job.l = plan_bwd(d, a);
    job.want_y = ssmi_present(&a->z) && ssmi_present(&a->dz);

    const int64_t threads = ssmi_num_threads(ctx);
    const size_t  tok_ws = job.l.gqa_ws ? (size_t)(job.l.nblocks * d->batch * d->seqlen * d->nheads_qk * d->dk) : 0;
    const size_t  part = (size_t)ssmi_cpu_lines(d->nseq * d->nheads * d->dk);
    const size_t  floats = (size_t)threads * (size_t)job.l.thread_floats +
                          (ssmi_present(&a->dq) ? (size_t)ssmi_cpu_lines((int64_t)tok_ws) : 0) +
                          (ssmi_present(&a->dk) ? (size_t)ssmi_cpu_lines((int64_t)tok_ws) : 0) + 2 * part +
                          (size_t)ssmi_cpu_lines(d->nseq * d->nheads);
    if (floats > SIZE_MAX / sizeof(float))
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba3_siso_bwd: scratch size overflows size_t");
    float * base = (float *)ssmi_alloc(ctx, floats * sizeof(float));
    if (base == NULL)
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba3_siso_bwd: could not allocate %zu bytes of scratch",
                          floats * sizeof(float));
    float * cur = base;
    job.scratch = cur;
    cur += (size_t)threads * (size_t)job.l.thread_floats;
    if (job.l.gqa_ws && ssmi_present(&a->dq)) {
        job.dq_ws = cur;
        cur += ssmi_cpu_lines((int64_t)tok_ws);
    }
    if (job.l.gqa_ws && ssmi_present(&a->dk)) {
        job.dk_ws = cur;
        cur += ssmi_cpu_lines((int64_t)tok_ws);
    }
    job.dqb_part = cur;
    cur += part;
    job.dkb_part = cur;
    cur += part;
    job.dd_part = cur;
    /* the forward's chunk_states replace the recompute at the chunks that start a chunk_size
     * chunk when those are chunks of this pass: one row per chunk_size chunk, sequence after
     * sequence */
    int64_t * row0 = NULL;
    if (ssmi_present(&a->chunk_states) && d->chunk % BWD_CHUNK == 0) {
        row0 = ssmi_cpu_chunk_rows(ctx, "mamba3_siso_bwd", &a->cu_seqlens, d->seqlen, d->nseq, d->chunk);
        if (row0 == NULL) {
            ssmi_free(ctx, base);
            return SSM_STATUS_OUT_OF_MEMORY;
        }
        job.cs_row0 = row0;
    }

    ssmi_parallel_for(ctx, d->nseq * d->nheads_qk * job.l.nblocks, bwd_task, &job);
    if (job.l.gqa_ws && d->seqlen > 0)
        ssmi_parallel_for(ctx, ssmi_cpu_m3_reduce_tasks(d->batch, d->seqlen), reduce_task, &job);
    reduce_over_sequences(&job);
    ssmi_free(ctx, row0);
    ssmi_free(ctx, base);
    return SSM_STATUS_OK;
}
