/*
 * test_mamba2_validation.c — argument validation of every Mamba-2 forward entry point.
 * For each rule: the expected status, a non-empty last error naming the operator, and
 * every buffer of the fixture (inputs and outputs, NaN-poisoned outputs included) byte-
 * identical to its content before the call. Each case runs with ctx NULL (CPU backend)
 * and with a REF-backend context: validation comes before dispatch.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { OP_CUMSUM, OP_STATE, OP_PASSING, OP_BMM, OP_CSCAN, OP_SCAN, OP_WSSIZE };
static const char * const op_names[] = {
    "mamba2_chunk_cumsum", "mamba2_chunk_state", "mamba2_state_passing",      "mamba2_bmm",
    "mamba2_chunk_scan",   "mamba2_scan",        "mamba2_scan_workspace_size"};

#define MAXH 40
typedef struct fixture {
    ssmt_host   own[MAXH]; /* the fixture's own buffers (fx_tensor) */
    int         nown;
    ssmt_bufset set;    /* every buffer a call could touch: own and borrowed, snapshotted */
    void *      ws_buf; /* 64-aligned workspace, also snapshotted */
    size_t      ws_size;
} fixture;

static ssm_context * g_ref;
static ssm_context * g_cuda; /* may be NULL */
static ssmt_rng      g_rng;

enum { B = 2, S = 20, H = 4, P = 4, N = 4, G = 2, Q = 8, NC = 3 };

/* The params every case starts from: the defaults with chunk_size Q. */
static ssm_mamba2_params chunk_params(void) {
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    p.chunk_size = Q;
    return p;
}

static ssm_tensor fx_tensor(fixture * f, ssm_dtype dt, int32_t ndim, const int64_t * shape) {
    ssmt_host * h = &f->own[f->nown++];
    *h = ssmt_alloc(dt, ndim, shape);
    ssmt_bufset_add(&f->set, h);
    if (dt == SSM_DTYPE_F32) ssmt_fill_normal(&g_rng, &h->t, 0.0, 1.0);
    return h->t;
}

static void fx_free(fixture * f) {
    for (int i = 0; i < f->nown; ++i) ssmt_free(&f->own[i]);
    free(f->ws_buf);
    memset(f, 0, sizeof *f);
}

static ssm_status call_op(int op, ssm_context * ctx, const ssm_mamba2_params * p, const void * args, void * ws,
                          size_t wss) {
    switch (op) {
        case OP_CUMSUM: return ssm_mamba2_chunk_cumsum(ctx, p, args);
        case OP_STATE: return ssm_mamba2_chunk_state(ctx, p, args);
        case OP_PASSING: return ssm_mamba2_state_passing(ctx, p, args);
        case OP_BMM: return ssm_mamba2_bmm(ctx, p, args);
        case OP_CSCAN: return ssm_mamba2_chunk_scan(ctx, p, args);
        case OP_SCAN: return ssm_mamba2_scan(ctx, p, args, ws, wss);
        default: {
            size_t bytes = 0;
            return ssm_mamba2_scan_workspace_size(ctx, p, args, &bytes);
        }
    }
}

/* Runs one invalid call with ctx NULL and REF; checks status, message and untouched memory. */
static void expect_ex(fixture * f, int op, const ssm_mamba2_params * p, const void * args, void * ws, size_t wss,
                      ssm_status want, const char * what, const char * must_mention, int ref_too) {
    for (int k = 0; k < 1 + (ref_too ? 1 : 0); ++k) {
        ssm_context * ctx = k == 0 ? NULL : g_ref;
        void *        snaps[SSMT_BUFSET_MAX];
        ssmt_bufset_snapshot(&f->set, snaps);
        void * ws_snap = NULL;
        if (f->ws_buf != NULL) {
            ws_snap = malloc(f->ws_size);
            memcpy(ws_snap, f->ws_buf, f->ws_size);
        }
        const ssm_status got = call_op(op, ctx, p, args, ws, wss);
        const char *     msg = ssm_context_last_error(ctx);
        const char *     opname = op == OP_WSSIZE ? "mamba2_scan" : op_names[op];
        ssmt_check_refusal(op_names[op], what, k ? "REF" : "NULL", got, want, msg, opname, SSMT_NAME_ANYWHERE,
                           must_mention);
        ssmt_bufset_check_unchanged(&f->set, snaps, op_names[op], what);
        if (ws_snap != NULL) {
            TEST_CHECK(memcmp(ws_snap, f->ws_buf, f->ws_size) == 0, "%s / %s: workspace was modified", op_names[op],
                       what);
            free(ws_snap);
        }
        if (k == 0 && got == want) printf("ok  %-28s %-44s %s\n", op_names[op], what, msg);
    }
}

static void expect(fixture * f, int op, const ssm_mamba2_params * p, const void * args, ssm_status want,
                   const char * what) {
    expect_ex(f, op, p, args, NULL, 0, want, what, NULL, 1);
}

/* The valid call must succeed on REF (so the failures above come from the mutation). */
static void expect_ok(int op, const ssm_mamba2_params * p, const void * args) {
    const ssm_status st = call_op(op, g_ref, p, args, NULL, 0);
    TEST_CHECK(st == SSM_STATUS_OK, "%s: the valid fixture fails: %s", op_names[op], ssm_context_last_error(g_ref));
}

/* One case of a test: `m` = `a`, then the mutation (an expression), then one expect() on the
 * test's fixture `f`, operator `op` and params `p`. */
#define CASE(mutation, want, what)          \
    do {                                    \
        m = a;                              \
        mutation;                           \
        expect(&f, op, &p, &m, want, what); \
    } while (0)

/* ---- generic rules -------------------------------------------------------------------- */

static void params_rules(fixture * f, int op, const void * args) {
    ssm_mamba2_params p = chunk_params();
    expect(f, op, NULL, args, SSM_STATUS_INVALID_ARGUMENT, "params NULL");
    expect(f, op, &p, NULL, SSM_STATUS_INVALID_ARGUMENT, "args NULL");
    ssm_mamba2_params q = p;
    q.size = sizeof q - 1;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "params.size too small");
    q = p;
    q.size = 0;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "params.size 0");
    q = p;
    q.chunk_size = 0;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "chunk 0");
    q = p;
    q.chunk_size = 2000;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "chunk 2000");
    q = p;
    q.dt_limit_lo = 0.5f;
    q.dt_limit_hi = 0.1f;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "dt_limit lo > hi");
    q = p;
    q.dt_limit_lo = NAN;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "dt_limit lo NaN");
    if (g_cuda != NULL) {
        const ssm_status got = call_op(op, g_cuda, &p, args, NULL, 0);
        ssmt_expect_cuda_refusal(op_names[op], g_cuda, got);
    }
}

/* Mutations of one tensor field (at byte offset `off` of the args struct). */
static void tensor_rules(fixture * f, int op, const void * args, size_t args_size, size_t off, const char * name,
                         int is_output, int is_index, int optional) {
    ssm_mamba2_params p = chunk_params();
    unsigned char buf[sizeof(ssm_mamba2_chunk_scan_args) + sizeof(ssm_mamba2_scan_args)];
    ssm_tensor *  t = (ssm_tensor *)(void *)(buf + off);
    char          what[128];
#define RESET() memcpy(buf, args, args_size)
    RESET();
    if (t->data == NULL) return; /* absent optional in this fixture */
    t->ndim -= 1;
    snprintf(what, sizeof what, "%s wrong ndim", name);
    expect(f, op, &p, buf, SSM_STATUS_INVALID_SHAPE, what);
    for (int32_t i = 0; i < t->ndim; ++i) {
        RESET();
        t->shape[i] += Q; /* +Q: also changes NC where S defines it (S+1 could stay valid) */
        snprintf(what, sizeof what, "%s.shape[%d] + Q", name, (int)i);
        expect(f, op, &p, buf, SSM_STATUS_INVALID_SHAPE, what);
    }
    RESET();
    t->dtype = is_index ? SSM_DTYPE_F32 : SSM_DTYPE_I32;
    snprintf(what, sizeof what, "%s bad dtype", name);
    expect(f, op, &p, buf, SSM_STATUS_INVALID_LAYOUT, what);
    RESET();
    t->dtype = 77;
    snprintf(what, sizeof what, "%s unknown dtype", name);
    expect(f, op, &p, buf, SSM_STATUS_INVALID_LAYOUT, what);
    RESET();
    t->device.type = SSM_DEVICE_CUDA;
    snprintf(what, sizeof what, "%s on CUDA device", name);
    expect(f, op, &p, buf, SSM_STATUS_INVALID_LAYOUT, what);
    if (!optional) {
        RESET();
        t->data = NULL;
        snprintf(what, sizeof what, "%s data NULL", name);
        expect(f, op, &p, buf, SSM_STATUS_INVALID_ARGUMENT, what);
    }
    if (is_output) {
        RESET();
        t->strides[t->ndim - 1] = 0;
        snprintf(what, sizeof what, "%s zero stride", name);
        expect(f, op, &p, buf, SSM_STATUS_INVALID_LAYOUT, what);
        RESET();
        t->strides[0] = t->strides[1]; /* rows alias */
        snprintf(what, sizeof what, "%s aliasing strides", name);
        if (t->shape[0] > 1) expect(f, op, &p, buf, SSM_STATUS_INVALID_LAYOUT, what);
    }
#undef RESET
}

/* out (at out_off) placed on top of the input at in_off (same bytes). */
static void overlap_rule(fixture * f, int op, const void * args, size_t args_size, size_t out_off, size_t in_off,
                         const char * what) {
    ssm_mamba2_params p = chunk_params();
    unsigned char buf[sizeof(ssm_mamba2_chunk_scan_args) + sizeof(ssm_mamba2_scan_args)];
    memcpy(buf, args, args_size);
    ssm_tensor *       out = (ssm_tensor *)(void *)(buf + out_off);
    const ssm_tensor * in = (const ssm_tensor *)(const void *)(buf + in_off);
    out->data = (char *)in->data + ssm_dtype_size((ssm_dtype)in->dtype); /* partial overlap */
    out->dtype = in->dtype;
    expect_ex(f, op, &p, buf, NULL, 0, SSM_STATUS_INVALID_LAYOUT, what, "overlap", 1);
}

#define TENSOR_RULES(op, ARGS, field, is_out, is_idx, opt) \
    tensor_rules(&f, op, &a, sizeof a, offsetof(ARGS, field), #field, is_out, is_idx, opt)
#define OVERLAP(op, ARGS, out, in) \
    overlap_rule(&f, op, &a, sizeof a, offsetof(ARGS, out), offsetof(ARGS, in), #out " overlaps " #in)

/* seq_idx (B, S) with a boundary in each row; ids 0.. */
static ssm_tensor fx_seq_idx(fixture * f) {
    const int64_t sh[2] = {B, S};
    ssm_tensor    t = fx_tensor(f, SSM_DTYPE_I32, 2, sh);
    for (int64_t i = 0; i < B * S; ++i) ssmt_set(&t, i, (i % S) < 9 ? 0.0 : 1.0);
    return t;
}

/* seq_idx value rules (decreasing, negative); works on any args struct holding seq_idx. */
static void seq_idx_rules(fixture * f, int op, const void * args, const ssm_tensor * seq) {
    ssm_mamba2_params p = chunk_params();
    const double keep5 = ssmt_get(seq, 5), keep6 = ssmt_get(seq, 6), keep_b1 = ssmt_get(seq, S);
    ssmt_set(seq, 5, 3.0);
    ssmt_set(seq, 6, 2.0);
    expect_ex(f, op, &p, args, NULL, 0, SSM_STATUS_INVALID_ARGUMENT, "seq_idx decreasing", "seq_idx[0,6]", 1);
    ssmt_set(seq, 5, keep5);
    ssmt_set(seq, 6, keep6);
    ssmt_set(seq, S, -1.0);
    expect_ex(f, op, &p, args, NULL, 0, SSM_STATUS_INVALID_ARGUMENT, "seq_idx negative", "seq_idx[1,0]", 1);
    ssmt_set(seq, S, keep_b1);
}

/* ---- per operator ----------------------------------------------------------------------- */

static void test_chunk_cumsum(void) {
    fixture                      f = {0};
    const int64_t                sdt[3] = {B, S, H}, sh[1] = {H}, so[4] = {B, H, NC, Q};
    ssm_mamba2_chunk_cumsum_args a = {.dt = fx_tensor(&f, SSM_DTYPE_F32, 3, sdt),
                                      .a = fx_tensor(&f, SSM_DTYPE_F32, 1, sh),
                                      .dt_bias = fx_tensor(&f, SSM_DTYPE_F32, 1, sh),
                                      .dt_out = fx_tensor(&f, SSM_DTYPE_F64, 4, so),
                                      .da_cumsum = fx_tensor(&f, SSM_DTYPE_F64, 4, so)};
    const int                    op = OP_CUMSUM;
    params_rules(&f, op, &a);
    TENSOR_RULES(op, ssm_mamba2_chunk_cumsum_args, dt, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_cumsum_args, a, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_cumsum_args, dt_bias, 0, 0, 1);
    TENSOR_RULES(op, ssm_mamba2_chunk_cumsum_args, dt_out, 1, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_cumsum_args, da_cumsum, 1, 0, 0);
    OVERLAP(op, ssm_mamba2_chunk_cumsum_args, dt_out, dt);
    OVERLAP(op, ssm_mamba2_chunk_cumsum_args, da_cumsum, dt_out);
    ssm_mamba2_params p = chunk_params();
    p.chunk_size = 16; /* NC would be 2, Q 16 */
    expect(&f, op, &p, &a, SSM_STATUS_INVALID_SHAPE, "chunk_size differs from dt_out Q");
    p.chunk_size = Q;
    expect_ok(op, &p, &a);
    fx_free(&f);
}

static void test_chunk_state(void) {
    fixture       f = {0};
    const int64_t sx[4] = {B, S, H, P}, sb[4] = {B, S, G, N}, sdt[4] = {B, H, NC, Q}, sst[5] = {B, NC, H, P, N};
    ssm_mamba2_chunk_state_args a = {.b = fx_tensor(&f, SSM_DTYPE_F32, 4, sb),
                                     .x = fx_tensor(&f, SSM_DTYPE_F32, 4, sx),
                                     .dt = fx_tensor(&f, SSM_DTYPE_F32, 4, sdt),
                                     .da_cumsum = fx_tensor(&f, SSM_DTYPE_F32, 4, sdt),
                                     .seq_idx = fx_seq_idx(&f),
                                     .states = fx_tensor(&f, SSM_DTYPE_F64, 5, sst)};
    const int                   op = OP_STATE;
    params_rules(&f, op, &a);
    TENSOR_RULES(op, ssm_mamba2_chunk_state_args, b, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_state_args, x, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_state_args, dt, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_state_args, da_cumsum, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_state_args, seq_idx, 0, 1, 1);
    TENSOR_RULES(op, ssm_mamba2_chunk_state_args, states, 1, 0, 0);
    OVERLAP(op, ssm_mamba2_chunk_state_args, states, x);
    OVERLAP(op, ssm_mamba2_chunk_state_args, states, da_cumsum);
    seq_idx_rules(&f, op, &a, &a.seq_idx);
    ssm_mamba2_params           p = chunk_params();
    ssm_mamba2_chunk_state_args m = a;
    m.b.shape[2] = 3; /* H=4 not a multiple of G=3 */
    expect_ex(&f, op, &p, &m, NULL, 0, SSM_STATUS_INVALID_SHAPE, "H % G != 0", "multiple", 1);
    p.chunk_size = 16;
    expect(&f, op, &p, &a, SSM_STATUS_INVALID_SHAPE, "chunk_size differs from dt Q");
    p.chunk_size = Q;
    m = a;
    m.x.shape[1] = 12; /* S=12 needs NC=2, dt has 3 */
    m.b.shape[1] = 12;
    m.seq_idx = (ssm_tensor){0};
    expect(&f, op, &p, &m, SSM_STATUS_INVALID_SHAPE, "NC != ceil(S/Q)");
    expect_ok(op, &p, &a);
    fx_free(&f);
}

static void test_state_passing(void) {
    fixture                       f = {0};
    const int64_t                 sst[5] = {B, NC, H, P, N}, sdc[3] = {B, H, NC}, sfin[4] = {B, H, P, N};
    ssm_mamba2_state_passing_args a = {.states = fx_tensor(&f, SSM_DTYPE_F32, 5, sst),
                                       .da_chunk_cumsum = fx_tensor(&f, SSM_DTYPE_F32, 3, sdc),
                                       .initial_states = fx_tensor(&f, SSM_DTYPE_F32, 4, sfin),
                                       .seq_idx = fx_seq_idx(&f),
                                       .states_in = fx_tensor(&f, SSM_DTYPE_F64, 5, sst),
                                       .final_states = fx_tensor(&f, SSM_DTYPE_F64, 4, sfin)};
    const int                     op = OP_PASSING;
    params_rules(&f, op, &a);
    TENSOR_RULES(op, ssm_mamba2_state_passing_args, states, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_state_passing_args, da_chunk_cumsum, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_state_passing_args, initial_states, 0, 0, 1);
    TENSOR_RULES(op, ssm_mamba2_state_passing_args, states_in, 1, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_state_passing_args, final_states, 1, 0, 1);
    OVERLAP(op, ssm_mamba2_state_passing_args, states_in, states);
    OVERLAP(op, ssm_mamba2_state_passing_args, final_states, initial_states);
    OVERLAP(op, ssm_mamba2_state_passing_args, final_states, states_in);
    seq_idx_rules(&f, op, &a, &a.seq_idx);
    ssm_mamba2_params             p = chunk_params();
    ssm_mamba2_state_passing_args m = a;
    m.seq_idx.shape[1] = 25; /* needs 4 chunks */
    expect(&f, op, &p, &m, SSM_STATUS_INVALID_SHAPE, "seq_idx S beyond NC*Q");
    m.seq_idx.shape[1] = 16; /* needs 2 chunks */
    expect(&f, op, &p, &m, SSM_STATUS_INVALID_SHAPE, "seq_idx S below (NC-1)*Q");
    CASE(m.seq_idx.dtype = SSM_DTYPE_F32, SSM_STATUS_INVALID_LAYOUT, "seq_idx F32");
    expect_ok(op, &p, &a);
    fx_free(&f);
}

static void test_bmm(void) {
    fixture             f = {0};
    const int64_t       sb[4] = {B, S, G, N}, scb[5] = {B, NC, G, Q, Q};
    ssm_mamba2_bmm_args a = {.c = fx_tensor(&f, SSM_DTYPE_F32, 4, sb),
                             .b = fx_tensor(&f, SSM_DTYPE_F32, 4, sb),
                             .seq_idx = fx_seq_idx(&f),
                             .cb = fx_tensor(&f, SSM_DTYPE_F64, 5, scb)};
    const int           op = OP_BMM;
    params_rules(&f, op, &a);
    TENSOR_RULES(op, ssm_mamba2_bmm_args, c, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_bmm_args, b, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_bmm_args, seq_idx, 0, 1, 1);
    TENSOR_RULES(op, ssm_mamba2_bmm_args, cb, 1, 0, 0);
    OVERLAP(op, ssm_mamba2_bmm_args, cb, c);
    OVERLAP(op, ssm_mamba2_bmm_args, cb, b);
    seq_idx_rules(&f, op, &a, &a.seq_idx);
    ssm_mamba2_params p = chunk_params();
    expect_ok(op, &p, &a);
    fx_free(&f);
}

static void test_chunk_scan(void) {
    fixture       f = {0};
    const int64_t sx[4] = {B, S, H, P}, sb[4] = {B, S, G, N}, sdt[4] = {B, H, NC, Q}, sst[5] = {B, NC, H, P, N};
    const int64_t scb[5] = {B, NC, G, Q, Q}, shp[2] = {H, P};
    ssm_mamba2_chunk_scan_args a = {.cb = fx_tensor(&f, SSM_DTYPE_F32, 5, scb),
                                    .x = fx_tensor(&f, SSM_DTYPE_F32, 4, sx),
                                    .dt = fx_tensor(&f, SSM_DTYPE_F32, 4, sdt),
                                    .da_cumsum = fx_tensor(&f, SSM_DTYPE_F32, 4, sdt),
                                    .c = fx_tensor(&f, SSM_DTYPE_F32, 4, sb),
                                    .states_in = fx_tensor(&f, SSM_DTYPE_F32, 5, sst),
                                    .d = fx_tensor(&f, SSM_DTYPE_F32, 2, shp),
                                    .z = fx_tensor(&f, SSM_DTYPE_F32, 4, sx),
                                    .seq_idx = fx_seq_idx(&f),
                                    .out = fx_tensor(&f, SSM_DTYPE_F64, 4, sx),
                                    .out_x = fx_tensor(&f, SSM_DTYPE_F64, 4, sx)};
    const int                  op = OP_CSCAN;
    params_rules(&f, op, &a);
    TENSOR_RULES(op, ssm_mamba2_chunk_scan_args, cb, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_scan_args, x, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_scan_args, dt, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_scan_args, da_cumsum, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_scan_args, c, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_scan_args, states_in, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_scan_args, z, 0, 0, 1);
    TENSOR_RULES(op, ssm_mamba2_chunk_scan_args, seq_idx, 0, 1, 1);
    TENSOR_RULES(op, ssm_mamba2_chunk_scan_args, out, 1, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_chunk_scan_args, out_x, 1, 0, 1);
    OVERLAP(op, ssm_mamba2_chunk_scan_args, out, x);
    OVERLAP(op, ssm_mamba2_chunk_scan_args, out, z);
    OVERLAP(op, ssm_mamba2_chunk_scan_args, out_x, states_in);
    OVERLAP(op, ssm_mamba2_chunk_scan_args, out_x, out);
    seq_idx_rules(&f, op, &a, &a.seq_idx);
    ssm_mamba2_params          p = chunk_params();
    ssm_mamba2_chunk_scan_args m = a;
    m.z = (ssm_tensor){0};
    expect_ex(&f, op, &p, &m, NULL, 0, SSM_STATUS_INVALID_ARGUMENT, "out_x without z", "out_x", 1);
    CASE(m.d.ndim = 3, SSM_STATUS_INVALID_SHAPE, "d with 3 dims");
    CASE(m.d.shape[1] = P + 1, SSM_STATUS_INVALID_SHAPE, "d (H, P+1)");
    m = a;
    m.d.ndim = 1; /* (H) is fine */
    expect_ok(op, &p, &m);
    m = a;
    m.c.shape[2] = 3;
    expect_ex(&f, op, &p, &m, NULL, 0, SSM_STATUS_INVALID_SHAPE, "H % G != 0", "multiple", 1);
    p.chunk_size = 16;
    expect(&f, op, &p, &a, SSM_STATUS_INVALID_SHAPE, "chunk_size differs from dt Q");
    p.chunk_size = Q;
    expect_ok(op, &p, &a);
    fx_free(&f);
}

/* scan fixtures come from the shared random generator (all optional inputs present). */
static void scan_fixture(fixture * f, ssmt_mamba2_problem * pr, int varlen) {
    static const int64_t lens[3] = {7, 0, 13};
    ssmt_mamba2_config   cfg;
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = B;
    cfg.seqlen = S;
    cfg.nheads = H;
    cfg.headdim = P;
    cfg.dstate = N;
    cfg.ngroups = G;
    cfg.d_mode = 1;
    cfg.has_z = cfg.has_dt_bias = cfg.has_initial = cfg.has_final = cfg.dt_softplus = 1;
    cfg.out_dtype = SSM_DTYPE_F64;
    if (varlen) {
        cfg.nseq = 3;
        cfg.seqlens = lens;
    } else {
        cfg.seq_segments = 2;
    }
    TEST_CHECK(ssmt_mamba2_random_args(&g_rng, &cfg, pr) == 0, "scan fixture");
    ssmt_host * all[] = {&pr->x,           &pr->dt,         &pr->a,
                         &pr->b,           &pr->c,          &pr->d,
                         &pr->z,           &pr->dt_bias,    &pr->initial_states,
                         &pr->seq_idx,     &pr->cu_seqlens, &pr->out,
                         &pr->final_states};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i]->t.data != NULL) ssmt_bufset_add(&f->set, all[i]); /* borrowed: freed with the problem */
}

static void scan_rules(int op) {
    fixture             f = {0};
    ssmt_mamba2_problem pr;
    scan_fixture(&f, &pr, 0);
    const ssm_mamba2_scan_args a = pr.args;
    params_rules(&f, op, &a);
    TENSOR_RULES(op, ssm_mamba2_scan_args, x, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_scan_args, dt, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_scan_args, a, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_scan_args, b, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_scan_args, c, 0, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_scan_args, z, 0, 0, 1);
    TENSOR_RULES(op, ssm_mamba2_scan_args, dt_bias, 0, 0, 1);
    TENSOR_RULES(op, ssm_mamba2_scan_args, initial_states, 0, 0, 1);
    TENSOR_RULES(op, ssm_mamba2_scan_args, seq_idx, 0, 1, 1);
    TENSOR_RULES(op, ssm_mamba2_scan_args, out, 1, 0, 0);
    TENSOR_RULES(op, ssm_mamba2_scan_args, final_states, 1, 0, 1);
    OVERLAP(op, ssm_mamba2_scan_args, out, x);
    OVERLAP(op, ssm_mamba2_scan_args, out, z);
    OVERLAP(op, ssm_mamba2_scan_args, final_states, initial_states);
    OVERLAP(op, ssm_mamba2_scan_args, final_states, out);
    seq_idx_rules(&f, op, &a, &pr.seq_idx.t);
    ssm_mamba2_params p = chunk_params();
    p.dt_softplus = 1;
    ssm_mamba2_scan_args m = a;
    m.b.shape[2] = 3;
    m.c.shape[2] = 3;
    expect_ex(&f, op, &p, &m, NULL, 0, SSM_STATUS_INVALID_SHAPE, "H % G != 0", "multiple", 1);
    CASE(m.d.ndim = 3, SSM_STATUS_INVALID_SHAPE, "d with 3 dims");
    CASE(m.x.dtype = SSM_DTYPE_I32, SSM_STATUS_INVALID_LAYOUT, "x I32");
    CASE(m.seq_idx.dtype = SSM_DTYPE_F32, SSM_STATUS_INVALID_LAYOUT, "seq_idx F32");

    /* cu_seqlens on this batch-2 fixture, with and without seq_idx. */
    const int64_t scu[1] = {3};
    ssmt_host     cu = ssmt_alloc(SSM_DTYPE_I32, 1, scu);
    ssmt_bufset_add(&f.set, &cu);
    ssmt_set(&cu.t, 0, 0.0);
    ssmt_set(&cu.t, 1, 5.0);
    ssmt_set(&cu.t, 2, S);
    CASE(m.cu_seqlens = cu.t, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens with seq_idx");
    m.seq_idx = (ssm_tensor){0};
    expect_ex(&f, op, &p, &m, NULL, 0, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens with batch 2", "x.shape[0]", 1);

    /* workspace */
    if (op == OP_SCAN) {
        size_t need = 0;
        TEST_CHECK_STATUS(ssm_mamba2_scan_workspace_size(NULL, &p, &a, &need), SSM_STATUS_OK);
        f.ws_size = need + 128;
        f.ws_buf = aligned_alloc(64, (f.ws_size + 63) / 64 * 64);
        memset(f.ws_buf, 0x33, f.ws_size);
        if (need > 0)
            expect_ex(&f, op, &p, &a, f.ws_buf, need - 1, SSM_STATUS_WORKSPACE_TOO_SMALL, "workspace too small",
                      "workspace", 0);
        else
            printf("note: CPU workspace size is 0 for this fixture; too-small case skipped\n");
        expect_ex(&f, op, &p, &a, (char *)f.ws_buf + 8, need, SSM_STATUS_INVALID_ARGUMENT, "workspace misaligned",
                  "aligned", 1);
    } else {
        const ssm_status st = ssm_mamba2_scan_workspace_size(NULL, &p, &a, NULL);
        TEST_CHECK(st == SSM_STATUS_INVALID_ARGUMENT, "workspace_size(bytes NULL) gives %s", ssm_status_string(st));
    }
    expect_ok(OP_SCAN, &p, &a);
    free(f.ws_buf); /* the borrowed buffers belong to pr; cu is freed below */
    ssmt_free(&cu);
    ssmt_mamba2_problem_free(&pr);
}

static void varlen_rules(int op) {
    fixture             f = {0};
    ssmt_mamba2_problem pr;
    scan_fixture(&f, &pr, 1);
    const ssm_mamba2_scan_args a = pr.args;
    ssm_mamba2_params          p = chunk_params();
    p.dt_softplus = 1;
    const ssm_tensor * cu = &pr.cu_seqlens.t;
    const double       c0 = ssmt_get(cu, 0), c1 = ssmt_get(cu, 1), c2 = ssmt_get(cu, 2), c3 = ssmt_get(cu, 3);
    ssmt_set(cu, 0, 1.0);
    expect_ex(&f, op, &p, &a, NULL, 0, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens[0] != 0", "cu_seqlens[0]", 1);
    ssmt_set(cu, 0, c0);
    ssmt_set(cu, 2, c1 - 1);
    expect_ex(&f, op, &p, &a, NULL, 0, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens decreasing", "cu_seqlens[2]", 1);
    ssmt_set(cu, 2, c2);
    ssmt_set(cu, 3, c3 - 1);
    expect_ex(&f, op, &p, &a, NULL, 0, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens last != S", "cu_seqlens[3]", 1);
    ssmt_set(cu, 3, c3);
    ssm_mamba2_scan_args m;
    CASE(m.cu_seqlens.shape[0] = 1, SSM_STATUS_INVALID_SHAPE, "cu_seqlens length 1");
    CASE(m.cu_seqlens.dtype = SSM_DTYPE_F32, SSM_STATUS_INVALID_LAYOUT, "cu_seqlens F32");
    CASE(m.cu_seqlens.ndim = 2, SSM_STATUS_INVALID_SHAPE, "cu_seqlens 2-D");
    CASE(m.initial_states.shape[0] = 1 /* batch, not nseq */, SSM_STATUS_INVALID_SHAPE,
         "initial_states leading dim batch (varlen)");
    CASE(m.final_states.shape[0] = 2, SSM_STATUS_INVALID_SHAPE, "final_states leading dim 2 (nseq 3)");
    expect_ok(OP_SCAN, &p, &a);
    ssmt_mamba2_problem_free(&pr);
}

int main(void) {
    g_ref = ssmt_ref_ctx_or_exit(SSM_REF_EXACT);
    g_cuda = ssmt_cuda_ctx_or_null("note: a CUDA-backend context cannot be created; the UNSUPPORTED dispatch case is "
                                   "skipped");
    ssmt_rng_seed(&g_rng, 7);
    test_chunk_cumsum();
    test_chunk_state();
    test_state_passing();
    test_bmm();
    test_chunk_scan();
    scan_rules(OP_SCAN);
    scan_rules(OP_WSSIZE);
    varlen_rules(OP_SCAN);
    varlen_rules(OP_WSSIZE);
    ssm_context_free(g_cuda);
    ssm_context_free(g_ref);
    TEST_EXIT();
}
