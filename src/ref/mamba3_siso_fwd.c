/* Reference of mamba3_siso_fwd (spec §3.1, §3.3, §3.6): the chunked form in float64, per
 * sequence (batch row, or cu_seqlens segment with its own chunking) and V-head:
 *   H_in = S_in + DT_0(1−λ_0)·V_in K_inᵀ (0 without initial states); carry 𝐒 = H_in;
 *   per chunk with local inclusive cumsum c of ADT:
 *     y_i = e^{c_i}·𝐒 q̂_i + Σ_{j<i} e^{c_i−c_j}·σ_j·(q̂_i·k̂_j)·v_j + (D + γ_i·d_i)·v_i
 *     out_i = y_i·silu(z_i);   𝐒 ← e^{c_last}·𝐒 + Σ_j e^{c_last−c_j}·σ_j·v_j k̂_jᵀ
 *   final: 𝐒, k̂ and v of the last token. An empty sequence passes its states through.
 * chunk_states: 𝐒 entering every chunk, rows in sequence and chunk order (none for an empty one).
 * No decay exponent is clamped. */
#include "ref_mamba3_common.h"
#include "ssmi_ref_mamba3.h"

/* Float64 scratch for one (sequence, head) of up to L tokens. */
typedef struct fwd_scratch {
    ssmi_ref_m3_scalars sc;
    double *            qt, *kt, *qh, *kh, *v, *dqk; /* q̃, k̃, q̂, k̂ (L×K), v (L×V), d_t (L) */
    double *            carry, *cc, *y, *theta;      /* 𝐒 (V×K), c (C), y (V), θ (A)         */
} fwd_scratch;

static ssm_status fwd_alloc(ssm_context * ctx, const ssmi_mamba3_dims * d, int64_t L, fwd_scratch * w,
                            double ** block) {
    int          ok = 1;
    const size_t l = (size_t)L, K = (size_t)d->dk, V = (size_t)d->dv;
    const size_t lk = ssmi_ref_m3_mul(l, K, &ok), lv = ssmi_ref_m3_mul(l, V, &ok);
    const size_t sizes[16] = {
        l, l, l, l, l, l, lk, lk, lk, lk, lv, l, ssmi_ref_m3_mul(V, K, &ok), (size_t)d->chunk, V, (size_t)d->nangles};
    double ** ptrs[16] = {&w->sc.adt, &w->sc.dt, &w->sc.lam, &w->sc.gam, &w->sc.gsh, &w->sc.sig, &w->qt, &w->kt,
                          &w->qh,     &w->kh,    &w->v,      &w->dqk,    &w->carry,  &w->cc,     &w->y,  &w->theta};
    SSM_RETURN_IF(!ok, ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba3_siso_fwd: reference scratch size overflows size_t");
    return ssmi_ref_m3_scratch(ctx, "mamba3_siso_fwd", 16, sizes, ptrs, block);
}

/* q̂, k̂ and d_t of one (sequence, head), θ read from the cumulative angles tensor. */
static void load_rotated(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_fwd_args * a, const ssmi_ref_m3_seq * s,
                         int64_t h, fwd_scratch * w) {
    const int64_t K = d->dk, A = d->nangles, g = h / (d->nheads / d->nheads_qk);
    ssmi_ref_m3_load_qk(w->qt, w->kt, &a->q, &a->k, &a->q_bias, &a->k_bias, s, h, g, K);
    for (int64_t t = 0; t < s->len; ++t) {
        for (int64_t i = 0; i < A; ++i)
            w->theta[i] = ssmi_get_f64(&a->angles, ssmi_off4(&a->angles, s->b, s->t0 + t, h, i));
        w->dqk[t] = ssmi_ref_m3_dot(w->qt + t * K, w->kt + t * K, K);
        ssmi_ref_m3_rotate(w->qh + t * K, w->qt + t * K, w->theta, K, A, 1.0);
        ssmi_ref_m3_rotate(w->kh + t * K, w->kt + t * K, w->theta, K, A, 1.0);
    }
}

/* 𝐒 ← H_in = S_in + DT_0(1−λ_0)·V_in K_inᵀ, or 0 without initial states. */
static void init_carry(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_fwd_args * a, const ssmi_ref_m3_seq * s,
                       int64_t h, fwd_scratch * w) {
    const int64_t K = d->dk, V = d->dv;
    if (!d->has_states) {
        memset(w->carry, 0, (size_t)(V * K) * sizeof(double));
        return;
    }
    const double c0 = w->sc.dt[0] * (1.0 - w->sc.lam[0]);
    for (int64_t r = 0; r < V; ++r) {
        const double vin = ssmi_get_f64(&a->v_state, ssmi_off3(&a->v_state, s->n, h, r));
        for (int64_t c = 0; c < K; ++c) {
            const double sin_ = ssmi_get_f64(&a->ssm_state, ssmi_off4(&a->ssm_state, s->n, h, r, c));
            const double kin = ssmi_get_f64(&a->k_state, ssmi_off3(&a->k_state, s->n, h, c));
            w->carry[r * K + c] = sin_ + c0 * vin * kin;
        }
    }
}

/* One chunk [c0, c0 + lc) of the sequence: outputs, then the carry update. */
static void run_chunk(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_fwd_args * a, const ssmi_ref_m3_seq * s,
                      int64_t h, int64_t c0, int64_t lc, fwd_scratch * w) {
    const int64_t K = d->dk, V = d->dv;
    const double  dskip = ssmi_present(&a->d) ? ssmi_get_f64(&a->d, ssmi_off1(&a->d, h)) : 0.0;
    double        run = 0.0;
    for (int64_t i = 0; i < lc; ++i) w->cc[i] = run += w->sc.adt[c0 + i];
    for (int64_t i = 0; i < lc; ++i) {
        const int64_t ti = c0 + i;
        const double *qi = w->qh + ti * K, ei = exp(w->cc[i]);
        for (int64_t r = 0; r < V; ++r) w->y[r] = ei * ssmi_ref_m3_dot(w->carry + r * K, qi, K);
        for (int64_t j = 0; j < i; ++j) {
            const int64_t tj = c0 + j;
            const double  wij = ssmi_ref_m3_dot(qi, w->kh + tj * K, K) * w->sc.sig[tj] * exp(w->cc[i] - w->cc[j]);
            for (int64_t r = 0; r < V; ++r) w->y[r] += wij * w->v[tj * V + r];
        }
        const double diag = dskip + w->sc.gam[ti] * w->dqk[ti];
        for (int64_t r = 0; r < V; ++r) {
            double yr = w->y[r] + diag * w->v[ti * V + r];
            if (ssmi_present(&a->pregate_y))
                ssmi_set_f64(&a->pregate_y, ssmi_off4(&a->pregate_y, s->b, s->t0 + ti, h, r), yr);
            if (ssmi_present(&a->z))
                yr *= ssmi_ref_m3_silu(ssmi_get_f64(&a->z, ssmi_off4(&a->z, s->b, s->t0 + ti, h, r)));
            ssmi_set_f64(&a->out, ssmi_off4(&a->out, s->b, s->t0 + ti, h, r), yr);
        }
    }
    const double clast = w->cc[lc - 1], elast = exp(clast);
    for (int64_t r = 0; r < V; ++r)
        for (int64_t c = 0; c < K; ++c) {
            double acc = elast * w->carry[r * K + c];
            for (int64_t j = 0; j < lc; ++j) {
                const int64_t tj = c0 + j;
                acc += exp(clast - w->cc[j]) * w->sc.sig[tj] * w->v[tj * V + r] * w->kh[tj * K + c];
            }
            w->carry[r * K + c] = acc;
        }
}

static void write_finals(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_fwd_args * a, const ssmi_ref_m3_seq * s,
                         int64_t h, const fwd_scratch * w) {
    const int64_t K = d->dk, V = d->dv, last = s->len - 1;
    if (ssmi_present(&a->final_ssm_state))
        for (int64_t r = 0; r < V; ++r)
            ssmi_ref_m3_write(&a->final_ssm_state, ssmi_off4(&a->final_ssm_state, s->n, h, r, 0), w->carry + r * K, K);
    if (ssmi_present(&a->final_k_state))
        ssmi_ref_m3_write(&a->final_k_state, ssmi_off3(&a->final_k_state, s->n, h, 0), w->kh + last * K, K);
    if (ssmi_present(&a->final_v_state))
        ssmi_ref_m3_write(&a->final_v_state, ssmi_off3(&a->final_v_state, s->n, h, 0), w->v + last * V, V);
}

ssm_status ssmi_ref_mamba3_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                    const ssm_mamba3_siso_fwd_args * a) {
    (void)p;
    fwd_scratch w;
    double *    block = NULL;
    SSM_FORWARD_IF_ERROR(fwd_alloc(ctx, d, ssmi_ref_m3_max_len(d, &a->cu_seqlens), &w, &block));
    int64_t row0 = 0; /* chunk_states row of the sequence's first chunk */
    for (int64_t q = 0; q < d->nseq; ++q) {
        const ssmi_ref_m3_seq s = ssmi_ref_m3_sequence(d, &a->cu_seqlens, q);
        if (s.len == 0) { /* identity on the states */
            ssmi_ref_m3_copy_state(&a->final_ssm_state, &a->ssm_state, q);
            ssmi_ref_m3_copy_state(&a->final_k_state, &a->k_state, q);
            ssmi_ref_m3_copy_state(&a->final_v_state, &a->v_state, q);
            continue;
        }
        for (int64_t h = 0; h < d->nheads; ++h) {
            ssmi_ref_m3_load_scalars(&w.sc, &a->adt, &a->dt, &a->trap, &s, h);
            load_rotated(d, a, &s, h, &w);
            ssmi_ref_m3_load_rows(w.v, &a->v, &s, h, d->dv);
            init_carry(d, a, &s, h, &w);
            for (int64_t c0 = 0; c0 < s.len; c0 += d->chunk) {
                const int64_t lc = s.len - c0 < d->chunk ? s.len - c0 : d->chunk;
                if (ssmi_present(&a->chunk_states))
                    for (int64_t r = 0; r < d->dv; ++r)
                        ssmi_ref_m3_write(&a->chunk_states,
                                          ssmi_off4(&a->chunk_states, row0 + c0 / d->chunk, h, r, 0),
                                          w.carry + r * d->dk, d->dk);
                run_chunk(d, a, &s, h, c0, lc, &w);
            }
            write_finals(d, a, &s, h, &w);
        }
        row0 += (s.len + d->chunk - 1) / d->chunk;
    }
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}
