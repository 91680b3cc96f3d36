/*
 * Mamba-3 MIMO decode step on the CPU (spec §3.9, ssmops convention): one token per batch
 * row, the prefill conventions (pre-sigmoid trap, adt, raw angles), all math fp32.
 *
 * Tasks: one per (row b, block of heads). Per head h (g = h/(H/G)):
 *   θ_new = angle_state + π·tanh(raw)·dt (NOT wrapped, as upstream's decode);
 *   q̃_r = Rot(θ_new)(q_r + q_bias[h,r]), k̃_r likewise (split halves);
 *   α = e^{adt}, λ = σ(trap), γ = dt·λ, β = (1−λ)·dt·α;
 *   u_r = v ⊙ mimo_v[r], u'_r = v_state ⊙ mimo_v[r];
 *   h ← α·h + Σ_r (γ·u_r) ⊗ k̃_r + Σ_r (β·u'_r) ⊗ k_state_r     (h is P×N, one GEMM
 *        with k = 2R: A = the 2R coefficient rows read transposed, B = [k̃; k_state]);
 *   y_r = h·q̃_r + D·u_r  (one GEMM P×R over N with q̃ᵀ packed);
 *   the output stage of the forward (z gate or fused norm, mimo_o sum).
 * Final states: θ_new, k̃, v, h. Row b reads slot state_batch_indices[b] (b without it)
 * and writes slot dst_state_batch_indices[b] (its read slot without it; nothing when
 * negative); a negative read slot is a padding row: out[b] = 0 and no state is read or
 * written. The head's whole input state (h, k_state, v_state, θ) is read into scratch
 * before anything is written, so an in-place update (final views = input views) is safe;
 * write slots are distinct and in place no row reads a slot another writes (checked by
 * ops/), so tasks never share a state.
 */
#include <string.h>

#include "mimo_common.h"
#include "ssmi_cpu_mimo.h"

typedef struct st_scratch {
    ssmi_mimo_head hd;
    float *        h;                    /* [P][N] state                               */
    float *        qr, *kr, *qt, *kt;    /* [R][N]                                     */
    float *        kcat;                 /* [2R][N] k̃ then k_state                     */
    float *        coef;                 /* [2R][P] γ·u then β·u'                      */
    float *        qtT;                  /* [N][R]                                     */
    float *        yt;                   /* [P][R]                                     */
    float *        y, *u;                /* [R][P]                                     */
    float *        theta, *raw, *cosv, *sinv, *pairs;
    float *        v, *vprev, *z;        /* [P]                                        */
    float *        work, *out;           /* [3RP], [RP]                                */
} st_scratch;

static int64_t st_carve(st_scratch * sc, float * base, const ssmi_mimo_dims * d) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles;
    int64_t used = 0; /* floats, counted as offsets: base may be NULL */
#define TAKE(field, cnt)          \
    do {                          \
        if (sc) sc->field = base + used;    \
        used += ssmi_cpu_lines(cnt); \
    } while (0)
    if (sc) ssmi_mimo_head_carve(&sc->hd, base + used, R, N, P);
    used += ssmi_mimo_head_floats(R, N, P);
    TAKE(h, P * N);
    TAKE(qr, R * N);
    TAKE(kr, R * N);
    TAKE(qt, R * N);
    TAKE(kt, R * N);
    TAKE(kcat, 2 * R * N);
    TAKE(coef, 2 * R * P);
    TAKE(qtT, N * R);
    TAKE(yt, P * R);
    TAKE(y, R * P);
    TAKE(u, R * P);
    TAKE(theta, A + 8);
    TAKE(raw, A + 8);
    TAKE(cosv, A + 8);
    TAKE(sinv, A + 8);
    TAKE(pairs, 4 * A + 16);
    TAKE(v, P);
    TAKE(vprev, P);
    TAKE(z, P);
    TAKE(work, 3 * R * P);
    TAKE(out, R * P);
#undef TAKE
    return used;
}

typedef struct st_job {
    const ssmi_mimo_dims *            d;
    const ssmi_mimo_kernels *         k;
    const ssm_mamba3_mimo_step_args * a;
    const ssm_mamba3_mimo_params *    p;
    int64_t                           head_block, blocks;
    float *                           scratch;
    int64_t                           thread_floats;
} st_job;

/* Row b, head h: reads slot `slot`, writes slot ws of the final_* pools (none when ws < 0). */
static void step_head(const st_job * job, st_scratch * sc, int64_t b, int64_t slot, int64_t ws, int64_t h) {
    const ssm_mamba3_mimo_step_args * a  = job->a;
    const ssmi_mimo_kernels *         k  = job->k;
    const ssmi_cpu_kernels *          kb = k->base;
    const ssmi_mimo_dims *            d  = job->d;
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles;
    const int64_t g = h / (d->nheads / d->ngroups);

    ssmi_mimo_head_load(k, &sc->hd, h, R, N, P, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o,
                        &a->outproj_norm_weight, &a->d);
    for (int64_t r = 0; r < R; ++r) {
        kb->load_row(sc->qr + r * N, a->q.data, a->q.dtype, ssmi_off4(&a->q, b, r, g, 0), a->q.strides[3], N);
        kb->load_row(sc->kr + r * N, a->k.data, a->k.dtype, ssmi_off4(&a->k, b, r, g, 0), a->k.strides[3], N);
    }
    ssmi_cpu_m3_load_row3(k, &a->v, b, h, P, sc->v);
    const float adt = ssmi_get_f32(&a->adt, ssmi_off2(&a->adt, b, h));
    const float dt  = ssmi_get_f32(&a->dt, ssmi_off2(&a->dt, b, h));
    const float lam = ssmi_cpu_m3_sigmoid(ssmi_get_f32(&a->trap, ssmi_off2(&a->trap, b, h)));
    float       alpha = adt;
    kb->vexp(1, &alpha, &alpha);
    const float gamma = dt * lam, beta = (1.0f - lam) * dt * alpha;

    /* the old state of the slot, all of it before any write */
    for (int64_t r = 0; r < R; ++r)
        kb->load_row(sc->kcat + (R + r) * N, a->k_state.data, a->k_state.dtype, ssmi_off4(&a->k_state, slot, r, h, 0),
                     a->k_state.strides[3], N);
    ssmi_cpu_m3_load_row3(k, &a->v_state, slot, h, P, sc->vprev);
    const ssm_tensor * st = &a->ssm_state;
    for (int64_t p = 0; p < P; ++p)
        kb->load_row(sc->h + p * N, st->data, st->dtype, ssmi_off4(st, slot, h, p, 0), st->strides[3], N);
    if (A > 0) {
        ssmi_cpu_m3_load_row3(k, &a->angle_state, slot, h, A, sc->theta);
        ssmi_cpu_m3_load_row3(k, &a->angles, b, h, A, sc->raw);
        k->angle_rate(A, sc->raw, sc->raw);
        for (int64_t i = 0; i < A; ++i) sc->theta[i] += sc->raw[i] * dt;
        ssmi_mimo_sincos(k, A, sc->theta, sc->cosv, sc->sinv, sc->pairs);
    }
    ssmi_mimo_prep_token(R, N, A, sc->qr, sc->kr, &sc->hd, sc->cosv, sc->sinv, 1.0f, sc->qt, sc->kt, NULL, N, NULL);
    memcpy(sc->kcat, sc->kt, (size_t) (R * N) * sizeof(float));
    ssmi_mimo_make_u(R, P, sc->v, sc->hd.mv, sc->u, P);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) {
            sc->coef[r * P + p]       = gamma * sc->u[r * P + p];
            sc->coef[(R + r) * P + p] = beta * (sc->vprev[p] * sc->hd.mv[r * P + p]);
        }
    /* h = α·h + coefᵀ·kcat (A[p][j] = coef[j][p]) */
    kb->gemm(P, N, 2 * R, sc->coef, 1, P, sc->kcat, N, sc->h, N, NULL, alpha, 0);
    /* yᵀ = h·q̃ᵀ */
    for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < N; ++n) sc->qtT[n * R + r] = sc->qt[r * N + n];
    kb->gemm(P, R, N, sc->h, N, 1, sc->qtT, R, sc->yt, R, NULL, 0.0f, 0);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) sc->y[r * P + p] = sc->yt[p * R + r] + sc->hd.d * sc->u[r * P + p];

    const int has_z = ssmi_present(&a->z);
    if (has_z) ssmi_cpu_m3_load_row3(k, &a->z, b, h, P, sc->z);
    ssmi_mimo_output_token(k, R, P, sc->y, has_z ? sc->z : NULL, &sc->hd, d->reduce_o, job->p->fuse_pregate_norm != 0,
                           (float) job->p->norm_eps, sc->work, sc->out);
    if (d->reduce_o)
        ssmi_cpu_m3_store_row3(k, &a->out, b, h, P, sc->out);
    else
        for (int64_t r = 0; r < R; ++r)
            kb->store_row(a->out.data, a->out.dtype, ssmi_off4(&a->out, b, r, h, 0), a->out.strides[3],
                          sc->out + r * P, P);

    /* final states, to the write slot */
    if (ws < 0) return;
    const ssm_tensor * fs = &a->final_ssm_state;
    if (ssmi_present(fs))
        for (int64_t p = 0; p < P; ++p)
            kb->store_row(fs->data, fs->dtype, ssmi_off4(fs, ws, h, p, 0), fs->strides[3], sc->h + p * N, N);
    if (ssmi_present(&a->final_k_state))
        for (int64_t r = 0; r < R; ++r)
            kb->store_row(a->final_k_state.data, a->final_k_state.dtype, ssmi_off4(&a->final_k_state, ws, r, h, 0),
                          a->final_k_state.strides[3], sc->kt + r * N, N);
    ssmi_cpu_m3_store_row3(k, &a->final_v_state, ws, h, P, sc->v);
    if (A > 0) ssmi_cpu_m3_store_row3(k, &a->final_angle_state, ws, h, A, sc->theta);
}

static void st_task(void * arg, int64_t task, int32_t thread) {
    const st_job *                    job = (const st_job *) arg;
    const ssm_mamba3_mimo_step_args * a   = job->a;
    const ssmi_mimo_dims *            d   = job->d;
    const int64_t                     H = d->nheads, R = d->rank, P = d->headdim;
    const int64_t                     b  = task / job->blocks;
    const int64_t                     h0 = (task % job->blocks) * job->head_block;
    const int64_t                     h1 = h0 + job->head_block < H ? h0 + job->head_block : H;
    st_scratch                        sc;
    st_carve(&sc, job->scratch + (int64_t) thread * job->thread_floats, d);
    const ssm_tensor * idx  = &a->state_batch_indices, *dst = &a->dst_state_batch_indices;
    const int64_t      slot = ssmi_present(idx) ? ssmi_get_i64(idx, ssmi_off1(idx, b)) : b;
    const int64_t      ws   = ssmi_present(dst) ? ssmi_get_i64(dst, ssmi_off1(dst, b)) : slot;
    if (slot < 0) { /* padding row */
        memset(sc.out, 0, (size_t) (R * P) * sizeof(float));
        for (int64_t h = h0; h < h1; ++h) {
            if (d->reduce_o) ssmi_cpu_m3_store_row3(job->k, &a->out, b, h, P, sc.out);
            else
                for (int64_t r = 0; r < R; ++r)
                    job->k->base->store_row(a->out.data, a->out.dtype, ssmi_off4(&a->out, b, r, h, 0),
                                            a->out.strides[3], sc.out, P);
        }
        return;
    }
    for (int64_t h = h0; h < h1; ++h) step_head(job, &sc, b, slot, ws, h);
}

ssm_status ssmi_cpu_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                    const ssm_mamba3_mimo_step_args * a) {
    if (d->batch == 0 || d->nheads == 0) return SSM_STATUS_OK;
    const int64_t threads = ssmi_num_threads(ctx);
    int64_t       hb      = d->nheads;
    /* a few tasks per thread when the batch alone does not give them */
    while (hb > 1 && d->batch * ((d->nheads + hb - 1) / hb) < 4 * threads) hb = (hb + 1) / 2;
    st_job job;
    job.d             = d;
    job.k             = ssmi_mimo_kernels_for(ctx);
    job.a             = a;
    job.p             = p;
    job.head_block    = hb;
    job.blocks        = (d->nheads + hb - 1) / hb;
    job.thread_floats = st_carve(NULL, NULL, d);
    job.scratch       = ssmi_cpu_thread_scratch(ctx, "mamba3_mimo_step", job.thread_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, d->batch * job.blocks, st_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
