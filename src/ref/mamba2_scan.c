/* Reference of mamba2_scan (spec §2.6, §2.8, DESIGN §3), two independent ways:
 *  - ssmi_ref_mamba2_scan: the five chunked stages (chunk_cumsum → chunk_state →
 *    state_passing → bmm → chunk_scan) chained on float64 scratch tensors;
 *  - ssmi_ref_mamba2_scan_recurrent: the token-by-token recurrence of §1.1/§1.4.
 * With cu_seqlens every sequence runs on its own, from initial_states[s] (or 0) to
 * final_states[s]; an empty sequence returns its initial state (or 0). With seq_idx the
 * chained form runs every run of equal ids of a row on its own as well (seq_idx_runs). */
#include <string.h>

#include "ref_common.h"
#include "ssmi_ref.h"

/* a·b·... in size_t, 0 and *ok = 0 on overflow. */
static size_t mul_size(size_t a, size_t b, int * ok) {
    if (a != 0 && b > SIZE_MAX / a) {
        *ok = 0;
        return 0;
    }
    return a * b;
}

/* final_states[fi] = initial_states[ii] (or 0 when absent). */
static void copy_initial_to_final(const ssmi_mamba2_dims * d, const ssm_tensor * init, int64_t ii,
                                  const ssm_tensor * fin, int64_t fi) {
    if (!ssmi_present(fin)) return;
    for (int64_t h = 0; h < d->nheads; ++h)
        for (int64_t p = 0; p < d->headdim; ++p)
            for (int64_t n = 0; n < d->dstate; ++n) {
                const double v = ssmi_present(init) ? ssmi_get_f64(init, ssmi_off4(init, ii, h, p, n)) : 0.0;
                ssmi_set_f64(fin, ssmi_off4(fin, fi, h, p, n), v);
            }
}

/* ---- chained (chunked) reference ------------------------------------------------------ */

/* Float64 scratch of the chain for up to `batch` rows of `nchunks` chunks. */
typedef struct chain_scratch {
    double * dt_out;    /* (batch, H, NC, Q)     */
    double * da_cumsum; /* (batch, H, NC, Q)     */
    double * states;    /* (batch, NC, H, P, N)  */
    double * states_in; /* (batch, NC, H, P, N)  */
    double * cb;        /* (batch, NC, G, Q, Q)  */
} chain_scratch;

/* Bytes of scratch for (batch, nchunks); 0 with *ok = 0 on overflow. */
static size_t chain_scratch_doubles(const ssmi_mamba2_dims * d, int64_t batch, int64_t nchunks, size_t part[5],
                                    int * ok) {
    const size_t bc = mul_size((size_t)batch, (size_t)nchunks, ok);
    part[0] = mul_size(mul_size(bc, (size_t)d->nheads, ok), (size_t)d->chunk, ok);
    part[1] = part[0];
    part[2] = mul_size(mul_size(mul_size(bc, (size_t)d->nheads, ok), (size_t)d->headdim, ok), (size_t)d->dstate, ok);
    part[3] = part[2];
    part[4] = mul_size(mul_size(mul_size(bc, (size_t)d->ngroups, ok), (size_t)d->chunk, ok), (size_t)d->chunk, ok);
    size_t total = 0;
    for (int i = 0; i < 5; ++i) {
        if (part[i] > SIZE_MAX / sizeof(double) - total) *ok = 0;
        total += part[i];
    }
    if (total > SIZE_MAX / sizeof(double)) *ok = 0;
    return *ok ? total : 0;
}

static ssm_status chain_alloc(ssm_context * ctx, const ssmi_mamba2_dims * d, int64_t batch, int64_t nchunks,
                              chain_scratch * s, double ** block) {
    size_t       part[5];
    int          ok = 1;
    const size_t total = chain_scratch_doubles(d, batch, nchunks, part, &ok);
    *block = NULL;
    memset(s, 0, sizeof *s);
    SSM_RETURN_IF(!ok, ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba2_scan: reference scratch size overflows size_t");
    if (total == 0) return SSM_STATUS_OK;
    *block = ssmi_alloc(ctx, total * sizeof(double));
    SSM_RETURN_IF(*block == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "mamba2_scan: could not allocate %zu bytes of reference scratch", total * sizeof(double));
    double *  q = *block;
    double ** dst[5] = {&s->dt_out, &s->da_cumsum, &s->states, &s->states_in, &s->cb};
    for (int i = 0; i < 5; ++i) {
        *dst[i] = q;
        q += part[i];
    }
    return SSM_STATUS_OK;
}

/* One chained run over rows of `a` described by `d` (d->nseq ignored; a->cu_seqlens unused).
 * Needs d->seqlen > 0 and scratch for at least d->batch × d->nchunks. */
static void chain_run(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                      const ssm_mamba2_scan_args * a, const chain_scratch * s) {
    const int64_t    B = d->batch, H = d->nheads, NC = d->nchunks, Q = d->chunk;
    const int64_t    sh_dt[4] = {B, H, NC, Q};
    const int64_t    sh_st[5] = {B, NC, H, d->headdim, d->dstate};
    const int64_t    sh_cb[5] = {B, NC, d->ngroups, Q, Q};
    const ssm_tensor dt_out = ssmi_ref_f64_view(s->dt_out, 4, sh_dt);
    const ssm_tensor da = ssmi_ref_f64_view(s->da_cumsum, 4, sh_dt);
    const ssm_tensor states = ssmi_ref_f64_view(s->states, 5, sh_st);
    const ssm_tensor states_in = ssmi_ref_f64_view(s->states_in, 5, sh_st);
    const ssm_tensor cb = ssmi_ref_f64_view(s->cb, 5, sh_cb);
    /* da_cumsum[..., Q−1] as a strided (B, H, NC) view: no copy. */
    ssm_tensor da_chunk = da;
    da_chunk.data = s->da_cumsum != NULL ? s->da_cumsum + (Q - 1) : NULL; /* NULL: empty */
    da_chunk.ndim = 3;
    da_chunk.shape[0] = B;
    da_chunk.shape[1] = H;
    da_chunk.shape[2] = NC;
    da_chunk.strides[0] = H * NC * Q;
    da_chunk.strides[1] = NC * Q;
    da_chunk.strides[2] = Q;

    const ssm_mamba2_chunk_cumsum_args ccs = {
        .dt = a->dt, .a = a->a, .dt_bias = a->dt_bias, .dt_out = dt_out, .da_cumsum = da};
    const ssm_mamba2_chunk_state_args cst = {
        .b = a->b, .x = a->x, .dt = dt_out, .da_cumsum = da, .seq_idx = a->seq_idx, .states = states};
    const ssm_mamba2_state_passing_args sp = {.states = states,
                                              .da_chunk_cumsum = da_chunk,
                                              .initial_states = a->initial_states,
                                              .seq_idx = a->seq_idx,
                                              .states_in = states_in,
                                              .final_states = a->final_states};
    const ssm_mamba2_bmm_args           bmm = {.c = a->c, .b = a->b, .seq_idx = a->seq_idx, .cb = cb};
    const ssm_mamba2_chunk_scan_args    cs = {.cb = cb,
                                              .x = a->x,
                                              .dt = dt_out,
                                              .da_cumsum = da,
                                              .c = a->c,
                                              .states_in = states_in,
                                              .d = a->d,
                                              .z = a->z,
                                              .seq_idx = a->seq_idx,
                                              .out = a->out};
    /* The stages only fail on allocation, and they allocate nothing. */
    (void)ssmi_ref_mamba2_chunk_cumsum(ctx, p, d, &ccs);
    (void)ssmi_ref_mamba2_chunk_state(ctx, p, d, &cst);
    (void)ssmi_ref_mamba2_state_passing(ctx, p, d, &sp);
    (void)ssmi_ref_mamba2_bmm(ctx, p, d, &bmm);
    (void)ssmi_ref_mamba2_chunk_scan(ctx, p, d, &cs);
}

/* Tokens [st, st + len) of batch row b as a batch-1 problem without seq_idx or cu_seqlens,
 * starting from initial_states[ii] (ii < 0: zeros) and ending in final_states[fi] (fi < 0:
 * not written). */
static void span_view(const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a, int64_t b, int64_t st, int64_t len,
                      int64_t ii, int64_t fi, ssmi_mamba2_dims * ds, ssm_mamba2_scan_args * as) {
    *ds = *d;
    ds->batch = 1;
    ds->seqlen = len;
    ds->nchunks = (len + d->chunk - 1) / d->chunk;
    ds->nseq = 0;
    *as = *a;
    const ssm_tensor * rows[6] = {&a->x, &a->dt, &a->b, &a->c, &a->z, &a->out};
    ssm_tensor *       views[6] = {&as->x, &as->dt, &as->b, &as->c, &as->z, &as->out};
    for (int i = 0; i < 6; ++i) {
        const ssm_tensor row = ssmi_ref_slice(rows[i], 0, b, 1);
        *views[i] = ssmi_ref_slice(&row, 1, st, len);
    }
    if (ii >= 0)
        as->initial_states = ssmi_ref_slice(&a->initial_states, 0, ii, 1);
    else
        memset(&as->initial_states, 0, sizeof as->initial_states);
    if (fi >= 0)
        as->final_states = ssmi_ref_slice(&a->final_states, 0, fi, 1);
    else
        memset(&as->final_states, 0, sizeof as->final_states);
    memset(&as->seq_idx, 0, sizeof as->seq_idx);
    memset(&as->cu_seqlens, 0, sizeof as->cu_seqlens);
}

static int64_t cu_at(const ssm_mamba2_scan_args * a, int64_t s) {
    return ssmi_get_i64(&a->cu_seqlens, ssmi_off1(&a->cu_seqlens, s));
}

/* With seq_idx, every run of equal ids of a row is a sequence of its own (the recurrence
 * resets between runs), run as a batch-1 chain: the first run starts from
 * initial_states[b] only if its id is 0 (seq_{−1} := 0), the last one writes
 * final_states[b]. Running the runs apart, instead of masking one chain over the row, keeps
 * a non-finite input of one run out of the others: inside a shared chunk the masked
 * products would multiply it by 0 (0·Inf = NaN) and the chunk's running sum of dt·A would
 * carry it past the run's end. */
static void seq_idx_runs(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                         const ssm_mamba2_scan_args * a, const chain_scratch * s) {
    for (int64_t b = 0; b < d->batch; ++b) {
        const int64_t id0 = ssmi_ref_seq(&a->seq_idx, b, 0);
        for (int64_t st = 0; st < d->seqlen;) {
            const int64_t id = ssmi_ref_seq(&a->seq_idx, b, st);
            int64_t       en = st + 1;
            while (en < d->seqlen && ssmi_ref_seq(&a->seq_idx, b, en) == id) ++en;
            const int64_t        ii = (st == 0 && id0 == 0 && ssmi_present(&a->initial_states)) ? b : -1;
            const int64_t        fi = (en == d->seqlen && ssmi_present(&a->final_states)) ? b : -1;
            ssmi_mamba2_dims     ds;
            ssm_mamba2_scan_args as;
            span_view(d, a, b, st, en - st, ii, fi, &ds, &as);
            chain_run(ctx, p, &ds, &as, s);
            st = en;
        }
    }
}

/* chunk_states: sequence q (tokens [st, st + len) of row b, first absolute position
 * start) run piece by piece, each piece ending at a chunk boundary (absolute position + 1 a
 * multiple of Q) or at the sequence's end; the state between pieces stays in float64
 * (tmp: two states of H·P·N doubles) and is copied to chunk_states[*row] at each boundary.
 * The chunked form is exact, so the pieces give the states and outputs of one run. */
static void chunk_state_sequence(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                 const ssm_mamba2_scan_args * a, const chain_scratch * s, int64_t b, int64_t st,
                                 int64_t len, int64_t ii, int64_t fi, int64_t start, int64_t * row, double * tmp) {
    const int64_t Q = p->chunk_size, HPN = d->nheads * d->headdim * d->dstate;
    const int64_t sh[4] = {1, d->nheads, d->headdim, d->dstate};
    if (len == 0) {
        copy_initial_to_final(d, &a->initial_states, ii, &a->final_states, fi);
        return;
    }
    ssm_tensor prev = ii >= 0 ? ssmi_ref_slice(&a->initial_states, 0, ii, 1) : (ssm_tensor){0};
    for (int64_t pos = 0, k = 0; pos < len; k ^= 1) {
        const int64_t to_boundary = Q - (start + pos) % Q;
        const int64_t n = len - pos < to_boundary ? len - pos : to_boundary;
        const int     boundary = n == to_boundary;
        ssmi_mamba2_dims     ds;
        ssm_mamba2_scan_args as;
        span_view(d, a, b, st + pos, n, -1, -1, &ds, &as);
        as.initial_states = prev;
        const ssm_tensor next = ssmi_ref_f64_view(tmp + k * HPN, 4, sh);
        if (boundary) as.final_states = next;
        else if (fi >= 0) as.final_states = ssmi_ref_slice(&a->final_states, 0, fi, 1);
        chain_run(ctx, p, &ds, &as, s);
        pos += n;
        if (!boundary) break;
        copy_initial_to_final(d, &next, 0, &a->chunk_states, (*row)++);
        if (pos == len && fi >= 0) copy_initial_to_final(d, &next, 0, &a->final_states, fi);
        prev = next;
    }
}

/* mamba2_scan with chunk_states (validation: no seq_idx): every sequence (with cu_seqlens)
 * or batch row on its own through chunk_state_sequence. */
static ssm_status scan_with_chunk_states(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                         const ssm_mamba2_scan_args * a) {
    const int64_t ns = d->nseq > 0 ? d->nseq : d->batch;
    int64_t       max_len = d->nseq > 0 ? 0 : d->seqlen;
    for (int64_t q = 0; q < d->nseq; ++q) {
        const int64_t len = cu_at(a, q + 1) - cu_at(a, q);
        if (len > max_len) max_len = len;
    }
    const int64_t piece = max_len < p->chunk_size ? max_len : p->chunk_size;
    chain_scratch s;
    double *      block;
    SSM_FORWARD_IF_ERROR(chain_alloc(ctx, d, 1, (piece + d->chunk - 1) / d->chunk, &s, &block));
    int          ok = 1;
    const size_t hpn = mul_size(mul_size((size_t)d->nheads, (size_t)d->headdim, &ok), (size_t)d->dstate, &ok);
    double *     tmp = NULL;
    if (ok && hpn > 0 && hpn <= SIZE_MAX / (2 * sizeof(double))) tmp = ssmi_alloc(ctx, 2 * hpn * sizeof(double));
    if (hpn > 0 && tmp == NULL) {
        ssmi_free(ctx, block);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba2_scan: could not allocate the reference chunk states");
    }
    int64_t row = 0;
    for (int64_t q = 0; q < ns; ++q) {
        const int64_t st = d->nseq > 0 ? cu_at(a, q) : 0, len = d->nseq > 0 ? cu_at(a, q + 1) - st : d->seqlen;
        chunk_state_sequence(ctx, p, d, a, &s, d->nseq > 0 ? 0 : q, st, len,
                             ssmi_present(&a->initial_states) ? q : -1, ssmi_present(&a->final_states) ? q : -1,
                             ssmi_computed_tokens(&a->num_computed_tokens, q), &row, tmp);
    }
    ssmi_free(ctx, tmp);
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}

ssm_status ssmi_ref_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                const ssm_mamba2_scan_args * a) {
    chain_scratch s;
    double *      block;
    if (ssmi_present(&a->chunk_states)) return scan_with_chunk_states(ctx, p, d, a);
    if (d->nseq == 0) {
        if (d->seqlen == 0) { /* no tokens: the state passes through */
            for (int64_t b = 0; b < d->batch; ++b) copy_initial_to_final(d, &a->initial_states, b, &a->final_states, b);
            return SSM_STATUS_OK;
        }
        if (ssmi_present(&a->seq_idx)) {
            SSM_FORWARD_IF_ERROR(chain_alloc(ctx, d, 1, d->nchunks, &s, &block));
            seq_idx_runs(ctx, p, d, a, &s);
        } else {
            SSM_FORWARD_IF_ERROR(chain_alloc(ctx, d, d->batch, d->nchunks, &s, &block));
            chain_run(ctx, p, d, a, &s);
        }
        ssmi_free(ctx, block);
        return SSM_STATUS_OK;
    }
    /* Varlen: scratch for the longest sequence, allocated before anything is written. */
    int64_t max_len = 0;
    for (int64_t q = 0; q < d->nseq; ++q) {
        const int64_t len = cu_at(a, q + 1) - cu_at(a, q);
        if (len > max_len) max_len = len;
    }
    SSM_FORWARD_IF_ERROR(chain_alloc(ctx, d, 1, (max_len + d->chunk - 1) / d->chunk, &s, &block));
    for (int64_t q = 0; q < d->nseq; ++q) {
        const int64_t st = cu_at(a, q), len = cu_at(a, q + 1) - st;
        if (len == 0) {
            copy_initial_to_final(d, &a->initial_states, q, &a->final_states, q);
            continue;
        }
        ssmi_mamba2_dims     ds;
        ssm_mamba2_scan_args as;
        span_view(d, a, 0, st, len, ssmi_present(&a->initial_states) ? q : -1, ssmi_present(&a->final_states) ? q : -1,
                  &ds, &as);
        chain_run(ctx, p, &ds, &as, &s);
    }
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}

/* ---- token-by-token recurrence ---------------------------------------------------------- */

/* Tokens [t0, t1) of row b, starting from initial_states[ii] (if present) and ending in
 * final_states[fi]. With seq_idx: h_t = [seq_t == seq_{t−1}]·exp(a_t)·h_{t−1} + dt_t·x_t B_tᵀ,
 * seq_{t0−1} := 0. `h` is P·N doubles of scratch. */
static void recurrent_segment(const ssm_mamba2_params * p, const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a,
                              int64_t b, int64_t t0, int64_t t1, int64_t ii, int64_t fi, double * h) {
    const int64_t      P = d->headdim, N = d->dstate, ratio = d->nheads / d->ngroups;
    const ssm_tensor * seq = ssmi_present(&a->seq_idx) ? &a->seq_idx : NULL;
    const ssm_tensor * init = &a->initial_states;
    for (int64_t hh = 0; hh < d->nheads; ++hh) {
        const int64_t g = hh / ratio;
        const double  ah = ssmi_get_f64(&a->a, ssmi_off1(&a->a, hh));
        const double  bias = ssmi_ref_bias(&a->dt_bias, hh);
        for (int64_t pp = 0; pp < P; ++pp)
            for (int64_t n = 0; n < N; ++n)
                h[pp * N + n] = ssmi_present(init) ? ssmi_get_f64(init, ssmi_off4(init, ii, hh, pp, n)) : 0.0;
        for (int64_t t = t0; t < t1; ++t) {
            const double dt = ssmi_ref_process_dt(p, ssmi_get_f64(&a->dt, ssmi_off3(&a->dt, b, t, hh)), bias);
            const double decay = exp(dt * ah);
            const int    keep = ssmi_ref_seq_keeps(seq, b, t0, t);
            for (int64_t pp = 0; pp < P; ++pp) {
                const double xt = ssmi_get_f64(&a->x, ssmi_off4(&a->x, b, t, hh, pp));
                double       y = 0.0;
                for (int64_t n = 0; n < N; ++n) {
                    const double bn = ssmi_get_f64(&a->b, ssmi_off4(&a->b, b, t, g, n));
                    const double cn = ssmi_get_f64(&a->c, ssmi_off4(&a->c, b, t, g, n));
                    double *     hv = &h[pp * N + n];
                    *hv = (keep ? decay * *hv : 0.0) + dt * xt * bn;
                    y += *hv * cn;
                }
                y += ssmi_ref_d(&a->d, hh, pp) * xt;
                if (ssmi_present(&a->z)) y *= ssmi_ref_silu(ssmi_get_f64(&a->z, ssmi_off4(&a->z, b, t, hh, pp)));
                ssmi_set_f64(&a->out, ssmi_off4(&a->out, b, t, hh, pp), y);
            }
        }
        if (ssmi_present(&a->final_states))
            for (int64_t pp = 0; pp < P; ++pp)
                for (int64_t n = 0; n < N; ++n)
                    ssmi_set_f64(&a->final_states, ssmi_off4(&a->final_states, fi, hh, pp, n), h[pp * N + n]);
    }
}

ssm_status ssmi_ref_mamba2_scan_recurrent(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                          const ssm_mamba2_scan_args * a) {
    int          ok = 1;
    const size_t n = mul_size((size_t)d->headdim, (size_t)d->dstate, &ok);
    SSM_RETURN_IF(!ok || n > SIZE_MAX / sizeof(double), ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "mamba2_scan: reference state size overflows size_t");
    double * h = NULL;
    if (n > 0) {
        h = ssmi_alloc(ctx, n * sizeof(double));
        SSM_RETURN_IF(h == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                      "mamba2_scan: could not allocate %zu bytes of reference state", n * sizeof(double));
    }
    if (d->nseq == 0) {
        for (int64_t b = 0; b < d->batch; ++b) recurrent_segment(p, d, a, b, 0, d->seqlen, b, b, h);
    } else {
        for (int64_t q = 0; q < d->nseq; ++q) recurrent_segment(p, d, a, 0, cu_at(a, q), cu_at(a, q + 1), q, q, h);
    }
    ssmi_free(ctx, h);
    return SSM_STATUS_OK;
}
