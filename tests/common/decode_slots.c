/* decode_slots.c — see decode_slots.h. */
#include "decode_slots.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cudautil.h"

ssm_mamba2_params      ssmt_ds_m2_params;
ssm_mamba3_params      ssmt_ds_siso_params;
ssm_mamba3_mimo_params ssmt_ds_mimo_params;
int                    ssmt_ds_index_dev;

static ssm_status call_m2(ssm_context * c, void * a) { return ssm_mamba2_step(c, &ssmt_ds_m2_params, a); }
static ssm_status call_siso(ssm_context * c, void * a) { return ssm_mamba3_siso_step(c, &ssmt_ds_siso_params, a); }
static ssm_status call_mimo(ssm_context * c, void * a) { return ssm_mamba3_mimo_step(c, &ssmt_ds_mimo_params, a); }

/* fn on ctx; on a CUDA context through device mirrors of every tensor (cudautil.h). */
static ssm_status call_on(ssm_context * c, const char * op, ssmt_run_fn fn, void * a) {
    if (c != NULL && ssm_context_backend(c) == SSM_BACKEND_CUDA)
        return ssmt_run_on_device(c, op, a, ssmt_ds_index_dev, fn);
    return fn(c, a);
}
ssm_status ssmt_ds_run_m2(ssm_context * c, void * a) { return call_on(c, "mamba2_step", call_m2, a); }
ssm_status ssmt_ds_run_siso(ssm_context * c, void * a) { return call_on(c, "mamba3_siso_step", call_siso, a); }
ssm_status ssmt_ds_run_mimo(ssm_context * c, void * a) { return call_on(c, "mamba3_mimo_step", call_mimo, a); }

/* A random permutation of 0..n−1 into perm. */
void ssmt_ds_shuffle(ssmt_rng * rng, int64_t * perm, int64_t n) {
    for (int64_t s = 0; s < n; ++s) perm[s] = s;
    for (int64_t s = n - 1; s > 0; --s) {
        const int64_t j = ssmt_randint(rng, 0, s), t = perm[s];
        perm[s] = perm[j], perm[j] = t;
    }
}

void ssmt_ds_m2_free(ssmt_ds_m2 * q) {
    ssmt_free(&q->x), ssmt_free(&q->dt), ssmt_free(&q->a), ssmt_free(&q->b), ssmt_free(&q->c), ssmt_free(&q->d);
    ssmt_free(&q->z), ssmt_free(&q->bias), ssmt_free(&q->state), ssmt_free(&q->cu), ssmt_free(&q->rd);
    ssmt_free(&q->wr);
}

/* R rows of lens[] tokens (cu_seqlens when varlen, else one token each), a pool of 2R + 2
 * slots: row b reads slot perm[b] and writes slot perm[R + b] (read ≠ write); every fourth
 * row (b % 4 == 1) is padding, and row 2 (when R > 2) computes without writing (write −1). */
void ssmt_ds_m2_make(ssmt_rng * rng, ssmt_ds_m2 * q, int64_t R, const int64_t * lens, int varlen, int64_t H, int64_t P,
                     int64_t N, int64_t G, ssm_dtype dtype, ssm_dtype sdt, int per_head, int has_z) {
    memset(q, 0, sizeof *q);
    q->R = R, q->H = H, q->P = P, q->N = N, q->G = G, q->slots = 2 * R + 2;
    q->T = 0;
    for (int64_t b = 0; b < R; ++b) q->lens[b] = varlen ? lens[b] : 1, q->T += q->lens[b];
    const int64_t T = q->T, sx[3] = {T, H, P}, sb[3] = {T, G, N}, sa[3] = {H, P, N}, shp[2] = {H, P};
    const int64_t sst[4] = {q->slots, H, P, N};
    q->x = ssmt_alloc(dtype, 3, sx), q->b = ssmt_alloc(dtype, 3, sb), q->c = ssmt_alloc(dtype, 3, sb);
    ssmt_fill_normal(rng, &q->x.t, 0, 1), ssmt_fill_normal(rng, &q->b.t, 0, 1), ssmt_fill_normal(rng, &q->c.t, 0, 1);
    q->state = ssmt_alloc(sdt, 4, sst);
    ssmt_fill_normal(rng, &q->state.t, 0, 1);
    ssm_mamba2_step_args * a = &q->args;
    a->x = q->x.t, a->b = q->b.t, a->c = q->c.t, a->state = q->state.t;
    if (per_head) {
        const int64_t s1[1] = {H}, s2[2] = {T, H};
        q->a = ssmt_alloc(SSM_DTYPE_F32, 1, s1), q->dt = ssmt_alloc(dtype, 2, s2);
        q->bias = ssmt_alloc(SSM_DTYPE_F32, 1, s1), q->d = ssmt_alloc(SSM_DTYPE_F32, 1, s1);
        const int ka[3] = {1, 0, 0}, kdt[3] = {1, 1, 0}, khp[2] = {1, 0};
        a->a = ssmt_broadcast(&q->a.t, 3, sa, ka), a->dt = ssmt_broadcast(&q->dt.t, 3, sx, kdt);
        a->dt_bias = ssmt_broadcast(&q->bias.t, 2, shp, khp), a->d = ssmt_broadcast(&q->d.t, 2, shp, khp);
    } else {
        q->a = ssmt_alloc(SSM_DTYPE_F32, 3, sa), q->dt = ssmt_alloc(dtype, 3, sx);
        q->bias = ssmt_alloc(SSM_DTYPE_F32, 2, shp), q->d = ssmt_alloc(SSM_DTYPE_F32, 2, shp);
        a->a = q->a.t, a->dt = q->dt.t, a->dt_bias = q->bias.t, a->d = q->d.t;
    }
    ssmt_fill_uniform(rng, &q->a.t, -4.0, -0.5), ssmt_fill_uniform(rng, &q->dt.t, -3.0, 1.0);
    ssmt_fill_uniform(rng, &q->bias.t, -2.0, 0.0), ssmt_fill_normal(rng, &q->d.t, 0, 1);
    if (has_z) {
        q->z = ssmt_alloc(dtype, 3, sx);
        ssmt_fill_normal(rng, &q->z.t, 0, 1);
        a->z = q->z.t;
    }
    if (varlen) {
        const int64_t sc[1] = {R + 1};
        q->cu = ssmt_alloc(SSM_DTYPE_I32, 1, sc);
        int64_t acc = 0;
        ssmt_set(&q->cu.t, 0, 0);
        for (int64_t b = 0; b < R; ++b) acc += q->lens[b], ssmt_set(&q->cu.t, b + 1, (double)acc);
        a->cu_seqlens = q->cu.t;
    }
    const int64_t si[1] = {R};
    q->rd = ssmt_alloc(SSM_DTYPE_I64, 1, si), q->wr = ssmt_alloc(SSM_DTYPE_I32, 1, si);
    int64_t perm[64];
    ssmt_ds_shuffle(rng, perm, q->slots);
    for (int64_t b = 0; b < R; ++b) {
        const int pad = b % 4 == 1;
        ssmt_set(&q->rd.t, b, pad ? -1 : (double)perm[b]);
        ssmt_set(&q->wr.t, b, pad || (b == 2) ? -1 : (double)perm[R + b]);
    }
    a->state_batch_indices = q->rd.t, a->dst_state_batch_indices = q->wr.t;
}

int64_t ssmt_ds_m2_cu(const ssmt_ds_m2 * q, int64_t b) {
    int64_t t = 0;
    for (int64_t i = 0; i < b; ++i) t += q->lens[i];
    return t;
}

/* The engine's loop with vLLM's slot tables: step A writes the state after each token of
 * row b to slot tabA[b, j]; step B reads tabA[b, max(k_b − 1, 0)] through num_accepted_tokens. */
void ssmt_ds_m2_tables(ssmt_rng * rng, ssm_context * ctx, ssm_dtype cdt) {
    const int64_t R = 5, H = 4, P = 8, N = 16, G = 2, Lmax = 4;
    int64_t       lens[5] = {3, 0, 4, 1, 2};
    ssmt_ds_m2    q;
    ssmt_ds_m2_make(rng, &q, R, lens, 1, H, P, N, G, SSM_DTYPE_F32, cdt, 1, 1);
    ssm_mamba2_params_init(&ssmt_ds_m2_params);
    ssmt_ds_m2_params.dt_softplus = 1;
    /* a larger pool: R read slots, R·Lmax table slots, R fresh slots for step B */
    const int64_t slots = R + R * Lmax + R, sst[4] = {slots, H, P, N};
    ssmt_host     pool = ssmt_alloc(cdt, 4, sst);
    ssmt_fill_normal(rng, &pool.t, 0, 1);
    int64_t perm[64];
    ssmt_ds_shuffle(rng, perm, slots);
    const int64_t st2[2] = {R, Lmax}, s1[1] = {R};
    ssmt_host     rd = ssmt_alloc(SSM_DTYPE_I32, 1, s1), tab = ssmt_alloc(SSM_DTYPE_I64, 2, st2);
    for (int64_t b = 0; b < R; ++b) {
        ssmt_set(&rd.t, b, (double)perm[b]);
        for (int64_t j = 0; j < Lmax; ++j) ssmt_set(&tab.t, b * Lmax + j, (double)perm[R + b * Lmax + j]);
    }
    const int64_t        so[3] = {q.T, H, P}, si[4] = {q.T, H, P, N};
    ssmt_host            out = ssmt_alloc(cdt, 3, so), inter = ssmt_alloc(cdt, 4, si);
    ssm_mamba2_step_args a = q.args;
    a.state = pool.t, a.final_state = pool.t, a.out = out.t, a.intermediate_states = inter.t;
    a.state_batch_indices = rd.t, a.dst_state_batch_indices = tab.t;
    ssmt_host before = ssmt_clone(&pool.t, cdt);
    TEST_CHECK_STATUS(ssmt_ds_run_m2(ctx, &a), SSM_STATUS_OK);
    /* the table's slots hold the intermediate states; every other slot is unchanged */
    char * touched = calloc((size_t)slots, 1);
    for (int64_t b = 0, t0 = 0; b < R; t0 += lens[b], ++b)
        for (int64_t j = 0; j < lens[b]; ++j) {
            const int64_t    w = perm[R + b * Lmax + j];
            const ssm_tensor ps = ssmt_pick(&pool.t, 0, w), is = ssmt_pick(&inter.t, 0, t0 + j);
            ssmt_check_close("table slot == intermediate state", &ps, &is, 0.0);
            touched[w] = 1;
        }
    for (int64_t s = 0; s < slots; ++s) {
        if (touched[s]) continue;
        const ssm_tensor ps = ssmt_pick(&pool.t, 0, s), bs = ssmt_pick(&before.t, 0, s);
        ssmt_check_close("slot outside the table unchanged", &ps, &bs, 0.0);
    }
    free(touched);
    /* step B: new tokens; the read table is tabA with num_accepted_tokens; writes to fresh slots */
    int64_t    lensB[5] = {2, 1, 0, 3, 1};
    ssmt_ds_m2 qb;
    ssmt_ds_m2_make(rng, &qb, R, lensB, 1, H, P, N, G, SSM_DTYPE_F32, cdt, 1, 1);
    ssmt_host acc = ssmt_alloc(SSM_DTYPE_I32, 1, s1), wr = ssmt_alloc(SSM_DTYPE_I32, 1, s1);
    ssmt_host rd1 = ssmt_alloc(SSM_DTYPE_I64, 1, s1);
    for (int64_t b = 0; b < R; ++b) {
        const int64_t k = ssmt_randint(rng, 0, lens[b]);
        ssmt_set(&acc.t, b, (double)k);
        ssmt_set(&wr.t, b, (double)perm[R + R * Lmax + b]);
        ssmt_set(&rd1.t, b, (double)perm[R + b * Lmax + (k > 0 ? k - 1 : 0)]);
    }
    const int64_t        sob[3] = {qb.T, H, P};
    ssmt_host            poolB = ssmt_clone(&pool.t, cdt), poolC = ssmt_clone(&pool.t, cdt);
    ssmt_host            outB = ssmt_alloc(cdt, 3, sob), outC = ssmt_alloc(cdt, 3, sob);
    ssm_mamba2_step_args bargs = qb.args;
    bargs.state = poolB.t, bargs.final_state = poolB.t, bargs.out = outB.t;
    bargs.state_batch_indices = tab.t, bargs.num_accepted_tokens = acc.t, bargs.dst_state_batch_indices = wr.t;
    TEST_CHECK_STATUS(ssmt_ds_run_m2(ctx, &bargs), SSM_STATUS_OK);
    ssm_mamba2_step_args cargs = bargs; /* the same with the read slots spelt out */
    cargs.state = poolC.t, cargs.final_state = poolC.t, cargs.out = outC.t;
    cargs.state_batch_indices = rd1.t, cargs.num_accepted_tokens = ssmt_absent();
    TEST_CHECK_STATUS(ssmt_ds_run_m2(ctx, &cargs), SSM_STATUS_OK);
    TEST_CHECK(memcmp(outB.buf, outC.buf, outB.bytes) == 0, "num_accepted_tokens: out differs from explicit slots");
    TEST_CHECK(memcmp(poolB.buf, poolC.buf, poolB.bytes) == 0, "num_accepted_tokens: pool differs from explicit slots");
    ssmt_free(&pool), ssmt_free(&rd), ssmt_free(&tab), ssmt_free(&out), ssmt_free(&inter), ssmt_free(&before);
    ssmt_free(&acc), ssmt_free(&wr), ssmt_free(&rd1), ssmt_free(&poolB), ssmt_free(&poolC), ssmt_free(&outB);
    ssmt_free(&outC);
    ssmt_ds_m2_free(&q), ssmt_ds_m2_free(&qb);
}

/* One Mamba-3 step problem (args: inputs with separate final buffers, poisoned; B rows, a
 * pool of `slots`, state_batch_indices with padding rows). Sets dst: each non-padding row a
 * slot no row reads, row 0 none (−1). */
void ssmt_ds_set_dst(ssmt_rng * rng, const ssmt_ds_fields * f, ssmt_host * dst, int64_t B, int64_t slots) {
    const int64_t s1[1] = {B};
    *dst = ssmt_alloc(SSM_DTYPE_I64, 1, s1);
    char *    read = calloc((size_t)slots, 1);
    int64_t * perm = malloc((size_t)slots * sizeof(int64_t));
    for (int64_t b = 0; b < B; ++b) {
        const int64_t r = (int64_t)ssmt_get(f->idx, b);
        if (r >= 0) read[r] = 1;
    }
    ssmt_ds_shuffle(rng, perm, slots);
    int64_t next = 0;
    for (int64_t b = 0; b < B; ++b) {
        int64_t w = -1;
        if (b != 0 && ssmt_get(f->idx, b) >= 0) {
            while (read[perm[next]]) ++next;
            w = perm[next++];
        }
        ssmt_set(&dst->t, b, (double)w);
    }
    free(read), free(perm);
    *f->dst = dst->t;
}

#define M3_STATES(T, p) \
    { offsetof(T, p##angle_state), offsetof(T, p##ssm_state), offsetof(T, p##k_state), offsetof(T, p##v_state) }
#define M3_LAYOUT(T, op, run, angle_outs)                                                                           \
    {                                                                                                               \
        op, run, sizeof(T), angle_outs, {offsetof(T, q),  offsetof(T, k),    offsetof(T, v),      offsetof(T, adt), \
                                         offsetof(T, dt), offsetof(T, trap), offsetof(T, angles), offsetof(T, z)},  \
            M3_STATES(T, ), M3_STATES(T, final_), M3_STATES(T, intermediate_), offsetof(T, out),                    \
            offsetof(T, state_batch_indices), offsetof(T, dst_state_batch_indices), offsetof(T, cu_seqlens),        \
            offsetof(T, num_accepted_tokens)                                                                        \
    }

/* SISO stores θ wrapped to [0, 2π) (final and intermediate angle states); MIMO as is. */
const ssmt_ds_layout ssmt_ds_siso_layout =
    M3_LAYOUT(ssm_mamba3_siso_step_args, "mamba3_siso_step", ssmt_ds_run_siso, (1u << 1) | (1u << 5));
const ssmt_ds_layout ssmt_ds_mimo_layout =
    M3_LAYOUT(ssm_mamba3_mimo_step_args, "mamba3_mimo_step", ssmt_ds_run_mimo, 0u);

/* The shape of intermediate state i: pool i's with T rows. */
ssmt_host ssmt_ds_inter_alloc(const ssm_tensor * pool, int64_t T, ssm_dtype dt) {
    int64_t sh[4];
    for (int i = 0; i < pool->ndim; ++i) sh[i] = pool->shape[i];
    sh[0] = T;
    return ssmt_alloc(dt, pool->ndim, sh);
}

/* Shapes: SISO {H, Hq, K, V, A, z}; MIMO {H, G, R, N, P, reduce_o, z}. */
const int64_t ssmt_ds_siso_shapes[3][7] = {{4, 2, 16, 8, 4, 1, 0}, {2, 1, 8, 16, 0, 0, 0}, {6, 3, 32, 8, 8, 1, 0}};
const int64_t ssmt_ds_mimo_shapes[3][7] = {{4, 2, 2, 16, 8, 1, 1}, {2, 1, 1, 8, 16, 0, 0}, {4, 4, 3, 16, 8, 1, 0}};

/* R rows of lens[] tokens of operator L (shape shp); row b reads slot perm[b] and writes
 * perm[R + b]; every fourth row (b % 4 == 1) is padding and row 2 writes nothing. Returns
 * nonzero on failure. */
int ssmt_ds_tokens_case(ssmt_rng * rng, ssmt_ds_tokens * q, const ssmt_ds_layout * L, int k, const int64_t ** shp,
                        ssm_dtype * dt) {
    *shp = L == &ssmt_ds_siso_layout ? ssmt_ds_siso_shapes[k % 3] : ssmt_ds_mimo_shapes[k % 3];
    const int64_t R = 3 + k % 5;
    int64_t       lens[16];
    for (int64_t b = 0; b < R; ++b) lens[b] = ssmt_randint(rng, 0, 4);
    lens[0] = 0, lens[R - 1] = 1 + ssmt_randint(rng, 0, 3); /* a row of no token; T ≥ 1 */
    *dt = k % 3 == 1 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    return ssmt_ds_tokens_make(rng, q, L, R, lens, *shp, *dt);
}

int ssmt_ds_tokens_make(ssmt_rng * rng, ssmt_ds_tokens * q, const ssmt_ds_layout * L, int64_t R, const int64_t * lens,
                        const int64_t * shp, ssm_dtype dtype) {
    memset(q, 0, sizeof *q);
    q->L = L, q->R = R;
    for (int64_t b = 0; b < R; ++b) q->lens[b] = lens[b], q->T += lens[b];
    q->slots = 2 * R + 2 + q->T; /* room for a slot table (ssmt_ds_m3_tables) */
    if (L == &ssmt_ds_siso_layout) {
        ssmt_mamba3_config cfg;
        ssmt_mamba3_config_init(&cfg);
        cfg.batch = q->T, cfg.nheads = shp[0], cfg.nheads_qk = shp[1], cfg.dk = shp[2], cfg.dv = shp[3];
        cfg.nangles = shp[4], cfg.dtype = dtype, cfg.has_z = shp[5];
        ssmt_mamba3_params(&cfg, &ssmt_ds_siso_params);
        if (ssmt_mamba3_random_step(rng, &cfg, q->slots, 1, &q->siso) != 0) return -1;
        q->args.siso = q->siso.args;
    } else {
        ssmt_mimo_config cfg;
        ssmt_mimo_config_init(&cfg);
        cfg.batch = q->T, cfg.nheads = shp[0], cfg.ngroups = shp[1], cfg.rank = shp[2], cfg.dstate = shp[3];
        cfg.headdim = shp[4], cfg.reduce_o = (int32_t)shp[5], cfg.has_z = (int32_t)shp[6], cfg.dtype = dtype;
        if (ssmt_mimo_random_step(rng, &cfg, q->slots, 1, &q->mimo) != 0) return -1;
        ssmt_ds_mimo_params = q->mimo.params;
        q->args.mimo = q->mimo.args;
    }
    const int64_t sc[1] = {R + 1}, si[1] = {R};
    q->cu = ssmt_alloc(SSM_DTYPE_I64, 1, sc), q->rd = ssmt_alloc(SSM_DTYPE_I32, 1, si);
    q->wr = ssmt_alloc(SSM_DTYPE_I64, 1, si);
    int64_t perm[64], acc = 0;
    ssmt_ds_shuffle(rng, perm, q->slots);
    ssmt_set(&q->cu.t, 0, 0);
    for (int64_t b = 0; b < R; ++b) {
        acc += lens[b], ssmt_set(&q->cu.t, b + 1, (double)acc);
        const int pad = b % 4 == 1;
        ssmt_set(&q->rd.t, b, pad ? -1 : (double)perm[b]);
        ssmt_set(&q->wr.t, b, pad || b == 2 ? -1 : (double)perm[R + b]);
    }
    *ssmt_ds_fld(&q->args, L->cu) = q->cu.t, *ssmt_ds_fld(&q->args, L->idx) = q->rd.t,
                           *ssmt_ds_fld(&q->args, L->dst) = q->wr.t;
    return 0;
}

void ssmt_ds_tokens_free(ssmt_ds_tokens * q) {
    if (q->L == &ssmt_ds_siso_layout)
        ssmt_mamba3_step_free(&q->siso);
    else
        ssmt_mimo_step_free(&q->mimo);
    ssmt_free(&q->cu), ssmt_free(&q->rd), ssmt_free(&q->wr);
}

/* Runs a on ctx expecting `want`; out, the intermediates and the pools unchanged after. */
static void expect_fail(const char * what, ssm_context * ctx, const ssmt_ds_layout * L, ssmt_ds_args * a,
                        ssm_status want) {
    const ssm_tensor * const watch[9] = {
        ssmt_ds_fld(a, L->out),      ssmt_ds_fld(a, L->in[0]),    ssmt_ds_fld(a, L->in[1]),
        ssmt_ds_fld(a, L->in[2]),    ssmt_ds_fld(a, L->in[3]),    ssmt_ds_fld(a, L->inter[0]),
        ssmt_ds_fld(a, L->inter[1]), ssmt_ds_fld(a, L->inter[2]), ssmt_ds_fld(a, L->inter[3])};
    ssmt_host snap[9];
    for (int i = 0; i < 9; ++i) snap[i] = ssmt_clone(watch[i], (ssm_dtype)watch[i]->dtype);
    const ssm_status st = L->run(ctx, a);
    TEST_CHECK(st == want, "%s rules: %s returned %s (%s)", L->op, what, ssm_status_string(st),
               ssm_context_last_error(ctx));
    for (int i = 0; i < 9; ++i) {
        ssmt_host now = ssmt_clone(watch[i], (ssm_dtype)watch[i]->dtype);
        TEST_CHECK(now.bytes == snap[i].bytes && memcmp(now.buf, snap[i].buf, now.bytes) == 0,
                   "%s rules: %s: a failed call wrote output %d", L->op, what, i);
        ssmt_free(&now), ssmt_free(&snap[i]);
    }
}

/* The engine's loop with slot tables on ctx (pools of dtype cdt, in place): step A stores
 * the states after each token of row b in slot tab[b, j] (equal to its intermediate
 * states); step B reads tab[b, max(k_b − 1, 0)] through num_accepted_tokens and equals the
 * same step with 1-D read slots. Then the table rules; failed calls write nothing. */
void ssmt_ds_m3_tables(ssmt_rng * rng, const ssmt_ds_layout * L, ssm_context * ctx, ssm_dtype cdt) {
    const int64_t  R = 5, W = 4, lens[5] = {3, 0, 4, 1, 2};
    ssmt_ds_tokens q;
    if (ssmt_ds_tokens_make(rng, &q, L, R, lens,
                            L == &ssmt_ds_siso_layout ? ssmt_ds_siso_shapes[0] : ssmt_ds_mimo_shapes[0],
                            SSM_DTYPE_F32) != 0) {
        TEST_CHECK(0, "could not build a %s tables problem", L->op);
        return;
    }
    ssmt_ds_args a = q.args;
    ssmt_host    pool[4], poolC[4], inter[4];
    for (int i = 0; i < 4; ++i) {
        pool[i] = ssmt_clone(ssmt_ds_fld(&a, L->in[i]), cdt),
        inter[i] = ssmt_ds_inter_alloc(ssmt_ds_fld(&a, L->in[i]), q.T, cdt);
        *ssmt_ds_fld(&a, L->in[i]) = pool[i].t, *ssmt_ds_fld(&a, L->fin[i]) = pool[i].t,
                         *ssmt_ds_fld(&a, L->inter[i]) = inter[i].t;
    }
    const int64_t      st[2] = {R, W}, s1[1] = {R};
    const ssm_tensor * o = ssmt_ds_fld(&a, L->out);
    ssmt_host          tab = ssmt_alloc(SSM_DTYPE_I32, 2, st), acc = ssmt_alloc(SSM_DTYPE_I64, 1, s1);
    ssmt_host          rd1 = ssmt_alloc(SSM_DTYPE_I64, 1, s1);
    ssmt_host          out = ssmt_alloc(cdt, o->ndim, o->shape), outC = ssmt_alloc(cdt, o->ndim, o->shape);
    int64_t            perm[64], next = 0;
    ssmt_ds_shuffle(rng, perm, q.slots);
    char read[64] = {0}; /* in place, no row may write a slot another row reads */
    for (int64_t b = 0; b < R; ++b)
        if (ssmt_get(&q.rd.t, b) >= 0) read[(int64_t)ssmt_get(&q.rd.t, b)] = 1;
    for (int64_t b = 0; b < R; ++b) {
        const int pad = ssmt_get(&q.rd.t, b) < 0;
        for (int64_t j = 0; j < W; ++j) {
            while (!pad && j < lens[b] && read[perm[next]]) ++next;
            ssmt_set(&tab.t, b * W + j, !pad && j < lens[b] ? (double)perm[next++] : -1.0);
        }
    }
    /* step A: 1-D reads, the token table as dst */
    *ssmt_ds_fld(&a, L->dst) = tab.t, *ssmt_ds_fld(&a, L->out) = out.t;
    TEST_CHECK(L->run(ctx, &a) == SSM_STATUS_OK, "%s table A: %s", L->op, ssm_context_last_error(ctx));
    for (int64_t b = 0, t0 = 0; b < R; t0 += lens[b], ++b)
        for (int64_t j = 0; j < lens[b]; ++j) {
            const int64_t w = (int64_t)ssmt_get(&tab.t, b * W + j);
            for (int i = 0; i < 4 && w >= 0; ++i) {
                const ssm_tensor got = ssmt_pick(&pool[i].t, 0, w), want = ssmt_pick(&inter[i].t, 0, t0 + j);
                ssmt_check_close("table: the slot of token j == its intermediate state", &got, &want, 0.0);
            }
        }
    /* step B: 2-D reads with num_accepted_tokens against C: 1-D reads of the same slots */
    for (int64_t b = 0; b < R; ++b) {
        const int64_t k = lens[b] > 0 ? ssmt_randint(rng, 0, lens[b]) : 0;
        ssmt_set(&acc.t, b, (double)k);
        ssmt_set(&rd1.t, b, ssmt_get(&tab.t, b * W + (k > 0 ? k - 1 : 0)));
    }
    for (int i = 0; i < 4; ++i) poolC[i] = ssmt_clone(&pool[i].t, cdt);
    ssmt_ds_args c = a;
    for (int i = 0; i < 4; ++i) *ssmt_ds_fld(&c, L->in[i]) = poolC[i].t, *ssmt_ds_fld(&c, L->fin[i]) = poolC[i].t;
    *ssmt_ds_fld(&c, L->idx) = rd1.t, *ssmt_ds_fld(&c, L->out) = outC.t;
    TEST_CHECK_STATUS(L->run(ctx, &c), SSM_STATUS_OK);
    *ssmt_ds_fld(&a, L->idx) = tab.t, *ssmt_ds_fld(&a, L->acc) = acc.t, *ssmt_ds_fld(&a, L->dst) = ssmt_absent();
    TEST_CHECK_STATUS(L->run(ctx, &a), SSM_STATUS_OK);
    TEST_CHECK(memcmp(out.buf, outC.buf, out.bytes) == 0, "%s table: out with num_accepted_tokens differs", L->op);
    for (int i = 0; i < 4; ++i)
        TEST_CHECK(memcmp(pool[i].buf, poolC[i].buf, pool[i].bytes) == 0,
                   "%s table: pool %d with num_accepted_tokens differs", L->op, i);
    /* the rules: a row with more tokens than the table has columns; num_accepted_tokens
     * beyond the table; a table with a separate final pool */
    ssmt_ds_args f = a;
    *ssmt_ds_fld(&f, L->idx) = ssmt_slice(&tab.t, 1, 0, W - 1), *ssmt_ds_fld(&f, L->acc) = ssmt_absent();
    expect_fail("more tokens than table columns", ctx, L, &f, SSM_STATUS_INVALID_SHAPE);
    f = a;
    ssmt_set(&acc.t, 2, (double)W + 1);
    expect_fail("num_accepted_tokens beyond the table", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    ssmt_set(&acc.t, 2, 1);
    *ssmt_ds_fld(&f, L->fin[2]) = poolC[2].t;
    expect_fail("a table with a separate final pool", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    /* the slot rules with several tokens per row (1-D reads, the token table as dst): two
     * tokens write one slot; a table slot, a read slot beyond the pool; cu_seqlens not
     * ending at T */
    ssmt_host bad = ssmt_clone(&tab.t, SSM_DTYPE_I32), rdbad = ssmt_clone(&q.rd.t, SSM_DTYPE_I64);
    ssmt_host cubad = ssmt_clone(&q.cu.t, SSM_DTYPE_I64);
    f = a;
    *ssmt_ds_fld(&f, L->idx) = q.rd.t, *ssmt_ds_fld(&f, L->acc) = ssmt_absent(),
                     *ssmt_ds_fld(&f, L->dst) = bad.t; /* row 0: 3 tokens */
    ssmt_set(&bad.t, 1, ssmt_get(&tab.t, 0));
    expect_fail("two tokens write one slot", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    ssmt_set(&bad.t, 1, ssmt_get(&tab.t, 1)), ssmt_set(&bad.t, 0, (double)q.slots);
    expect_fail("a table slot beyond the pool", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    ssmt_set(&bad.t, 0, ssmt_get(&tab.t, 0));
    TEST_CHECK_STATUS(L->run(ctx, &f), SSM_STATUS_OK); /* the restored table is valid */
    *ssmt_ds_fld(&f, L->idx) = rdbad.t;
    ssmt_set(&rdbad.t, 0, (double)q.slots);
    expect_fail("a read slot beyond the pool", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    *ssmt_ds_fld(&f, L->idx) = q.rd.t, *ssmt_ds_fld(&f, L->cu) = cubad.t;
    ssmt_set(&cubad.t, R, (double)(q.T - 1));
    expect_fail("cu_seqlens ending before T", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    ssmt_free(&bad), ssmt_free(&rdbad), ssmt_free(&cubad);
    for (int i = 0; i < 4; ++i) ssmt_free(&pool[i]), ssmt_free(&poolC[i]), ssmt_free(&inter[i]);
    ssmt_free(&tab), ssmt_free(&acc), ssmt_free(&rd1), ssmt_free(&out), ssmt_free(&outC);
    ssmt_ds_tokens_free(&q);
}
