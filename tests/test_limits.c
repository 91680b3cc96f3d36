/*
 * test_limits.c — the size limits of docs/ops/limits.md, on the reference and the CPU backend.
 *
 * Part 1, every operator alike: each fixture of tests/common/fixtures.h (every public operator,
 * some in several variants) gets, in turn for each of its present tensors, a view whose element
 * count overflows int64, one whose byte size does, one whose last element's offset does (in
 * elements, and in bytes only), and one with a stride of INT64_MIN. Each call must fail with
 * INVALID_SHAPE, a message that starts with the operator's name and names the tensor, and leave
 * every output byte as it was.
 *
 * Part 2, the limits of single operators: a call just inside each limit a CPU or REF call can
 * reach (cheap: stride-0 views over tiny buffers, empty outputs) and one just beyond, with the
 * documented status and a message naming the operator. Huge broadcast shapes also check that
 * validation takes constant time on a stride-0 index tensor and never overflows.
 */
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"

#define BIG (INT64_C(1) << 62)

static ssm_context * g_ctx[2];
static const char *  g_ctx_name[2] = {"ref", "cpu"};

/* A message that starts with "op:" (or "op_workspace_size:", the query a caller-workspace
 * call makes first) and contains `word` (NULL: any). */
static int names(const ssm_context * ctx, const char * op, const char * word) {
    const char * msg = ssm_context_last_error(ctx);
    const size_t n = strlen(op);
    const int    lead = strncmp(msg, op, n) == 0 && (msg[n] == ':' || strncmp(msg + n, "_workspace_size:", 16) == 0);
    return lead && (word == NULL || strstr(msg, word) != NULL);
}

/* ---- part 1: overflowing views of every tensor of every operator ------------------------ */

enum { MUT_COUNT, MUT_BYTES, MUT_OFFSET, MUT_OFFSET_BYTES, MUT_STRIDE_MIN, MUT_N };
static const char * const mut_name[MUT_N] = {"element count", "byte size", "offset", "byte offset", "INT64_MIN stride"};

/* t mutated by kind m (returns 0 where the kind does not apply: one dim cannot hold more
 * than INT64_MAX elements). Only the view changes: the call must reject it before any use. */
static int mutate(ssm_tensor * t, int m) {
    const int64_t elem = (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    switch (m) {
        case MUT_COUNT: /* 2^62 · 4 elements, every stride 0 (no offset grows) */
            if (t->ndim < 2) return 0;
            for (int32_t d = 0; d < t->ndim; ++d) t->shape[d] = 1, t->strides[d] = 0;
            t->shape[0] = BIG, t->shape[1] = 4;
            return 1;
        case MUT_BYTES: /* INT64_MAX / elem + 1 elements fit in int64, their bytes do not */
            for (int32_t d = 0; d < t->ndim; ++d) t->shape[d] = 1, t->strides[d] = 0;
            if (t->ndim == 0) return 0;
            t->shape[0] = INT64_MAX / elem + 1;
            return 1;
        case MUT_OFFSET: /* the last element at 2·2^62 elements */
            if (t->ndim == 0) return 0;
            t->shape[0] = 3, t->strides[0] = BIG;
            return 1;
        case MUT_OFFSET_BYTES: /* the last element at 2^62 elements: its bytes overflow */
            if (t->ndim == 0) return 0;
            t->shape[0] = 2, t->strides[0] = BIG;
            return 1;
        default: /* |INT64_MIN| does not fit */
            if (t->ndim == 0) return 0;
            t->shape[0] = 2, t->strides[0] = INT64_MIN;
            return 1;
    }
}

static void overflow_views(void) {
    int calls = 0;
    for (int i = 0; i < ssmt_fixture_count(); ++i) {
        ssmt_fixture f;
        if (ssmt_fixture_make(i, 7, &f) != 0) {
            TEST_CHECK(0, "fixture %d could not be built", i);
            continue;
        }
        const ssm_op_info * info = ssm_op_get(ssm_op_find(f.op));
        TEST_CHECK(info != NULL, "%s: not in the schema", f.op);
        const size_t    bytes = ssmt_fixture_out_bytes(&f);
        unsigned char * want = malloc(bytes + 1);
        ssmt_fixture_fill(&f, 0xA5);
        ssmt_fixture_save(&f, want);
        for (int32_t a = 0; info != NULL && a < info->nargs; ++a) {
            ssm_tensor * t = (ssm_tensor *)(void *)((char *)&f.args + info->args[a].offset);
            if (t->data == NULL) continue;
            for (int m = 0; m < MUT_N; ++m) {
                const ssm_tensor keep = *t;
                if (!mutate(t, m)) continue;
                for (int c = 0; c < 2; ++c) {
                    const ssm_status st = ssmt_fixture_run(g_ctx[c], &f);
                    ++calls;
                    TEST_CHECK(st == SSM_STATUS_INVALID_SHAPE, "%s (%s): %s with an overflowing %s: %s (%s)", f.name,
                               g_ctx_name[c], info->args[a].name, mut_name[m], ssm_status_string(st),
                               ssm_context_last_error(g_ctx[c]));
                    TEST_CHECK(names(g_ctx[c], f.op, info->args[a].name), "%s (%s): message '%s' names neither %s nor %s",
                               f.name, g_ctx_name[c], ssm_context_last_error(g_ctx[c]), f.op, info->args[a].name);
                    const int o = ssmt_fixture_diff(&f, want);
                    TEST_CHECK(o < 0, "%s (%s): a failed call wrote %s", f.name, g_ctx_name[c], o < 0 ? "" : f.out_names[o]);
                    if (o >= 0) ssmt_fixture_load(&f, want);
                }
                *t = keep;
            }
        }
        /* The untouched fixture still runs: the mutations were the only fault. */
        for (int c = 0; c < 2; ++c) TEST_CHECK_STATUS(ssmt_fixture_run(g_ctx[c], &f), SSM_STATUS_OK);
        free(want);
        ssmt_fixture_free(&f);
    }
    printf("overflowing views: %d calls\n", calls);
}

/* ---- part 2: helpers for problems built from broadcast views ---------------------------- */

/* Tiny buffers that broadcast views point into (every float dtype reads them as zeros; index
 * views read the value set in g_idx). */
static double  g_zero[64];
static int32_t g_idx[4];

/* A stride-0 view of `ndim` dims over g_zero (f16: 2-byte elements let the broadcast shapes
 * grow the furthest) or g_idx (i32). */
static ssm_tensor bview(ssm_dtype dt, int32_t ndim, const int64_t * shape) {
    ssm_tensor t = ssm_tensor_make(dt == SSM_DTYPE_I32 ? (void *)g_idx : (void *)g_zero, dt, ndim, shape);
    for (int32_t d = 0; d < ndim; ++d) t.strides[d] = 0;
    return t;
}
#define BV(ndim, ...)  bview(SSM_DTYPE_F16, ndim, (const int64_t[]){__VA_ARGS__})
#define BI(ndim, ...)  bview(SSM_DTYPE_I32, ndim, (const int64_t[]){__VA_ARGS__})

/* A contiguous f32 output view over its own zeroed buffer of up to 4096 floats (released by
 * out_free); an empty shape gets a 1-float buffer. */
static float * g_outs[16];
static int     g_nouts;
static ssm_tensor oview(int32_t ndim, const int64_t * shape) {
    ssm_tensor t = ssm_tensor_make(NULL, SSM_DTYPE_F32, ndim, shape);
    int64_t    n = 1;
    for (int32_t d = 0; d < ndim; ++d) n *= shape[d];
    if (n > 4096) abort(); /* a test bug: outputs stay tiny */
    g_outs[g_nouts] = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    t.data = g_outs[g_nouts++];
    return t;
}
#define OV(ndim, ...) oview(ndim, (const int64_t[]){__VA_ARGS__})
static void out_free(void) {
    while (g_nouts > 0) free(g_outs[--g_nouts]);
}

/* Runs `call` on both backends: status want, and a message naming op (and word) on failure. */
#define EXPECT(want, op, word, call)                                                                              \
    do {                                                                                                          \
        for (int c_ = 0; c_ < 2; ++c_) {                                                                          \
            ssm_context * ctx = g_ctx[c_];                                                                        \
            const ssm_status st_ = (call);                                                                        \
            TEST_CHECK(st_ == (want), "%s:%d %s (%s): %s, expected %s (%s)", __FILE__, __LINE__, op, g_ctx_name[c_], \
                       ssm_status_string(st_), ssm_status_string(want), ssm_context_last_error(ctx));             \
            if ((want) != SSM_STATUS_OK)                                                                          \
                TEST_CHECK(names(ctx, op, word), "%s (%s): message '%s' should name %s and '%s'", op,             \
                           g_ctx_name[c_], ssm_context_last_error(ctx), op, (word) ? (word) : "");                 \
        }                                                                                                         \
    } while (0)

/* ---- Mamba-2 ------------------------------------------------------------------------------ */

/* chunk_size ∈ [1, 1024] on a real fixture (mamba2_scan: the chunk is in no shape). */
static void m2_chunk_size(void) {
    ssmt_fixture f;
    if (ssmt_fixture_make(5, 7, &f) != 0 || strcmp(f.op, "mamba2_scan") != 0) {
        TEST_CHECK(0, "fixture 5 is not mamba2_scan");
        return;
    }
    static const int64_t q[] = {1, 1024, 1025, 0};
    static const ssm_status want[] = {SSM_STATUS_OK, SSM_STATUS_OK, SSM_STATUS_INVALID_ARGUMENT,
                                      SSM_STATUS_INVALID_ARGUMENT};
    for (int i = 0; i < 4; ++i) {
        f.params.m2.chunk_size = q[i];
        EXPECT(want[i], "mamba2_scan", "chunk_size", ssmt_fixture_run(ctx, &f));
    }
    ssmt_fixture_free(&f);
    /* The decode step has no chunk: any chunk_size passes. */
    if (ssmt_fixture_make(11, 7, &f) != 0 || strcmp(f.op, "mamba2_step") != 0) {
        TEST_CHECK(0, "fixture 11 is not mamba2_step");
        return;
    }
    f.params.m2.chunk_size = 0;
    EXPECT(SSM_STATUS_OK, "mamba2_step", NULL, ssmt_fixture_run(ctx, &f));
    f.params.m2.chunk_size = INT64_MAX;
    EXPECT(SSM_STATUS_OK, "mamba2_step", NULL, ssmt_fixture_run(ctx, &f));
    ssmt_fixture_free(&f);
}

/* S = INT64_MAX with an empty batch: ceil(S/Q) must not overflow in any chunked operator. */
static void m2_huge_seqlen(void) {
    const int64_t S = INT64_MAX, Q = 256, NC = S / Q + 1;
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    {
        ssm_mamba2_chunk_cumsum_args a;
        memset(&a, 0, sizeof a);
        a.dt = BV(3, 0, S, 2);
        a.a = BV(1, 2);
        a.dt_out = OV(4, 0, 2, NC, Q);
        a.da_cumsum = OV(4, 0, 2, NC, Q);
        EXPECT(SSM_STATUS_OK, "mamba2_chunk_cumsum", NULL, ssm_mamba2_chunk_cumsum(ctx, &p, &a));
        a.dt_out.shape[2] = NC - 1;
        EXPECT(SSM_STATUS_INVALID_SHAPE, "mamba2_chunk_cumsum", "dt_out", ssm_mamba2_chunk_cumsum(ctx, &p, &a));
    }
    {
        ssm_mamba2_bmm_args a;
        memset(&a, 0, sizeof a);
        a.b = BV(4, 0, S, 1, 4);
        a.c = BV(4, 0, S, 1, 4);
        a.cb = OV(5, 0, NC, 1, Q, Q);
        EXPECT(SSM_STATUS_OK, "mamba2_bmm", NULL, ssm_mamba2_bmm(ctx, &p, &a));
    }
    {
        ssm_mamba2_scan_args a;
        memset(&a, 0, sizeof a);
        a.x = BV(4, 0, S, 2, 4);
        a.dt = BV(3, 0, S, 2);
        a.a = BV(1, 2);
        a.b = BV(4, 0, S, 1, 8);
        a.c = BV(4, 0, S, 1, 8);
        a.out = OV(4, 0, S, 2, 4);
        EXPECT(SSM_STATUS_OK, "mamba2_scan", NULL, ssm_mamba2_scan(ctx, &p, &a, NULL, 0));
        size_t bytes = 0;
        EXPECT(SSM_STATUS_OK, "mamba2_scan", NULL, ssm_mamba2_scan_workspace_size(ctx, &p, &a, &bytes));
        /* An empty call needs no workspace: 2^40 rows of 2^40 heads are never planned. */
        ssm_mamba2_scan_args e = a;
        const int64_t        R = INT64_C(1) << 40;
        e.x = BV(4, R, 0, R, 4), e.dt = BV(3, R, 0, R), e.a = BV(1, R), e.b = BV(4, R, 0, 1, 8), e.c = e.b;
        e.out = OV(4, R, 0, R, 4);
        bytes = 1;
        EXPECT(SSM_STATUS_OK, "mamba2_scan", NULL, ssm_mamba2_scan_workspace_size(ctx, &p, &e, &bytes));
        TEST_CHECK(bytes == 0, "an empty mamba2_scan asks for %zu bytes of workspace", bytes);
        EXPECT(SSM_STATUS_OK, "mamba2_scan", NULL, ssm_mamba2_scan(ctx, &p, &e, NULL, 0));
        ssm_mamba2_scan_bwd_args g;
        memset(&g, 0, sizeof g);
        g.x = a.x, g.dt = a.dt, g.a = a.a, g.b = a.b, g.c = a.c;
        g.dout = BV(4, 0, S, 2, 4);
        g.dx = OV(4, 0, S, 2, 4);
        EXPECT(SSM_STATUS_OK, "mamba2_scan_bwd", NULL, ssm_mamba2_scan_bwd(ctx, &p, &g));
    }
    out_free();
}

/* state_passing: S = NC·Q must fit in int64 (INVALID_SHAPE beyond). */
static void m2_state_passing_nc(void) {
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    p.chunk_size = 1024;
    const int64_t in = INT64_MAX / 1024;
    for (int beyond = 0; beyond < 2; ++beyond) {
        const int64_t NC = in + beyond;
        ssm_mamba2_state_passing_args a;
        memset(&a, 0, sizeof a);
        a.states = BV(5, 1, NC, 0, 4, 8);
        a.da_chunk_cumsum = BV(3, 1, 0, NC);
        a.states_in = OV(5, 1, NC, 0, 4, 8);
        a.final_states = OV(4, 1, 0, 4, 8);
        EXPECT(beyond ? SSM_STATUS_INVALID_SHAPE : SSM_STATUS_OK, "mamba2_state_passing", "NC",
               ssm_mamba2_state_passing(ctx, &p, &a));
        out_free();
    }
}

/* Decode steps with a stride-0 state_batch_indices over a huge batch (H = 0 or D = 0: nothing
 * to write): one slot for every row is used twice (INVALID_ARGUMENT), all padding is valid;
 * both answered in constant time, without sizing anything by the batch. mamba3_siso_step has
 * no empty output (H, V ≥ 1): only the rejected case. */
static void step_broadcast_indices(void) {
    const int64_t B = (INT64_C(1) << 60) + 1;
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    for (int pad = 0; pad < 2; ++pad) {
        g_idx[0] = pad ? -1 : 0;
        const ssm_status want = pad ? SSM_STATUS_OK : SSM_STATUS_INVALID_ARGUMENT;
        {
            ssm_mamba2_step_args a;
            memset(&a, 0, sizeof a);
            a.x = BV(3, B, 0, 4);
            a.dt = BV(3, B, 0, 4);
            a.a = BV(3, 0, 4, 1);
            a.b = BV(3, B, 1, 1);
            a.c = BV(3, B, 1, 1);
            a.state = BV(4, 2, 0, 4, 1);
            a.state_batch_indices = BI(1, B);
            a.out = OV(3, B, 0, 4);
            EXPECT(want, "mamba2_step", "state_batch_indices", ssm_mamba2_step(ctx, &p, &a));
        }
        {
            ssm_conv1d_params cp;
            ssm_conv1d_params_init(&cp);
            ssm_causal_conv1d_update_args a;
            memset(&a, 0, sizeof a);
            a.x = BV(2, B, 0);
            a.weight = BV(2, 0, 4);
            a.conv_state = BV(3, 2, 0, 3);
            a.state_batch_indices = BI(1, B);
            a.out = OV(2, B, 0);
            EXPECT(want, "causal_conv1d_update", "state_batch_indices", ssm_causal_conv1d_update(ctx, &cp, &a));
        }
        if (!pad) { /* H, V ≥ 1: out is never empty; the view is rejected before any write */
            ssm_mamba3_params mp;
            ssm_mamba3_params_init(&mp);
            ssm_mamba3_siso_step_args a;
            memset(&a, 0, sizeof a);
            a.q = BV(3, B, 1, 2);
            a.k = BV(3, B, 1, 2);
            a.v = BV(3, B, 1, 1);
            a.adt = BV(2, B, 1);
            a.dt = BV(2, B, 1);
            a.trap = BV(2, B, 1);
            a.q_bias = BV(2, 1, 2);
            a.k_bias = BV(2, 1, 2);
            a.angles = BV(3, B, 1, 1);
            a.angle_state = BV(3, 2, 1, 1);
            a.ssm_state = BV(4, 2, 1, 1, 2);
            a.k_state = BV(3, 2, 1, 2);
            a.v_state = BV(3, 2, 1, 1);
            a.state_batch_indices = BI(1, B);
            a.out = OV(3, 1, 1, 1);
            a.out.shape[0] = B; /* a claimed view over one float: the call must not reach it */
            EXPECT(want, "mamba3_siso_step", "state_batch_indices", ssm_mamba3_siso_step(ctx, &mp, &a));
        }
    }
    g_idx[0] = 0;
    out_free();
}

/* cu_seqlens broadcast (stride 0) over 2^60 entries of 0: 2^60 − 1 empty sequences, S = 0;
 * valid, and checked in constant time. A broadcast 1 cannot start at 0. */
static void broadcast_cu_seqlens(void) {
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    for (int bad = 0; bad < 2; ++bad) {
        g_idx[0] = bad;
        ssm_mamba2_scan_args a;
        memset(&a, 0, sizeof a);
        a.x = BV(4, 1, 0, 2, 4);
        a.dt = BV(3, 1, 0, 2);
        a.a = BV(1, 2);
        a.b = BV(4, 1, 0, 1, 8);
        a.c = BV(4, 1, 0, 1, 8);
        a.cu_seqlens = BI(1, INT64_C(1) << 60);
        a.out = OV(4, 1, 0, 2, 4);
        EXPECT(bad ? SSM_STATUS_INVALID_ARGUMENT : SSM_STATUS_OK, "mamba2_scan", "cu_seqlens",
               ssm_mamba2_scan(ctx, &p, &a, NULL, 0));
        out_free();
    }
    g_idx[0] = 0;
}

/* The inner dimensions (P, N, K, V, W, L ≤ 2^24) and a head's state (P·N, V·K ≤ 2^31), on
 * empty calls (batch 0: validation only, nothing to compute). */
static void inner_dims(void) {
    const int64_t M = INT64_C(1) << 24;
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    for (int beyond = 0; beyond < 2; ++beyond) {
        const int64_t    D = M + beyond;
        const ssm_status want = beyond ? SSM_STATUS_INVALID_SHAPE : SSM_STATUS_OK;
        {
            ssm_mamba2_bmm_args a;
            memset(&a, 0, sizeof a);
            a.b = BV(4, 0, 1, 1, D);
            a.c = a.b;
            a.cb = OV(5, 0, 1, 1, 256, 256);
            EXPECT(want, "mamba2_bmm", "(N)", ssm_mamba2_bmm(ctx, &p, &a));
        }
        {
            ssm_mamba2_step_args a;
            memset(&a, 0, sizeof a);
            a.x = BV(3, 0, 1, 1);
            a.dt = a.x;
            a.a = BV(3, 1, 1, D);
            a.b = BV(3, 0, 1, D);
            a.c = a.b;
            a.state = BV(4, 0, 1, 1, D);
            a.out = OV(3, 0, 1, 1);
            EXPECT(want, "mamba2_step", "(N)", ssm_mamba2_step(ctx, &p, &a));
        }
        for (int k = 0; k < 2; ++k) { /* mamba2_scan: P alone, then N alone */
            const int64_t P = k == 0 ? D : 1, N = k == 0 ? 1 : D;
            ssm_mamba2_scan_args a;
            memset(&a, 0, sizeof a);
            a.x = BV(4, 0, 1, 1, P);
            a.dt = BV(3, 0, 1, 1);
            a.a = BV(1, 1);
            a.b = BV(4, 0, 1, 1, N);
            a.c = a.b;
            a.out = OV(4, 0, 1, 1, P);
            EXPECT(want, "mamba2_scan", k == 0 ? "(P)" : "(N)", ssm_mamba2_scan(ctx, &p, &a, NULL, 0));
        }
        { /* P·N = 2^31 (P = 2^24, N = 128), then N = 129 */
            ssm_mamba2_scan_args a;
            memset(&a, 0, sizeof a);
            a.x = BV(4, 0, 1, 1, M);
            a.dt = BV(3, 0, 1, 1);
            a.a = BV(1, 1);
            a.b = BV(4, 0, 1, 1, 128 + beyond);
            a.c = a.b;
            a.out = OV(4, 0, 1, 1, M);
            EXPECT(want, "mamba2_scan", "P·N", ssm_mamba2_scan(ctx, &p, &a, NULL, 0));
        }
        {
            ssm_conv1d_params cp;
            ssm_conv1d_params_init(&cp);
            ssm_causal_conv1d_args a;
            memset(&a, 0, sizeof a);
            a.x = BV(3, 0, 1, 4);
            a.weight = BV(2, 1, D);
            a.out = OV(3, 0, 1, 4);
            EXPECT(want, "causal_conv1d", "(W)", ssm_causal_conv1d(ctx, &cp, &a));
            ssm_causal_conv1d_update_args u;
            memset(&u, 0, sizeof u);
            u.x = BV(2, 0, 1);
            u.weight = BV(2, 1, 4);
            u.conv_state = BV(3, 0, 1, D);
            u.out = OV(2, 0, 1);
            EXPECT(want, "causal_conv1d_update", "(L)", ssm_causal_conv1d_update(ctx, &cp, &u));
        }
        for (int k = 0; k < 3; ++k) { /* mamba3_siso_fwd: K alone, V alone, V·K = 2^31 + (0 or 2^24) */
            ssm_mamba3_params mp;
            ssm_mamba3_params_init(&mp);
            const int64_t K = k == 0 ? D + beyond : k == 1 ? 2 : 128 + 2 * beyond, V = k == 0 ? 1 : k == 1 ? D : M;
            ssm_mamba3_siso_fwd_args a;
            memset(&a, 0, sizeof a);
            a.q = BV(4, 0, 1, 1, K);
            a.k = a.q;
            a.v = BV(4, 0, 1, 1, V);
            a.adt = BV(3, 0, 1, 1);
            a.dt = a.adt;
            a.trap = a.adt;
            a.q_bias = BV(2, 1, K);
            a.k_bias = a.q_bias;
            a.angles = BV(4, 0, 1, 1, 1);
            a.out = OV(4, 0, 1, 1, V);
            EXPECT(want, "mamba3_siso_fwd", k == 0 ? "(K)" : k == 1 ? "(V)" : "V·K", ssm_mamba3_siso_fwd(ctx, &mp, &a));
        }
        out_free();
    }
}

/* The calls that crashed or overflowed before the inner-dimension limit: a broadcast input
 * claiming 2^61 for an inner dimension, with small real outputs. The reference
 * causal_conv1d_update sized its window scratch as (L + 1)·8 bytes, which wrapped to 8 and was
 * written past; the CPU planners of bmm and siso_fwd overflowed int64. */
static void inner_dim_reproducers(void) {
    const int64_t H61 = INT64_C(1) << 61;
    {
        ssm_conv1d_params cp;
        ssm_conv1d_params_init(&cp);
        ssm_causal_conv1d_update_args a;
        memset(&a, 0, sizeof a);
        a.x = BV(2, 1, 1);
        a.weight = BV(2, 1, 2);
        a.conv_state = BV(3, 1, 1, H61);
        a.out = OV(2, 1, 1);
        EXPECT(SSM_STATUS_INVALID_SHAPE, "causal_conv1d_update", "(L)", ssm_causal_conv1d_update(ctx, &cp, &a));
    }
    {
        ssm_mamba2_params p;
        ssm_mamba2_params_init(&p);
        p.chunk_size = 1;
        ssm_mamba2_bmm_args a;
        memset(&a, 0, sizeof a);
        a.b = BV(4, 1, 1, 1, H61);
        a.c = a.b;
        a.cb = OV(5, 1, 1, 1, 1, 1);
        EXPECT(SSM_STATUS_INVALID_SHAPE, "mamba2_bmm", "(N)", ssm_mamba2_bmm(ctx, &p, &a));
    }
    {
        ssm_mamba3_params mp;
        ssm_mamba3_params_init(&mp);
        ssm_mamba3_siso_fwd_args a;
        memset(&a, 0, sizeof a);
        a.q = BV(4, 1, 1, 1, H61);
        a.k = a.q;
        a.v = BV(4, 1, 1, 1, 1);
        a.adt = BV(3, 1, 1, 1);
        a.dt = a.adt;
        a.trap = a.adt;
        a.q_bias = BV(2, 1, H61);
        a.k_bias = a.q_bias;
        a.angles = BV(4, 1, 1, 1, 1);
        a.out = OV(4, 1, 1, 1, 1);
        EXPECT(SSM_STATUS_INVALID_SHAPE, "mamba3_siso_fwd", "(K)", ssm_mamba3_siso_fwd(ctx, &mp, &a));
    }
    out_free();
}

/* ---- Mamba-3 SISO ------------------------------------------------------------------------- */

static void siso_limits(void) {
    ssm_mamba3_params p;
    ssm_mamba3_params_init(&p);
    /* chunk_size ∈ [1, 1024] (the combined forward: the chunk is in no shape) */
    ssmt_fixture f;
    if (ssmt_fixture_make(22, 7, &f) != 0 || strcmp(f.op, "mamba3_siso") != 0) {
        TEST_CHECK(0, "fixture 22 is not mamba3_siso");
        return;
    }
    static const int64_t q[] = {1, 1024, 1025, 0};
    for (int i = 0; i < 4; ++i) {
        f.params.m3.chunk_size = q[i];
        EXPECT(i < 2 ? SSM_STATUS_OK : SSM_STATUS_INVALID_ARGUMENT, "mamba3_siso", "chunk_size",
               ssmt_fixture_run(ctx, &f));
    }
    ssmt_fixture_free(&f);

    /* K even and ≥ 2; A ≤ K/2 (siso_fwd on broadcast inputs, one token) */
    for (int k = 1; k <= 4; ++k) {
        for (int extra = 0; extra < 2; ++extra) {
            const int64_t K = k, A = K / 2 + extra;
            ssm_mamba3_siso_fwd_args a;
            memset(&a, 0, sizeof a);
            a.q = BV(4, 1, 1, 1, K);
            a.k = BV(4, 1, 1, 1, K);
            a.v = BV(4, 1, 1, 1, 2);
            a.adt = BV(3, 1, 1, 1);
            a.dt = BV(3, 1, 1, 1);
            a.trap = BV(3, 1, 1, 1);
            a.q_bias = BV(2, 1, K);
            a.k_bias = BV(2, 1, K);
            a.angles = BV(4, 1, 1, 1, A);
            a.out = OV(4, 1, 1, 1, 2);
            const int ok = K % 2 == 0 && extra == 0;
            EXPECT(ok ? SSM_STATUS_OK : SSM_STATUS_INVALID_SHAPE, "mamba3_siso_fwd", K % 2 ? "(K)" : "(A)",
                   ssm_mamba3_siso_fwd(ctx, &p, &a));
            out_free();
        }
    }

    /* angle_cumsum: K = 2A must fit in int64 (an empty batch reaches A up to INT64_MAX) */
    for (int beyond = 0; beyond < 2; ++beyond) {
        const int64_t A = INT64_MAX / 2 + beyond;
        ssm_mamba3_angle_cumsum_args a;
        memset(&a, 0, sizeof a);
        a.angles = BV(4, 0, 1, 1, A);
        a.dt = BV(3, 0, 1, 1);
        a.angles_cumsum = OV(4, 0, 1, 1, A);
        EXPECT(beyond ? SSM_STATUS_INVALID_SHAPE : SSM_STATUS_OK, "mamba3_angle_cumsum", "(A)",
               ssm_mamba3_angle_cumsum(ctx, &p, &a));
        ssm_mamba3_angle_cumsum_bwd_args g;
        memset(&g, 0, sizeof g);
        g.dangles_cumsum = a.angles;
        g.angles = a.angles;
        g.dt = a.dt;
        g.dangles = OV(4, 0, 1, 1, A);
        g.ddt = OV(3, 0, 1, 1);
        EXPECT(beyond ? SSM_STATUS_INVALID_SHAPE : SSM_STATUS_OK, "mamba3_angle_cumsum_bwd", "(A)",
               ssm_mamba3_angle_cumsum_bwd(ctx, &p, &g));
        out_free();
    }
}

/* ---- Mamba-3 MIMO ------------------------------------------------------------------------- */

typedef struct mimo_case {
    int64_t R, N, P, C;
    int32_t div;
} mimo_case;

/* The forward (reduced output) and the step on broadcast inputs: B = S = H = G = 1. */
static ssm_status run_mimo(ssm_context * ctx, const mimo_case * m, int step) {
    ssm_mamba3_mimo_params p;
    ssm_mamba3_mimo_params_init(&p);
    p.chunk_size = m->C;
    p.rotary_dim_divisor = m->div;
    const int64_t R = m->R, N = m->N, P = m->P, A = N / m->div;
    ssm_status st;
    if (!step) {
        ssm_mamba3_mimo_args a;
        memset(&a, 0, sizeof a);
        a.q = BV(5, 1, 1, R, 1, N);
        a.k = BV(5, 1, 1, R, 1, N);
        a.v = BV(4, 1, 1, 1, P);
        a.adt = BV(3, 1, 1, 1);
        a.dt = BV(3, 1, 1, 1);
        a.trap = BV(3, 1, 1, 1);
        a.q_bias = BV(3, 1, R, N);
        a.k_bias = BV(3, 1, R, N);
        a.mimo_v = BV(3, 1, R, P);
        a.mimo_o = BV(3, 1, R, P);
        a.angles = BV(4, 1, 1, 1, A);
        a.out = OV(4, 1, 1, 1, P);
        st = ssm_mamba3_mimo(ctx, &p, &a);
    } else {
        ssm_mamba3_mimo_step_args a;
        memset(&a, 0, sizeof a);
        a.q = BV(4, 1, R, 1, N);
        a.k = BV(4, 1, R, 1, N);
        a.v = BV(3, 1, 1, P);
        a.adt = BV(2, 1, 1);
        a.dt = BV(2, 1, 1);
        a.trap = BV(2, 1, 1);
        a.angles = BV(3, 1, 1, A);
        a.q_bias = BV(3, 1, R, N);
        a.k_bias = BV(3, 1, R, N);
        a.mimo_v = BV(3, 1, R, P);
        a.mimo_o = BV(3, 1, R, P);
        a.angle_state = BV(3, 1, 1, A);
        a.ssm_state = BV(4, 1, 1, P, N);
        a.k_state = BV(4, 1, R, 1, N);
        a.v_state = BV(3, 1, 1, P);
        a.out = OV(3, 1, 1, P);
        st = ssm_mamba3_mimo_step(ctx, &p, &a);
    }
    out_free();
    return st;
}

static void mimo_limits(void) {
    static const struct {
        mimo_case  m;
        ssm_status fwd, step; /* statuses of the forward and the step */
        const char * word;
    } cases[] = {
        {{128, 2, 1, 1, 2}, SSM_STATUS_OK, SSM_STATUS_OK, NULL},                                 /* R = 128        */
        {{129, 2, 1, 1, 2}, SSM_STATUS_INVALID_ARGUMENT, SSM_STATUS_INVALID_ARGUMENT, "(R)"},   /* R beyond       */
        {{(INT64_C(1) << 61) - 1, 2, 1, 1, 2}, SSM_STATUS_INVALID_ARGUMENT, SSM_STATUS_INVALID_ARGUMENT, "(R)"},
        {{1, 128, 1, 1, 4}, SSM_STATUS_OK, SSM_STATUS_OK, NULL},                                 /* N = 128        */
        {{1, 130, 1, 1, 2}, SSM_STATUS_INVALID_ARGUMENT, SSM_STATUS_INVALID_ARGUMENT, "(N)"},   /* N beyond       */
        {{1, 2, 1, 1, 2}, SSM_STATUS_OK, SSM_STATUS_OK, NULL},                                   /* N = 2          */
        {{1, 6, 1, 1, 4}, SSM_STATUS_INVALID_ARGUMENT, SSM_STATUS_INVALID_ARGUMENT, "(N)"},     /* N % div        */
        {{1, 4, 128, 1, 2}, SSM_STATUS_OK, SSM_STATUS_OK, NULL},                                 /* P = 128        */
        {{1, 4, 129, 1, 2}, SSM_STATUS_INVALID_ARGUMENT, SSM_STATUS_INVALID_ARGUMENT, "(P)"},   /* P beyond       */
        {{1, 4, 1, 128, 2}, SSM_STATUS_OK, SSM_STATUS_OK, NULL},                                 /* C = 128        */
        {{1, 4, 1, 129, 2}, SSM_STATUS_INVALID_ARGUMENT, SSM_STATUS_INVALID_ARGUMENT, "chunk_size"},
        {{8, 4, 1, 16, 2}, SSM_STATUS_OK, SSM_STATUS_OK, NULL},                                  /* C·R = 128      */
        {{8, 4, 1, 17, 2}, SSM_STATUS_INVALID_ARGUMENT, SSM_STATUS_OK, "C·R"},                  /* the step: no C */
        {{128, 4, 1, 128, 2}, SSM_STATUS_INVALID_ARGUMENT, SSM_STATUS_OK, "C·R"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        EXPECT(cases[i].fwd, "mamba3_mimo", cases[i].word, run_mimo(ctx, &cases[i].m, 0));
        EXPECT(cases[i].step, "mamba3_mimo_step", cases[i].word, run_mimo(ctx, &cases[i].m, 1));
    }
}

int main(void) {
    for (int c = 0; c < 2; ++c) {
        ssm_context_params cp;
        ssm_context_params_init(&cp);
        cp.backend = c == 0 ? SSM_BACKEND_REF : SSM_BACKEND_CPU;
        cp.num_threads = 2;
        if (ssm_context_create(&cp, &g_ctx[c]) != SSM_STATUS_OK) {
            fprintf(stderr, "context %s could not be created\n", g_ctx_name[c]);
            return 1;
        }
    }
    overflow_views();
    m2_chunk_size();
    m2_huge_seqlen();
    m2_state_passing_nc();
    step_broadcast_indices();
    broadcast_cu_seqlens();
    inner_dims();
    inner_dim_reproducers();
    siso_limits();
    mimo_limits();
    for (int c = 0; c < 2; ++c) ssm_context_free(g_ctx[c]);
    TEST_EXIT();
}
