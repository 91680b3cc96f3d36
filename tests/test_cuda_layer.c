/*
 * test_cuda_layer.c — the CUDA backend of the layer operators: causal_conv1d, causal_conv1d_bwd,
 * causal_conv1d_update, rmsnorm_gated, rmsnorm_gated_bwd, mamba3_angle_cumsum and
 * mamba3_angle_cumsum_bwd. Each case runs the operator on REF (F64 outputs), on the CPU backend
 * (outputs in their own dtype) and on the device (NaN-poisoned outputs in their own dtype), and
 * checks the device outputs against float64 and against the CPU within the DESIGN §5 bars of the
 * compute dtype (angles modulo 2π); then runs the device again on re-uploaded inputs and
 * poisoned outputs and checks the bytes are identical (the backward reductions are fixed-order).
 * Covered: f32 / f16 / bf16 inputs, outputs in the input dtype or f32, odd lengths and tails
 * (S < W−1, S = 1, W = 1, group sizes 1 / 32 / D), channel-last and padded/permuted views,
 * stride-0 inputs, bias / activation / initial and final states / seq_idx with padding ids,
 * z / norm_before_gate / group sizes, angle states, varlen with an empty sequence, the decode
 * update with slots, padding rows, separate, in-place and absent final pools, index tensors on
 * the device and on the host, a mamba2-130m-like shape (conv over 1536 + 2·128 channels, width
 * 4, S = 2048; RMSNorm over 1536 columns), each table's entry forced by name, and the device
 * rules (host tensors mixed with device ones, an unknown variant name).
 * Label cuda; exits 77 ("no CUDA device: skipped", a CTest skip) without a GPU.
 * Seed: SSMOPS_TEST_SEED (default 20261203).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cudautil.h"

static ssm_context *ctx_ref, *ctx_cpu, *ctx_cuda;
static ssm_conv1d_params  g_conv;
static ssm_rmsnorm_params g_norm;
static ssm_mamba3_params  g_m3;
static int                g_forced = 0; /* the device runs force the table's entry by name */

static ssm_status run_conv(ssm_context * c, void * a) { return ssm_causal_conv1d(c, &g_conv, a); }
static ssm_status run_conv_bwd(ssm_context * c, void * a) { return ssm_causal_conv1d_bwd(c, &g_conv, a); }
static ssm_status run_update(ssm_context * c, void * a) { return ssm_causal_conv1d_update(c, &g_conv, a); }
static ssm_status run_norm(ssm_context * c, void * a) { return ssm_rmsnorm_gated(c, &g_norm, a); }
static ssm_status run_norm_bwd(ssm_context * c, void * a) { return ssm_rmsnorm_gated_bwd(c, &g_norm, a); }
static ssm_status run_angle(ssm_context * c, void * a) { return ssm_mamba3_angle_cumsum(c, &g_m3, a); }
static ssm_status run_angle_bwd(ssm_context * c, void * a) { return ssm_mamba3_angle_cumsum_bwd(c, &g_m3, a); }

/* ---- the harness ------------------------------------------------------------------------------ */

/* One tensor field of an args struct: its host buffer, the field's offset, whether it is an
 * output (compared), an angle output (modulo 2π), `alias`: the earlier binding whose memory it
 * shares (an in-place pool) or −1, and `host`: an index tensor left in host memory. */
typedef struct bind {
    ssmt_host * h;
    size_t      off;
    int         out, angle, alias, host;
} bind;
enum { MAX_BINDS = 16 };

#define IN(S, h, f) ((bind){&(h), offsetof(S, f), 0, 0, -1, 0})
#define OUT(S, h, f) ((bind){&(h), offsetof(S, f), 1, 0, -1, 0})

static ssm_tensor * field(void * args, size_t off) { return (ssm_tensor *)((char *)args + off); }

/* The schema's name of op's argument at offset off. */
static const char * arg_name(const char * op, size_t off) {
    const ssm_op_info * info = ssm_op_get(ssm_op_find(op));
    for (int32_t i = 0; info != NULL && i < info->nargs; ++i)
        if (info->args[i].offset == off) return info->args[i].name;
    return "?";
}

/* y against r within the bar of `compute` (angles: y moved by ±2π to r's side first). */
static void check_one(const char * label, const ssm_tensor * y, const ssm_tensor * r, int angle, ssm_dtype compute) {
    if (angle) {
        ssmt_host unw = ssmt_unwrap_angles(y, r);
        ssmt_check_bar(label, &unw.t, r, compute);
        ssmt_free(&unw);
    } else {
        ssmt_check_bar_rounded(label, y, r, compute);
    }
}

static void run_case(const char * name, const char * op, ssmt_run_fn run, const void * host_args, size_t size,
                     const bind * b, int nb, ssm_dtype compute) {
    unsigned char *ra = malloc(size), *ca = malloc(size), *da = malloc(size);
    ssmt_host      ref[MAX_BINDS], cpu[MAX_BINDS];
    ssmt_dev       dv[MAX_BINDS];
    void *         saved[MAX_BINDS], *first[MAX_BINDS];
    TEST_CHECK(ra && ca && da && nb <= MAX_BINDS, "%s: no memory for the args", name);
    if (!(ra && ca && da && nb <= MAX_BINDS)) {
        free(ra), free(ca), free(da);
        return;
    }
    memcpy(ra, host_args, size), memcpy(ca, host_args, size), memcpy(da, host_args, size);
    for (int i = 0; i < nb; ++i) {
        memset(&ref[i], 0, sizeof ref[i]), memset(&cpu[i], 0, sizeof cpu[i]), memset(&dv[i], 0, sizeof dv[i]);
        saved[i] = first[i] = NULL;
        const ssm_tensor * t = field((void *)host_args, b[i].off);
        if (!b[i].out || t->data == NULL) continue;
        ref[i] = ssmt_alloc(SSM_DTYPE_F64, t->ndim, t->shape);
        *field(ra, b[i].off) = ref[i].t;
        cpu[i] = ssmt_alloc((ssm_dtype)t->dtype, t->ndim, t->shape); /* an in-place pool: a separate one here */
        *field(ca, b[i].off) = cpu[i].t;
        if (b[i].alias < 0) ssmt_poison(t);
    }
    ssm_status st = run(ctx_ref, ra);
    TEST_CHECK(st == SSM_STATUS_OK, "%s ref: %s (%s)", name, ssm_status_string(st), ssm_context_last_error(ctx_ref));
    st = run(ctx_cpu, ca);
    TEST_CHECK(st == SSM_STATUS_OK, "%s cpu: %s (%s)", name, ssm_status_string(st), ssm_context_last_error(ctx_cpu));

    /* device mirrors of every buffer (host index tensors stay), saved for the second run */
    for (int i = 0; i < nb; ++i) {
        const ssm_tensor * t = field((void *)host_args, b[i].off);
        if (t->data == NULL || b[i].host) continue;
        const ssmt_dev * src = &dv[i];
        if (b[i].alias >= 0) {
            src = &dv[b[i].alias];
        } else {
            dv[i] = ssmt_to_device(b[i].h);
            saved[i] = ssmt_snapshot(b[i].h);
        }
        ssm_tensor * f = field(da, b[i].off);
        f->data = (char *)src->mem + ((const char *)t->data - (const char *)b[i].h->buf);
        f->device = src->view.device;
    }
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1)
            for (int i = 0; i < nb; ++i)
                if (saved[i] != NULL)
                    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, dv[i].mem, saved[i], b[i].h->bytes), SSM_STATUS_OK);
        const char * want = g_forced ? ssm_variant_name(SSM_BACKEND_CUDA, op, 0) : NULL;
        ssmt_variant_forced = g_forced;
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, op, want), SSM_STATUS_OK);
        st = run(ctx_cuda, da);
        TEST_CHECK(st == SSM_STATUS_OK, "%s cuda (run %d): %s (%s)", name, pass + 1, ssm_status_string(st),
                   ssm_context_last_error(ctx_cuda));
        const char * ran = ssm_context_last_variant(ctx_cuda);
        TEST_CHECK(ran[0] != '\0', "%s: no variant recorded", name);
        if (want != NULL) TEST_CHECK(strcmp(ran, want) == 0, "%s: forced %s, ran %s", name, want, ran);
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, op, NULL), SSM_STATUS_OK);
        if (st != SSM_STATUS_OK) break;
        for (int i = 0; i < nb; ++i) {
            if (!b[i].out || ref[i].t.data == NULL) continue;
            const int          j = b[i].alias >= 0 ? b[i].alias : i;
            const ssm_tensor * got = field((void *)host_args, b[i].off);
            ssmt_to_host(b[j].h, &dv[j]);
            if (pass == 0) {
                char label[400];
                snprintf(label, sizeof label, "%.300s %s vs f64", name, arg_name(op, b[i].off));
                check_one(label, got, &ref[i].t, b[i].angle, compute);
                snprintf(label, sizeof label, "%.300s %s vs cpu", name, arg_name(op, b[i].off));
                check_one(label, got, &cpu[i].t, b[i].angle, compute);
                first[i] = ssmt_snapshot(b[j].h);
            } else {
                TEST_CHECK(ssmt_unchanged(b[j].h, first[i]), "%s: %s differs between two runs", name,
                           arg_name(op, b[i].off));
            }
        }
    }
    ssmt_variant_forced = 0;
    for (int i = 0; i < nb; ++i) {
        free(first[i]), free(saved[i]);
        ssmt_dev_free(&dv[i]);
        ssmt_free(&ref[i]), ssmt_free(&cpu[i]);
    }
    free(ra), free(ca), free(da);
}

/* ---- tensors ------------------------------------------------------------------------------------ */

enum { L_DENSE, L_CHANNEL_LAST, L_PADDED };

/* A (d0, d1, d2) tensor in a layout: dense, channel-last (memory d0, d2, d1: Mamba-2's
 * activations), or permuted (memory d2, d0, d1) with padding in every dimension. */
static ssmt_host alloc3(ssm_dtype dt, int64_t d0, int64_t d1, int64_t d2, int layout) {
    static const int32_t cl[3] = {0, 2, 1}, perm[3] = {2, 0, 1};
    const int64_t        sh[3] = {d0, d1, d2};
    if (layout == L_CHANNEL_LAST) return ssmt_alloc_layout(dt, 3, sh, cl, 0);
    if (layout == L_PADDED) return ssmt_alloc_layout(dt, 3, sh, perm, 3);
    return ssmt_alloc(dt, 3, sh);
}

/* A tensor of `ndim` dims whose dimension `dim` is a stride-0 broadcast of one slice (the
 * buffer holds shape[dim] = 1). */
static ssmt_host alloc_broadcast(ssmt_rng * rng, ssm_dtype dt, int32_t ndim, const int64_t * shape, int32_t dim,
                                 double mean, double std) {
    int64_t one[SSM_MAX_DIMS];
    for (int32_t i = 0; i < ndim; ++i) one[i] = i == dim ? 1 : shape[i];
    ssmt_host h = ssmt_alloc(dt, ndim, one);
    ssmt_fill_normal(rng, &h.t, mean, std);
    h.t.shape[dim] = shape[dim];
    h.t.strides[dim] = 0;
    return h;
}

static void free_all(ssmt_host * hs, int n) {
    for (int i = 0; i < n; ++i) ssmt_free(&hs[i]);
}

/* ---- causal conv1d: forward and backward ---------------------------------------------------------- */

typedef struct conv_cfg {
    int64_t   B, D, S, W;
    ssm_dtype dt, odt; /* inputs (the compute dtype), outputs                        */
    int       layout;  /* of x, out, dout, dx                                         */
    int       seq;     /* seq_idx: row b starts with b padding tokens, then 3 ids     */
    int       init;    /* initial_states (and final_states / their gradients)         */
    int       bias, silu;
    int       bcast;    /* x and dout broadcast over batch (stride 0), bias stride 0   */
    int       host_idx; /* seq_idx stays in host memory                                */
} conv_cfg;

enum { C_X, C_W, C_BIAS, C_SEQ, C_INIT, C_OUT, C_FIN, C_DOUT, C_DFIN, C_DX, C_DW, C_DB, C_DINIT, C_N };

static void conv_build(ssmt_rng * rng, const conv_cfg * c, ssmt_host * h) {
    memset(h, 0, sizeof(ssmt_host) * C_N);
    const int64_t B = c->B, D = c->D, S = c->S, W = c->W;
    const int64_t sx[3] = {B, D, S}, sw[2] = {D, W}, sd[1] = {D}, ss[2] = {B, S};
    if (c->bcast) {
        h[C_X] = alloc_broadcast(rng, c->dt, 3, sx, 0, 0, 1);
        h[C_DOUT] = alloc_broadcast(rng, c->dt, 3, sx, 0, 0, 1);
        h[C_BIAS] = alloc_broadcast(rng, SSM_DTYPE_F32, 1, sd, 0, 0, 0.5);
    } else {
        h[C_X] = alloc3(c->dt, B, D, S, c->layout), h[C_DOUT] = alloc3(c->dt, B, D, S, c->layout);
        ssmt_fill_normal(rng, &h[C_X].t, 0, 1), ssmt_fill_normal(rng, &h[C_DOUT].t, 0, 1);
        if (c->bias) {
            h[C_BIAS] = ssmt_alloc(c->odt == SSM_DTYPE_F32 ? SSM_DTYPE_F32 : c->dt, 1, sd);
            ssmt_fill_normal(rng, &h[C_BIAS].t, 0, 0.5);
        }
    }
    h[C_W] = ssmt_alloc(c->dt == SSM_DTYPE_BF16 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32, 2, sw);
    ssmt_fill_normal(rng, &h[C_W].t, 0, 0.5);
    if (c->seq) {
        h[C_SEQ] = ssmt_alloc(B > 2 ? SSM_DTYPE_I64 : SSM_DTYPE_I32, 2, ss);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < S; ++t) ssmt_set(&h[C_SEQ].t, b * S + t, t < b ? -1 : (double)((t * 3) / S));
    }
    if (c->init) {
        h[C_INIT] = alloc3(c->dt, B, D, W - 1, c->layout), h[C_DFIN] = alloc3(SSM_DTYPE_F32, B, D, W - 1, L_DENSE);
        ssmt_fill_normal(rng, &h[C_INIT].t, 0, 1), ssmt_fill_normal(rng, &h[C_DFIN].t, 0, 1);
        h[C_FIN] = alloc3(c->odt, B, D, W - 1, c->layout), h[C_DINIT] = alloc3(c->odt, B, D, W - 1, L_PADDED);
    }
    h[C_OUT] = alloc3(c->odt, B, D, S, c->layout), h[C_DX] = alloc3(c->odt, B, D, S, c->layout);
    h[C_DW] = ssmt_alloc(c->odt, 2, sw);
    if (c->bias || c->bcast) h[C_DB] = ssmt_alloc(c->odt, 1, sd);
}

static void test_conv(ssmt_rng * rng, const conv_cfg * c) {
    ssmt_host h[C_N];
    conv_build(rng, c, h);
    ssm_conv1d_params_init(&g_conv);
    g_conv.activation = c->silu;
    char tag[256];
    snprintf(tag, sizeof tag, "conv[B%lld D%lld S%lld W%lld %s->%s L%d%s%s%s act%d%s%s]", (long long)c->B,
             (long long)c->D, (long long)c->S, (long long)c->W, ssm_dtype_name(c->dt), ssm_dtype_name(c->odt),
             c->layout, c->seq ? " seq" : "", c->init ? " states" : "", c->bias || c->bcast ? " bias" : "", c->silu,
             c->bcast ? " stride0" : "", c->host_idx ? " host-idx" : "");
    {
        typedef ssm_causal_conv1d_args S;
        S a = {0};
        a.x = h[C_X].t, a.weight = h[C_W].t, a.bias = h[C_BIAS].t, a.seq_idx = h[C_SEQ].t;
        a.initial_states = h[C_INIT].t, a.out = h[C_OUT].t, a.final_states = h[C_FIN].t;
        bind b[] = {IN(S, h[C_X], x),     IN(S, h[C_W], weight),        IN(S, h[C_BIAS], bias),
                    IN(S, h[C_SEQ], seq_idx), IN(S, h[C_INIT], initial_states), OUT(S, h[C_OUT], out),
                    OUT(S, h[C_FIN], final_states)};
        b[3].host = c->host_idx;
        char name[300];
        snprintf(name, sizeof name, "%s fwd", tag);
        run_case(name, "causal_conv1d", run_conv, &a, sizeof a, b, (int)(sizeof b / sizeof b[0]), c->dt);
    }
    {
        typedef ssm_causal_conv1d_bwd_args S;
        S a = {0};
        a.x = h[C_X].t, a.weight = h[C_W].t, a.bias = h[C_BIAS].t, a.seq_idx = h[C_SEQ].t;
        a.initial_states = h[C_INIT].t, a.dout = h[C_DOUT].t, a.dfinal_states = h[C_DFIN].t;
        a.dx = h[C_DX].t, a.dweight = h[C_DW].t, a.dbias = h[C_DB].t, a.dinitial_states = h[C_DINIT].t;
        bind b[] = {IN(S, h[C_X], x),           IN(S, h[C_W], weight),  IN(S, h[C_BIAS], bias),
                    IN(S, h[C_SEQ], seq_idx),   IN(S, h[C_INIT], initial_states), IN(S, h[C_DOUT], dout),
                    IN(S, h[C_DFIN], dfinal_states), OUT(S, h[C_DX], dx), OUT(S, h[C_DW], dweight),
                    OUT(S, h[C_DB], dbias),     OUT(S, h[C_DINIT], dinitial_states)};
        b[3].host = c->host_idx;
        char name[300];
        snprintf(name, sizeof name, "%s bwd", tag);
        run_case(name, "causal_conv1d_bwd", run_conv_bwd, &a, sizeof a, b, (int)(sizeof b / sizeof b[0]), c->dt);
    }
    free_all(h, C_N);
}

/* ---- causal conv1d: the decode update ---------------------------------------------------------------- */

/* fin: 0 no final pool, 1 a separate one, 2 in place. The state (slots, D, L) is channel-last
 * in memory (upstream's cache) when cl. */
static void test_update(ssmt_rng * rng, int64_t B, int64_t D, int64_t W, int64_t L, int64_t slots, int with_idx,
                        int fin, ssm_dtype dt, ssm_dtype odt, int cl, int silu, int host_idx) {
    ssm_conv1d_params_init(&g_conv);
    g_conv.activation = silu;
    const int64_t sx[2] = {B, D}, sw[2] = {D, W}, sd[1] = {D}, sb[1] = {B};
    ssmt_host     x = ssmt_alloc(dt, 2, sx), w = ssmt_alloc(SSM_DTYPE_F32, 2, sw), bias = ssmt_alloc(dt, 1, sd);
    ssmt_host     state = alloc3(dt, slots, D, L, cl ? L_CHANNEL_LAST : L_DENSE), idx = {0};
    ssmt_host     out = ssmt_alloc(odt, 2, sx), final = {0};
    ssmt_fill_normal(rng, &x.t, 0, 1), ssmt_fill_normal(rng, &w.t, 0, 0.5), ssmt_fill_normal(rng, &bias.t, 0, 0.5);
    ssmt_fill_normal(rng, &state.t, 0, 1);
    if (with_idx) { /* a random injective map of rows to slots; every third row is padding */
        idx = ssmt_alloc(SSM_DTYPE_I64, 1, sb);
        int64_t * perm = malloc(sizeof(int64_t) * (size_t)slots);
        TEST_CHECK(perm != NULL, "no memory for the slot map");
        if (perm == NULL) return;
        for (int64_t s = 0; s < slots; ++s) perm[s] = s;
        for (int64_t s = slots - 1; s > 0; --s) {
            const int64_t j = ssmt_randint(rng, 0, s), tmp = perm[s];
            perm[s] = perm[j], perm[j] = tmp;
        }
        for (int64_t b = 0; b < B; ++b) ssmt_set(&idx.t, b, b % 3 == 2 ? -1.0 : (double)perm[b]);
        free(perm);
    }
    if (fin == 1) final = alloc3(odt, slots, D, L, L_PADDED);
    typedef ssm_causal_conv1d_update_args S;
    S a = {0};
    a.x = x.t, a.weight = w.t, a.bias = bias.t, a.conv_state = state.t, a.state_batch_indices = idx.t, a.out = out.t;
    a.final_conv_state = fin == 2 ? state.t : final.t;
    bind b[] = {IN(S, x, x), IN(S, w, weight), IN(S, bias, bias), IN(S, state, conv_state),
                IN(S, idx, state_batch_indices), OUT(S, out, out), OUT(S, final, final_conv_state)};
    b[4].host = host_idx;
    if (fin == 2) b[6].h = &state, b[6].alias = 3;
    char name[300];
    snprintf(name, sizeof name, "update[B%lld D%lld W%lld L%lld slots%lld idx%d fin%d %s->%s cl%d act%d host-idx%d]",
             (long long)B, (long long)D, (long long)W, (long long)L, (long long)slots, with_idx, fin,
             ssm_dtype_name(dt), ssm_dtype_name(odt), cl, silu, host_idx);
    run_case(name, "causal_conv1d_update", run_update, &a, sizeof a, b, (int)(sizeof b / sizeof b[0]), dt);
    ssmt_free(&x), ssmt_free(&w), ssmt_free(&bias), ssmt_free(&state), ssmt_free(&idx), ssmt_free(&out);
    ssmt_free(&final);
}

/* ---- gated RMSNorm: forward and backward ----------------------------------------------------------- */

typedef struct norm_cfg {
    int64_t   M, D, gs; /* gs 0: one group per row */
    ssm_dtype dt, odt;
    int       z, nbg;
    int       z_view;   /* z a column slice of a wider row-major buffer (the in_proj output) */
    int       padded;   /* x, dout, out, dx, dz with padded strides                         */
    int       w_bcast;  /* weight with stride 0                                             */
} norm_cfg;

static void test_norm(ssmt_rng * rng, const norm_cfg * c) {
    ssm_rmsnorm_params_init(&g_norm);
    g_norm.group_size = c->gs, g_norm.norm_before_gate = c->nbg;
    const int64_t sh[2] = {c->M, c->D}, sd[1] = {c->D}, wide[2] = {c->M, 2 * c->D + 24};
    const int64_t pad = c->padded ? 5 : 0;
    ssmt_host x = ssmt_alloc_layout(c->dt, 2, sh, NULL, pad), dout = ssmt_alloc_layout(c->dt, 2, sh, NULL, pad);
    ssmt_host z = {0}, w, out = ssmt_alloc_layout(c->odt, 2, sh, NULL, pad);
    ssmt_host dx = ssmt_alloc_layout(c->odt, 2, sh, NULL, pad), dz = {0}, dw = ssmt_alloc(c->odt, 1, sd);
    ssmt_fill_normal(rng, &x.t, 0, 1), ssmt_fill_normal(rng, &dout.t, 0, 1);
    if (c->w_bcast) {
        w = alloc_broadcast(rng, SSM_DTYPE_F32, 1, sd, 0, 1, 0.1);
    } else {
        w = ssmt_alloc(SSM_DTYPE_F32, 1, sd);
        ssmt_fill_normal(rng, &w.t, 1, 0.1);
    }
    if (c->z) {
        if (c->z_view) {
            z = ssmt_alloc(c->dt, 2, wide);
            ssmt_fill_normal(rng, &z.t, 0, 1);
            z.t = ssmt_slice(&z.t, 1, 0, c->D); /* the z columns of [z | xBC | dt] */
        } else {
            z = ssmt_alloc_layout(c->dt, 2, sh, NULL, pad);
            ssmt_fill_normal(rng, &z.t, 0, 1);
        }
        dz = ssmt_alloc_layout(c->odt, 2, sh, NULL, pad);
    }
    char tag[256];
    snprintf(tag, sizeof tag, "norm[M%lld D%lld gs%lld %s->%s z%d nbg%d zview%d pad%d w0%d]", (long long)c->M,
             (long long)c->D, (long long)c->gs, ssm_dtype_name(c->dt), ssm_dtype_name(c->odt), c->z, c->nbg,
             c->z_view, c->padded, c->w_bcast);
    {
        typedef ssm_rmsnorm_gated_args S;
        S a = {0};
        a.x = x.t, a.z = z.t, a.weight = w.t, a.out = out.t;
        const bind b[] = {IN(S, x, x), IN(S, z, z), IN(S, w, weight), OUT(S, out, out)};
        char       name[300];
        snprintf(name, sizeof name, "%s fwd", tag);
        run_case(name, "rmsnorm_gated", run_norm, &a, sizeof a, b, 4, c->dt);
    }
    {
        typedef ssm_rmsnorm_gated_bwd_args S;
        S a = {0};
        a.x = x.t, a.z = z.t, a.weight = w.t, a.dout = dout.t, a.dx = dx.t, a.dz = dz.t, a.dweight = dw.t;
        const bind b[] = {IN(S, x, x),     IN(S, z, z),       IN(S, w, weight),       IN(S, dout, dout),
                          OUT(S, dx, dx), OUT(S, dz, dz), OUT(S, dw, dweight)};
        char       name[300];
        snprintf(name, sizeof name, "%s bwd", tag);
        run_case(name, "rmsnorm_gated_bwd", run_norm_bwd, &a, sizeof a, b, 7, c->dt);
    }
    ssmt_free(&x), ssmt_free(&dout), ssmt_free(&z), ssmt_free(&w), ssmt_free(&out), ssmt_free(&dx);
    ssmt_free(&dz), ssmt_free(&dw);
}

/* ---- the Mamba-3 angle cumsum: forward and backward -------------------------------------------------- */

/* lens: nseq > 0 sequence lengths (varlen, batch 1). */
static void test_angle(ssmt_rng * rng, int64_t B, int64_t S, int64_t H, int64_t A, ssm_dtype dt, ssm_dtype odt,
                       int states, int bcast, int strided, int32_t nseq, const int64_t * lens, int host_idx) {
    ssmt_mamba3_config cfg;
    ssmt_mamba3_config_init(&cfg);
    cfg.batch = B, cfg.seqlen = S, cfg.nheads = H, cfg.nheads_qk = 1, cfg.nangles = A, cfg.dk = 2 * A, cfg.dv = 4;
    cfg.dtype = dt, cfg.out_dtype = odt, cfg.has_states = states, cfg.has_final = 1;
    cfg.angles_broadcast = bcast, cfg.strided = strided, cfg.index_i64 = host_idx;
    if (nseq > 0) cfg.nseq = nseq, cfg.seqlens = lens;
    ssmt_mamba3_problem pr;
    if (ssmt_mamba3_random_args(rng, &cfg, &pr) != 0) {
        TEST_CHECK(0, "could not build an angle problem");
        return;
    }
    ssmt_mamba3_params(&cfg, &g_m3);
    const ssm_tensor * an = &pr.angles.t;
    const int64_t      s4[4] = {an->shape[0], an->shape[1], an->shape[2], an->shape[3]};
    const int64_t      sdt[3] = {an->shape[0], H, an->shape[1]}, sst[3] = {pr.nseq, H, A};
    ssmt_host          cum = ssmt_alloc(odt, 4, s4), dcum = ssmt_alloc(dt, 4, s4), dfin = ssmt_alloc(SSM_DTYPE_F32, 3, sst);
    ssmt_host          dang = ssmt_alloc(odt, 4, s4), ddt = alloc3(odt, sdt[0], sdt[1], sdt[2], L_PADDED);
    ssmt_host          dstate = ssmt_alloc(odt, 3, sst);
    ssmt_fill_normal(rng, &dcum.t, 0, 1), ssmt_fill_normal(rng, &dfin.t, 0, 1);
    char tag[256];
    snprintf(tag, sizeof tag, "angle[B%lld S%lld H%lld A%lld %s->%s states%d stride0-H%d strided%d nseq%d host-idx%d]",
             (long long)B, (long long)S, (long long)H, (long long)A, ssm_dtype_name(dt), ssm_dtype_name(odt), states,
             bcast, strided, (int)nseq, host_idx);
    {
        typedef ssm_mamba3_angle_cumsum_args Sa;
        Sa a = pr.angle_args;
        a.angles_cumsum = cum.t, a.final_angle_state = pr.final_angle_state.t;
        bind b[] = {IN(Sa, pr.angles, angles), IN(Sa, pr.dt, dt), IN(Sa, pr.angle_state, angle_state),
                    IN(Sa, pr.cu_seqlens, cu_seqlens), OUT(Sa, cum, angles_cumsum),
                    OUT(Sa, pr.final_angle_state, final_angle_state)};
        b[3].host = host_idx, b[4].angle = b[5].angle = 1;
        char name[300];
        snprintf(name, sizeof name, "%s fwd", tag);
        run_case(name, "mamba3_angle_cumsum", run_angle, &a, sizeof a, b, 6, dt);
    }
    {
        typedef ssm_mamba3_angle_cumsum_bwd_args Sb;
        Sb a = {0};
        a.dangles_cumsum = dcum.t, a.dfinal_angle_state = states ? dfin.t : ssmt_absent();
        a.angles = pr.angles.t, a.dt = pr.dt.t, a.cu_seqlens = pr.cu_seqlens.t;
        a.dangles = dang.t, a.ddt = ddt.t, a.dangle_state = dstate.t;
        bind b[] = {IN(Sb, dcum, dangles_cumsum), IN(Sb, dfin, dfinal_angle_state), IN(Sb, pr.angles, angles),
                    IN(Sb, pr.dt, dt),            IN(Sb, pr.cu_seqlens, cu_seqlens), OUT(Sb, dang, dangles),
                    OUT(Sb, ddt, ddt),            OUT(Sb, dstate, dangle_state)};
        b[4].host = host_idx;
        char name[300];
        snprintf(name, sizeof name, "%s bwd", tag);
        run_case(name, "mamba3_angle_cumsum_bwd", run_angle_bwd, &a, sizeof a, b, 8, dt);
    }
    ssmt_free(&cum), ssmt_free(&dcum), ssmt_free(&dfin), ssmt_free(&dang), ssmt_free(&ddt), ssmt_free(&dstate);
    ssmt_mamba3_problem_free(&pr);
}

/* ---- device rules --------------------------------------------------------------------------------- */

static void test_device_rules(ssmt_rng * rng) {
    const conv_cfg c = {2, 8, 9, 4, SSM_DTYPE_F32, SSM_DTYPE_F32, L_DENSE, 0, 1, 1, 1, 0, 0};
    ssmt_host      h[C_N];
    conv_build(rng, &c, h);
    ssm_conv1d_params_init(&g_conv);
    ssm_causal_conv1d_args a = {0};
    a.x = h[C_X].t, a.weight = h[C_W].t, a.bias = h[C_BIAS].t, a.initial_states = h[C_INIT].t, a.out = h[C_OUT].t;
    /* every tensor on the host under the CUDA backend: refused, naming CUDA */
    ssmt_expect_cuda_refusal("causal_conv1d", ctx_cuda, ssm_causal_conv1d(ctx_cuda, &g_conv, &a));
    /* x and out on the device, weight on the host: INVALID_LAYOUT under CUDA and under AUTO */
    ssmt_dev dx = ssmt_to_device(&h[C_X]), dout = ssmt_to_device(&h[C_OUT]), db = ssmt_to_device(&h[C_BIAS]);
    ssmt_dev dinit = ssmt_to_device(&h[C_INIT]);
    a.x = dx.view, a.out = dout.view, a.bias = db.view, a.initial_states = dinit.view;
    TEST_CHECK_STATUS(ssm_causal_conv1d(ctx_cuda, &g_conv, &a), SSM_STATUS_INVALID_LAYOUT);
    TEST_CHECK(strstr(ssm_context_last_error(ctx_cuda), "weight") != NULL, "message: %s",
               ssm_context_last_error(ctx_cuda));
    ssm_context * ctx_auto = ssmt_make_ctx(SSM_BACKEND_AUTO, 0, SSM_ISA_AUTO);
    TEST_CHECK(ctx_auto != NULL, "AUTO context");
    if (ctx_auto != NULL) {
        TEST_CHECK_STATUS(ssm_causal_conv1d(ctx_auto, &g_conv, &a), SSM_STATUS_INVALID_LAYOUT);
        ssm_context_free(ctx_auto);
    }
    /* a device view whose pointer is host memory: the pointer check refuses it */
    ssmt_dev dw = ssmt_to_device(&h[C_W]);
    a.weight = dw.view;
    a.initial_states = h[C_INIT].t;
    a.initial_states.device.type = SSM_DEVICE_CUDA;
    TEST_CHECK_STATUS(ssm_causal_conv1d(ctx_cuda, &g_conv, &a), SSM_STATUS_INVALID_LAYOUT);
    TEST_CHECK(strstr(ssm_context_last_error(ctx_cuda), "initial_states") != NULL, "message: %s",
               ssm_context_last_error(ctx_cuda));
    /* an unknown variant name is refused */
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "causal_conv1d", "no_such_kernel"), SSM_STATUS_INVALID_ARGUMENT);
    ssmt_dev_free(&dx), ssmt_dev_free(&dout), ssmt_dev_free(&db), ssmt_dev_free(&dinit), ssmt_dev_free(&dw);
    free_all(h, C_N);
    /* the other operators refuse host tensors too */
    norm_cfg nc = {4, 8, 0, SSM_DTYPE_F32, SSM_DTYPE_F32, 1, 0, 0, 0, 0};
    const int64_t sh[2] = {nc.M, nc.D}, sd[1] = {nc.D};
    ssmt_host     x = ssmt_alloc(SSM_DTYPE_F32, 2, sh), w = ssmt_alloc(SSM_DTYPE_F32, 1, sd), o = ssmt_alloc(SSM_DTYPE_F32, 2, sh);
    ssmt_fill_value(&x.t, 1.0), ssmt_fill_value(&w.t, 1.0);
    ssm_rmsnorm_params_init(&g_norm);
    ssm_rmsnorm_gated_args na = {0};
    na.x = x.t, na.weight = w.t, na.out = o.t;
    ssmt_expect_cuda_refusal("rmsnorm_gated", ctx_cuda, ssm_rmsnorm_gated(ctx_cuda, &g_norm, &na));
    ssmt_free(&x), ssmt_free(&w), ssmt_free(&o);
}

/* ---- the suites ------------------------------------------------------------------------------------- */

static void conv_suite(ssmt_rng * rng) {
    const ssm_dtype F32 = SSM_DTYPE_F32, F16 = SSM_DTYPE_F16, BF16 = SSM_DTYPE_BF16;
    /* B, D, S, W, dt, odt, layout, seq, init, bias, silu, bcast, host_idx */
    const conv_cfg cases[] = {
        {2, 37, 67, 4, F32, F32, L_CHANNEL_LAST, 0, 1, 1, 1, 0, 0},  /* states, odd D and S        */
        {3, 64, 33, 3, F16, F16, L_DENSE, 1, 0, 0, 0, 0, 0},         /* seq_idx with padding, no act */
        {3, 64, 33, 3, F16, F32, L_DENSE, 1, 0, 1, 1, 0, 1},         /* host seq_idx                */
        {2, 130, 2, 4, BF16, BF16, L_CHANNEL_LAST, 0, 1, 1, 1, 0, 0}, /* S < W − 1: finals from states */
        {2, 130, 1, 4, BF16, F32, L_PADDED, 0, 0, 1, 1, 0, 0},       /* S = 1, no states            */
        {2, 19, 40, 1, F32, F32, L_PADDED, 0, 0, 1, 1, 0, 0},        /* W = 1                       */
        {1, 33, 25, 6, F32, F32, L_PADDED, 0, 1, 0, 1, 0, 0},        /* W = 6, permuted + padded     */
        {4, 24, 31, 4, F32, F32, L_DENSE, 0, 1, 0, 1, 1, 0},         /* x, dout, bias with stride 0  */
        {5, 48, 130, 4, BF16, BF16, L_CHANNEL_LAST, 1, 0, 1, 1, 0, 0}, /* seq, tiles across rows      */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) test_conv(rng, &cases[i]);
    /* mamba2-130m: xBC of 1536 + 2·128 channels, width 4, S = 2048, channel-last */
    const conv_cfg big[] = {
        {1, 1792, 2048, 4, F32, F32, L_CHANNEL_LAST, 0, 1, 1, 1, 0, 0},
        {2, 1792, 2048, 4, BF16, BF16, L_CHANNEL_LAST, 0, 0, 1, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; ++i) test_conv(rng, &big[i]);
}

static void update_suite(ssmt_rng * rng) {
    const ssm_dtype F32 = SSM_DTYPE_F32, F16 = SSM_DTYPE_F16, BF16 = SSM_DTYPE_BF16;
    /* B, D, W, L, slots, idx, fin, dt, odt, cl, silu, host_idx */
    test_update(rng, 5, 40, 4, 4, 5, 0, 1, F32, F32, 1, 1, 0);    /* upstream's cache layout, L = W */
    test_update(rng, 5, 40, 4, 4, 5, 0, 2, F32, F32, 1, 1, 0);    /* in place                      */
    test_update(rng, 7, 33, 4, 6, 11, 1, 1, F16, F32, 0, 1, 0);   /* slots, padding rows, L > W    */
    test_update(rng, 7, 33, 4, 6, 11, 1, 2, BF16, BF16, 1, 0, 1); /* in place, host indices        */
    test_update(rng, 7, 33, 3, 2, 9, 1, 0, F32, F16, 0, 1, 0);    /* L = W − 1, no final pool      */
    test_update(rng, 3, 1792, 4, 4, 3, 0, 2, BF16, BF16, 1, 1, 0); /* mamba2-130m's decode          */
}

static void norm_suite(ssmt_rng * rng) {
    const ssm_dtype F32 = SSM_DTYPE_F32, F16 = SSM_DTYPE_F16, BF16 = SSM_DTYPE_BF16;
    /* M, D, gs, dt, odt, z, nbg, z_view, padded, w_bcast */
    const norm_cfg cases[] = {
        {37, 96, 32, F32, F32, 1, 0, 0, 0, 0},   /* three groups, gate then norm     */
        {37, 96, 0, F32, F32, 1, 1, 0, 1, 0},    /* one group, norm then gate, padded */
        {13, 70, 0, F16, F16, 0, 0, 0, 0, 0},    /* no z, odd D                       */
        {13, 70, 5, BF16, F32, 1, 0, 0, 1, 0},   /* groups of 5 columns (under a warp) */
        {9, 600, 300, BF16, BF16, 1, 1, 1, 0, 1}, /* groups over 256 columns, z view, stride-0 weight */
        {1, 5, 5, F16, F32, 1, 0, 0, 0, 0},      /* one tiny row                      */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) test_norm(rng, &cases[i]);
    /* mamba2-130m: rows = S = 2048, d_inner 1536, one group, z a slice of the in_proj output */
    const norm_cfg big[] = {{2048, 1536, 0, F32, F32, 1, 0, 1, 0, 0}, {2048, 1536, 0, BF16, BF16, 1, 0, 1, 0, 0}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; ++i) test_norm(rng, &big[i]);
}

static void angle_suite(ssmt_rng * rng) {
    const ssm_dtype F32 = SSM_DTYPE_F32, F16 = SSM_DTYPE_F16, BF16 = SSM_DTYPE_BF16;
    static const int64_t lens[3] = {20, 0, 27}, lens2[4] = {1, 300, 0, 211};
    /* B, S, H, A, dt, odt, states, bcast, strided, nseq, lens, host_idx */
    test_angle(rng, 2, 41, 3, 8, F32, F32, 1, 0, 0, 0, NULL, 0);
    test_angle(rng, 2, 41, 3, 8, F32, F32, 0, 1, 1, 0, NULL, 0);      /* stride 0 over H, strided */
    test_angle(rng, 1, 47, 4, 5, F16, F16, 1, 0, 0, 3, lens, 0);      /* varlen, an empty sequence */
    test_angle(rng, 1, 512, 2, 40, BF16, F32, 1, 0, 1, 4, lens2, 1);  /* A > 32, host cu_seqlens  */
    test_angle(rng, 3, 1, 2, 1, F32, F32, 0, 0, 0, 0, NULL, 0);       /* S = 1, A = 1              */
    test_angle(rng, 2, 2048, 8, 32, BF16, BF16, 1, 0, 0, 0, NULL, 0); /* a long sequence           */
}

/* Each table has one entry, reported by name; forced by name on one case per operator. */
static void forced_suite(ssmt_rng * rng) {
    static const char * const ops[] = {"causal_conv1d",    "causal_conv1d_bwd",   "causal_conv1d_update",
                                       "rmsnorm_gated",    "rmsnorm_gated_bwd",   "mamba3_angle_cumsum",
                                       "mamba3_angle_cumsum_bwd"};
    for (int i = 0; i < 7; ++i) {
        TEST_CHECK(ssm_variant_count(SSM_BACKEND_CUDA, ops[i]) == 1, "%s: %d CUDA variants, expected 1", ops[i],
                   (int)ssm_variant_count(SSM_BACKEND_CUDA, ops[i]));
        const char * name = ssm_variant_name(SSM_BACKEND_CUDA, ops[i], 0);
        TEST_CHECK(name != NULL && name[0] != '\0', "%s: entry 0 has no name", ops[i]);
    }
    g_forced = 1;
    const conv_cfg c = {2, 21, 17, 4, SSM_DTYPE_F32, SSM_DTYPE_F32, L_CHANNEL_LAST, 0, 1, 1, 1, 0, 0};
    test_conv(rng, &c);
    test_update(rng, 4, 21, 4, 5, 6, 1, 1, SSM_DTYPE_F32, SSM_DTYPE_F32, 1, 1, 0);
    const norm_cfg n = {11, 64, 16, SSM_DTYPE_F32, SSM_DTYPE_F32, 1, 1, 0, 0, 0};
    test_norm(rng, &n);
    test_angle(rng, 2, 19, 2, 4, SSM_DTYPE_F32, SSM_DTYPE_F32, 1, 0, 0, 0, NULL, 0);
    g_forced = 0;
}

int main(void) {
    if (!ssmt_cuda_present("test_cuda_layer")) return 77;
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261203u);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 0, SSM_ISA_AUTO);
    ctx_cpu = ssmt_make_ctx(SSM_BACKEND_CPU, 2, SSM_ISA_AUTO);
    ctx_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 0, SSM_ISA_AUTO);
    TEST_CHECK(ctx_ref && ctx_cpu && ctx_cuda, "context creation failed");
    if (ssmt_failures) TEST_EXIT();
    test_device_rules(&rng);
    conv_suite(&rng);
    update_suite(&rng);
    norm_suite(&rng);
    angle_suite(&rng);
    forced_suite(&rng);
    ssm_context_free(ctx_ref), ssm_context_free(ctx_cpu), ssm_context_free(ctx_cuda);
    TEST_EXIT();
}
