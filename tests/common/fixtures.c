/* fixtures.c — every public operator as a ready-to-run fixture; see fixtures.h. */
#include "fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- owned tensors and outputs --------------------------------------------------------- */
/* A poisoned contiguous tensor owned by the fixture (absent view when the table is full or
 * the allocation fails: the builder's check of its inputs then fails). */
static ssm_tensor own(ssmt_fixture * f, ssm_dtype dtype, int32_t ndim, const int64_t * shape) {
    if (f->nhosts == SSMT_FIXTURE_MAX_HOSTS) return ssmt_absent();
    ssmt_host * h = &f->hosts[f->nhosts++];
    *h = ssmt_alloc(dtype, ndim, shape);
    return h->t;
}
/* The same, laid out with `order` (see ssmt_alloc_layout). */
static ssm_tensor own_layout(ssmt_fixture * f, ssm_dtype dtype, int32_t ndim, const int64_t * shape,
                             const int32_t * order) {
    if (f->nhosts == SSMT_FIXTURE_MAX_HOSTS) return ssmt_absent();
    ssmt_host * h = &f->hosts[f->nhosts++];
    *h = ssmt_alloc_layout(dtype, ndim, shape, order, 0);
    return h->t;
}
static ssm_tensor own_normal(ssmt_fixture * f, ssmt_rng * rng, ssm_dtype dtype, int32_t ndim, const int64_t * shape,
                             double std) {
    const ssm_tensor t = own(f, dtype, ndim, shape);
    if (t.data != NULL) ssmt_fill_normal(rng, &t, 0.0, std);
    return t;
}
/* A new poisoned output shaped like `like`. */
static ssm_tensor own_like(ssmt_fixture * f, const ssm_tensor * like, ssm_dtype dtype) {
    return own(f, dtype, like->ndim, like->shape);
}

static void add_out(ssmt_fixture * f, const char * name, const ssm_tensor * t) {
    if (t->data == NULL || f->nouts == SSMT_FIXTURE_MAX_OUTS) return;
    f->out_names[f->nouts] = name;
    f->outs[f->nouts++] = *t;
}

/* out and the four final states of the Mamba-3 forwards and decode steps. */
static void add_state_outs(ssmt_fixture * f, const ssm_tensor * out, const ssm_tensor * angle, const ssm_tensor * ssm,
                           const ssm_tensor * k, const ssm_tensor * v) {
    add_out(f, "out", out), add_out(f, "final_angle_state", angle), add_out(f, "final_ssm_state", ssm);
    add_out(f, "final_k_state", k), add_out(f, "final_v_state", v);
}

/* 1 when every listed view is present (the allocations behind them succeeded). */
static int all_present(const ssm_tensor * const * t, int n) {
    for (int i = 0; i < n; ++i)
        if (t[i]->data == NULL) return 0;
    return 1;
}

/* ---- runners ---------------------------------------------------------------------------- */
#define RUNNER(fn, params_member, args_member)                              \
    static ssm_status run_##fn(ssm_context * c, const ssmt_fixture * f) {   \
        return ssm_##fn(c, &f->params.params_member, &f->args.args_member); \
    }
RUNNER(mamba2_chunk_cumsum, m2, cumsum)
RUNNER(mamba2_chunk_state, m2, chunk_state)
RUNNER(mamba2_state_passing, m2, passing)
RUNNER(mamba2_bmm, m2, bmm)
RUNNER(mamba2_chunk_scan, m2, chunk_scan)
RUNNER(mamba2_scan_bwd, m2, scan_bwd)
RUNNER(mamba2_step, m2, m2_step)
RUNNER(causal_conv1d, conv, conv)
RUNNER(causal_conv1d_bwd, conv, conv_bwd)
RUNNER(causal_conv1d_update, conv, conv_update)
RUNNER(rmsnorm_gated, norm, norm)
RUNNER(rmsnorm_gated_bwd, norm, norm_bwd)
RUNNER(mamba3_angle_cumsum, m3, angle)
RUNNER(mamba3_angle_cumsum_bwd, m3, angle_bwd)
RUNNER(mamba3_siso_fwd, m3, siso_fwd)
RUNNER(mamba3_siso, m3, siso)
RUNNER(mamba3_siso_bwd, m3, siso_bwd)
RUNNER(mamba3_siso_step, m3, siso_step)
RUNNER(mamba3_mimo_bwd_fwd, mimo, mimo_bwd_fwd)
RUNNER(mamba3_mimo, mimo, mimo)
RUNNER(mamba3_mimo_bwd, mimo, mimo_bwd)
RUNNER(mamba3_mimo_step, mimo, mimo_step)
#undef RUNNER

/* The scan allocates its workspace through ctx, or takes one from the caller (exactly the
 * reported size, from malloc: not the context's allocator). */
static ssm_status run_mamba2_scan(ssm_context * c, const ssmt_fixture * f) {
    if (!f->caller_workspace) return ssm_mamba2_scan(c, &f->params.m2, &f->args.scan, NULL, 0);
    size_t           bytes = 0;
    const ssm_status s = ssm_mamba2_scan_workspace_size(c, &f->params.m2, &f->args.scan, &bytes);
    if (s != SSM_STATUS_OK) return s;
    void * ws = bytes > 0 ? aligned_alloc(64, (bytes + 63) & ~(size_t)63) : NULL;
    if (bytes > 0 && ws == NULL) return SSM_STATUS_INTERNAL; /* the test's own malloc failed */
    const ssm_status r = ssm_mamba2_scan(c, &f->params.m2, &f->args.scan, ws, bytes);
    free(ws);
    return r;
}

/* ---- problems owned through testutil's builders ------------------------------------------- */
static void free_m2(void * p) { ssmt_mamba2_problem_free(p), free(p); }
static void free_m3(void * p) { ssmt_mamba3_problem_free(p), free(p); }
static void free_m3_bwd(void * p) { ssmt_mamba3_bwd_free(p), free(p); }
static void free_m3_step(void * p) { ssmt_mamba3_step_free(p), free(p); }
static void free_mimo(void * p) { ssmt_mimo_problem_free(p), free(p); }
static void free_mimo_bwd(void * p) { ssmt_mimo_bwd_free(p), free(p); }
static void free_mimo_bwd_fwd(void * p) { ssmt_mimo_bwd_fwd_free(p), free(p); }
static void free_mimo_step(void * p) { ssmt_mimo_step_free(p), free(p); }

/* A zeroed problem struct of `bytes`, owned by slot `slot` of the fixture once built. */
static void * hold(ssmt_fixture * f, int slot, size_t bytes, void (*release)(void *)) {
    void * p = calloc(1, bytes);
    if (p == NULL) return NULL;
    f->problem[slot] = p;
    f->problem_free[slot] = release;
    return p;
}
/* After a testutil builder failed: it freed its tensors; the struct goes too. */
static int drop(ssmt_fixture * f, int slot) {
    free(f->problem[slot]);
    f->problem[slot] = NULL;
    f->problem_free[slot] = NULL;
    return -1;
}

/* ---- Mamba-2 ---------------------------------------------------------------------------- */
enum { M2_DENSE, M2_SEQ, M2_VARLEN };
static const int64_t m2_lens[3] = {9, 0, 14};

/* B 2, S 24, H 4, P 8, N 8, G 2, chunk 8 (3 chunks); z, D (H), dt_bias, softplus, initial and
 * final states; seq_idx with two segments, or varlen over 9, 0, 14 tokens in bf16. */
static int m2_problem(ssmt_fixture * f, ssmt_rng * rng, int layout, ssmt_mamba2_problem ** out) {
    ssmt_mamba2_config cfg;
    ssmt_mamba2_config_init(&cfg);
    cfg.seqlen = 24;
    cfg.d_mode = 1, cfg.has_z = 1, cfg.has_dt_bias = 1, cfg.has_initial = 1, cfg.has_final = 1;
    cfg.dt_softplus = 1;
    if (layout == M2_SEQ) cfg.seq_segments = 2;
    if (layout == M2_VARLEN) cfg.nseq = 3, cfg.seqlens = m2_lens, cfg.dtype = SSM_DTYPE_BF16;
    ssmt_mamba2_problem * p = hold(f, 0, sizeof *p, free_m2);
    if (p == NULL || ssmt_mamba2_random_args(rng, &cfg, p) != 0) return p ? drop(f, 0) : -1;
    ssm_mamba2_params_init(&f->params.m2);
    f->params.m2.chunk_size = 8;
    f->params.m2.dt_softplus = 1;
    f->params.m2.dt_limit_lo = 0.002;
    f->params.m2.dt_limit_hi = 0.08;
    *out = p;
    return 0;
}

static int make_scan(ssmt_fixture * f, ssmt_rng * rng, int layout, int caller_workspace) {
    ssmt_mamba2_problem * p;
    if (m2_problem(f, rng, layout, &p) != 0) return -1;
    f->op = "mamba2_scan", f->run = run_mamba2_scan, f->caller_workspace = caller_workspace;
    f->args.scan = p->args;
    add_out(f, "out", &f->args.scan.out), add_out(f, "final_states", &f->args.scan.final_states);
    return 0;
}

static int make_scan_bwd(ssmt_fixture * f, ssmt_rng * rng, int layout) {
    ssmt_mamba2_problem * p;
    if (m2_problem(f, rng, layout, &p) != 0) return -1;
    f->op = "mamba2_scan_bwd", f->run = run_mamba2_scan_bwd;
    ssm_mamba2_scan_bwd_args *   a = &f->args.scan_bwd;
    const ssm_mamba2_scan_args * s = &p->args;
    a->x = s->x, a->dt = s->dt, a->a = s->a, a->b = s->b, a->c = s->c, a->d = s->d, a->z = s->z;
    a->dt_bias = s->dt_bias, a->initial_states = s->initial_states, a->seq_idx = s->seq_idx;
    a->cu_seqlens = s->cu_seqlens;
    a->dout = own_normal(f, rng, s->x.dtype, 4, s->x.shape, 1.0);
    a->dfinal_states = own_normal(f, rng, SSM_DTYPE_F32, 4, s->final_states.shape, 1.0);
    ssm_tensor * const grad[9] = {
        &a->dx, &a->ddt, &a->da, &a->db, &a->dc, &a->dd, &a->dz, &a->ddt_bias, &a->dinitial_states};
    const ssm_tensor * const in[9] = {
        &a->x, &a->dt, &a->a, &a->b, &a->c, &a->d, &a->z, &a->dt_bias, &a->initial_states};
    static const char * const names[9] = {"dx", "ddt", "da", "db", "dc", "dd", "dz", "ddt_bias", "dinitial_states"};
    for (int k = 0; k < 9; ++k) {
        *grad[k] = own_like(f, in[k], SSM_DTYPE_F32);
        add_out(f, names[k], grad[k]);
    }
    const ssm_tensor * const need[11] = {&a->dout, &a->dfinal_states, grad[0], grad[1], grad[2], grad[3],
                                         grad[4],  grad[5],           grad[6], grad[7], grad[8]};
    return all_present(need, 11) ? 0 : -1;
}

enum { CH_CUMSUM, CH_STATE, CH_PASSING, CH_BMM, CH_CHUNK_SCAN };

/* The five chunked operators on one seq_idx problem; their inputs from the operators before
 * them in the chain, computed here with ctx == NULL. */
static int make_chain(ssmt_fixture * f, ssmt_rng * rng, int which) {
    ssmt_mamba2_problem * p;
    if (m2_problem(f, rng, M2_SEQ, &p) != 0) return -1;
    const ssm_mamba2_params *    prm = &f->params.m2;
    const ssm_mamba2_scan_args * s = &p->args;
    const int64_t                B = s->x.shape[0], S = s->x.shape[1], H = s->x.shape[2], P = s->x.shape[3];
    const int64_t                G = s->b.shape[2], N = s->b.shape[3], Q = prm->chunk_size, NC = (S + Q - 1) / Q;
    const int64_t                hq[4] = {B, H, NC, Q}, st[5] = {B, NC, H, P, N}, cbs[5] = {B, NC, G, Q, Q};

    ssm_mamba2_chunk_cumsum_args cs = {0};
    cs.dt = s->dt, cs.a = s->a, cs.dt_bias = s->dt_bias;
    cs.dt_out = own(f, SSM_DTYPE_F32, 4, hq), cs.da_cumsum = own(f, SSM_DTYPE_F32, 4, hq);
    ssm_mamba2_chunk_state_args cst = {0};
    cst.b = s->b, cst.x = s->x, cst.dt = cs.dt_out, cst.da_cumsum = cs.da_cumsum, cst.seq_idx = s->seq_idx;
    cst.states = own(f, SSM_DTYPE_F32, 5, st);
    ssm_mamba2_state_passing_args sp = {0};
    ssm_tensor                    dcc = cs.da_cumsum; /* da_cumsum[..., Q−1] as a strided view */
    dcc.ndim = 3, dcc.strides[0] = H * NC * Q, dcc.strides[1] = NC * Q, dcc.strides[2] = Q;
    if (dcc.data != NULL) dcc.data = (float *)dcc.data + (Q - 1);
    sp.states = cst.states, sp.da_chunk_cumsum = dcc, sp.initial_states = s->initial_states, sp.seq_idx = s->seq_idx;
    sp.states_in = own(f, SSM_DTYPE_F32, 5, st), sp.final_states = own_like(f, &s->final_states, SSM_DTYPE_F32);
    ssm_mamba2_bmm_args bm = {0};
    bm.c = s->c, bm.b = s->b, bm.seq_idx = s->seq_idx, bm.cb = own(f, SSM_DTYPE_F32, 5, cbs);
    ssm_mamba2_chunk_scan_args sc = {0};
    sc.cb = bm.cb, sc.x = s->x, sc.dt = cs.dt_out, sc.da_cumsum = cs.da_cumsum, sc.c = s->c,
    sc.states_in = sp.states_in;
    sc.d = s->d, sc.z = s->z, sc.seq_idx = s->seq_idx;
    sc.out = own_like(f, &s->x, SSM_DTYPE_F32), sc.out_x = own_like(f, &s->x, SSM_DTYPE_F32);
    const ssm_tensor * const need[9] = {&cs.dt_out, &cs.da_cumsum, &cst.states, &sp.states_in, &sp.final_states,
                                        &bm.cb,     &sc.out,       &sc.out_x,   &s->x};
    if (!all_present(need, 9)) return -1;
    /* the inputs of the later operators (the chosen operator's outputs are re-poisoned below) */
    if (ssm_mamba2_chunk_cumsum(NULL, prm, &cs) != SSM_STATUS_OK ||
        ssm_mamba2_chunk_state(NULL, prm, &cst) != SSM_STATUS_OK ||
        ssm_mamba2_state_passing(NULL, prm, &sp) != SSM_STATUS_OK || ssm_mamba2_bmm(NULL, prm, &bm) != SSM_STATUS_OK)
        return -1;
    switch (which) {
        case CH_CUMSUM: {
            f->op = "mamba2_chunk_cumsum", f->run = run_mamba2_chunk_cumsum;
            f->args.cumsum = cs;
            f->args.cumsum.dt_out = own_like(f, &cs.dt_out, SSM_DTYPE_F32);
            f->args.cumsum.da_cumsum = own_like(f, &cs.da_cumsum, SSM_DTYPE_F32);
            add_out(f, "dt_out", &f->args.cumsum.dt_out), add_out(f, "da_cumsum", &f->args.cumsum.da_cumsum);
            return f->nouts == 2 ? 0 : -1;
        }
        case CH_STATE:
            f->op = "mamba2_chunk_state", f->run = run_mamba2_chunk_state;
            f->args.chunk_state = cst;
            f->args.chunk_state.states = own_like(f, &cst.states, SSM_DTYPE_F32);
            add_out(f, "states", &f->args.chunk_state.states);
            return f->nouts == 1 ? 0 : -1;
        case CH_PASSING:
            f->op = "mamba2_state_passing", f->run = run_mamba2_state_passing;
            f->args.passing = sp;
            f->args.passing.states_in = own_like(f, &sp.states_in, SSM_DTYPE_F32);
            f->args.passing.final_states = own_like(f, &sp.final_states, SSM_DTYPE_F32);
            add_out(f, "states_in", &f->args.passing.states_in);
            add_out(f, "final_states", &f->args.passing.final_states);
            return f->nouts == 2 ? 0 : -1;
        case CH_BMM:
            f->op = "mamba2_bmm", f->run = run_mamba2_bmm;
            f->args.bmm = bm;
            f->args.bmm.cb = own_like(f, &bm.cb, SSM_DTYPE_F32);
            add_out(f, "cb", &f->args.bmm.cb);
            return f->nouts == 1 ? 0 : -1;
        default:
            f->op = "mamba2_chunk_scan", f->run = run_mamba2_chunk_scan;
            f->args.chunk_scan = sc;
            add_out(f, "out", &sc.out), add_out(f, "out_x", &sc.out_x);
            return 0;
    }
}

/* Decode: B 4, H 4, P 8, N 8, G 2. Full (H, P, N) parameters with a pool of 6 slots
 * (state_batch_indices: a permutation, row 1 padding) and a separate final pool; or the
 * per-head form (stride-0 views) with slots == B. */
static int make_m2_step(ssmt_fixture * f, ssmt_rng * rng, int per_head) {
    const int64_t          B = 4, H = 4, P = 8, N = 8, G = 2, slots = per_head ? B : 6;
    const int64_t          sx[3] = {B, H, P}, sb[3] = {B, G, N}, sa[3] = {H, P, N}, shp[2] = {H, P}, sh[1] = {H};
    const int64_t          sst[4] = {slots, H, P, N}, sbh[2] = {B, H}, si[1] = {B};
    ssm_mamba2_step_args * a = &f->args.m2_step;
    f->op = "mamba2_step", f->run = run_mamba2_step;
    ssm_mamba2_params_init(&f->params.m2);
    f->params.m2.dt_softplus = 1;
    a->x = own_normal(f, rng, SSM_DTYPE_F32, 3, sx, 1.0), a->z = own_normal(f, rng, SSM_DTYPE_F32, 3, sx, 1.0);
    a->b = own_normal(f, rng, SSM_DTYPE_F32, 3, sb, 1.0), a->c = own_normal(f, rng, SSM_DTYPE_F32, 3, sb, 1.0);
    a->state = own_normal(f, rng, SSM_DTYPE_F32, 4, sst, 1.0);
    if (per_head) { /* a (H), dt (B, H), dt_bias (H), d (H) broadcast over p and n */
        a->a = own(f, SSM_DTYPE_F32, 1, sh), a->dt = own(f, SSM_DTYPE_F32, 2, sbh);
        a->dt_bias = own(f, SSM_DTYPE_F32, 1, sh), a->d = own_normal(f, rng, SSM_DTYPE_F32, 1, sh, 1.0);
    } else {
        a->a = own(f, SSM_DTYPE_F32, 3, sa), a->dt = own(f, SSM_DTYPE_F32, 3, sx);
        a->dt_bias = own(f, SSM_DTYPE_F32, 2, shp), a->d = own_normal(f, rng, SSM_DTYPE_F32, 2, shp, 1.0);
    }
    const ssm_tensor * const need[9] = {&a->x, &a->z, &a->b, &a->c, &a->state, &a->a, &a->dt, &a->dt_bias, &a->d};
    if (!all_present(need, 9)) return -1;
    ssmt_fill_uniform(rng, &a->a, -8.0, -0.5), ssmt_fill_uniform(rng, &a->dt, -3.0, 1.0);
    ssmt_fill_uniform(rng, &a->dt_bias, -2.0, 0.0);
    if (per_head) {
        a->a.ndim = 3, a->a.shape[1] = P, a->a.shape[2] = N, a->a.strides[0] = 1, a->a.strides[1] = 0,
        a->a.strides[2] = 0;
        a->dt.ndim = 3, a->dt.shape[2] = P, a->dt.strides[2] = 0;
        a->dt_bias.ndim = 2, a->dt_bias.shape[1] = P, a->dt_bias.strides[0] = 1, a->dt_bias.strides[1] = 0;
        a->d.ndim = 2, a->d.shape[1] = P, a->d.strides[0] = 1, a->d.strides[1] = 0;
    } else {
        static const int map[4] = {5, -1, 0, 3}; /* row → slot; row 1 is padding */
        a->state_batch_indices = own(f, SSM_DTYPE_I32, 1, si);
        if (a->state_batch_indices.data == NULL) return -1;
        for (int64_t r = 0; r < B; ++r) ssmt_set(&a->state_batch_indices, r, map[r]);
    }
    a->out = own(f, SSM_DTYPE_F32, 3, sx), a->final_state = own(f, SSM_DTYPE_F32, 4, sst);
    add_out(f, "out", &a->out), add_out(f, "final_state", &a->final_state);
    return f->nouts == 2 ? 0 : -1;
}

/* ---- conv1d and gated RMSNorm ------------------------------------------------------------- */
/* (B, D, S) stored channel-last (memory (B, S, D)), as Mamba-2 keeps x. */
static ssm_tensor own_bds(ssmt_fixture * f, ssm_dtype dtype, const int64_t * shape) {
    static const int32_t order[3] = {0, 2, 1};
    return own_layout(f, dtype, 3, shape, order);
}

enum { CONV_FWD, CONV_FWD_SEQ, CONV_BWD };

/* B 2, D 12, S 10, W 4, silu, bias. CONV_FWD: initial and final states; CONV_FWD_SEQ: seq_idx
 * (row 1 starts with a padding token, ids 0, 1, 2); CONV_BWD: initial states, every gradient. */
static int make_conv(ssmt_fixture * f, ssmt_rng * rng, int kind) {
    const int64_t B = 2, D = 12, S = 10, W = 4;
    const int64_t sx[3] = {B, D, S}, sw[2] = {D, W}, sd[1] = {D}, si[3] = {B, D, W - 1}, ss[2] = {B, S};
    ssm_conv1d_params_init(&f->params.conv);
    ssm_tensor x = own_bds(f, SSM_DTYPE_F32, sx);
    if (x.data != NULL) ssmt_fill_normal(rng, &x, 0.0, 1.0);
    const ssm_tensor w = own_normal(f, rng, SSM_DTYPE_F32, 2, sw, 0.5);
    const ssm_tensor bias = own_normal(f, rng, SSM_DTYPE_F32, 1, sd, 0.5);
    const ssm_tensor init = kind == CONV_FWD_SEQ ? ssmt_absent() : own_normal(f, rng, SSM_DTYPE_F32, 3, si, 1.0);
    ssm_tensor       seq = ssmt_absent();
    if (kind == CONV_FWD_SEQ) {
        seq = own(f, SSM_DTYPE_I32, 2, ss);
        if (seq.data == NULL) return -1;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < S; ++t) ssmt_set(&seq, b * S + t, t < b ? -1 : (double)((t * 3) / S));
    }
    const ssm_tensor * const need[3] = {&x, &w, &bias};
    if (!all_present(need, 3) || (kind != CONV_FWD_SEQ && init.data == NULL)) return -1;
    if (kind == CONV_BWD) {
        ssm_causal_conv1d_bwd_args * a = &f->args.conv_bwd;
        f->op = "causal_conv1d_bwd", f->run = run_causal_conv1d_bwd;
        a->x = x, a->weight = w, a->bias = bias, a->initial_states = init;
        a->dout = own_bds(f, SSM_DTYPE_F32, sx), a->dfinal_states = own_normal(f, rng, SSM_DTYPE_F32, 3, si, 1.0);
        if (a->dout.data != NULL) ssmt_fill_normal(rng, &a->dout, 0.0, 1.0);
        a->dx = own_bds(f, SSM_DTYPE_F32, sx), a->dweight = own(f, SSM_DTYPE_F32, 2, sw);
        a->dbias = own(f, SSM_DTYPE_F32, 1, sd), a->dinitial_states = own(f, SSM_DTYPE_F32, 3, si);
        add_out(f, "dx", &a->dx), add_out(f, "dweight", &a->dweight), add_out(f, "dbias", &a->dbias);
        add_out(f, "dinitial_states", &a->dinitial_states);
        return f->nouts == 4 && a->dout.data && a->dfinal_states.data ? 0 : -1;
    }
    ssm_causal_conv1d_args * a = &f->args.conv;
    f->op = "causal_conv1d", f->run = run_causal_conv1d;
    a->x = x, a->weight = w, a->bias = bias, a->initial_states = init, a->seq_idx = seq;
    a->out = own_bds(f, SSM_DTYPE_F32, sx);
    if (kind == CONV_FWD) a->final_states = own(f, SSM_DTYPE_F32, 3, si);
    add_out(f, "out", &a->out), add_out(f, "final_states", &a->final_states);
    return f->nouts == (kind == CONV_FWD ? 2 : 1) ? 0 : -1;
}

/* Decode through a rolling state: B 4, D 12, W 4, L 5, a pool of 6 slots (row 1 padding),
 * separate final pool. */
static int make_conv_update(ssmt_fixture * f, ssmt_rng * rng) {
    const int64_t                   B = 4, D = 12, W = 4, L = 5, slots = 6;
    const int64_t                   sx[2] = {B, D}, sw[2] = {D, W}, sd[1] = {D}, sl[3] = {slots, D, L}, si[1] = {B};
    ssm_causal_conv1d_update_args * a = &f->args.conv_update;
    f->op = "causal_conv1d_update", f->run = run_causal_conv1d_update;
    ssm_conv1d_params_init(&f->params.conv);
    a->x = own_normal(f, rng, SSM_DTYPE_F32, 2, sx, 1.0), a->weight = own_normal(f, rng, SSM_DTYPE_F32, 2, sw, 0.5);
    a->bias = own_normal(f, rng, SSM_DTYPE_F32, 1, sd, 0.5),
    a->conv_state = own_normal(f, rng, SSM_DTYPE_F32, 3, sl, 1.0);
    a->state_batch_indices = own(f, SSM_DTYPE_I64, 1, si);
    a->out = own(f, SSM_DTYPE_F32, 2, sx), a->final_conv_state = own(f, SSM_DTYPE_F32, 3, sl);
    const ssm_tensor * const need[7] = {&a->x,   &a->weight,          &a->bias, &a->conv_state, &a->state_batch_indices,
                                        &a->out, &a->final_conv_state};
    if (!all_present(need, 7)) return -1;
    static const int map[4] = {2, -1, 5, 0};
    for (int64_t r = 0; r < B; ++r) ssmt_set(&a->state_batch_indices, r, map[r]);
    add_out(f, "out", &a->out), add_out(f, "final_conv_state", &a->final_conv_state);
    return 0;
}

/* M 6, D 16, groups of 8, z gate after the norm. */
static int make_norm(ssmt_fixture * f, ssmt_rng * rng, int bwd) {
    const int64_t s2[2] = {6, 16}, s1[1] = {16};
    ssm_rmsnorm_params_init(&f->params.norm);
    f->params.norm.group_size = 8;
    const ssm_tensor x = own_normal(f, rng, SSM_DTYPE_F32, 2, s2, 1.0),
                     z = own_normal(f, rng, SSM_DTYPE_F32, 2, s2, 1.0);
    ssm_tensor w = own(f, SSM_DTYPE_F32, 1, s1);
    if (w.data != NULL) ssmt_fill_uniform(rng, &w, 0.5, 1.5);
    if (bwd) {
        ssm_rmsnorm_gated_bwd_args * a = &f->args.norm_bwd;
        f->op = "rmsnorm_gated_bwd", f->run = run_rmsnorm_gated_bwd;
        a->x = x, a->z = z, a->weight = w, a->dout = own_normal(f, rng, SSM_DTYPE_F32, 2, s2, 1.0);
        a->dx = own(f, SSM_DTYPE_F32, 2, s2), a->dz = own(f, SSM_DTYPE_F32, 2, s2),
        a->dweight = own(f, SSM_DTYPE_F32, 1, s1);
        add_out(f, "dx", &a->dx), add_out(f, "dz", &a->dz), add_out(f, "dweight", &a->dweight);
        return f->nouts == 3 && x.data && z.data && w.data && a->dout.data ? 0 : -1;
    }
    ssm_rmsnorm_gated_args * a = &f->args.norm;
    f->op = "rmsnorm_gated", f->run = run_rmsnorm_gated;
    a->x = x, a->z = z, a->weight = w, a->out = own(f, SSM_DTYPE_F32, 2, s2);
    add_out(f, "out", &a->out);
    return f->nouts == 1 && x.data && z.data && w.data ? 0 : -1;
}

/* ---- Mamba-3 SISO ------------------------------------------------------------------------- */
static const int64_t m3_lens[3] = {7, 0, 10};

/* B 2, S 24, H 4, Hq 2, K 16, V 8, A 4, chunk 8, d and z, the four initial and final states;
 * varlen: 7, 0, 10 tokens in f16. */
static int m3_problem(ssmt_fixture * f, ssmt_rng * rng, int varlen, ssmt_mamba3_config * cfg,
                      ssmt_mamba3_problem ** out) {
    ssmt_mamba3_config_init(cfg);
    cfg->seqlen = 24, cfg->chunk = 8, cfg->has_states = 1, cfg->has_final = 1;
    if (varlen) cfg->nseq = 3, cfg->seqlens = m3_lens, cfg->dtype = SSM_DTYPE_F16;
    ssmt_mamba3_problem * p = hold(f, 0, sizeof *p, free_m3);
    if (p == NULL || ssmt_mamba3_random_args(rng, cfg, p) != 0) return p ? drop(f, 0) : -1;
    ssmt_mamba3_params(cfg, &f->params.m3);
    *out = p;
    return 0;
}

enum { M3_ANGLE, M3_ANGLE_BWD, M3_FWD, M3_SISO, M3_SISO_VARLEN, M3_BWD };

static int make_siso(ssmt_fixture * f, ssmt_rng * rng, int which) {
    ssmt_mamba3_config    cfg;
    ssmt_mamba3_problem * p;
    if (m3_problem(f, rng, which == M3_SISO_VARLEN, &cfg, &p) != 0) return -1;
    switch (which) {
        case M3_ANGLE: {
            ssm_mamba3_angle_cumsum_args * a = &f->args.angle;
            f->op = "mamba3_angle_cumsum", f->run = run_mamba3_angle_cumsum;
            *a = p->angle_args;
            add_out(f, "angles_cumsum", &a->angles_cumsum), add_out(f, "final_angle_state", &a->final_angle_state);
            return 0;
        }
        case M3_ANGLE_BWD: {
            ssm_mamba3_angle_cumsum_bwd_args * a = &f->args.angle_bwd;
            f->op = "mamba3_angle_cumsum_bwd", f->run = run_mamba3_angle_cumsum_bwd;
            const ssm_tensor * ang = &p->args.angles;
            a->angles = *ang, a->dt = p->args.dt, a->cu_seqlens = p->args.cu_seqlens;
            a->dangles_cumsum = own_normal(f, rng, SSM_DTYPE_F32, 4, ang->shape, 1.0);
            a->dfinal_angle_state = own_normal(f, rng, SSM_DTYPE_F32, 3, p->args.angle_state.shape, 1.0);
            a->dangles = own_like(f, ang, SSM_DTYPE_F32), a->ddt = own_like(f, &p->args.dt, SSM_DTYPE_F32);
            a->dangle_state = own_like(f, &p->args.angle_state, SSM_DTYPE_F32);
            add_out(f, "dangles", &a->dangles), add_out(f, "ddt", &a->ddt),
                add_out(f, "dangle_state", &a->dangle_state);
            return f->nouts == 3 && a->dangles_cumsum.data && a->dfinal_angle_state.data ? 0 : -1;
        }
        case M3_FWD: {
            ssm_mamba3_siso_fwd_args * a = &f->args.siso_fwd;
            f->op = "mamba3_siso_fwd", f->run = run_mamba3_siso_fwd;
            *a = p->fwd_args;
            add_out(f, "out", &a->out), add_out(f, "final_ssm_state", &a->final_ssm_state);
            add_out(f, "final_k_state", &a->final_k_state), add_out(f, "final_v_state", &a->final_v_state);
            return 0;
        }
        case M3_SISO:
        case M3_SISO_VARLEN: {
            ssm_mamba3_siso_args * a = &f->args.siso;
            f->op = "mamba3_siso", f->run = run_mamba3_siso;
            *a = p->args;
            add_state_outs(f, &a->out, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state,
                           &a->final_v_state);
            return 0;
        }
        default: {
            ssmt_mamba3_bwd_problem * q = hold(f, 1, sizeof *q, free_m3_bwd);
            if (q == NULL || ssmt_mamba3_bwd_alloc(rng, &cfg, p, 1, q) != 0) return q ? drop(f, 1) : -1;
            ssm_mamba3_siso_bwd_args * a = &f->args.siso_bwd;
            f->op = "mamba3_siso_bwd", f->run = run_mamba3_siso_bwd;
            *a = q->args;
            add_out(f, "dq", &a->dq), add_out(f, "dk", &a->dk), add_out(f, "dv", &a->dv), add_out(f, "dadt", &a->dadt);
            add_out(f, "ddt", &a->ddt), add_out(f, "dtrap", &a->dtrap), add_out(f, "dq_bias", &a->dq_bias);
            add_out(f, "dk_bias", &a->dk_bias), add_out(f, "dangles", &a->dangles), add_out(f, "dd", &a->dd);
            add_out(f, "dz", &a->dz), add_out(f, "dangle_state", &a->dangle_state);
            add_out(f, "dssm_state", &a->dssm_state), add_out(f, "dk_state", &a->dk_state);
            add_out(f, "dv_state", &a->dv_state);
            return 0;
        }
    }
}

/* Decode: B 3, a pool of 5 slots with state_batch_indices (row 2 padding), separate finals. */
static int make_siso_step(ssmt_fixture * f, ssmt_rng * rng) {
    ssmt_mamba3_config cfg;
    ssmt_mamba3_config_init(&cfg);
    cfg.batch = 3;
    ssmt_mamba3_step_problem * p = hold(f, 0, sizeof *p, free_m3_step);
    if (p == NULL || ssmt_mamba3_random_step(rng, &cfg, 5, 1, p) != 0) return p ? drop(f, 0) : -1;
    ssmt_mamba3_params(&cfg, &f->params.m3);
    ssm_mamba3_siso_step_args * a = &f->args.siso_step;
    f->op = "mamba3_siso_step", f->run = run_mamba3_siso_step;
    *a = p->args;
    add_state_outs(f, &a->out, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state, &a->final_v_state);
    return 0;
}

/* ---- Mamba-3 MIMO ------------------------------------------------------------------------- */
static const int64_t mimo_lens[2] = {9, 7};

/* B 2, S 20, H 4, G 2, R 2, N 16, P 8, chunk 8, div 4, reduced output, z and d, the four
 * initial and final states; varlen: 9 and 7 tokens. */
static int mimo_problem(ssmt_fixture * f, ssmt_rng * rng, int varlen, ssmt_mimo_config * cfg,
                        ssmt_mimo_problem ** out) {
    ssmt_mimo_config_init(cfg);
    cfg->has_states = 1, cfg->has_final = 1;
    if (varlen) cfg->nseq = 2, cfg->seqlens = mimo_lens;
    ssmt_mimo_problem * p = hold(f, 0, sizeof *p, free_mimo);
    if (p == NULL || ssmt_mimo_random_args(rng, cfg, p) != 0) return p ? drop(f, 0) : -1;
    f->params.mimo = p->params;
    *out = p;
    return 0;
}

enum { MIMO_FWD, MIMO_FWD_VARLEN, MIMO_BWD };

static int make_mimo(ssmt_fixture * f, ssmt_rng * rng, int which) {
    ssmt_mimo_config    cfg;
    ssmt_mimo_problem * p;
    if (mimo_problem(f, rng, which == MIMO_FWD_VARLEN, &cfg, &p) != 0) return -1;
    if (which != MIMO_BWD) {
        f->op = "mamba3_mimo", f->run = run_mamba3_mimo;
        f->args.mimo = p->args;
        ssm_mamba3_mimo_args * a = &f->args.mimo;
        add_state_outs(f, &a->out, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state, &a->final_v_state);
        return 0;
    }
    ssmt_mimo_bwd_problem * q = hold(f, 1, sizeof *q, free_mimo_bwd);
    if (q == NULL || ssmt_mimo_bwd_alloc(rng, &cfg, p, 1, q) != 0) return q ? drop(f, 1) : -1;
    ssm_mamba3_mimo_bwd_args * a = &f->args.mimo_bwd;
    f->op = "mamba3_mimo_bwd", f->run = run_mamba3_mimo_bwd;
    *a = q->args;
    add_out(f, "dq", &a->dq), add_out(f, "dk", &a->dk), add_out(f, "dv", &a->dv), add_out(f, "dz", &a->dz);
    add_out(f, "dq_bias", &a->dq_bias), add_out(f, "dk_bias", &a->dk_bias), add_out(f, "dmimo_v", &a->dmimo_v);
    add_out(f, "dmimo_z", &a->dmimo_z), add_out(f, "dmimo_o", &a->dmimo_o), add_out(f, "dd", &a->dd);
    add_out(f, "dadt", &a->dadt), add_out(f, "ddt", &a->ddt), add_out(f, "dtrap", &a->dtrap);
    add_out(f, "dangles", &a->dangles), add_out(f, "doutproj_norm_weight", &a->doutproj_norm_weight);
    add_out(f, "dangle_state", &a->dangle_state), add_out(f, "dssm_state", &a->dssm_state);
    add_out(f, "dk_state", &a->dk_state), add_out(f, "dv_state", &a->dv_state);
    return 0;
}

/* The seed's bwd_fwd problem at the default MIMO shape, every output; contexts in the exact
 * or the upstream-bf16 rounding mode (bf16 activations then). */
static int make_mimo_bwd_fwd(ssmt_fixture * f, ssmt_rng * rng, int32_t ref_mode) {
    ssmt_mimo_config cfg;
    ssmt_mimo_config_init(&cfg);
    f->ref_mode = ref_mode;
    if (ref_mode == SSM_REF_UPSTREAM_BF16) cfg.dtype = SSM_DTYPE_BF16;
    ssmt_mimo_bwd_fwd_problem * p = hold(f, 0, sizeof *p, free_mimo_bwd_fwd);
    if (p == NULL || ssmt_mimo_random_bwd_fwd(rng, &cfg, p) != 0) return p ? drop(f, 0) : -1;
    f->params.mimo = p->params;
    ssm_mamba3_mimo_bwd_fwd_args * a = &f->args.mimo_bwd_fwd;
    f->op = "mamba3_mimo_bwd_fwd", f->run = run_mamba3_mimo_bwd_fwd;
    *a = p->args;
    add_out(f, "dmimo_o", &a->dmimo_o), add_out(f, "states", &a->states), add_out(f, "dz", &a->dz);
    add_out(f, "dmimo_z", &a->dmimo_z), add_out(f, "qk_dot", &a->qk_dot);
    return 0;
}

/* Decode: B 3, a pool of 5 slots with state_batch_indices, separate finals. */
static int make_mimo_step(ssmt_fixture * f, ssmt_rng * rng) {
    ssmt_mimo_config cfg;
    ssmt_mimo_config_init(&cfg);
    cfg.batch = 3;
    ssmt_mimo_step_problem * p = hold(f, 0, sizeof *p, free_mimo_step);
    if (p == NULL || ssmt_mimo_random_step(rng, &cfg, 5, 1, p) != 0) return p ? drop(f, 0) : -1;
    f->params.mimo = p->params;
    ssm_mamba3_mimo_step_args * a = &f->args.mimo_step;
    f->op = "mamba3_mimo_step", f->run = run_mamba3_mimo_step;
    *a = p->args;
    add_state_outs(f, &a->out, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state, &a->final_v_state);
    return 0;
}

/* ---- the table ------------------------------------------------------------------------------ */
typedef struct fixture_entry {
    const char * variant; /* "" for the operator's plain fixture */
    int (*make)(ssmt_fixture * f, ssmt_rng * rng, int arg);
    int arg;
} fixture_entry;

static int mk_chain(ssmt_fixture * f, ssmt_rng * r, int w) { return make_chain(f, r, w); }
static int mk_scan(ssmt_fixture * f, ssmt_rng * r, int w) { return make_scan(f, r, w % 3, w / 3); }
static int mk_scan_bwd(ssmt_fixture * f, ssmt_rng * r, int w) { return make_scan_bwd(f, r, w); }
static int mk_m2_step(ssmt_fixture * f, ssmt_rng * r, int w) { return make_m2_step(f, r, w); }
static int mk_conv(ssmt_fixture * f, ssmt_rng * r, int w) { return make_conv(f, r, w); }
static int mk_conv_update(ssmt_fixture * f, ssmt_rng * r, int w) { return (void)w, make_conv_update(f, r); }
static int mk_norm(ssmt_fixture * f, ssmt_rng * r, int w) { return make_norm(f, r, w); }
static int mk_siso(ssmt_fixture * f, ssmt_rng * r, int w) { return make_siso(f, r, w); }
static int mk_siso_step(ssmt_fixture * f, ssmt_rng * r, int w) { return (void)w, make_siso_step(f, r); }
static int mk_mimo_bwd_fwd(ssmt_fixture * f, ssmt_rng * r, int w) { return make_mimo_bwd_fwd(f, r, w); }
static int mk_mimo(ssmt_fixture * f, ssmt_rng * r, int w) { return make_mimo(f, r, w); }
static int mk_mimo_step(ssmt_fixture * f, ssmt_rng * r, int w) { return (void)w, make_mimo_step(f, r); }

/* In the order of the public header. */
static const fixture_entry fixture_table[] = {
    {"", mk_chain, CH_CUMSUM},
    {"seq_idx", mk_chain, CH_STATE},
    {"seq_idx", mk_chain, CH_PASSING},
    {"seq_idx", mk_chain, CH_BMM},
    {"seq_idx", mk_chain, CH_CHUNK_SCAN},
    {"dense", mk_scan, M2_DENSE},
    {"seq_idx", mk_scan, M2_SEQ},
    {"varlen", mk_scan, M2_VARLEN},
    {"caller workspace", mk_scan, 3 + M2_DENSE},
    {"dense", mk_scan_bwd, M2_DENSE},
    {"varlen", mk_scan_bwd, M2_VARLEN},
    {"pool", mk_m2_step, 0},
    {"per head", mk_m2_step, 1},
    {"states", mk_conv, CONV_FWD},
    {"seq_idx", mk_conv, CONV_FWD_SEQ},
    {"", mk_conv, CONV_BWD},
    {"pool", mk_conv_update, 0},
    {"", mk_norm, 0},
    {"", mk_norm, 1},
    {"", mk_siso, M3_ANGLE},
    {"", mk_siso, M3_ANGLE_BWD},
    {"", mk_siso, M3_FWD},
    {"", mk_siso, M3_SISO},
    {"varlen", mk_siso, M3_SISO_VARLEN},
    {"", mk_siso, M3_BWD},
    {"pool", mk_siso_step, 0},
    {"", mk_mimo_bwd_fwd, SSM_REF_EXACT},
    {"upstream bf16", mk_mimo_bwd_fwd, SSM_REF_UPSTREAM_BF16},
    {"", mk_mimo, MIMO_FWD},
    {"varlen", mk_mimo, MIMO_FWD_VARLEN},
    {"", mk_mimo, MIMO_BWD},
    {"pool", mk_mimo_step, 0},
};

int ssmt_fixture_count(void) { return (int)(sizeof fixture_table / sizeof fixture_table[0]); }

int ssmt_fixture_make(int i, uint64_t seed, ssmt_fixture * f) {
    memset(f, 0, sizeof *f);
    if (i < 0 || i >= ssmt_fixture_count()) return -1;
    ssmt_rng rng;
    ssmt_rng_seed(&rng, seed + (uint64_t)i);
    const fixture_entry * e = &fixture_table[i];
    if (e->make(f, &rng, e->arg) != 0 || f->op == NULL) {
        ssmt_fixture_free(f);
        return -1;
    }
    snprintf(f->name, sizeof f->name, "%s%s%s", f->op, e->variant[0] ? "/" : "", e->variant);
    return 0;
}

void ssmt_fixture_free(ssmt_fixture * f) {
    for (int i = 0; i < f->nhosts; ++i) ssmt_free(&f->hosts[i]);
    for (int s = 0; s < 2; ++s)
        if (f->problem[s] != NULL) f->problem_free[s](f->problem[s]);
    memset(f, 0, sizeof *f);
}

ssm_status ssmt_fixture_run(ssm_context * ctx, const ssmt_fixture * f) { return f->run(ctx, f); }

/* ---- output bytes ----------------------------------------------------------------------------- */
size_t ssmt_view_bytes(const ssm_tensor * t) {
    if (t->data == NULL || ssmt_numel(t) == 0) return 0;
    int64_t last = 0;
    for (int32_t d = 0; d < t->ndim; ++d) last += (t->shape[d] - 1) * t->strides[d];
    return (size_t)(last + 1) * ssm_dtype_size((ssm_dtype)t->dtype);
}

size_t ssmt_fixture_out_bytes(const ssmt_fixture * f) {
    size_t n = 0;
    for (int o = 0; o < f->nouts; ++o) n += ssmt_view_bytes(&f->outs[o]);
    return n;
}

void ssmt_fixture_fill(const ssmt_fixture * f, unsigned char byte) {
    for (int o = 0; o < f->nouts; ++o) memset(f->outs[o].data, byte, ssmt_view_bytes(&f->outs[o]));
}

void ssmt_fixture_save(const ssmt_fixture * f, void * dst) {
    unsigned char * p = dst;
    for (int o = 0; o < f->nouts; ++o) {
        const size_t n = ssmt_view_bytes(&f->outs[o]);
        memcpy(p, f->outs[o].data, n);
        p += n;
    }
}

void ssmt_fixture_load(const ssmt_fixture * f, const void * src) {
    const unsigned char * p = src;
    for (int o = 0; o < f->nouts; ++o) {
        const size_t n = ssmt_view_bytes(&f->outs[o]);
        memcpy(f->outs[o].data, p, n);
        p += n;
    }
}

int ssmt_fixture_diff(const ssmt_fixture * f, const void * saved) {
    const unsigned char * p = saved;
    for (int o = 0; o < f->nouts; ++o) {
        const size_t n = ssmt_view_bytes(&f->outs[o]);
        if (memcmp(f->outs[o].data, p, n) != 0) return o;
        p += n;
    }
    return -1;
}

void ssmt_m3_expect_outs(const char * what, const ssm_tensor * const got[5], const ssm_tensor * const want[5],
                         double tol, void (*angle_check)(const char *, const ssm_tensor *, const ssm_tensor *)) {
    static const char * const names[5] = {"out", "final_angle", "final_ssm", "final_k", "final_v"};
    for (int i = 0; i < 5; ++i) {
        char label[200];
        snprintf(label, sizeof label, "%s %s", what, names[i]);
        if (i == 1 && angle_check != NULL)
            angle_check(label, got[i], want[i]);
        else
            ssmt_expect_close(label, got[i], want[i], tol);
    }
}

void ssmt_f32_alloc(ssmt_host * h, const ssm_tensor * const * like, int n) {
    for (int i = 0; i < n; ++i) h[i] = ssmt_alloc(SSM_DTYPE_F32, like[i]->ndim, like[i]->shape);
}

void ssmt_f32_pools(ssmt_host * pool, const ssm_tensor * const * like, const ssm_tensor * const * init, int n) {
    ssmt_f32_alloc(pool, like, n);
    for (int i = 0; i < n; ++i) {
        if (init != NULL)
            ssmt_copy(&pool[i].t, init[i]);
        else
            ssmt_fill_value(&pool[i].t, 0);
    }
}
