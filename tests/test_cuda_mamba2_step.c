/*
 * test_cuda_mamba2_step.c — the CUDA backend of ssm_mamba2_step against the float64
 * reference (REF backend on the host copies, F64 outputs), DESIGN §5 bars per compute
 * dtype (the pool's own rounding where it is coarser): f32 / f16 / bf16 activations;
 * f32 / f16 / bf16 / f64 pools, contiguous (16-byte vector path), padded-strided and
 * misaligned (generic path); per-head (stride-0 a, dt, dt_bias, d) and general forms;
 * every option on and off (d, dt_bias, z, softplus, dt_limit); G = 1 / 1 < G < H / G = H;
 * N = 1, odd, 128, 256; state_batch_indices I32/I64 in host and device memory with
 * padding rows, more rows than fit in the kernel arguments; in place (unused slots
 * bit-identical) and a separate final pool (poisoned; unused slots copied, also into
 * another dtype); NaN-poisoned outputs; identical bytes on a second run; AUTO dispatch
 * from device tensors; device-rule errors; dst_state_batch_indices naming the read slots equal
 * to the plain step (test_cuda_decode_slots tests the slot forms).
 * Every case runs by the default choice of the selection table (pass "auto"), then with every
 * entry of the table forced through the contexts (ssm_context_set_variant): "registers" (vector
 * pools with up to 64 vectors a row and a constant over n; typed fp32 / bf16 inputs and the
 * generic loads, large- and small-batch plans, P tails), "streaming" (vector pools with N = 4·2^k
 * f32 / 8·2^k 16-bit up to 256 vectors a row, one and several vectors per lane, small-batch plans),
 * "vector" and "generic". A forced entry that does not apply must fail with UNSUPPORTED ("generic"
 * applies to every pool, "vector" exactly to the vector pools); every entry runs somewhere; an
 * unknown name is INVALID_ARGUMENT.
 * Label cuda; exits 77 ("no CUDA device: skipped", a CTest skip) without a GPU.
 * Seed: SSMOPS_TEST_SEED (default 20261202).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cudautil.h"

static ssm_context *ctx_ref, *ctx_cuda, *ctx_auto;
static const char * kernel_name = "auto"; /* the running pass: "auto" (the default) or the forced entry */
static const char * forced = NULL;       /* the entry forced in ctx_cuda and ctx_auto, NULL: none */

/* Runs and skips of every entry of the step's table (index = table entry). */
enum { MAX_ENTRIES = 16 };
static int step_ran[MAX_ENTRIES], step_not_applicable[MAX_ENTRIES];

static int step_entry_index(const char * name) {
    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba2_step");
    for (int32_t i = 0; i < n && i < MAX_ENTRIES; ++i)
        if (strcmp(ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_step", i), name) == 0) return (int)i;
    return -1;
}


/* The coarser of two bars (f64 < f32 < f16 < bf16). */
static ssm_dtype coarser(ssm_dtype a, ssm_dtype b) {
    static const ssm_dtype order[4] = {SSM_DTYPE_F64, SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16};
    int ia = 0, ib = 0;
    for (int i = 0; i < 4; ++i) {
        if (order[i] == a) ia = i;
        if (order[i] == b) ib = i;
    }
    return ia > ib ? a : b;
}

/* ---- one problem --------------------------------------------------------------------------- */
typedef struct step_problem {
    int64_t              B, H, P, N, G, slots;
    int                  pool_layout; /* step_opts.pool_layout */
    ssmt_host            x, dt, a, b, c, d, z, bias, idx, state;
    ssm_mamba2_step_args args; /* inputs only (host) */
} step_problem;

typedef struct step_opts {
    int       per_head, with_idx, opt, strided; /* opt: 1 d, 2 dt_bias, 4 z                       */
    int       pool_layout;                      /* 0 contiguous, 1 padded strides, 2 misaligned */
    ssm_dtype dtype, sdt;
} step_opts;

static void problem_free(step_problem * q) {
    ssmt_free(&q->x), ssmt_free(&q->dt), ssmt_free(&q->a), ssmt_free(&q->b), ssmt_free(&q->c), ssmt_free(&q->d);
    ssmt_free(&q->z), ssmt_free(&q->bias), ssmt_free(&q->idx), ssmt_free(&q->state);
}

/* A contiguous pool view starting one element into its buffer: no row is 16-byte aligned. */
static ssmt_host alloc_misaligned(ssm_dtype dtype, const int64_t * shape) {
    const int64_t total = shape[0] * shape[1] * shape[2] * shape[3] + 1;
    ssmt_host     h = ssmt_alloc(dtype, 1, &total);
    if (h.t.data == NULL) return h;
    const size_t es = ssm_dtype_size(dtype);
    h.t.data = (char *)h.t.data + es;
    h.t.ndim = 4;
    int64_t s = 1;
    for (int i = 3; i >= 0; --i) {
        h.t.shape[i] = shape[i];
        h.t.strides[i] = s;
        s *= shape[i];
    }
    return h;
}

static int problem_make(ssmt_rng * rng, step_problem * q, const int64_t * s, int64_t slots, const step_opts * o) {
    memset(q, 0, sizeof *q);
    const int64_t B = s[0], H = s[1], P = s[2], N = s[3], G = s[4];
    q->B = B, q->H = H, q->P = P, q->N = N, q->G = G, q->slots = o->with_idx ? slots : B;
    q->pool_layout = o->pool_layout;
    const int64_t sx[3] = {B, H, P}, sb[3] = {B, G, N}, sa[3] = {H, P, N}, shp[2] = {H, P};
    const int64_t sst[4] = {q->slots, H, P, N};
    static const int32_t rev3[3] = {2, 1, 0};
    q->x = o->strided ? ssmt_alloc_layout(o->dtype, 3, sx, rev3, 1) : ssmt_alloc(o->dtype, 3, sx);
    q->b = ssmt_alloc(o->dtype, 3, sb);
    q->c = o->strided ? ssmt_alloc_layout(o->dtype, 3, sb, NULL, 3) : ssmt_alloc(o->dtype, 3, sb);
    q->state = o->pool_layout == 1   ? ssmt_alloc_layout(o->sdt, 4, sst, NULL, 2)
               : o->pool_layout == 2 ? alloc_misaligned(o->sdt, sst)
                                     : ssmt_alloc(o->sdt, 4, sst);
    if (q->x.t.data == NULL || q->b.t.data == NULL || q->c.t.data == NULL || q->state.t.data == NULL) return -1;
    ssmt_fill_normal(rng, &q->x.t, 0, 1), ssmt_fill_normal(rng, &q->b.t, 0, 1), ssmt_fill_normal(rng, &q->c.t, 0, 1);
    ssmt_fill_normal(rng, &q->state.t, 0, 1);
    ssm_mamba2_step_args * a = &q->args;
    a->x = q->x.t, a->b = q->b.t, a->c = q->c.t, a->state = q->state.t;
    if (o->per_head) {
        const int64_t s1[1] = {H}, s2[2] = {B, H};
        q->a = ssmt_alloc(SSM_DTYPE_F32, 1, s1), q->dt = ssmt_alloc(o->dtype, 2, s2);
        q->bias = ssmt_alloc(SSM_DTYPE_F32, 1, s1), q->d = ssmt_alloc(SSM_DTYPE_F32, 1, s1);
        const int ka[3] = {1, 0, 0}, kdt[3] = {1, 1, 0}, khp[2] = {1, 0};
        a->a = ssmt_broadcast(&q->a.t, 3, sa, ka), a->dt = ssmt_broadcast(&q->dt.t, 3, sx, kdt);
        a->dt_bias = ssmt_broadcast(&q->bias.t, 2, shp, khp), a->d = ssmt_broadcast(&q->d.t, 2, shp, khp);
    } else {
        q->a = ssmt_alloc(SSM_DTYPE_F32, 3, sa), q->dt = ssmt_alloc(o->dtype, 3, sx);
        q->bias = ssmt_alloc(SSM_DTYPE_F32, 2, shp), q->d = ssmt_alloc(SSM_DTYPE_F32, 2, shp);
        a->a = q->a.t, a->dt = q->dt.t, a->dt_bias = q->bias.t, a->d = q->d.t;
    }
    ssmt_fill_uniform(rng, &q->a.t, -8.0, -0.5), ssmt_fill_uniform(rng, &q->dt.t, -3.0, 1.0);
    ssmt_fill_uniform(rng, &q->bias.t, -2.0, 0.0), ssmt_fill_normal(rng, &q->d.t, 0, 1);
    if (!(o->opt & 1)) a->d.data = NULL;
    if (!(o->opt & 2)) a->dt_bias.data = NULL;
    if (o->opt & 4) {
        q->z = ssmt_alloc(o->dtype, 3, sx);
        ssmt_fill_normal(rng, &q->z.t, 0, 1);
        a->z = q->z.t;
    }
    if (o->with_idx) { /* a random permutation of slots, every third row padding */
        const int64_t si[1] = {B};
        q->idx = ssmt_alloc((B % 2) ? SSM_DTYPE_I64 : SSM_DTYPE_I32, 1, si);
        int64_t * perm = malloc((size_t)slots * sizeof(int64_t));
        if (perm == NULL) return -1;
        for (int64_t k = 0; k < slots; ++k) perm[k] = k;
        for (int64_t k = slots - 1; k > 0; --k) {
            const int64_t j = ssmt_randint(rng, 0, k), t = perm[k];
            perm[k] = perm[j], perm[j] = t;
        }
        for (int64_t r = 0; r < B; ++r) ssmt_set(&q->idx.t, r, (r % 3 == 1) ? -1.0 - (double)(r % 5) : (double)perm[r]);
        free(perm);
        a->state_batch_indices = q->idx.t;
    }
    return 0;
}

static int64_t slot_of(const step_problem * q, int64_t r) {
    return q->idx.t.data ? (int64_t)ssmt_get(&q->idx.t, r) : r;
}

/* ---- device run against the reference ------------------------------------------------------ */
typedef struct run_opts {
    int       in_place, index_device, use_auto;
    ssm_dtype fdt; /* dtype of a separate final pool */
} run_opts;

/* Copies of the host inputs on the device; args points at them. */
typedef struct dev_inputs {
    ssmt_dev x, dt, a, b, c, d, z, bias, idx, state;
} dev_inputs;

static void dev_inputs_free(dev_inputs * v) {
    ssmt_dev_free(&v->x), ssmt_dev_free(&v->dt), ssmt_dev_free(&v->a), ssmt_dev_free(&v->b), ssmt_dev_free(&v->c);
    ssmt_dev_free(&v->d), ssmt_dev_free(&v->z), ssmt_dev_free(&v->bias), ssmt_dev_free(&v->idx);
    ssmt_dev_free(&v->state);
}

/* The device view of a host view of h (stride-0 broadcasts keep their own shape/strides). */
static ssm_tensor on_device(const ssm_tensor * host_view, const ssmt_host * h, const ssmt_dev * d) {
    if (host_view->data == NULL || d->mem == NULL) return ssmt_absent();
    ssm_tensor v = *host_view;
    v.data = (char *)d->mem + ((const char *)host_view->data - (const char *)h->buf);
    v.device = d->view.device;
    return v;
}

/* Whether the forced entry `name` must apply to this case (1), must not (0), or depends on the pool's
 * padding (-1): the vector entries need state (and a separate final pool, of the same dtype) f32,
 * f16 or bf16 in contiguous 16-byte aligned rows of whole 16-byte vectors. */
static int step_must_apply(const char * name, const step_problem * q, const run_opts * o) {
    const ssm_dtype sdt = (ssm_dtype)q->state.t.dtype;
    const int       typed = sdt == SSM_DTYPE_F32 || sdt == SSM_DTYPE_F16 || sdt == SSM_DTYPE_BF16;
    const int64_t   vec = typed ? 16 / (int64_t)ssm_dtype_size(sdt) : 1;
    int             vec_pool = typed && q->N % vec == 0 && (o->in_place || o->fdt == sdt) && q->pool_layout != 2;
    if (vec_pool && q->pool_layout == 1) vec_pool = -1;
    if (strcmp(name, "generic") == 0) return 1;
    if (strcmp(name, "vector") == 0) return vec_pool;
    return vec_pool == 0 ? 0 : -1;
}

static void run_case(const step_problem * q, const ssm_mamba2_params * prm, const run_opts * o, const char * tag) {
    const ssm_dtype compute = (ssm_dtype)q->x.t.dtype, sdt = (ssm_dtype)q->state.t.dtype;
    const ssm_dtype fdt = o->in_place ? sdt : o->fdt;
    char            label[300];

    /* reference: F64 out and a separate F64 final pool (unused slots copied) */
    ssm_mamba2_step_args r = q->args;
    ssmt_host            rout = ssmt_alloc(SSM_DTYPE_F64, 3, q->x.t.shape);
    ssmt_host            rfin = ssmt_alloc(SSM_DTYPE_F64, 4, q->state.t.shape);
    r.out = rout.t, r.final_state = rfin.t;
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_ref, prm, &r), SSM_STATUS_OK);

    /* device inputs (the pool too: in place it is also the output) */
    dev_inputs v;
    memset(&v, 0, sizeof v);
    v.x = ssmt_to_device(&q->x), v.dt = ssmt_to_device(&q->dt), v.a = ssmt_to_device(&q->a);
    v.b = ssmt_to_device(&q->b), v.c = ssmt_to_device(&q->c), v.d = ssmt_to_device(&q->d);
    v.z = ssmt_to_device(&q->z), v.bias = ssmt_to_device(&q->bias), v.state = ssmt_to_device(&q->state);
    if (o->index_device) v.idx = ssmt_to_device(&q->idx);
    ssm_mamba2_step_args da = q->args;
    da.x = on_device(&q->args.x, &q->x, &v.x), da.dt = on_device(&q->args.dt, &q->dt, &v.dt);
    da.a = on_device(&q->args.a, &q->a, &v.a), da.b = on_device(&q->args.b, &q->b, &v.b);
    da.c = on_device(&q->args.c, &q->c, &v.c), da.d = on_device(&q->args.d, &q->d, &v.d);
    da.z = on_device(&q->args.z, &q->z, &v.z), da.dt_bias = on_device(&q->args.dt_bias, &q->bias, &v.bias);
    da.state = on_device(&q->args.state, &q->state, &v.state);
    if (o->index_device) da.state_batch_indices = on_device(&q->args.state_batch_indices, &q->idx, &v.idx);

    /* outputs, NaN-poisoned. out is f32: the bars apply to the computation (rounding a
     * heavy-tailed output to 16 bits alone can exceed max_rel); the 16-bit store is checked
     * below as exactly the rounded f32 result. */
    ssmt_host out = ssmt_alloc(SSM_DTYPE_F32, 3, q->x.t.shape);
    ssmt_host fin = ssmt_alloc(fdt, 4, q->state.t.shape);
    ssmt_dev  dout = ssmt_to_device(&out), dfin = {0};
    da.out = dout.view;
    if (o->in_place) {
        da.final_state = da.state;
    } else {
        dfin = ssmt_to_device(&fin);
        da.final_state = dfin.view;
    }
    ssm_context * ctx = o->use_auto ? ctx_auto : ctx_cuda;
    ssm_status    st = ssm_mamba2_step(ctx, prm, &da);
    if (forced != NULL) {
        const int must = step_must_apply(forced, q, o), idx = step_entry_index(forced);
        TEST_CHECK(must < 0 || (st == SSM_STATUS_OK) == (must == 1), "%s: forced %s gave %s (%s)", tag, forced,
                   ssm_status_string(st), ssm_context_last_error(ctx));
        if (idx >= 0 && st == SSM_STATUS_OK) ++step_ran[idx];
        if (idx >= 0 && st == SSM_STATUS_UNSUPPORTED) ++step_not_applicable[idx];
        if (st == SSM_STATUS_UNSUPPORTED) { /* the entry does not apply: nothing to check */
            TEST_CHECK(strstr(ssm_context_last_error(ctx), "does not apply") != NULL, "%s: message: %s", tag,
                       ssm_context_last_error(ctx));
            ssmt_dev_free(&dout), ssmt_dev_free(&dfin);
            dev_inputs_free(&v);
            ssmt_free(&out), ssmt_free(&fin), ssmt_free(&rout), ssmt_free(&rfin);
            return;
        }
    }
    TEST_CHECK(st == SSM_STATUS_OK, "%s: step %s (%s)", tag, ssm_status_string(st), ssm_context_last_error(ctx));
    TEST_CHECK(forced == NULL ? step_entry_index(ssm_context_last_variant(ctx)) >= 0
                              : strcmp(ssm_context_last_variant(ctx), forced) == 0,
               "%s: ran '%s'", tag, ssm_context_last_variant(ctx));

    /* results back: in place the pool is the host copy of the state */
    ssmt_host pool = ssmt_clone(&q->state.t, sdt); /* same values as the input, overwritten below */
    ssmt_to_host(&out, &dout);
    const ssmt_host * got_pool;
    ssmt_host         state_back = {0};
    if (o->in_place) {
        state_back = ssmt_clone(&q->state.t, sdt);
        /* the device buffer has the input's layout: bring it back into a buffer of that layout */
        ssmt_host layout = q->state;
        layout.buf = malloc(q->state.bytes);
        layout.t.data = layout.buf ? (char *)layout.buf + ((const char *)q->state.t.data - (const char *)q->state.buf)
                                   : NULL;
        if (layout.buf) {
            ssmt_to_host(&layout, &v.state);
            ssmt_copy(&state_back.t, &layout.t);
            free(layout.buf);
        }
        got_pool = &state_back;
    } else {
        ssmt_to_host(&fin, &dfin);
        got_pool = &fin;
    }
    snprintf(label, sizeof label, "%s out", tag);
    ssmt_check_bar(label, &out.t, &rout.t, compute);
    snprintf(label, sizeof label, "%s pool", tag);
    ssmt_check_bar(label, &got_pool->t, &rfin.t, coarser(compute, coarser(sdt, fdt)));

    /* padding rows: exactly 0; slots no row used: exactly the input (when the dtype is kept) */
    const int64_t per_row = q->H * q->P, per_slot = q->H * q->P * q->N;
    int           bad_pad = 0, bad_slot = 0;
    for (int64_t b = 0; b < q->B; ++b)
        if (slot_of(q, b) < 0)
            for (int64_t i = 0; i < per_row; ++i) bad_pad += ssmt_get(&out.t, b * per_row + i) != 0.0;
    TEST_CHECK(bad_pad == 0, "%s: %d outputs of padding rows are not 0", tag, bad_pad);
    if (fdt == sdt) {
        unsigned char * used = calloc((size_t)q->slots, 1);
        for (int64_t b = 0; used != NULL && b < q->B; ++b)
            if (slot_of(q, b) >= 0) used[slot_of(q, b)] = 1;
        for (int64_t s = 0; used != NULL && s < q->slots; ++s)
            if (!used[s])
                for (int64_t i = 0; i < per_slot; ++i)
                    bad_slot += !(ssmt_get(&got_pool->t, s * per_slot + i) == ssmt_get(&pool.t, s * per_slot + i));
        free(used);
        TEST_CHECK(bad_slot == 0, "%s: %d elements of unused slots differ from the input pool", tag, bad_slot);
    }

    /* a second run from the same inputs on re-poisoned outputs gives the same bytes */
    void * first_out = ssmt_snapshot(&out);
    void * first_pool = ssmt_snapshot(got_pool);
    ssmt_poison(&out.t);
    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, dout.mem, out.buf, out.bytes), SSM_STATUS_OK);
    if (o->in_place) {
        TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, v.state.mem, q->state.buf, q->state.bytes), SSM_STATUS_OK);
    } else {
        ssmt_poison(&fin.t);
        TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, dfin.mem, fin.buf, fin.bytes), SSM_STATUS_OK);
    }
    st = ssm_mamba2_step(ctx, prm, &da);
    TEST_CHECK(st == SSM_STATUS_OK, "%s: second step %s (%s)", tag, ssm_status_string(st), ssm_context_last_error(ctx));
    ssmt_to_host(&out, &dout);
    TEST_CHECK(ssmt_unchanged(&out, first_out), "%s: out differs between two runs", tag);
    if (o->in_place) {
        ssmt_host layout = q->state;
        layout.buf = malloc(q->state.bytes);
        layout.t.data = layout.buf ? (char *)layout.buf + ((const char *)q->state.t.data - (const char *)q->state.buf)
                                   : NULL;
        if (layout.buf) {
            ssmt_to_host(&layout, &v.state);
            ssmt_copy(&state_back.t, &layout.t);
            free(layout.buf);
        }
    } else {
        ssmt_to_host(&fin, &dfin);
    }
    TEST_CHECK(ssmt_unchanged(got_pool, first_pool), "%s: pool differs between two runs", tag);
    free(first_out), free(first_pool);

    if (compute == SSM_DTYPE_F16 || compute == SSM_DTYPE_BF16) {
        ssmt_host out16 = ssmt_alloc(compute, 3, q->x.t.shape);
        ssmt_dev  dout16 = ssmt_to_device(&out16);
        if (o->in_place)
            TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, v.state.mem, q->state.buf, q->state.bytes), SSM_STATUS_OK);
        ssm_mamba2_step_args a16 = da;
        a16.out = dout16.view;
        st = ssm_mamba2_step(ctx, prm, &a16);
        TEST_CHECK(st == SSM_STATUS_OK, "%s: 16-bit out step %s (%s)", tag, ssm_status_string(st),
                   ssm_context_last_error(ctx));
        ssmt_to_host(&out16, &dout16);
        int64_t bad16 = 0;
        for (int64_t i = 0; i < q->B * per_row; ++i)
            bad16 += !(ssmt_get(&out16.t, i) == ssmt_round_to(compute, ssmt_get(&out.t, i)));
        TEST_CHECK(bad16 == 0, "%s: %lld 16-bit outputs are not the rounded f32 outputs", tag, (long long)bad16);
        ssmt_dev_free(&dout16);
        ssmt_free(&out16);
    }

    ssmt_dev_free(&dout), ssmt_dev_free(&dfin);
    dev_inputs_free(&v);
    ssmt_free(&out), ssmt_free(&fin), ssmt_free(&pool), ssmt_free(&state_back);
    ssmt_free(&rout), ssmt_free(&rfin);
}

/* ---- the matrix of cases ----------------------------------------------------------------------- */
static void test_random(ssmt_rng * rng) {
    static const ssm_dtype dts[3] = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16};
    static const ssm_dtype sdts[4] = {SSM_DTYPE_F32, SSM_DTYPE_BF16, SSM_DTYPE_F16, SSM_DTYPE_F64};
    /* B, H, P, N, G: odd sizes, N = 1 / odd / 128 / 256, G = 1 / 1 < G < H / G = H, four rows
     * per thread (B·H large), more rows than the kernel-argument slot table (B = 300) */
    static const int64_t shp[][5] = {{3, 4, 8, 16, 2},   {5, 6, 5, 19, 3},   {2, 2, 64, 128, 1}, {7, 4, 3, 8, 4},
                                     {3, 2, 5, 1, 1},    {4, 3, 16, 256, 1}, {64, 16, 64, 128, 4},
                                     {1, 80, 64, 128, 8}, {300, 2, 64, 64, 1}, {2, 3, 5, 512, 3},
                                     {2, 2, 3, 1024, 1},  {1, 2, 2, 2048, 2}, {3, 2, 7, 24, 1},
                                     {2, 4, 33, 32, 2}};
    const int            nshapes = (int)(sizeof shp / sizeof shp[0]);
    for (int k = 0; k < 56; ++k) {
        const int64_t * s = shp[k % nshapes];
        step_opts       so;
        memset(&so, 0, sizeof so);
        so.per_head = k % 2;
        so.with_idx = (k % 3) != 0 || s[0] > 256;
        so.opt = (k * 5) % 8;
        so.strided = (k % 5) == 3;
        so.pool_layout = (k % 7) == 2 ? 1 : (k % 7) == 5 ? 2 : 0;
        so.dtype = dts[k % 3];
        so.sdt = sdts[(k / 3) % 4];
        step_problem q;
        if (problem_make(rng, &q, s, s[0] + 2, &so) != 0) {
            TEST_CHECK(0, "case %d: allocation failed", k);
            problem_free(&q);
            continue;
        }
        ssm_mamba2_params prm;
        ssm_mamba2_params_init(&prm);
        prm.dt_softplus = (k % 4) != 1;
        if (k % 6 == 5) prm.dt_limit_lo = 0.05f, prm.dt_limit_hi = 0.3f;
        run_opts ro;
        ro.in_place = (k % 2) == 0;
        ro.index_device = (k % 4) >= 2;
        ro.use_auto = (k % 5) == 1;
        ro.fdt = (k % 8) == 3 ? SSM_DTYPE_F32 : (k % 8) == 7 ? SSM_DTYPE_BF16 : so.sdt;
        char tag[240];
        snprintf(tag, sizeof tag, "%s case%d B%lld H%lld P%lld N%lld G%lld %s pool %s%s %s%s%s%s%s%s%s", kernel_name, k,
                 (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3], (long long)s[4],
                 ssm_dtype_name(so.dtype), ssm_dtype_name(so.sdt),
                 so.pool_layout == 1 ? " strided" : so.pool_layout == 2 ? " misaligned" : "",
                 so.per_head ? "head" : "general", so.with_idx ? (ro.index_device ? " idx-dev" : " idx-host") : "",
                 ro.in_place ? " in-place" : " separate", ro.in_place ? "" : ssm_dtype_name(ro.fdt),
                 (so.opt & 4) ? " z" : "", prm.dt_softplus ? " softplus" : "", ro.use_auto ? " auto" : "");
        run_case(&q, &prm, &ro, tag);
        problem_free(&q);
    }
}

/* The serving form at a block count that selects four rows per thread: per-head a/dt/d,
 * dt_bias, z, softplus, indices with padding rows, every pool dtype of the vector path,
 * in place and separate. */
static void test_serving(ssmt_rng * rng) {
    static const ssm_dtype sdts[3] = {SSM_DTYPE_F32, SSM_DTYPE_BF16, SSM_DTYPE_F16};
    const int64_t          s[5] = {40, 16, 64, 128, 2};
    for (int k = 0; k < 6; ++k) {
        step_opts so;
        memset(&so, 0, sizeof so);
        so.per_head = 1, so.with_idx = 1, so.opt = 7;
        so.dtype = k < 3 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
        so.sdt = sdts[k % 3];
        step_problem q;
        if (problem_make(rng, &q, s, 45, &so) != 0) {
            TEST_CHECK(0, "serving %d: allocation failed", k);
            problem_free(&q);
            continue;
        }
        ssm_mamba2_params prm;
        ssm_mamba2_params_init(&prm);
        prm.dt_softplus = 1;
        run_opts ro;
        ro.in_place = k != 4, ro.index_device = k == 2, ro.use_auto = 0, ro.fdt = so.sdt;
        char tag[160];
        snprintf(tag, sizeof tag, "%s serving B40 H16 P64 N128 G2 %s pool %s %s", kernel_name, ssm_dtype_name(so.dtype),
                 ssm_dtype_name(so.sdt), ro.in_place ? "in-place" : "separate");
        run_case(&q, &prm, &ro, tag);
        problem_free(&q);
    }
}

/* Every plan of the streaming kernel (vectors per lane 1 / 2 / 4 / 8, rows per lane group 8 / 4 / 2 /
 * 1, the small-batch plan, one lane per row, P tails) on contiguous f32 and 16-bit pools, in
 * place and separate, general and per-head, every option; under the other entries the same problems. */
static void test_streaming_plans(ssmt_rng * rng) {
    static const int64_t shp[][5] = {{40, 8, 16, 256, 2}, {2, 2, 16, 256, 1}, {3, 2, 9, 512, 1},
                                     {2, 3, 5, 1024, 3},  {5, 2, 9, 4, 2},    {33, 8, 64, 128, 4},
                                     {40, 8, 13, 64, 8}};
    static const ssm_dtype sdts[3] = {SSM_DTYPE_F32, SSM_DTYPE_BF16, SSM_DTYPE_F16};
    const int              nshapes = (int)(sizeof shp / sizeof shp[0]);
    for (int k = 0; k < 2 * nshapes * 3; ++k) {
        const int64_t * s = shp[(k / 6) % nshapes];
        step_opts       so;
        memset(&so, 0, sizeof so);
        so.per_head = (k / 2) % 2;
        so.with_idx = k % 3 != 2;
        so.opt = 7 - (k % 4);
        so.dtype = k % 4 == 3 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
        so.sdt = sdts[k % 3];
        step_problem q;
        if (problem_make(rng, &q, s, s[0] + 3, &so) != 0) {
            TEST_CHECK(0, "plan %d: allocation failed", k);
            problem_free(&q);
            continue;
        }
        ssm_mamba2_params prm;
        ssm_mamba2_params_init(&prm);
        prm.dt_softplus = k % 5 != 4;
        if (k % 7 == 6) prm.dt_limit_lo = 0.05f, prm.dt_limit_hi = 0.3f;
        run_opts ro;
        ro.in_place = k % 2 == 0, ro.index_device = k % 6 == 1, ro.use_auto = 0, ro.fdt = so.sdt;
        char tag[200];
        snprintf(tag, sizeof tag, "%s plan%d B%lld H%lld P%lld N%lld G%lld %s pool %s %s %s", kernel_name, k,
                 (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3], (long long)s[4],
                 ssm_dtype_name(so.dtype), ssm_dtype_name(so.sdt), so.per_head ? "head" : "general",
                 ro.in_place ? "in-place" : "separate");
        run_case(&q, &prm, &ro, tag);
        problem_free(&q);
    }
}

/* ---- device rules ---------------------------------------------------------------------------- */
static void test_device_rules(ssmt_rng * rng) {
    const int64_t s[5] = {3, 4, 8, 16, 2};
    step_opts     so;
    memset(&so, 0, sizeof so);
    so.with_idx = 1, so.opt = 7, so.dtype = SSM_DTYPE_F32, so.sdt = SSM_DTYPE_F32;
    step_problem q;
    if (problem_make(rng, &q, s, 5, &so) != 0) {
        TEST_CHECK(0, "device rules: allocation failed");
        problem_free(&q);
        return;
    }
    ssm_mamba2_params prm;
    ssm_mamba2_params_init(&prm);
    ssmt_host            out = ssmt_alloc(SSM_DTYPE_F32, 3, q.x.t.shape);
    ssm_mamba2_step_args a = q.args;
    a.out = out.t, a.final_state = a.state;
    void * snap_out = ssmt_snapshot(&out), *snap_pool = ssmt_snapshot(&q.state);
    /* host tensors under the CUDA backend: INVALID_LAYOUT, nothing written */
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cuda, &prm, &a), SSM_STATUS_INVALID_LAYOUT);
    TEST_CHECK(strstr(ssm_context_last_error(ctx_cuda), "CUDA") != NULL, "message: %s",
               ssm_context_last_error(ctx_cuda));
    TEST_CHECK(ssmt_unchanged(&out, snap_out) && ssmt_unchanged(&q.state, snap_pool),
               "a rejected step wrote its outputs");
    /* x on the device, the rest on the host, AUTO: rejected (mixed devices) */
    ssmt_dev dx = ssmt_to_device(&q.x);
    a.x = dx.view;
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_auto, &prm, &a), SSM_STATUS_INVALID_LAYOUT);
    /* a host pointer labelled as a CUDA tensor (the pool) */
    ssmt_dev dt = ssmt_to_device(&q.dt), da = ssmt_to_device(&q.a), db = ssmt_to_device(&q.b), dc = ssmt_to_device(&q.c);
    ssmt_dev dd = ssmt_to_device(&q.d), dz = ssmt_to_device(&q.z), dbias = ssmt_to_device(&q.bias);
    ssmt_dev dout = ssmt_to_device(&out);
    a.dt = dt.view, a.a = da.view, a.b = db.view, a.c = dc.view, a.d = dd.view, a.z = dz.view, a.dt_bias = dbias.view;
    a.out = dout.view;
    a.state.device.type = SSM_DEVICE_CUDA;
    a.final_state = a.state;
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cuda, &prm, &a), SSM_STATUS_INVALID_LAYOUT);
    TEST_CHECK(ssmt_unchanged(&q.state, snap_pool), "a rejected step wrote the host pool");
    /* a slot index out of range (index tensor on the host): INVALID_ARGUMENT before any write */
    ssmt_dev dst = ssmt_to_device(&q.state);
    a.state = a.final_state = dst.view;
    const double keep = ssmt_get(&q.idx.t, 0);
    ssmt_set(&q.idx.t, 0, 99.0);
    const ssm_status st = ssm_mamba2_step(ctx_cuda, &prm, &a);
    TEST_CHECK(st != SSM_STATUS_OK, "an out-of-range slot index was accepted");
    ssmt_set(&q.idx.t, 0, keep);
    /* dst_state_batch_indices naming the read slots (the general form, test_cuda_decode_slots
     * covers it in full): the plain step's out and pool within the fp32 bar */
    ssmt_poison(&out.t);
    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, dout.mem, out.buf, out.bytes), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cuda, &prm, &a), SSM_STATUS_OK);
    ssmt_to_host(&out, &dout), ssmt_to_host(&q.state, &dst);
    ssmt_host plain_out = ssmt_clone(&out.t, SSM_DTYPE_F32), plain_pool = ssmt_clone(&q.state.t, SSM_DTYPE_F32);
    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, dst.mem, snap_pool, q.state.bytes), SSM_STATUS_OK);
    ssmt_poison(&out.t);
    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, dout.mem, out.buf, out.bytes), SSM_STATUS_OK);
    a.dst_state_batch_indices = q.idx.t;
    const ssm_status sd = ssm_mamba2_step(ctx_cuda, &prm, &a);
    TEST_CHECK(sd == SSM_STATUS_OK, "dst_state_batch_indices on CUDA: %s (%s)", ssm_status_string(sd),
               ssm_context_last_error(ctx_cuda));
    ssmt_to_host(&out, &dout), ssmt_to_host(&q.state, &dst);
    ssmt_check_bar("dst = the read slots: out", &out.t, &plain_out.t, SSM_DTYPE_F32);
    ssmt_check_bar("dst = the read slots: pool", &q.state.t, &plain_pool.t, SSM_DTYPE_F32);
    ssmt_free(&plain_out), ssmt_free(&plain_pool);
    a.dst_state_batch_indices = ssmt_absent();
    free(snap_out), free(snap_pool);
    ssmt_dev_free(&dx), ssmt_dev_free(&dt), ssmt_dev_free(&da), ssmt_dev_free(&db), ssmt_dev_free(&dc);
    ssmt_dev_free(&dd), ssmt_dev_free(&dz), ssmt_dev_free(&dbias), ssmt_dev_free(&dout), ssmt_dev_free(&dst);
    ssmt_free(&out);
    problem_free(&q);
}

/* ---- variant names ------------------------------------------------------------------------------ */
static void test_variant_names(void) {
    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba2_step");
    TEST_CHECK(n > 0 && n <= MAX_ENTRIES, "mamba2_step: %d CUDA variants", (int)n);
    for (int32_t i = 0; i < n; ++i) {
        const char * why = ssm_variant_why(SSM_BACKEND_CUDA, "mamba2_step", i);
        TEST_CHECK(why != NULL && why[0] != '\0', "mamba2_step: entry %d has no reason", (int)i);
    }
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_step", "no_such_kernel"), SSM_STATUS_INVALID_ARGUMENT);
    TEST_CHECK(strstr(ssm_context_last_error(ctx_cuda), "generic") != NULL, "message: %s",
               ssm_context_last_error(ctx_cuda));
}

int main(void) {
    if (!ssmt_cuda_present("test_cuda_mamba2_step")) return 77;
    const char * env = getenv("SSMOPS_TEST_SEED");
    uint64_t     seed = env ? strtoull(env, NULL, 10) : 20261202u;
    printf("seed %llu, %d CUDA device(s)\n", (unsigned long long)seed, (int)ssm_cuda_device_count());
    ssmt_rng rng;
    ssmt_rng_seed(&rng, seed);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 0, SSM_ISA_AUTO);
    ctx_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 0, SSM_ISA_AUTO);
    ctx_auto = ssmt_make_ctx(SSM_BACKEND_AUTO, 0, SSM_ISA_AUTO);
    TEST_CHECK(ctx_ref && ctx_cuda && ctx_auto, "context creation failed");
    if (ssmt_failures) TEST_EXIT();

    test_device_rules(&rng);
    test_variant_names();
    /* the default, then every entry forced, on the same problems (same seed) */
    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba2_step");
    for (int32_t pass = -1; pass < n; ++pass) {
        forced = pass < 0 ? NULL : ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_step", pass);
        kernel_name = forced != NULL ? forced : "auto";
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_step", forced), SSM_STATUS_OK);
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_auto, "mamba2_step", forced), SSM_STATUS_OK);
        ssmt_variant_forced = forced != NULL;
        printf("kernel %s\n", kernel_name);
        ssmt_rng krng;
        ssmt_rng_seed(&krng, seed + 1);
        test_random(&krng);
        test_serving(&krng);
        test_streaming_plans(&krng);
    }
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_step", NULL), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_auto, "mamba2_step", NULL), SSM_STATUS_OK);
    ssmt_variant_forced = 0;
    for (int32_t i = 0; i < n && i < MAX_ENTRIES; ++i) {
        const char * name = ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_step", i);
        printf("mamba2_step variant %-10s ran %4d times, did not apply %4d times\n", name, step_ran[i],
               step_not_applicable[i]);
        TEST_CHECK(step_ran[i] > 0, "mamba2_step variant %s never ran", name);
    }

    ssm_context_free(ctx_ref);
    ssm_context_free(ctx_cuda);
    ssm_context_free(ctx_auto);
    TEST_EXIT();
}
