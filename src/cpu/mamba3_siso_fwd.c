/*
 * Mamba-3 SISO chunked forward on the CPU (spec §3.5, §3.6): ssmi_cpu_mamba3_siso_fwd
 * (cumulative angles in) and ssmi_cpu_mamba3_siso (raw angles in, the angle cumsum fused:
 * θ is advanced in fp32 token by token inside the chunk loop and never rounded).
 *
 * Tasks: one per (sequence, Q/K group, block of heads of the group); a sequence is a batch
 * row or a varlen sequence. A task walks its sequence's chunks in order (chunks restart at
 * each sequence start). Per chunk (L ≤ SISO_CHUNK tokens):
 *   raw q, k rows of the group: once per chunk, shared by the heads of the block;
 *   per head h:
 *     scalars γ, σ (σ reads the next token's dt/trap, also across the chunk end), the
 *     chunk-local inclusive cumsum c of adt, e^{c}, w_j = σ_j·e^{c_last − c_j};
 *     per token: θ, q̂ = R(θ)(q + q_bias), k̂ = R(θ)(k + k_bias), d = (q + q_bias)·(k + k_bias);
 *     Y  = diag(e^{c})·Q̂·S                                   (state entering the chunk)
 *     CB = Q̂·K̂ᵀ (lower row blocks only), M_ij = CB_ij·e^{c_i − c_j}·σ_j (j < i),
 *     M_ii = D + γ_i·d_i (the diagonal uses γ and the unrotated dot, never σ: trap 3),
 *     Y += M·V,  out = Y·silu(z)
 *     S  = e^{c_last}·S + K̂ᵀ·(diag(w)·V)
 * The state S of each head is K×V fp32 (V contiguous) in per-thread scratch, so every GEMM
 * uses the microkernel with contiguous B rows; the state-update A operand is K̂ read
 * transposed through its strides. With initial states, S starts as
 * H_in = S_in + dt_0(1−λ_0)·V_in K_inᵀ. Final states: S after the last token (no pending
 * β-term), k̂ of the last token (not σ-scaled), the raw v of the last token, θ of the last
 * token. An empty sequence copies its initial states to the final ones (zeros without).
 *
 * chunk_states (optional): the state entering every chunk of params->chunk_size tokens of
 * each sequence (spec §3.6), S transposed into its (V, K) row, stored before the internal
 * chunk that starts it; one row per chunk_size chunk, sequence after sequence (the first row
 * of each sequence from ssmi_cpu_chunk_rows). Those boundaries must be internal chunk
 * boundaries: a chunk_size that is not a multiple of SISO_CHUNK is UNSUPPORTED with
 * chunk_states (checked before anything is written).
 *
 * params->chunk_size is otherwise not semantic and not used: SISO_CHUNK is the fastest at B=1
 * S=2048 H=32 Hq=1 K=128 V=64 A=32 fp32 with z, one thread, CPU time of the best of 30
 * (AMD EPYC, AVX2): C=32 34.9 ms, 48 36.9 ms, 64 37.8 ms, 96 41.8 ms, 128 62.9 ms — the
 * smaller lower-triangular work wins over the shorter k of the state GEMM, as for Mamba-2.
 *
 * Threads: every output element, final state and chunk_states row is written by exactly one
 * task (that of its sequence and head) whose arithmetic does not depend on the head-block
 * size, so results are bitwise identical for any thread count.
 */
#include <string.h>

#include "mamba3_common.h"
#include "ssmi_cpu_mamba3.h"

#define SISO_CHUNK        32           /* internal chunk (see above)                          */
#define SISO_STATE_BUDGET (512 * 1024) /* bytes of head-block states per thread: half an L2 */
#define SISO_CB_ROWS      12           /* row block of the lower-triangular Q̂·K̂ᵀ            */

/* One view of the tensors of both entry points. */
typedef struct fwd_io {
    ssm_tensor q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z;
    ssm_tensor angle_state, ssm_state, k_state, v_state, cu_seqlens;
    ssm_tensor out, final_angle_state, final_ssm_state, final_k_state, final_v_state, pregate_y, chunk_states;
    int        fused; /* angles are raw rates (the combined op) */
} fwd_io;

typedef struct fwd_layout {
    int64_t head_block;
    int64_t thread_floats;
} fwd_layout;

/* Offsets (in floats) of one thread's scratch pieces, each a whole number of lines. */
typedef struct fwd_scratch {
    float *s, *theta, *bq, *bk;           /* per head of the block                          */
    float *qraw, *kraw, *qh, *kh;         /* [L][K]                                         */
    float *w;                             /* [L][V] diag(w)·V of the state update           */
    float *kt;                            /* [K][Q]                                         */
    float *cb, *m;                        /* [Q][Q]                                         */
    float *vc, *y;                        /* per head of the block: [hh][Q][V]              */
    float *zrow, *raw, *cos2, *sin2;      /* [V], [A], [2A], [2A]                           */
    float *adt, *dtv, *lam, *gam, *sig;   /* [Q+1]                                          */
    float *cm, *ecm, *wexp, *dd, *tmp;    /* [Q+1], tmp [2Q+2]                              */
    float *kin, *vin;                     /* [K], [V]                                       */
    float *rate;                          /* [L][A] π·tanh(raw) shared by the block's heads  */
} fwd_scratch;

static int64_t carve(fwd_scratch * sc, float * base, int64_t hb, int64_t K, int64_t V, int64_t A) {
    const int64_t Q = SISO_CHUNK;
    int64_t used = 0; /* floats, counted as offsets: base may be NULL */
#define TAKE(field, n) SSMI_CPU_TAKE(sc, base, used, field, n)
    TAKE(s, hb * ssmi_cpu_lines(K * V));
    TAKE(theta, hb * ssmi_cpu_lines(A));
    TAKE(bq, hb * ssmi_cpu_lines(K));
    TAKE(bk, hb * ssmi_cpu_lines(K));
    TAKE(qraw, Q * K);
    TAKE(kraw, Q * K);
    TAKE(qh, Q * K);
    TAKE(kh, Q * K);
    TAKE(w, Q * (K > V ? K : V));
    TAKE(kt, K * Q);
    TAKE(cb, Q * Q);
    TAKE(m, Q * Q);
    TAKE(vc, hb * Q * V);
    TAKE(y, hb * Q * V);
    TAKE(zrow, V);
    TAKE(raw, A + 8);
    TAKE(cos2, 2 * A + 8);
    TAKE(sin2, 2 * A + 8);
    TAKE(adt, Q + 1);
    TAKE(dtv, Q + 1);
    TAKE(lam, Q + 1);
    TAKE(gam, Q + 1);
    TAKE(sig, Q + 1);
    TAKE(cm, Q + 1);
    TAKE(ecm, Q + 1);
    TAKE(wexp, Q + 1);
    TAKE(dd, Q + 1);
    TAKE(tmp, 2 * Q + 2);
    TAKE(kin, K);
    TAKE(vin, V);
    TAKE(rate, Q * A);
#undef TAKE
    return used;
}

static fwd_layout plan_fwd(const ssm_context * ctx, const ssmi_mamba3_dims * d) {
    const int64_t G       = d->nheads / d->nheads_qk;
    const int64_t threads = ssmi_num_threads(ctx);
    const int64_t state_b = d->dk * d->dv * (int64_t) sizeof(float);
    int64_t       hb      = G;
    const int64_t cap     = state_b > 0 && SISO_STATE_BUDGET / state_b > 1 ? SISO_STATE_BUDGET / state_b : 1;
    if (hb > cap) hb = cap;
    /* enough tasks to keep every thread busy, twice over, when the shape allows it */
    while (hb > 1 && d->nseq * d->nheads_qk * ((G + hb - 1) / hb) < 2 * threads) hb = (hb + 1) / 2;
    fwd_layout l;
    l.head_block    = hb;
    l.thread_floats = carve(NULL, NULL, hb, d->dk, d->dv, d->nangles);
    return l;
}

typedef struct fwd_job {
    const ssmi_mamba3_dims *    d;
    const ssmi_cpu_m3_kernels * k;
    const fwd_io *              io;
    int64_t                     head_block, blocks;
    float *                     scratch;
    int64_t                     thread_floats;
    const int64_t *             cs_row0; /* chunk_states: the first row of each sequence, or NULL */
} fwd_job;

/* An empty sequence: every final state is its initial state (zeros without). */
static void copy_states(const fwd_job * job, fwd_scratch * sc, int64_t s, int64_t h) {
    const ssmi_cpu_m3_kernels * k  = job->k;
    const fwd_io *              io = job->io;
    const int64_t K = job->d->dk, V = job->d->dv, A = job->d->nangles;
    const int     has = ssmi_present(&io->ssm_state);
    if (ssmi_present(&io->final_ssm_state)) {
        if (has) ssmi_cpu_m3_load_state_kv(k, &io->ssm_state, s, h, K, V, sc->s);
        else memset(sc->s, 0, (size_t) (K * V) * sizeof(float));
        ssmi_cpu_m3_store_state_kv(k, &io->final_ssm_state, s, h, K, V, sc->s);
    }
    ssmi_cpu_m3_load_row3(k, has ? &io->k_state : NULL, s, h, K, sc->kin);
    ssmi_cpu_m3_store_row3(k, &io->final_k_state, s, h, K, sc->kin);
    ssmi_cpu_m3_load_row3(k, has ? &io->v_state : NULL, s, h, V, sc->vin);
    ssmi_cpu_m3_store_row3(k, &io->final_v_state, s, h, V, sc->vin);
    if (io->fused && A > 0) {
        ssmi_cpu_m3_load_row3(k, ssmi_present(&io->angle_state) ? &io->angle_state : NULL, s, h, A, sc->raw);
        ssmi_cpu_m3_store_row3(k, &io->final_angle_state, s, h, A, sc->raw);
    }
}

/* State of head h at the sequence start: H_in (or zeros), and θ_in for the fused op. */
static void start_head(const fwd_job * job, float * st, float * theta, int64_t s, int64_t row, int64_t t0, int64_t h,
                       fwd_scratch * sc) {
    const ssmi_cpu_m3_kernels * k  = job->k;
    const fwd_io *              io = job->io;
    const int64_t K = job->d->dk, V = job->d->dv, A = job->d->nangles;
    if (ssmi_present(&io->ssm_state)) {
        ssmi_cpu_m3_load_state_kv(k, &io->ssm_state, s, h, K, V, st);
        ssmi_cpu_m3_load_row3(k, &io->k_state, s, h, K, sc->kin);
        ssmi_cpu_m3_load_row3(k, &io->v_state, s, h, V, sc->vin);
        const float dt0 = ssmi_get_f32(&io->dt, ssmi_off3(&io->dt, row, h, t0));
        const float lam = ssmi_cpu_m3_sigmoid(ssmi_get_f32(&io->trap, ssmi_off3(&io->trap, row, h, t0)));
        ssmi_cpu_m3_fold_initial(K, V, dt0 * (1.0f - lam), sc->kin, sc->vin, st);
    } else {
        memset(st, 0, (size_t) (K * V) * sizeof(float));
    }
    if (io->fused && A > 0) ssmi_cpu_m3_load_row3(k, ssmi_present(&io->angle_state) ? &io->angle_state : NULL, s, h, A, theta);
}

/* Raw angles broadcast over heads (the layer's case): π·tanh(raw) is computed once per
 * token for the whole head block. */
static int shared_rates(const fwd_io * io) { return io->fused && io->angles.strides[2] == 0; }

/* One chunk of one head: tokens [tc, tc+L) of a sequence ending at t_end. */
static void chunk_head(const fwd_job * job, fwd_scratch * sc, int64_t hh, int64_t h, int64_t row, int64_t tc,
                       int64_t L, int64_t t_end, int64_t s) {
    const ssmi_cpu_m3_kernels * k  = job->k;
    const ssmi_cpu_kernels *    b  = k->base;
    const fwd_io *              io = job->io;
    const int64_t K = job->d->dk, V = job->d->dv, A = job->d->nangles, Q = SISO_CHUNK;
    float * st = sc->s + hh * ssmi_cpu_lines(K * V);
    float * theta = sc->theta + hh * ssmi_cpu_lines(A);
    const float * bq = sc->bq + hh * ssmi_cpu_lines(K), *bk = sc->bk + hh * ssmi_cpu_lines(K);
    const int last = tc + L == t_end;

    ssmi_cpu_m3_token_scalars(k, &io->adt, &io->dt, &io->trap, row, h, tc, L, t_end, sc->tmp, sc->adt, sc->dtv,
                              sc->lam, sc->gam, sc->sig);
    float run = 0.0f;
    for (int64_t i = 0; i < L; ++i) sc->cm[i] = run += sc->adt[i];
    const float cl = sc->cm[L - 1];
    for (int64_t j = 0; j < L; ++j) sc->wexp[j] = cl - sc->cm[j];
    b->vexp(L, sc->wexp, sc->wexp);
    for (int64_t j = 0; j < L; ++j) sc->wexp[j] *= sc->sig[j];
    b->vexp(L, sc->cm, sc->ecm);
    float ecl = cl;
    b->vexp(1, &ecl, &ecl);

    /* q̂, k̂, d per token */
    for (int64_t i = 0; i < L; ++i) {
        if (A > 0) {
            if (io->fused && shared_rates(io)) {
                k->angle_advance(A, theta, sc->rate + i * A, sc->dtv[i]);
            } else if (io->fused) {
                b->load_row(sc->raw, io->angles.data, io->angles.dtype, ssmi_off4(&io->angles, row, tc + i, h, 0),
                            io->angles.strides[3], A);
                k->angle_rate(A, sc->raw, sc->raw);
                k->angle_advance(A, theta, sc->raw, sc->dtv[i]);
            } else {
                b->load_row(theta, io->angles.data, io->angles.dtype, ssmi_off4(&io->angles, row, tc + i, h, 0),
                            io->angles.strides[3], A);
            }
        }
        sc->dd[i] = ssmi_cpu_m3_prep_token(k, K, A, sc->qraw + i * K, sc->kraw + i * K, bq, bk, theta, sc->cos2,
                                           sc->sin2, sc->qh + i * K, sc->kh + i * K);
    }
    for (int64_t i = 0; i < L; ++i) {
        const float * kr = sc->kh + i * K;
        for (int64_t n = 0; n < K; ++n) sc->kt[n * Q + i] = kr[n];
    }
    float * vc = sc->vc + hh * Q * V, *y = sc->y + hh * Q * V;

    /* outputs */
    b->gemm(L, V, K, sc->qh, K, 1, st, V, y, V, sc->ecm, 0.0f, 0);
    for (int64_t i0 = 0; i0 < L; i0 += SISO_CB_ROWS) {
        const int64_t mr = L - i0 < SISO_CB_ROWS ? L - i0 : SISO_CB_ROWS;
        b->gemm(mr, i0 + mr, K, sc->qh + i0 * K, K, 1, sc->kt, Q, sc->cb + i0 * Q, Q, NULL, 0.0f, 0);
    }
    b->decay_rows(L, L, sc->cb, Q, sc->cm, sc->sig, sc->m, Q);
    const float dh = ssmi_present(&io->d) ? ssmi_get_f32(&io->d, ssmi_off1(&io->d, h)) : 0.0f;
    for (int64_t i = 0; i < L; ++i) sc->m[i * Q + i] = dh + sc->gam[i] * sc->dd[i];
    b->gemm(L, V, L, sc->m, Q, 1, vc, V, y, V, NULL, 1.0f, 1);

    if (last) {
        ssmi_cpu_m3_store_row3(k, &io->final_k_state, s, h, K, sc->kh + (L - 1) * K);
        ssmi_cpu_m3_store_row3(k, &io->final_v_state, s, h, V, vc + (L - 1) * V);
        if (io->fused && A > 0) ssmi_cpu_m3_store_row3(k, &io->final_angle_state, s, h, A, theta);
        if (!ssmi_present(&io->final_ssm_state)) return; /* the last update only feeds the final state */
    }
    /* state: S = e^{c_last}·S + K̂ᵀ·(diag(w)·V), K̂ read transposed through its strides */
    for (int64_t j = 0; j < L; ++j) {
        const float   wj = sc->wexp[j];
        const float * vr = vc + j * V;
        float *       wr = sc->w + j * V;
        for (int64_t p = 0; p < V; ++p) wr[p] = vr[p] * wj;
    }
    b->gemm(K, V, L, sc->kh, 1, K, sc->w, V, st, V, NULL, ecl, 0);
}

/* v rows of the chunk for every head of the block, token-major: for one token the heads'
 * rows are neighbours in memory (H·V apart between tokens), so this walks memory almost
 * sequentially where a head-major loop jumps H·V elements per row (the row copies took
 * ~20% of the run time that way). */
static void load_v_tiles(const fwd_job * job, fwd_scratch * sc, int64_t row, int64_t tc, int64_t L, int64_t h0,
                         int64_t nh) {
    const ssm_tensor *       v = &job->io->v;
    const ssmi_cpu_kernels * b = job->k->base;
    const int64_t            V = job->d->dv, Q = SISO_CHUNK;
    for (int64_t i = 0; i < L; ++i)
        for (int64_t hh = 0; hh < nh; ++hh)
            b->load_row(sc->vc + hh * Q * V + i * V, v->data, v->dtype, ssmi_off4(v, row, tc + i, h0 + hh, 0),
                        v->strides[3], V);
}

/* out = Y·silu(z) (and Y into pregate_y) for the chunk's tokens and the block's heads,
 * token-major as above. */
static void store_outputs(const fwd_job * job, fwd_scratch * sc, int64_t row, int64_t tc, int64_t L, int64_t h0,
                          int64_t nh) {
    const fwd_io *           io = job->io;
    const ssmi_cpu_kernels * b  = job->k->base;
    const int64_t            V  = job->d->dv, Q = SISO_CHUNK;
    for (int64_t i = 0; i < L; ++i)
        for (int64_t hh = 0; hh < nh; ++hh) {
            float * y = sc->y + hh * Q * V + i * V;
            if (ssmi_present(&io->pregate_y))
                b->store_row(io->pregate_y.data, io->pregate_y.dtype,
                             ssmi_off4(&io->pregate_y, row, tc + i, h0 + hh, 0), io->pregate_y.strides[3], y, V);
            if (ssmi_present(&io->z)) {
                b->load_row(sc->zrow, io->z.data, io->z.dtype, ssmi_off4(&io->z, row, tc + i, h0 + hh, 0),
                            io->z.strides[3], V);
                b->silu_gate(V, y, sc->zrow, y);
            }
            b->store_row(io->out.data, io->out.dtype, ssmi_off4(&io->out, row, tc + i, h0 + hh, 0), io->out.strides[3],
                         y, V);
        }
}

/* Asks for part `part` of `parts` of the next chunk's v, z (read) and out (written) rows
 * of the block's heads while this chunk computes: rows of consecutive tokens are H·V
 * elements apart, a stride the hardware prefetchers follow poorly (the row copies were
 * the largest cost after the GEMMs). */
static void prefetch_chunk(const fwd_io * io, int64_t row, int64_t tc, int64_t L, int64_t h0, int64_t nh, int64_t V,
                           int64_t part, int64_t parts) {
    const ssm_tensor * ts[3] = { &io->v, &io->z, &io->out };
    const int64_t      i0 = L * part / parts, i1 = L * (part + 1) / parts;
    for (int w = 0; w < 3; ++w) {
        const ssm_tensor * t = ts[w];
        if (!ssmi_present(t) || t->strides[3] != 1 || t->strides[2] != V) continue;
        const size_t es   = ssm_dtype_size((ssm_dtype) t->dtype);
        const size_t span = (size_t) (nh * V) * es; /* the block's heads are one run per token */
        for (int64_t i = i0; i < i1; ++i) {
            const char * p = (const char *) t->data + (size_t) ssmi_off4(t, row, tc + i, h0, 0) * es;
            for (size_t o = 0; o < span; o += 64) {
                if (w == 2) __builtin_prefetch(p + o, 1);
                else __builtin_prefetch(p + o);
            }
        }
    }
}

static void fwd_task(void * arg, int64_t task, int32_t thread) {
    const fwd_job *             job = (const fwd_job *) arg;
    const ssmi_mamba3_dims *    d   = job->d;
    const ssmi_cpu_m3_kernels * k   = job->k;
    const fwd_io *              io  = job->io;
    const int64_t K = d->dk, Hq = d->nheads_qk, G = d->nheads / Hq;
    const int64_t per_seq = Hq * job->blocks;
    const int64_t s       = task / per_seq;
    const int64_t g       = (task % per_seq) / job->blocks;
    const int64_t h0      = g * G + (task % job->blocks) * job->head_block;
    const int64_t nh      = (g + 1) * G - h0 < job->head_block ? (g + 1) * G - h0 : job->head_block;
    fwd_scratch   sc;
    carve(&sc, job->scratch + (int64_t) thread * job->thread_floats, job->head_block, K, d->dv, d->nangles);

    int64_t row, t0, len;
    ssmi_cpu_sequence(&io->cu_seqlens, d->seqlen, s, &row, &t0, &len);
    if (len == 0) {
        for (int64_t hh = 0; hh < nh; ++hh) copy_states(job, &sc, s, h0 + hh);
        return;
    }
    for (int64_t hh = 0; hh < nh; ++hh) {
        const int64_t h = h0 + hh;
        start_head(job, sc.s + hh * ssmi_cpu_lines(K * d->dv), sc.theta + hh * ssmi_cpu_lines(d->nangles), s, row,
                   t0, h, &sc);
        k->base->load_row(sc.bq + hh * ssmi_cpu_lines(K), io->q_bias.data, io->q_bias.dtype,
                          ssmi_off2(&io->q_bias, h, 0), io->q_bias.strides[1], K);
        k->base->load_row(sc.bk + hh * ssmi_cpu_lines(K), io->k_bias.data, io->k_bias.dtype,
                          ssmi_off2(&io->k_bias, h, 0), io->k_bias.strides[1], K);
    }
    for (int64_t c0 = 0; c0 < len; c0 += SISO_CHUNK) {
        const int64_t L  = len - c0 < SISO_CHUNK ? len - c0 : SISO_CHUNK;
        const int64_t tc = t0 + c0;
        if (job->cs_row0 != NULL && c0 % d->chunk == 0) /* the state entering a chunk_size chunk */
            for (int64_t hh = 0; hh < nh; ++hh)
                ssmi_cpu_m3_store_state_kv(k, &io->chunk_states, job->cs_row0[s] + c0 / d->chunk, h0 + hh, K, d->dv,
                                           sc.s + hh * ssmi_cpu_lines(K * d->dv));
        for (int64_t i = 0; i < L; ++i) {
            k->base->load_row(sc.qraw + i * K, io->q.data, io->q.dtype, ssmi_off4(&io->q, row, tc + i, g, 0),
                              io->q.strides[3], K);
            k->base->load_row(sc.kraw + i * K, io->k.data, io->k.dtype, ssmi_off4(&io->k, row, tc + i, g, 0),
                              io->k.strides[3], K);
        }
        if (shared_rates(io) && d->nangles > 0)
            for (int64_t i = 0; i < L; ++i) {
                float * r = sc.rate + i * d->nangles;
                k->base->load_row(r, io->angles.data, io->angles.dtype, ssmi_off4(&io->angles, row, tc + i, 0, 0),
                                  io->angles.strides[3], d->nangles);
                k->angle_rate(d->nangles, r, r);
            }
        load_v_tiles(job, &sc, row, tc, L, h0, nh);
        const int64_t next = len - c0 - L < SISO_CHUNK ? len - c0 - L : SISO_CHUNK;
        for (int64_t hh = 0; hh < nh; ++hh) {
            if (next > 0) prefetch_chunk(io, row, tc + L, next, h0, nh, d->dv, hh, nh);
            chunk_head(job, &sc, hh, h0 + hh, row, tc, L, t0 + len, s);
        }
        store_outputs(job, &sc, row, tc, L, h0, nh);
    }
    if (ssmi_present(&io->final_ssm_state))
        for (int64_t hh = 0; hh < nh; ++hh)
            ssmi_cpu_m3_store_state_kv(k, &io->final_ssm_state, s, h0 + hh, K, d->dv, sc.s + hh * ssmi_cpu_lines(K * d->dv));
}

static ssm_status run_fwd(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d, const fwd_io * io) {
    const int with_cs = ssmi_present(&io->chunk_states);
    SSM_RETURN_IF(with_cs && d->chunk % SISO_CHUNK != 0, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: the CPU backend writes chunk_states only for a params->chunk_size that is a multiple of %d "
                  "(its internal chunk), not %lld",
                  op, SISO_CHUNK, (long long) d->chunk);
    if (d->nheads == 0 || d->nheads_qk == 0 || d->nseq == 0) return SSM_STATUS_OK;
    const fwd_layout l = plan_fwd(ctx, d);
    fwd_job          job;
    job.d             = d;
    job.k             = ssmi_cpu_m3_kernels_for(ctx);
    job.io            = io;
    job.head_block    = l.head_block;
    job.blocks        = (d->nheads / d->nheads_qk + l.head_block - 1) / l.head_block;
    job.thread_floats = l.thread_floats;
    job.cs_row0       = NULL;
    int64_t * row0    = NULL;
    if (with_cs) {
        row0 = ssmi_cpu_chunk_rows(ctx, op, &io->cu_seqlens, d->seqlen, d->nseq, d->chunk);
        if (row0 == NULL) return SSM_STATUS_OUT_OF_MEMORY;
        job.cs_row0 = row0;
    }
    job.scratch = ssmi_cpu_thread_scratch(ctx, op, l.thread_floats);
    if (job.scratch == NULL) {
        ssmi_free(ctx, row0);
        return SSM_STATUS_OUT_OF_MEMORY;
    }
    ssmi_parallel_for(ctx, d->nseq * d->nheads_qk * job.blocks, fwd_task, &job);
    ssmi_free(ctx, job.scratch);
    ssmi_free(ctx, row0);
    return SSM_STATUS_OK;
}

ssm_status ssmi_cpu_mamba3_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                    const ssm_mamba3_siso_fwd_args * a) {
    (void) p;
    fwd_io io;
    memset(&io, 0, sizeof io);
    io.q = a->q, io.k = a->k, io.v = a->v, io.adt = a->adt, io.dt = a->dt, io.trap = a->trap;
    io.q_bias = a->q_bias, io.k_bias = a->k_bias, io.angles = a->angles, io.d = a->d, io.z = a->z;
    io.ssm_state = a->ssm_state, io.k_state = a->k_state, io.v_state = a->v_state, io.cu_seqlens = a->cu_seqlens;
    io.out = a->out, io.final_ssm_state = a->final_ssm_state, io.final_k_state = a->final_k_state;
    io.final_v_state = a->final_v_state, io.pregate_y = a->pregate_y, io.chunk_states = a->chunk_states;
    io.fused         = 0;
    return run_fwd(ctx, "mamba3_siso_fwd", d, &io);
}

ssm_status ssmi_cpu_mamba3_siso(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                const ssm_mamba3_siso_args * a) {
    (void) p;
    fwd_io io;
    memset(&io, 0, sizeof io);
    io.q = a->q, io.k = a->k, io.v = a->v, io.adt = a->adt, io.dt = a->dt, io.trap = a->trap;
    io.q_bias = a->q_bias, io.k_bias = a->k_bias, io.angles = a->angles, io.d = a->d, io.z = a->z;
    io.angle_state = a->angle_state, io.ssm_state = a->ssm_state, io.k_state = a->k_state, io.v_state = a->v_state;
    io.cu_seqlens = a->cu_seqlens, io.out = a->out, io.final_angle_state = a->final_angle_state;
    io.final_ssm_state = a->final_ssm_state, io.final_k_state = a->final_k_state;
    io.final_v_state   = a->final_v_state, io.pregate_y = a->pregate_y, io.chunk_states = a->chunk_states;
    io.fused           = 1;
    return run_fwd(ctx, "mamba3_siso", d, &io);
}
