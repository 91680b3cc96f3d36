/*
 * Mamba-3 MIMO backward phase 1 on the CPU (spec §3.4): ssmi_cpu_mamba3_mimo_bwd_fwd.
 *
 * Re-runs the chunked forward of spec §2.4 from the given cumulative angles and the given
 * da_cs, da_cs_rev and segsum (independent inputs: read at valid positions only, never
 * recomputed or clamped), and returns states (Ŝ entering each chunk), qk_dot, and the
 * gradients that need only per-token forward values: dmimo_o, dz, dmimo_z (per batch row).
 *
 * Tasks: one per (batch row b, value head h), sequential over the chunks; Ŝ (N×P fp32, P
 * contiguous) lives in per-thread scratch. Per chunk of n ≤ C valid tokens (a tail chunk
 * just has fewer rows: padded rows would read zeros and are never needed, spec §0):
 *   scalars γ, c (σ̄ reads the next token, also across the chunk end; 0 at t = S−1);
 *   per token: q̄ = q + q_bias, k̄ = k + k_bias, qk_dot = q̄·k̄ᵀ (R×R), q̃ = Rot(θ) q̄,
 *     k̂ = c·Rot(θ) k̄, u = v ⊙ mimo_v (fused rows x = i·R + r);
 *   states[c] = Ŝ;  Y (L×P) by ssmi_mimo_chunk_y (inter GEMM, strict-in-time intra
 *     scores, γ-weighted diagonal block and D on the block diagonal, one GEMM with U);
 *   gradients per token and rank (y = Y row, zz = z ⊙ mimo_z[r], gate = silu(zz)):
 *     reduced:     dmimo_o[r] += gate ⊙ y ⊙ dout[t];  dg = dout[t] ⊙ mimo_o[r] ⊙ y
 *     non-reduced: dg = dout[t, r] ⊙ y
 *     with z:      dzz = dg ⊙ σ(zz)(1 + zz·σ(−zz));  dz[t] = Σ_r dzz ⊙ mimo_z[r];
 *                  dmimo_z[r] += dzz ⊙ z[t]
 *   Ŝ ← e^{da_cs[last]}·Ŝ + (diag(e^{da_cs_rev})K̂)ᵀ·U (skipped after the last chunk).
 *
 * Two rounding models, chosen by the context's ref_mode (this is the only CPU operator
 * that reads it; the others always run the fp32 model):
 *   SSM_REF_EXACT (default): everything fp32, no rounding of intermediates — within the
 *     DESIGN §5 bars of the float64 reference.
 *   SSM_REF_UPSTREAM_BF16: the arithmetic of upstream's GPU kernel (spec §5.1): ρ (round
 *     to the activation dtype = v's dtype and back; a no-op for f32 inputs) exactly where
 *     §5.1 puts it, fp32 accumulation everywhere else — within rel_rms 1e-3 of the
 *     reference's UPSTREAM_BF16 mode and of the seed's bf16 reference outputs, but
 *     3e-3..9e-3 from float64 with bf16 inputs (the price of the roundings). Rounded: DT; the
 *     head parameters q_bias, k_bias, mimo_v, mimo_o (mimo_z and D stay fp32); σ̄ and
 *     c = γ + σ̄ (γ itself stays fp32); q̄, k̄; qk_dot = ρ(q̄·k̄); the rotated pairs; k̂ =
 *     ρ(k̃·c); u = ρ(v·ρ(mimo_v)); ρ(Ŝ) as the inter operand and the states output; the
 *     masked scores ρ((q̃·k̂)·e^{segsum}); the diagonal as a sequential per-rank sum
 *     acc = ρ(acc + ρ(qkdot·u)), then ρ(acc·γ), with D·u added in fp32 (so the diagonal
 *     block is not part of the score GEMM in this mode); y_b = ρ(y) for the gradients;
 *     dg = ρ(ρ(dout·ρ(mimo_o))·y_b) (reduced) or ρ(dout·y_b); dz as a sequential per-rank
 *     sum acc = ρ(acc + dzz·mimo_z); the state-update keys ks = ρ(k̂·e^{da_cs_rev}).
 *     The GEMMs are the same fp32 kernels on rounded operands, so only summation order
 *     (and libm-vs-kernel exp/sin/cos) separates this mode from the reference's.
 * Sums over t run in token order inside one task, so the outputs are bitwise identical
 * for any thread count, in both modes.
 */
#include <string.h>

#include "mimo_common.h"
#include "ssmi_cpu_mimo.h"

typedef struct bf_scratch {
    ssmi_mimo_head hd;
    ssmi_mimo_tile tl;
    float *        s;                  /* [N][P] Ŝ                                    */
    float *        qr, *kr;            /* [R][N] raw rows of one token                */
    float *        theta, *cosv, *sinv, *pairs;
    float *        dtv, *lam, *cf, *tmp;
    float *        dout;               /* [C][R][P] (reduced: [C][P])                 */
    float *        z, *v;              /* [C][P], [P]                                 */
    float *        zz, *ex;            /* [C][R][P]                                   */
    float *        dmo, *dmz;          /* [R][P] per-task sums                        */
    float *        dzrow, *row;        /* [P], [max(C, R)]                            */
    /* upstream-bf16 mode only (NULL otherwise) */
    float *        sb;                 /* [N][P] ρ(Ŝ)                                 */
    float *        ks;                 /* [C·R][N] ρ(k̂·e^{da_cs_rev})                 */
    float *        acc, *prod, *yb;    /* [P] each: row temporaries                   */
} bf_scratch;

/* Points the scratch fields into base (sc == NULL: only counts); returns the floats used.
 * `faithful` adds the buffers of the upstream-bf16 mode. */
static int64_t bf_carve(bf_scratch * sc, float * base, const ssmi_mimo_dims * d, int faithful) {
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
    TAKE(theta, A + 8);
    TAKE(cosv, A + 8);
    TAKE(sinv, A + 8);
    TAKE(pairs, 4 * A + 16);
    TAKE(dtv, C + 1);
    TAKE(lam, C + 1);
    TAKE(cf, C + 1);
    TAKE(tmp, 2 * C + 2);
    TAKE(dout, C * R * P);
    TAKE(z, C * P);
    TAKE(v, P);
    TAKE(zz, C * R * P);
    TAKE(ex, C * R * P);
    TAKE(dmo, R * P);
    TAKE(dmz, R * P);
    TAKE(dzrow, P);
    TAKE(row, (C > R ? C : R) + 8);
    if (sc) sc->sb = sc->ks = sc->acc = sc->prod = sc->yb = NULL;
    if (faithful) {
        TAKE(sb, N * P);
        TAKE(ks, C * R * N);
        TAKE(acc, P);
        TAKE(prod, P);
        TAKE(yb, P);
    }
#undef TAKE
    return used;
}

typedef struct bf_job {
    const ssmi_mimo_dims *               d;
    const ssmi_mimo_kernels *            k;
    const ssm_mamba3_mimo_bwd_fwd_args * a;
    float *                              scratch;
    int64_t                              thread_floats;
    int                                  faithful; /* ref_mode UPSTREAM_BF16: the §5.1 roundings */
    int32_t                              act;      /* the dtype ρ rounds to (v's dtype)          */
} bf_job;

/* ---- upstream-bf16 mode: rounded row operations ----------------------------------------- *
 * Each fuses an fp32 operation with its ρ; the bf16 case is a separate branch-free loop
 * (it vectorises), other act dtypes go through the generic ρ. */

/* dst = ρ(a + b) */
static void rho_add_row(int32_t act, float * dst, const float * a, const float * b, int64_t n) {
    if (act == SSM_DTYPE_BF16)
        for (int64_t i = 0; i < n; ++i) dst[i] = ssmi_mimo_round_bf16(a[i] + b[i]);
    else
        for (int64_t i = 0; i < n; ++i) dst[i] = ssmi_mimo_rho(act, a[i] + b[i]);
}

/* dst = ρ(a ⊙ b) */
static void rho_mul_row(int32_t act, float * dst, const float * a, const float * b, int64_t n) {
    if (act == SSM_DTYPE_BF16)
        for (int64_t i = 0; i < n; ++i) dst[i] = ssmi_mimo_round_bf16(a[i] * b[i]);
    else
        for (int64_t i = 0; i < n; ++i) dst[i] = ssmi_mimo_rho(act, a[i] * b[i]);
}

/* dst = ρ(s·a) */
static void rho_scale_row(int32_t act, float * dst, const float * a, float s, int64_t n) {
    if (act == SSM_DTYPE_BF16)
        for (int64_t i = 0; i < n; ++i) dst[i] = ssmi_mimo_round_bf16(a[i] * s);
    else
        for (int64_t i = 0; i < n; ++i) dst[i] = ssmi_mimo_rho(act, a[i] * s);
}

/* acc = ρ(acc + ρ(s·u)): one step of the diagonal's sequential per-rank sum */
static void rho_acc_scaled(int32_t act, float * acc, float s, const float * u, int64_t n) {
    if (act == SSM_DTYPE_BF16)
        for (int64_t i = 0; i < n; ++i) acc[i] = ssmi_mimo_round_bf16(acc[i] + ssmi_mimo_round_bf16(s * u[i]));
    else
        for (int64_t i = 0; i < n; ++i) acc[i] = ssmi_mimo_rho(act, acc[i] + ssmi_mimo_rho(act, s * u[i]));
}

/* acc = ρ(acc + a ⊙ b): one step of dz's sequential per-rank sum */
static void rho_acc_mul(int32_t act, float * acc, const float * a, const float * b, int64_t n) {
    if (act == SSM_DTYPE_BF16)
        for (int64_t i = 0; i < n; ++i) acc[i] = ssmi_mimo_round_bf16(acc[i] + a[i] * b[i]);
    else
        for (int64_t i = 0; i < n; ++i) acc[i] = ssmi_mimo_rho(act, acc[i] + a[i] * b[i]);
}

/* ---- upstream-bf16 mode: the per-token roundings (spec §5.1 items 2-9) ------------------ */

/* γ (fp32, from ρ(dt)), c = ρ(γ + σ̄) with σ̄ = ρ(ρ(dt_{t+1})·σ(−trap_{t+1})) (0 at t = S−1)
 * for tokens [tc, tc+n). dtv, trp: n+1 floats of scratch each. */
static void token_scalars_act(const bf_job * job, float * dtv, float * trp, int64_t b, int64_t h, int64_t tc,
                              int64_t n, float * gamma, float * cf) {
    const ssm_mamba3_mimo_bwd_fwd_args * a  = job->a;
    const ssmi_cpu_kernels *             kb = job->k->base;
    const int32_t                        act = job->act;
    const int64_t nload = tc + n < job->d->seqlen ? n + 1 : n; /* the next token, if any */
    kb->load_row(dtv, a->dt.data, a->dt.dtype, ssmi_off3(&a->dt, b, h, tc), a->dt.strides[2], nload);
    kb->load_row(trp, a->trap.data, a->trap.dtype, ssmi_off3(&a->trap, b, h, tc), a->trap.strides[2], nload);
    if (nload == n) dtv[n] = 0.0f, trp[n] = 0.0f; /* σ̄ = ρ(0·σ(0)) = 0 at the sequence end */
    for (int64_t i = 0; i < n; ++i) {
        gamma[i]         = ssmi_mimo_rho(act, dtv[i]) * ssmi_cpu_m3_sigmoid(trp[i]);
        const float sbar = ssmi_mimo_rho(act, ssmi_mimo_rho(act, dtv[i + 1]) * ssmi_cpu_m3_sigmoid(-trp[i + 1]));
        cf[i]            = ssmi_mimo_rho(act, gamma[i] + sbar);
    }
}

/* ssmi_mimo_prep_token with the roundings: q̄ = ρ(q + ρ(q_bias)), k̄ likewise (the head's
 * biases are already rounded), qkd = ρ(q̄·k̄), the rotated pairs ρ(rotated) (columns
 * [0, A) and [N/2, N/2 + A); the others keep their ρ values), k̂ = ρ(k̃·c). */
static void prep_token_act(int32_t act, int64_t R, int64_t N, int64_t A, const float * qr, const float * kr,
                           const ssmi_mimo_head * hd, const float * cosv, const float * sinv, float c, float * qt,
                           float * kh, float * qkd) {
    for (int64_t r = 0; r < R; ++r) {
        rho_add_row(act, qt + r * N, qr + r * N, hd->qb + r * N, N);
        rho_add_row(act, kh + r * N, kr + r * N, hd->kb + r * N, N);
    }
    for (int64_t r = 0; r < R; ++r)
        for (int64_t r2 = 0; r2 < R; ++r2) qkd[r * R + r2] = ssmi_mimo_rho(act, ssmi_mimo_dot(N, qt + r * N, kh + r2 * N));
    for (int64_t r = 0; r < R; ++r) {
        float * q = qt + r * N, *kk = kh + r * N;
        ssmi_mimo_rotate(N, A, cosv, sinv, q);
        ssmi_mimo_rotate(N, A, cosv, sinv, kk);
        ssmi_mimo_round_act(act, q, A);
        ssmi_mimo_round_act(act, q + N / 2, A);
        ssmi_mimo_round_act(act, kk, A);
        ssmi_mimo_round_act(act, kk + N / 2, A);
        rho_scale_row(act, kk, kk, c, N);
    }
}

/* Per-token inputs of chunk [tc, tc+n): tile rows, qk_dot output, e^{da_cs}, e^{da_cs_rev},
 * e^{segsum} (lower part), dout and z rows. */
static void load_chunk(const bf_job * job, bf_scratch * sc, int64_t b, int64_t h, int64_t c, int64_t tc, int64_t n) {
    const ssm_mamba3_mimo_bwd_fwd_args * a  = job->a;
    const ssmi_mimo_kernels *            k  = job->k;
    const ssmi_cpu_kernels *             kb = k->base;
    const ssmi_mimo_dims *               d  = job->d;
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, C = d->chunk, A = d->nangles;
    const int64_t g = h / (d->nheads / d->ngroups);
    ssmi_mimo_tile * tl = &sc->tl;

    if (job->faithful)
        token_scalars_act(job, sc->dtv, sc->lam, b, h, tc, n, tl->gamma, sc->cf);
    else
        ssmi_mimo_token_scalars(k, &a->dt, &a->trap, b, h, tc, n, d->seqlen, sc->tmp, sc->dtv, sc->lam, tl->gamma,
                                sc->cf);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = tc + i;
        for (int64_t r = 0; r < R; ++r) {
            kb->load_row(sc->qr + r * N, a->q.data, a->q.dtype, ssmi_off5(&a->q, b, t, r, g, 0), a->q.strides[4], N);
            kb->load_row(sc->kr + r * N, a->k.data, a->k.dtype, ssmi_off5(&a->k, b, t, r, g, 0), a->k.strides[4], N);
        }
        if (A > 0) {
            kb->load_row(sc->theta, a->angles.data, a->angles.dtype, ssmi_off4(&a->angles, b, t, h, 0),
                         a->angles.strides[3], A);
            ssmi_mimo_sincos(k, A, sc->theta, sc->cosv, sc->sinv, sc->pairs);
        }
        float * qkd = tl->qkd + i * R * R;
        if (job->faithful)
            prep_token_act(job->act, R, N, A, sc->qr, sc->kr, &sc->hd, sc->cosv, sc->sinv, sc->cf[i],
                           tl->qt + i * R * N, tl->kh + i * R * N, qkd);
        else
            ssmi_mimo_prep_token(R, N, A, sc->qr, sc->kr, &sc->hd, sc->cosv, sc->sinv, sc->cf[i], tl->qt + i * R * N,
                                 tl->kh + i * R * N, NULL, N, qkd);
        if (ssmi_present(&a->qk_dot))
            for (int64_t r = 0; r < R; ++r)
                kb->store_row(a->qk_dot.data, a->qk_dot.dtype, ssmi_off5(&a->qk_dot, b, h, t, r, 0),
                              a->qk_dot.strides[4], qkd + r * R, R);
        kb->load_row(sc->v, a->v.data, a->v.dtype, ssmi_off4(&a->v, b, t, h, 0), a->v.strides[3], P);
        if (job->faithful)
            for (int64_t r = 0; r < R; ++r) rho_mul_row(job->act, tl->u + (i * R + r) * P, sc->v, sc->hd.mv + r * P, P);
        else
            ssmi_mimo_make_u(R, P, sc->v, sc->hd.mv, tl->u + i * R * P, P);
        if (ssmi_present(&a->z))
            kb->load_row(sc->z + i * P, a->z.data, a->z.dtype, ssmi_off4(&a->z, b, t, h, 0), a->z.strides[3], P);
        if (job->d->reduce_o)
            kb->load_row(sc->dout + i * P, a->dout.data, a->dout.dtype, ssmi_off4(&a->dout, b, t, h, 0),
                         a->dout.strides[3], P);
        else
            for (int64_t r = 0; r < R; ++r)
                kb->load_row(sc->dout + (i * R + r) * P, a->dout.data, a->dout.dtype,
                             ssmi_off5(&a->dout, b, t, r, h, 0), a->dout.strides[4], P);
    }
    /* decays: e^{da_cs} per row, e^{da_cs_rev} per token, e^{segsum[i][j]} for j < i */
    kb->load_row(sc->row, a->da_cs.data, a->da_cs.dtype, ssmi_off3(&a->da_cs, b, h, tc), a->da_cs.strides[2], n);
    kb->vexp(n, sc->row, sc->row);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < R; ++r) tl->ecs[i * R + r] = sc->row[i];
    kb->load_row(tl->wrev, a->da_cs_rev.data, a->da_cs_rev.dtype, ssmi_off3(&a->da_cs_rev, b, h, tc),
                 a->da_cs_rev.strides[2], n);
    kb->vexp(n, tl->wrev, tl->wrev);
    for (int64_t i = 1; i < n; ++i) {
        float * e = tl->e + i * C;
        kb->load_row(e, a->segsum.data, a->segsum.dtype, ssmi_off5(&a->segsum, b, h, c, i, 0), a->segsum.strides[4], i);
        kb->vexp(i, e, e);
    }
}

/* zz = z·mimo_z per (token, rank) of the chunk's n tokens and e^{−zz}, for the whole chunk at once
 * (sc->zz, sc->ex). */
static void gate_exps(const bf_job * job, bf_scratch * sc, int64_t n) {
    const int64_t R = job->d->rank, P = job->d->headdim;
    const float * mz = sc->hd.mz;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < R; ++r) {
            const float * z  = sc->z + i * P, *mzr = mz + r * P;
            float *       zz = sc->zz + (i * R + r) * P, *ex = sc->ex + (i * R + r) * P;
            for (int64_t p = 0; p < P; ++p) zz[p] = z[p] * mzr[p], ex[p] = -zz[p];
        }
    job->k->base->vexp(n * R * P, sc->ex, sc->ex);
}

/* dmimo_o, dz, dmimo_z contributions of the chunk's n tokens (tl->y holds Y). */
static void chunk_grads(const bf_job * job, bf_scratch * sc, int64_t b, int64_t h, int64_t tc, int64_t n) {
    const ssm_mamba3_mimo_bwd_fwd_args * a  = job->a;
    const ssmi_cpu_kernels *             kb = job->k->base;
    const int64_t R = job->d->rank, P = job->d->headdim, RP = R * P;
    const int     has_z = ssmi_present(&a->z), reduce = job->d->reduce_o;
    const float * mz = sc->hd.mz, *mo = sc->hd.mo;
    if (!has_z && !reduce) return;
    if (has_z) gate_exps(job, sc, n);
    for (int64_t i = 0; i < n; ++i) {
        const float * z = sc->z + i * P;
        for (int64_t r = 0; r < R; ++r) {
            const int64_t x  = i * R + r;
            const float * y  = sc->tl.y + x * P;
            const float * zz = sc->zz + x * P;
            float *       ex = sc->ex + x * P; /* becomes dzz */
            float *       dmo = sc->dmo + r * P, *dmz = sc->dmz + r * P;
            if (reduce) {
                const float * dout = sc->dout + i * P, *mor = mo + r * P;
                if (has_z) {
                    for (int64_t p = 0; p < P; ++p) {
                        const float sg = 1.0f / (1.0f + ex[p]);
                        const float yd = y[p] * dout[p];
                        dmo[p] += zz[p] * sg * yd;
                        const float dg = yd * mor[p];
                        ex[p]          = dg * sg * (1.0f + zz[p] * (1.0f - sg));
                    }
                } else {
                    for (int64_t p = 0; p < P; ++p) dmo[p] += y[p] * dout[p];
                }
            } else {
                const float * dout = sc->dout + x * P;
                for (int64_t p = 0; p < P; ++p) {
                    const float sg = 1.0f / (1.0f + ex[p]);
                    ex[p]          = dout[p] * y[p] * sg * (1.0f + zz[p] * (1.0f - sg));
                }
            }
            if (has_z)
                for (int64_t p = 0; p < P; ++p) dmz[p] += ex[p] * z[p];
        }
        if (has_z && ssmi_present(&a->dz)) {
            const float * dzz = sc->ex + i * RP;
            for (int64_t p = 0; p < P; ++p) sc->dzrow[p] = dzz[p] * mz[p];
            for (int64_t r = 1; r < R; ++r)
                for (int64_t p = 0; p < P; ++p) sc->dzrow[p] += dzz[r * P + p] * mz[r * P + p];
            kb->store_row(a->dz.data, a->dz.dtype, ssmi_off4(&a->dz, b, tc + i, h, 0), a->dz.strides[3], sc->dzrow, P);
        }
    }
}

/* ---- upstream-bf16 mode: Y, the gate side and the state update (spec §5.1 items 10-18) -- */

/* Token rows per block of the lower-triangular work (as ssmi_mimo_chunk_y). */
static int64_t block_tokens(int64_t R) { return R >= 12 ? 1 : 12 / R; }

/* Y of the chunk's n tokens with the roundings: Y = diag(e^{da_cs})·Q̃·ρ(Ŝ) (sb) + M·U
 * with M = the strict-in-time scores ρ((q̃·k̂)·e^{segsum}) (no diagonal block), then per
 * token and rank the diagonal ρ(Σ_r' in order ρ(qkd·u))·γ rounded, and D·u in fp32. */
static void chunk_y_act(const bf_job * job, bf_scratch * sc, int64_t n) {
    const ssmi_cpu_kernels * b  = job->k->base;
    ssmi_mimo_tile *         tl = &sc->tl;
    const int32_t            act = job->act;
    const int64_t R = tl->R, N = tl->N, P = tl->P, C = tl->C, ld = tl->ld, L = n * R;
    const float   dskip = sc->hd.d;
    b->gemm(L, P, N, tl->qt, N, 1, sc->sb, P, tl->y, P, tl->ecs, 0.0f, 0);
    const int64_t kc = (n - 1) * R; /* keys of tokens that have a later token */
    for (int64_t x = 0; x < kc; ++x)
        for (int64_t j = 0; j < N; ++j) tl->khT[j * ld + x] = tl->kh[x * N + j];
    const int64_t tb = block_tokens(R);
    for (int64_t i0 = 0; i0 < n; i0 += tb) {
        const int64_t i1 = i0 + tb < n ? i0 + tb : n, x0 = i0 * R, rows = (i1 - i0) * R, cols = (i1 - 1) * R;
        if (cols == 0) continue; /* token 0 alone: no earlier token */
        float * m0 = tl->m + x0 * ld;
        b->gemm(rows, cols, N, tl->qt + x0 * N, N, 1, tl->khT, ld, m0, ld, NULL, 0.0f, 0);
        for (int64_t i = i0; i < i1; ++i) {
            const float * e = tl->e + i * C;
            for (int64_t r = 0; r < R; ++r) {
                float * mr = tl->m + (i * R + r) * ld;
                for (int64_t j = 0; j < i; ++j)
                    for (int64_t r2 = 0; r2 < R; ++r2) mr[j * R + r2] *= e[j];
                ssmi_mimo_round_act(act, mr, i * R);
                for (int64_t x = i * R; x < cols; ++x) mr[x] = 0.0f;
            }
        }
        b->gemm(rows, P, cols, m0, ld, 1, tl->u, P, tl->y + x0 * P, P, NULL, 1.0f, 0);
    }
    float * acc = sc->acc;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < R; ++r) {
            const float * qkd = tl->qkd + (i * R + r) * R;
            const float * ur  = tl->u + (i * R + r) * P;
            float *       y   = tl->y + (i * R + r) * P;
            memset(acc, 0, (size_t) P * sizeof(float));
            for (int64_t r2 = 0; r2 < R; ++r2) rho_acc_scaled(act, acc, qkd[r2], tl->u + (i * R + r2) * P, P);
            rho_scale_row(act, acc, acc, tl->gamma[i], P);
            for (int64_t p = 0; p < P; ++p) y[p] = (y[p] + acc[p]) + dskip * ur[p];
        }
}

/* dmimo_o, dz, dmimo_z of the chunk's n tokens with the roundings: y_b = ρ(y); dmimo_o +=
 * gate·y_b·dout; dg = ρ(ρ(dout·ρ(mimo_o))·y_b) (reduced) or ρ(dout[r]·y_b); dzz and
 * dmimo_z fp32 (mimo_z unrounded); dz = the sequential per-rank sum ρ(acc + dzz·mimo_z). */
static void chunk_grads_act(const bf_job * job, bf_scratch * sc, int64_t b, int64_t h, int64_t tc, int64_t n) {
    const ssm_mamba3_mimo_bwd_fwd_args * a  = job->a;
    const ssmi_cpu_kernels *             kb = job->k->base;
    const int32_t                        act = job->act;
    const int64_t R = job->d->rank, P = job->d->headdim, RP = R * P;
    const int     has_z = ssmi_present(&a->z), reduce = job->d->reduce_o;
    const float * mz = sc->hd.mz, *mo = sc->hd.mo;
    float *       yb = sc->yb, *t1 = sc->prod, *acc = sc->acc;
    if (!has_z && !reduce) return;
    if (has_z) gate_exps(job, sc, n);
    for (int64_t i = 0; i < n; ++i) {
        const float * z = sc->z + i * P;
        for (int64_t r = 0; r < R; ++r) {
            const int64_t x  = i * R + r;
            const float * zz = sc->zz + x * P;
            float *       ex = sc->ex + x * P; /* becomes dzz */
            float *       dmo = sc->dmo + r * P, *dmz = sc->dmz + r * P;
            rho_scale_row(act, yb, sc->tl.y + x * P, 1.0f, P);
            const float * dout = reduce ? sc->dout + i * P : sc->dout + x * P;
            if (reduce && !has_z) {
                for (int64_t p = 0; p < P; ++p) dmo[p] += yb[p] * dout[p];
                continue;
            }
            if (reduce) {
                const float * mor = mo + r * P;
                for (int64_t p = 0; p < P; ++p) dmo[p] += zz[p] / (1.0f + ex[p]) * yb[p] * dout[p];
                rho_mul_row(act, t1, dout, mor, P);
                rho_mul_row(act, t1, t1, yb, P); /* dg */
            } else {
                rho_mul_row(act, t1, dout, yb, P); /* dg */
            }
            for (int64_t p = 0; p < P; ++p) {
                const float sg = 1.0f / (1.0f + ex[p]);
                ex[p]          = t1[p] * sg * (1.0f + zz[p] * (1.0f - sg));
            }
            for (int64_t p = 0; p < P; ++p) dmz[p] += ex[p] * z[p];
        }
        if (has_z && ssmi_present(&a->dz)) {
            const float * dzz = sc->ex + i * RP;
            memset(acc, 0, (size_t) P * sizeof(float));
            for (int64_t r = 0; r < R; ++r) rho_acc_mul(act, acc, dzz + r * P, mz + r * P, P);
            kb->store_row(a->dz.data, a->dz.dtype, ssmi_off4(&a->dz, b, tc + i, h, 0), a->dz.strides[3], acc, P);
        }
    }
}

/* Ŝ ← ecl·Ŝ + ksᵀ·U with ks = ρ(k̂·e^{da_cs_rev}) (fp32 accumulation). */
static void state_update_act(const bf_job * job, bf_scratch * sc, int64_t n, float ecl) {
    ssmi_mimo_tile * tl = &sc->tl;
    const int64_t    R = tl->R, N = tl->N, P = tl->P, L = n * R;
    for (int64_t x = 0; x < L; ++x) rho_scale_row(job->act, sc->ks + x * N, tl->kh + x * N, tl->wrev[x / R], N);
    job->k->base->gemm(N, P, L, sc->ks, 1, N, tl->u, P, sc->s, P, NULL, ecl, 0);
}

/* The head's parameters as upstream loads them into act fragments (§5.1 item 1): q_bias,
 * k_bias, mimo_v and mimo_o rounded; mimo_z and D stay fp32. */
static void round_head_act(const bf_job * job, ssmi_mimo_head * hd) {
    const int64_t R = job->d->rank, N = job->d->dstate, P = job->d->headdim;
    ssmi_mimo_round_act(job->act, hd->qb, R * N);
    ssmi_mimo_round_act(job->act, hd->kb, R * N);
    ssmi_mimo_round_act(job->act, hd->mv, R * P);
    if (job->d->reduce_o) ssmi_mimo_round_act(job->act, hd->mo, R * P);
}

static void bf_task(void * arg, int64_t task, int32_t thread) {
    const bf_job *                       job = (const bf_job *) arg;
    const ssmi_mimo_dims *               d   = job->d;
    const ssmi_mimo_kernels *            k   = job->k;
    const ssm_mamba3_mimo_bwd_fwd_args * a   = job->a;
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, C = d->chunk, S = d->seqlen;
    const int64_t b = task / d->nheads, h = task % d->nheads;
    bf_scratch    sc;
    bf_carve(&sc, job->scratch + (int64_t) thread * job->thread_floats, d, job->faithful);
    ssmi_mimo_head_load(k, &sc.hd, h, R, N, P, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o, NULL, &a->d);
    if (job->faithful) round_head_act(job, &sc.hd);
    memset(sc.s, 0, (size_t) (N * P) * sizeof(float));
    memset(sc.dmo, 0, (size_t) (R * P) * sizeof(float));
    memset(sc.dmz, 0, (size_t) (R * P) * sizeof(float));
    const int64_t nc = (S + C - 1) / C;
    for (int64_t c = 0; c < nc; ++c) {
        const int64_t tc = c * C, n = S - tc < C ? S - tc : C;
        load_chunk(job, &sc, b, h, c, tc, n);
        const float * s_out = sc.s; /* the states output: Ŝ, or ρ(Ŝ) in the bf16 mode */
        if (job->faithful) {
            memcpy(sc.sb, sc.s, (size_t) (N * P) * sizeof(float));
            ssmi_mimo_round_act(job->act, sc.sb, N * P);
            s_out = sc.sb;
        }
        if (ssmi_present(&a->states))
            for (int64_t j = 0; j < N; ++j)
                k->base->store_row(a->states.data, a->states.dtype, ssmi_off5(&a->states, b, h, c, j, 0),
                                   a->states.strides[4], s_out + j * P, P);
        if (job->faithful) {
            chunk_y_act(job, &sc, n);
            chunk_grads_act(job, &sc, b, h, tc, n);
        } else {
            ssmi_mimo_chunk_y(k, &sc.tl, n, sc.s, sc.hd.d);
            chunk_grads(job, &sc, b, h, tc, n);
        }
        if (c + 1 < nc) {
            float ecl = ssmi_get_f32(&a->da_cs, ssmi_off3(&a->da_cs, b, h, tc + n - 1));
            k->base->vexp(1, &ecl, &ecl);
            if (job->faithful)
                state_update_act(job, &sc, n, ecl);
            else
                ssmi_mimo_state_update(k, &sc.tl, n, ecl, sc.s);
        }
    }
    for (int64_t r = 0; r < R; ++r) {
        if (ssmi_present(&a->dmimo_o))
            k->base->store_row(a->dmimo_o.data, a->dmimo_o.dtype, ssmi_off4(&a->dmimo_o, b, h, r, 0),
                               a->dmimo_o.strides[3], sc.dmo + r * P, P);
        if (ssmi_present(&a->dmimo_z))
            k->base->store_row(a->dmimo_z.data, a->dmimo_z.dtype, ssmi_off4(&a->dmimo_z, b, h, r, 0),
                               a->dmimo_z.strides[3], sc.dmz + r * P, P);
    }
}

ssm_status ssmi_cpu_mamba3_mimo_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                       const ssm_mamba3_mimo_bwd_fwd_args * a) {
    (void) p;
    if (d->batch == 0 || d->nheads == 0) return SSM_STATUS_OK;
    bf_job job;
    job.d             = d;
    job.k             = ssmi_mimo_kernels_for(ctx);
    job.a             = a;
    job.faithful      = ctx != NULL && ctx->ref_mode == SSM_REF_UPSTREAM_BF16;
    job.act           = a->v.dtype;
    job.thread_floats = bf_carve(NULL, NULL, d, job.faithful);
    job.scratch       = ssmi_cpu_thread_scratch(ctx, "mamba3_mimo_bwd_fwd", job.thread_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, d->batch * d->nheads, bf_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
