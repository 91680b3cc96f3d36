/*
 * Mamba-3 MIMO forward on the CPU (spec §2.2-§2.5, §3.3, §3.7): ssmi_cpu_mamba3_mimo.
 *
 * Raw angles and adt in. Tasks: one per (sequence, value head), a sequence being a batch
 * row or a varlen sequence; each walks its sequence's chunks in order (chunks restart at
 * the sequence start, so C-token chunks of the sequence, the last one shorter). Per chunk
 * of n tokens (fp32 throughout):
 *   scalars γ, c (σ̄ from the next token of the SAME sequence, 0 at its last token), the
 *   chunk-local inclusive cumsum cm of adt; da_cs = cm, da_cs_rev[j] = cm[n−1] − cm[j],
 *   segsum[i][j] = cm[i] − cm[j] (j < i) — the decays of spec §2.4 formed here, unclamped;
 *   θ advanced token by token: θ = wrap(θ + π·tanh(raw)·dt) (the SISO angle kernels);
 *   tile rows q̃, k̂ = c·k̃, u, qkdot (ssmi_mimo_prep_token); Y by ssmi_mimo_chunk_y;
 *   pregate_y (when given) and the output stage per token (ssmi_mimo_output_token: z gate or
 *   fused norm, mimo_o sum); the entering Ŝ into chunk_states (when given, one row per chunk,
 *   sequence after sequence);
 *   Ŝ ← e^{cm[n−1]}·Ŝ + (diag(e^{da_cs_rev})K̂)ᵀ·U.
 * Initial states (spec §2.3): Ŝ_0 = ssm_stateᵀ + dt_0(1−λ_0)·Σ_r k_state[r] ⊗ (v_state ⊙
 * mimo_v[r]), θ starts at angle_state. Final states: ssm = Ŝ after the last token (= h,
 * σ̄ = 0 there) in (P, N) layout, k = k̃ of the last token (not c-scaled), v = the last
 * token's v (per sequence), angle = θ of the last token in [0, 2π). An empty sequence
 * copies its initial states (zeros without).
 * Each output element is written by one task with thread-independent arithmetic, so the
 * results are bitwise identical for any thread count.
 */
#include <string.h>

#include "mimo_common.h"
#include "ssmi_cpu_mimo.h"

typedef struct fw_scratch {
    ssmi_mimo_head hd;
    ssmi_mimo_tile tl;
    float *        s;                  /* [N][P] Ŝ                                    */
    float *        qr, *kr, *klast;    /* [R][N]                                      */
    float *        theta, *raw, *cosv, *sinv, *pairs;
    float *        dtv, *lam, *cf, *tmp, *cm;
    float *        v, *vlast, *z;      /* [P]                                         */
    float *        work, *out;         /* [3·R·P], [R·P]                              */
} fw_scratch;

static int64_t fw_carve(fw_scratch * sc, float * base, const ssmi_mimo_dims * d) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, C = d->chunk, A = d->nangles;
    int64_t used = 0; /* floats, counted as offsets: base may be NULL */
#define TAKE(field, cnt) SSMI_CPU_TAKE(sc, base, used, field, cnt)
    if (sc) ssmi_mimo_head_carve(&sc->hd, base + used, R, N, P);
    used += ssmi_mimo_head_floats(R, N, P);
    if (sc) ssmi_mimo_tile_carve(&sc->tl, base + used, R, N, P, C);
    used += ssmi_mimo_tile_floats(R, N, P, C);
    TAKE(s, N * P);
    TAKE(qr, R * N);
    TAKE(kr, R * N);
    TAKE(klast, R * N);
    TAKE(theta, A + 8);
    TAKE(raw, A + 8);
    TAKE(cosv, A + 8);
    TAKE(sinv, A + 8);
    TAKE(pairs, 4 * A + 16);
    TAKE(dtv, C + 1);
    TAKE(lam, C + 1);
    TAKE(cf, C + 1);
    TAKE(tmp, 2 * C + 2);
    TAKE(cm, C + 1);
    TAKE(v, P);
    TAKE(vlast, P);
    TAKE(z, P);
    TAKE(work, 3 * R * P);
    TAKE(out, R * P);
#undef TAKE
    return used;
}

typedef struct fw_job {
    const ssmi_mimo_dims *         d;
    const ssmi_mimo_kernels *      k;
    const ssm_mamba3_mimo_args *   a;
    const ssm_mamba3_mimo_params * p;
    float *                        scratch;
    int64_t                        thread_floats;
    const int64_t *                cs_row0; /* chunk_states: the first row of each sequence, or NULL */
} fw_job;

/* Rows [s, r, h, :] (r < R) of an (NS, R, H, N) tensor ↔ [R][N] fp32. */
static void load_rhn(const ssmi_mimo_kernels * k, const ssm_tensor * t, int64_t s, int64_t h, int64_t R, int64_t N,
                     float * dst) {
    for (int64_t r = 0; r < R; ++r)
        k->base->load_row(dst + r * N, t->data, t->dtype, ssmi_off4(t, s, r, h, 0), t->strides[3], N);
}
static void store_rhn(const ssmi_mimo_kernels * k, const ssm_tensor * t, int64_t s, int64_t h, int64_t R, int64_t N,
                      const float * src) {
    if (!ssmi_present(t)) return;
    for (int64_t r = 0; r < R; ++r)
        k->base->store_row(t->data, t->dtype, ssmi_off4(t, s, r, h, 0), t->strides[3], src + r * N, N);
}

/* An empty sequence: every final state is its initial state (zeros without). */
static void copy_states(const fw_job * job, fw_scratch * sc, int64_t s, int64_t h) {
    const ssmi_mimo_kernels *    k = job->k;
    const ssm_mamba3_mimo_args * a = job->a;
    const int64_t R = job->d->rank, N = job->d->dstate, P = job->d->headdim, A = job->d->nangles;
    const int     has = job->d->has_states;
    if (has) ssmi_mimo_load_state_np(k, &a->ssm_state, s, h, N, P, sc->s);
    else memset(sc->s, 0, (size_t) (N * P) * sizeof(float));
    if (ssmi_present(&a->final_ssm_state)) ssmi_mimo_store_state_np(k, &a->final_ssm_state, s, h, N, P, sc->s);
    if (has) load_rhn(k, &a->k_state, s, h, R, N, sc->klast);
    else memset(sc->klast, 0, (size_t) (R * N) * sizeof(float));
    store_rhn(k, &a->final_k_state, s, h, R, N, sc->klast);
    ssmi_cpu_m3_load_row3(k, has ? &a->v_state : NULL, s, h, P, sc->vlast);
    ssmi_cpu_m3_store_row3(k, &a->final_v_state, s, h, P, sc->vlast);
    if (A > 0) {
        ssmi_cpu_m3_load_row3(k, has ? &a->angle_state : NULL, s, h, A, sc->theta);
        ssmi_cpu_m3_store_row3(k, &a->final_angle_state, s, h, A, sc->theta);
    }
}

/* Ŝ_0 and θ at the sequence start (spec §2.3). */
static void start_head(const fw_job * job, fw_scratch * sc, int64_t s, int64_t row, int64_t t0, int64_t h) {
    const ssmi_mimo_kernels *    k = job->k;
    const ssm_mamba3_mimo_args * a = job->a;
    const int64_t R = job->d->rank, N = job->d->dstate, P = job->d->headdim, A = job->d->nangles;
    if (job->d->has_states) {
        ssmi_mimo_load_state_np(k, &a->ssm_state, s, h, N, P, sc->s);
        load_rhn(k, &a->k_state, s, h, R, N, sc->klast);
        ssmi_cpu_m3_load_row3(k, &a->v_state, s, h, P, sc->v);
        const float dt0 = ssmi_get_f32(&a->dt, ssmi_off3(&a->dt, row, h, t0));
        const float lam = ssmi_cpu_m3_sigmoid(ssmi_get_f32(&a->trap, ssmi_off3(&a->trap, row, h, t0)));
        const float c0  = dt0 * (1.0f - lam);
        /* u_{−1}[r] = v_state ⊙ mimo_v[r] into the tile's u rows (scratch until chunk 0) */
        ssmi_mimo_make_u(R, P, sc->v, sc->hd.mv, sc->tl.u, P);
        for (int64_t r = 0; r < R; ++r) ssmi_cpu_m3_fold_initial(N, P, c0, sc->klast + r * N, sc->tl.u + r * P, sc->s);
        if (A > 0) ssmi_cpu_m3_load_row3(k, &a->angle_state, s, h, A, sc->theta);
    } else {
        memset(sc->s, 0, (size_t) (N * P) * sizeof(float));
        if (A > 0) memset(sc->theta, 0, (size_t) A * sizeof(float));
    }
}

/* Chunk [tc, tc+n) of (row, h) of a sequence ending at t_end; its entering Ŝ goes to row cs_row
 * of chunk_states (when given). */
static void fw_chunk(const fw_job * job, fw_scratch * sc, int64_t row, int64_t h, int64_t tc, int64_t n,
                     int64_t t_end, int64_t cs_row) {
    const ssm_mamba3_mimo_args * a  = job->a;
    const ssmi_mimo_kernels *    k  = job->k;
    const ssmi_cpu_kernels *     kb = k->base;
    const ssmi_mimo_dims *       d  = job->d;
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, C = d->chunk, A = d->nangles;
    const int64_t g = h / (d->nheads / d->ngroups);
    ssmi_mimo_tile * tl   = &sc->tl;
    const int        last = tc + n == t_end;

    if (job->cs_row0 != NULL)
        for (int64_t x = 0; x < N; ++x)
            kb->store_row(a->chunk_states.data, a->chunk_states.dtype, ssmi_off4(&a->chunk_states, cs_row, h, x, 0),
                          a->chunk_states.strides[3], sc->s + x * P, P);
    ssmi_mimo_token_scalars(k, &a->dt, &a->trap, row, h, tc, n, t_end, sc->tmp, sc->dtv, sc->lam, tl->gamma, sc->cf);
    kb->load_row(sc->cm, a->adt.data, a->adt.dtype, ssmi_off3(&a->adt, row, h, tc), a->adt.strides[2], n);
    for (int64_t i = 1; i < n; ++i) sc->cm[i] += sc->cm[i - 1];
    const float cl = sc->cm[n - 1];
    for (int64_t i = 0; i < n; ++i) tl->wrev[i] = cl - sc->cm[i];
    kb->vexp(n, tl->wrev, tl->wrev);
    for (int64_t i = 1; i < n; ++i) {
        float * e = tl->e + i * C;
        for (int64_t j = 0; j < i; ++j) e[j] = sc->cm[i] - sc->cm[j];
        kb->vexp(i, e, e);
    }
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = tc + i;
        for (int64_t r = 0; r < R; ++r) {
            kb->load_row(sc->qr + r * N, a->q.data, a->q.dtype, ssmi_off5(&a->q, row, t, r, g, 0), a->q.strides[4], N);
            kb->load_row(sc->kr + r * N, a->k.data, a->k.dtype, ssmi_off5(&a->k, row, t, r, g, 0), a->k.strides[4], N);
        }
        if (A > 0) {
            kb->load_row(sc->raw, a->angles.data, a->angles.dtype, ssmi_off4(&a->angles, row, t, h, 0),
                         a->angles.strides[3], A);
            k->angle_rate(A, sc->raw, sc->raw);
            k->angle_advance(A, sc->theta, sc->raw, sc->dtv[i]);
            ssmi_mimo_sincos(k, A, sc->theta, sc->cosv, sc->sinv, sc->pairs);
        }
        const int is_last = last && i == n - 1;
        ssmi_mimo_prep_token(R, N, A, sc->qr, sc->kr, &sc->hd, sc->cosv, sc->sinv, sc->cf[i], tl->qt + i * R * N,
                             tl->kh + i * R * N, is_last ? sc->klast : NULL, N, tl->qkd + i * R * R);
        kb->load_row(sc->v, a->v.data, a->v.dtype, ssmi_off4(&a->v, row, t, h, 0), a->v.strides[3], P);
        ssmi_mimo_make_u(R, P, sc->v, sc->hd.mv, tl->u + i * R * P, P);
        if (is_last) memcpy(sc->vlast, sc->v, (size_t) P * sizeof(float));
    }
    kb->vexp(n, sc->cm, sc->cm); /* e^{da_cs} */
    for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < R; ++r) tl->ecs[i * R + r] = sc->cm[i];
    ssmi_mimo_chunk_y(k, tl, n, sc->s, sc->hd.d);

    const int   has_z = ssmi_present(&a->z), fused = job->p->fuse_pregate_norm != 0;
    const float eps   = (float) job->p->norm_eps;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = tc + i;
        if (ssmi_present(&a->pregate_y))
            for (int64_t r = 0; r < R; ++r)
                kb->store_row(a->pregate_y.data, a->pregate_y.dtype, ssmi_off5(&a->pregate_y, row, t, h, r, 0),
                              a->pregate_y.strides[4], tl->y + (i * R + r) * P, P);
        if (has_z) kb->load_row(sc->z, a->z.data, a->z.dtype, ssmi_off4(&a->z, row, t, h, 0), a->z.strides[3], P);
        ssmi_mimo_output_token(k, R, P, tl->y + i * R * P, has_z ? sc->z : NULL, &sc->hd, d->reduce_o, fused, eps,
                               sc->work, sc->out);
        if (d->reduce_o)
            kb->store_row(a->out.data, a->out.dtype, ssmi_off4(&a->out, row, t, h, 0), a->out.strides[3], sc->out, P);
        else
            for (int64_t r = 0; r < R; ++r)
                kb->store_row(a->out.data, a->out.dtype, ssmi_off5(&a->out, row, t, r, h, 0), a->out.strides[4],
                              sc->out + r * P, P);
    }
    if (last && !ssmi_present(&a->final_ssm_state)) return; /* the last update only feeds the final state */
    float ecl = cl;
    kb->vexp(1, &ecl, &ecl);
    ssmi_mimo_state_update(k, tl, n, ecl, sc->s);
}

static void fw_task(void * arg, int64_t task, int32_t thread) {
    const fw_job *               job = (const fw_job *) arg;
    const ssmi_mimo_dims *       d   = job->d;
    const ssmi_mimo_kernels *    k   = job->k;
    const ssm_mamba3_mimo_args * a   = job->a;
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, C = d->chunk, A = d->nangles;
    const int64_t s = task / d->nheads, h = task % d->nheads;
    fw_scratch    sc;
    fw_carve(&sc, job->scratch + (int64_t) thread * job->thread_floats, d);
    int64_t row, t0, len;
    ssmi_cpu_sequence(&a->cu_seqlens, d->seqlen, s, &row, &t0, &len);
    if (len == 0) {
        copy_states(job, &sc, s, h);
        return;
    }
    ssmi_mimo_head_load(k, &sc.hd, h, R, N, P, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o,
                        &a->outproj_norm_weight, &a->d);
    start_head(job, &sc, s, row, t0, h);
    for (int64_t c0 = 0; c0 < len; c0 += C) {
        const int64_t n = len - c0 < C ? len - c0 : C;
        fw_chunk(job, &sc, row, h, t0 + c0, n, t0 + len, job->cs_row0 != NULL ? job->cs_row0[s] + c0 / C : 0);
    }
    if (ssmi_present(&a->final_ssm_state)) ssmi_mimo_store_state_np(k, &a->final_ssm_state, s, h, N, P, sc.s);
    store_rhn(k, &a->final_k_state, s, h, R, N, sc.klast);
    ssmi_cpu_m3_store_row3(k, &a->final_v_state, s, h, P, sc.vlast);
    if (A > 0) ssmi_cpu_m3_store_row3(k, &a->final_angle_state, s, h, A, sc.theta);
}

ssm_status ssmi_cpu_mamba3_mimo(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                               const ssm_mamba3_mimo_args * a) {
    if (d->nseq == 0 || d->nheads == 0) return SSM_STATUS_OK;
    fw_job job;
    job.d             = d;
    job.k             = ssmi_mimo_kernels_for(ctx);
    job.a             = a;
    job.p             = p;
    job.thread_floats = fw_carve(NULL, NULL, d);
    job.cs_row0       = NULL;
    int64_t * row0    = NULL;
    if (ssmi_present(&a->chunk_states)) {
        row0 = ssmi_cpu_chunk_rows(ctx, "mamba3_mimo", &a->cu_seqlens, d->seqlen, d->nseq, d->chunk);
        if (row0 == NULL) return SSM_STATUS_OUT_OF_MEMORY;
        job.cs_row0 = row0;
    }
    job.scratch = ssmi_cpu_thread_scratch(ctx, "mamba3_mimo", job.thread_floats);
    if (job.scratch == NULL) {
        ssmi_free(ctx, row0);
        return SSM_STATUS_OUT_OF_MEMORY;
    }
    ssmi_parallel_for(ctx, d->nseq * d->nheads, fw_task, &job);
    ssmi_free(ctx, job.scratch);
    ssmi_free(ctx, row0);
    return SSM_STATUS_OK;
}
