/*
 * test_decode_slots.c — where the decode steps read and write their states
 * (docs/ops/mamba2.md "Decode slots").
 *  - mamba2_step with several tokens per row (cu_seqlens, rows of 0..4 tokens), padding
 *    rows, read slots ≠ write slots, a row that writes nothing, per-head and general forms,
 *    f32/f16/bf16/f64 pools: the CPU against the float64 reference (every thread count
 *    bitwise equal, the scalar ISA within the bars), separate and in-place pools;
 *  - the same call against running each row's tokens one by one through single-token
 *    steps: the reference exactly (f64), the CPU bitwise (f32 pool): out, the intermediate
 *    states and the pool;
 *  - vLLM's slot tables: a 2-D dst_state_batch_indices stores the state after each token
 *    in the pool (equal to intermediate_states), and a 2-D state_batch_indices with
 *    num_accepted_tokens reads the state after the accepted tokens;
 *  - mamba3_siso_step and mamba3_mimo_step with dst_state_batch_indices: CPU against the
 *    reference, the new state in the write slot equal to the one a step without dst puts in
 *    the read slot, in place equal to separate;
 *  - mamba3_siso_step and mamba3_mimo_step (one test, a field layout per operator) with
 *    several tokens per row (cu_seqlens, rows of 0..4 tokens, padding,
 *    read ≠ write slots, a row that writes nothing): the CPU against the reference (out,
 *    the four final pools, the four intermediate states; thread counts bitwise equal), and
 *    against the tokens one by one (reference exact on f64 pools, CPU bitwise on f32), in
 *    place and separate; slot tables (2-D dst, then 2-D reads with num_accepted_tokens);
 *    failed calls (too many tokens for a table, num_accepted_tokens beyond it, a table with
 *    a separate final pool, two tokens writing one slot, table and read slots beyond the
 *    pool, cu_seqlens not ending at T) write nothing;
 *  - every slot rule (repeated write slots, out-of-range slots, padding rows that write,
 *    in-place reads of another row's write slot, tables, num_accepted_tokens), with every
 *    output and the pool unchanged by a failed call; shared read slots accepted.
 * Seed: SSMOPS_TEST_SEED (default 20261202).
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static ssm_context *ctx_ref, *ctx_cpu[4], *ctx_scalar;
static ssm_mamba2_params      m2_params;
static ssm_mamba3_params      siso_params;
static ssm_mamba3_mimo_params mimo_params;

static ssm_status run_m2(ssm_context * c, void * a) { return ssm_mamba2_step(c, &m2_params, a); }
static ssm_status run_siso(ssm_context * c, void * a) { return ssm_mamba3_siso_step(c, &siso_params, a); }
static ssm_status run_mimo(ssm_context * c, void * a) { return ssm_mamba3_mimo_step(c, &mimo_params, a); }


/* A random permutation of 0..n−1 into perm. */
static void shuffle(ssmt_rng * rng, int64_t * perm, int64_t n) {
    for (int64_t s = 0; s < n; ++s) perm[s] = s;
    for (int64_t s = n - 1; s > 0; --s) {
        const int64_t j = ssmt_randint(rng, 0, s), t = perm[s];
        perm[s] = perm[j], perm[j] = t;
    }
}

/* ==== mamba2_step ======================================================================= */
typedef struct m2_problem {
    int64_t              R, T, H, P, N, G, slots;
    int64_t              lens[16];
    ssmt_host            x, dt, a, b, c, d, z, bias, state, cu, rd, wr;
    ssm_mamba2_step_args args; /* inputs */
} m2_problem;

static void m2_free(m2_problem * q) {
    ssmt_free(&q->x), ssmt_free(&q->dt), ssmt_free(&q->a), ssmt_free(&q->b), ssmt_free(&q->c), ssmt_free(&q->d);
    ssmt_free(&q->z), ssmt_free(&q->bias), ssmt_free(&q->state), ssmt_free(&q->cu), ssmt_free(&q->rd);
    ssmt_free(&q->wr);
}

/* R rows of lens[] tokens (cu_seqlens when varlen, else one token each), a pool of 2R + 2
 * slots: row b reads slot perm[b] and writes slot perm[R + b] (read ≠ write); every fourth
 * row (b % 4 == 1) is padding, and row 2 (when R > 2) computes without writing (write −1). */
static void m2_make(ssmt_rng * rng, m2_problem * q, int64_t R, const int64_t * lens, int varlen, int64_t H, int64_t P,
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
    shuffle(rng, perm, q->slots);
    for (int64_t b = 0; b < R; ++b) {
        const int pad = b % 4 == 1;
        ssmt_set(&q->rd.t, b, pad ? -1 : (double)perm[b]);
        ssmt_set(&q->wr.t, b, pad || (b == 2) ? -1 : (double)perm[R + b]);
    }
    a->state_batch_indices = q->rd.t, a->dst_state_batch_indices = q->wr.t;
}

static int64_t m2_cu(const m2_problem * q, int64_t b) {
    int64_t t = 0;
    for (int64_t i = 0; i < b; ++i) t += q->lens[i];
    return t;
}

/* Runs every row's tokens one at a time through single-token steps on ctx (state carried in
 * a (1,H,P,N) buffer of dtype cdt), into out, inter (T rows) and the pool `pool` (a copy of
 * the input pool, updated at the write slots only). Padding rows: out and inter zero. */
static void m2_one_by_one(ssm_context * ctx, const m2_problem * q, ssm_dtype cdt, const ssm_tensor * out,
                          const ssm_tensor * inter, const ssm_tensor * pool) {
    const int64_t sc[4] = {1, q->H, q->P, q->N};
    ssmt_host     carry = ssmt_alloc(cdt, 4, sc);
    ssmt_host     snapshot_pool = ssmt_clone(pool, (ssm_dtype)pool->dtype); /* the input pool */
    for (int64_t b = 0; b < q->R; ++b) {
        const int64_t t0 = m2_cu(q, b), L = q->lens[b];
        const int64_t r = (int64_t)ssmt_get(&q->rd.t, b), w = (int64_t)ssmt_get(&q->wr.t, b);
        if (r < 0) {
            for (int64_t t = t0; t < t0 + L; ++t) {
                const ssm_tensor o = ssmt_pick(out, 0, t), s = ssmt_pick(inter, 0, t);
                ssmt_fill_value(&o, 0.0), ssmt_fill_value(&s, 0.0);
            }
            continue;
        }
        const ssm_tensor src = ssmt_slice(&snapshot_pool.t, 0, r, 1);
        ssmt_copy(&carry.t, &src);
        for (int64_t t = t0; t < t0 + L; ++t) {
            ssm_mamba2_step_args s = q->args;
            s.x = ssmt_slice(&q->args.x, 0, t, 1), s.dt = ssmt_slice(&q->args.dt, 0, t, 1);
            s.b = ssmt_slice(&q->args.b, 0, t, 1), s.c = ssmt_slice(&q->args.c, 0, t, 1);
            if (ssmt_numel(&q->z.t) > 0 && q->z.t.data) s.z = ssmt_slice(&q->args.z, 0, t, 1);
            s.cu_seqlens = ssmt_absent(), s.state_batch_indices = ssmt_absent();
            s.dst_state_batch_indices = ssmt_absent();
            s.state = carry.t, s.final_state = carry.t, s.out = ssmt_slice(out, 0, t, 1);
            TEST_CHECK_STATUS(ssm_mamba2_step(ctx, &m2_params, &s), SSM_STATUS_OK);
            const ssm_tensor dst = ssmt_slice(inter, 0, t, 1);
            ssmt_copy(&dst, &carry.t);
        }
        if (w >= 0) {
            const ssm_tensor dst = ssmt_slice(pool, 0, w, 1);
            ssmt_copy(&dst, &carry.t);
        }
    }
    ssmt_free(&carry), ssmt_free(&snapshot_pool);
}

/* One multi-token call on ctx (pool of dtype cdt, outputs cdt, in place or into a separate
 * final_state) against m2_one_by_one: bitwise equal. */
static void m2_check_one_by_one(const m2_problem * q, ssm_context * ctx, ssm_dtype cdt, int in_place,
                                const char * tag) {
    const int64_t so[3] = {q->T, q->H, q->P}, si[4] = {q->T, q->H, q->P, q->N};
    ssmt_host     out = ssmt_alloc(cdt, 3, so), inter = ssmt_alloc(cdt, 4, si);
    ssmt_host     pool = ssmt_clone(&q->state.t, cdt), fin = ssmt_alloc(cdt, 4, q->state.t.shape);
    ssmt_host     eout = ssmt_alloc(cdt, 3, so), einter = ssmt_alloc(cdt, 4, si), epool = ssmt_clone(&q->state.t, cdt);
    m2_one_by_one(ctx, q, cdt, &eout.t, &einter.t, &epool.t);
    ssm_mamba2_step_args a = q->args;
    a.state = pool.t, a.final_state = in_place ? pool.t : fin.t, a.out = out.t, a.intermediate_states = inter.t;
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx, &m2_params, &a), SSM_STATUS_OK);
    const ssmt_host * res = in_place ? &pool : &fin;
    TEST_CHECK(memcmp(out.buf, eout.buf, out.bytes) == 0, "%s: out differs from the tokens one by one", tag);
    TEST_CHECK(memcmp(inter.buf, einter.buf, inter.bytes) == 0, "%s: intermediate_states differ from one by one", tag);
    TEST_CHECK(memcmp(res->buf, epool.buf, res->bytes) == 0, "%s: the pool differs from one by one (%s)", tag,
               in_place ? "in place" : "separate");
    ssmt_free(&out), ssmt_free(&inter), ssmt_free(&pool), ssmt_free(&fin), ssmt_free(&eout), ssmt_free(&einter);
    ssmt_free(&epool);
}

static void test_m2_tokens(ssmt_rng * rng) {
    static const ssm_dtype dts[3]  = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16};
    static const ssm_dtype sdts[4] = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16, SSM_DTYPE_F64};
    static const int64_t   shp[4][4] = {{4, 8, 16, 2}, {6, 5, 19, 3}, {2, 32, 64, 1}, {4, 3, 8, 4}}; /* H P N G */
    for (int k = 0; k < 16; ++k) {
        const int64_t * s = shp[k % 4];
        const int64_t   R = 3 + k % 5;
        int64_t         lens[16];
        for (int64_t b = 0; b < R; ++b) lens[b] = ssmt_randint(rng, 0, 4);
        lens[0] = 0; /* a row of no token */
        const int      varlen = k % 8 != 7, per_head = k % 2, has_z = k % 3 != 0;
        const ssm_dtype dt = dts[k % 3], sdt = sdts[(k / 3) % 4];
        m2_problem      q;
        m2_make(rng, &q, R, lens, varlen, s[0], s[1], s[2], s[3], dt, sdt, per_head, has_z);
        ssm_mamba2_params_init(&m2_params);
        m2_params.dt_softplus = 1;
        char tag[200];
        snprintf(tag, sizeof tag, "m2 tokens[R%lld T%lld H%lld P%lld N%lld G%lld %s pool %s%s%s]", (long long)R,
                 (long long)q.T, (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3],
                 ssm_dtype_name(dt), ssm_dtype_name(sdt), per_head ? " per-head" : "", varlen ? " varlen" : "");
        /* the CPU against the reference: out, the separate final pool, intermediate_states */
        ssm_mamba2_step_args a = q.args;
        const int64_t        si[4] = {q.T, s[0], s[1], s[2]};
        ssmt_host            fin = ssmt_alloc(sdt, 4, q.state.t.shape), inter = ssmt_alloc(sdt, 4, si);
        ssmt_host            out = ssmt_alloc(dt, 3, q.x.t.shape);
        a.out = out.t, a.final_state = fin.t, a.intermediate_states = inter.t;
        ssmt_op_case oc = {0};
        oc.name = tag, oc.args = &a, oc.args_size = sizeof a, oc.compute = dt, oc.out_dtype = SSM_DTYPE_F32;
        oc.run = run_m2;
        ssmt_op_add_outs(&oc, "mamba2_step");
        TEST_CHECK(oc.nouts == 3, "%s: %d outputs", tag, oc.nouts);
        ssmt_op_run(&oc, ctx_ref, ctx_cpu, ctx_scalar);
        ssmt_free(&fin), ssmt_free(&inter), ssmt_free(&out);
        /* against the tokens one by one */
        m2_check_one_by_one(&q, ctx_ref, SSM_DTYPE_F64, k % 2, tag);
        m2_check_one_by_one(&q, ctx_cpu[1 + k % 3], SSM_DTYPE_F32, k % 2 == 0, tag);
        m2_free(&q);
    }
}

/* The engine's loop with vLLM's slot tables: step A writes the state after each token of
 * row b to slot tabA[b, j]; step B reads tabA[b, max(k_b − 1, 0)] through num_accepted_tokens. */
static void test_m2_tables(ssmt_rng * rng, ssm_context * ctx, ssm_dtype cdt) {
    const int64_t R = 5, H = 4, P = 8, N = 16, G = 2, Lmax = 4;
    int64_t       lens[5] = {3, 0, 4, 1, 2};
    m2_problem    q;
    m2_make(rng, &q, R, lens, 1, H, P, N, G, SSM_DTYPE_F32, cdt, 1, 1);
    ssm_mamba2_params_init(&m2_params);
    m2_params.dt_softplus = 1;
    /* a larger pool: R read slots, R·Lmax table slots, R fresh slots for step B */
    const int64_t slots = R + R * Lmax + R, sst[4] = {slots, H, P, N};
    ssmt_host     pool = ssmt_alloc(cdt, 4, sst);
    ssmt_fill_normal(rng, &pool.t, 0, 1);
    int64_t perm[64];
    shuffle(rng, perm, slots);
    const int64_t st2[2] = {R, Lmax}, s1[1] = {R};
    ssmt_host     rd = ssmt_alloc(SSM_DTYPE_I32, 1, s1), tab = ssmt_alloc(SSM_DTYPE_I64, 2, st2);
    for (int64_t b = 0; b < R; ++b) {
        ssmt_set(&rd.t, b, (double)perm[b]);
        for (int64_t j = 0; j < Lmax; ++j) ssmt_set(&tab.t, b * Lmax + j, (double)perm[R + b * Lmax + j]);
    }
    const int64_t so[3] = {q.T, H, P}, si[4] = {q.T, H, P, N};
    ssmt_host     out = ssmt_alloc(cdt, 3, so), inter = ssmt_alloc(cdt, 4, si);
    ssm_mamba2_step_args a = q.args;
    a.state = pool.t, a.final_state = pool.t, a.out = out.t, a.intermediate_states = inter.t;
    a.state_batch_indices = rd.t, a.dst_state_batch_indices = tab.t;
    ssmt_host before = ssmt_clone(&pool.t, cdt);
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx, &m2_params, &a), SSM_STATUS_OK);
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
    m2_problem qb;
    m2_make(rng, &qb, R, lensB, 1, H, P, N, G, SSM_DTYPE_F32, cdt, 1, 1);
    ssmt_host acc = ssmt_alloc(SSM_DTYPE_I32, 1, s1), wr = ssmt_alloc(SSM_DTYPE_I32, 1, s1);
    ssmt_host rd1 = ssmt_alloc(SSM_DTYPE_I64, 1, s1);
    for (int64_t b = 0; b < R; ++b) {
        const int64_t k = ssmt_randint(rng, 0, lens[b]);
        ssmt_set(&acc.t, b, (double)k);
        ssmt_set(&wr.t, b, (double)perm[R + R * Lmax + b]);
        ssmt_set(&rd1.t, b, (double)perm[R + b * Lmax + (k > 0 ? k - 1 : 0)]);
    }
    const int64_t sob[3] = {qb.T, H, P};
    ssmt_host     poolB = ssmt_clone(&pool.t, cdt), poolC = ssmt_clone(&pool.t, cdt);
    ssmt_host     outB = ssmt_alloc(cdt, 3, sob), outC = ssmt_alloc(cdt, 3, sob);
    ssm_mamba2_step_args bargs = qb.args;
    bargs.state = poolB.t, bargs.final_state = poolB.t, bargs.out = outB.t;
    bargs.state_batch_indices = tab.t, bargs.num_accepted_tokens = acc.t, bargs.dst_state_batch_indices = wr.t;
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx, &m2_params, &bargs), SSM_STATUS_OK);
    ssm_mamba2_step_args cargs = bargs; /* the same with the read slots spelt out */
    cargs.state = poolC.t, cargs.final_state = poolC.t, cargs.out = outC.t;
    cargs.state_batch_indices = rd1.t, cargs.num_accepted_tokens = ssmt_absent();
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx, &m2_params, &cargs), SSM_STATUS_OK);
    TEST_CHECK(memcmp(outB.buf, outC.buf, outB.bytes) == 0, "num_accepted_tokens: out differs from explicit slots");
    TEST_CHECK(memcmp(poolB.buf, poolC.buf, poolB.bytes) == 0, "num_accepted_tokens: pool differs from explicit slots");
    ssmt_free(&pool), ssmt_free(&rd), ssmt_free(&tab), ssmt_free(&out), ssmt_free(&inter), ssmt_free(&before);
    ssmt_free(&acc), ssmt_free(&wr), ssmt_free(&rd1), ssmt_free(&poolB), ssmt_free(&poolC), ssmt_free(&outB);
    ssmt_free(&outC);
    m2_free(&q), m2_free(&qb);
}

/* A call that must fail with `want` and leave out, final, inter and pool untouched. */
static void m2_expect_fail(const char * what, const ssm_mamba2_step_args * a, ssm_status want, const ssmt_host * out,
                           const ssmt_host * inter, const ssmt_host * pool, const ssmt_host * fin) {
    void *           s[4] = {ssmt_snapshot(out), ssmt_snapshot(inter), ssmt_snapshot(pool), ssmt_snapshot(fin)};
    ssm_context *    ctxs[2] = {ctx_ref, ctx_cpu[2]};
    for (int i = 0; i < 2; ++i) {
        const ssm_status st = ssm_mamba2_step(ctxs[i], &m2_params, a);
        TEST_CHECK(st == want, "%s (%s): got %s (%s), expected %s", what, i ? "cpu" : "ref", ssm_status_string(st),
                   ssm_context_last_error(ctxs[i]), ssm_status_string(want));
    }
    TEST_CHECK(ssmt_unchanged(out, s[0]) && ssmt_unchanged(inter, s[1]) && ssmt_unchanged(pool, s[2]) &&
                   ssmt_unchanged(fin, s[3]),
               "%s: a failed call wrote an output", what);
    for (int i = 0; i < 4; ++i) free(s[i]);
}

static void test_m2_rules(ssmt_rng * rng) {
    const int64_t R = 4, H = 2, P = 4, N = 8, G = 1;
    int64_t       lens[4] = {1, 2, 0, 1};
    m2_problem    q;
    m2_make(rng, &q, R, lens, 1, H, P, N, G, SSM_DTYPE_F32, SSM_DTYPE_F32, 0, 0);
    ssm_mamba2_params_init(&m2_params);
    const int64_t so[3] = {q.T, H, P}, si[4] = {q.T, H, P, N}, s1[1] = {R}, s2[2] = {R, 2};
    ssmt_host     out = ssmt_alloc(SSM_DTYPE_F32, 3, so), inter = ssmt_alloc(SSM_DTYPE_F32, 4, si);
    ssmt_host     pool = ssmt_clone(&q.state.t, SSM_DTYPE_F32), fin = ssmt_alloc(SSM_DTYPE_F32, 4, q.state.t.shape);
    ssmt_host     rd = ssmt_alloc(SSM_DTYPE_I32, 1, s1), wr = ssmt_alloc(SSM_DTYPE_I32, 1, s1);
    ssmt_host     tab = ssmt_alloc(SSM_DTYPE_I32, 2, s2), acc = ssmt_alloc(SSM_DTYPE_I32, 1, s1);
    const double  r0[4] = {0, 1, 2, 3}, w0[4] = {4, 5, 6, 7};
    for (int64_t b = 0; b < R; ++b) ssmt_set(&rd.t, b, r0[b]), ssmt_set(&wr.t, b, w0[b]);
    ssm_mamba2_step_args ok = q.args;
    ok.state = pool.t, ok.final_state = pool.t, ok.out = out.t, ok.intermediate_states = inter.t;
    ok.state_batch_indices = rd.t, ok.dst_state_batch_indices = wr.t;
    const ssm_status base = ssm_mamba2_step(ctx_ref, &m2_params, &ok);
    TEST_CHECK(base == SSM_STATUS_OK, "the valid call failed: %s", ssm_context_last_error(ctx_ref));
    ssmt_poison(&out.t), ssmt_poison(&inter.t);
    ssm_mamba2_step_args a = ok;
    /* repeated write slots */
    ssmt_set(&wr.t, 2, 5);
    m2_expect_fail("two rows write slot 5", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    ssmt_set(&wr.t, 2, 6);
    a = ok, a.dst_state_batch_indices = ssmt_absent();
    ssmt_set(&rd.t, 3, 1); /* without dst the read slots are written: shared = repeated */
    m2_expect_fail("two rows read and write slot 1", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    /* a shared read slot is fine when nobody writes it */
    a = ok;
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &m2_params, &a), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_ref, &m2_params, &a), SSM_STATUS_OK);
    ssmt_set(&rd.t, 3, 3);
    /* out of range */
    ssmt_set(&rd.t, 1, (double)q.slots);
    m2_expect_fail("read slot = slots", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    ssmt_set(&rd.t, 1, 1), ssmt_set(&wr.t, 0, (double)q.slots + 3);
    m2_expect_fail("write slot beyond the pool", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    ssmt_set(&wr.t, 0, 4);
    /* a padding row may not write */
    ssmt_set(&rd.t, 1, -1);
    m2_expect_fail("padding row with a write slot", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    ssmt_set(&rd.t, 1, 1);
    /* in place: row 0 reads slot 5, which row 1 writes; fine into a separate pool */
    ssmt_set(&rd.t, 0, 5);
    m2_expect_fail("in place read of another row's write slot", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool,
                   &fin);
    a.final_state = fin.t;
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &m2_params, &a), SSM_STATUS_OK);
    ssmt_set(&rd.t, 0, 0), a = ok;
    /* in place: a row writing its own read slot is fine */
    ssmt_set(&wr.t, 0, 0);
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &m2_params, &a), SSM_STATUS_OK);
    ssmt_set(&wr.t, 0, 4);
    ssmt_poison(&out.t), ssmt_poison(&inter.t);
    /* dst without state_batch_indices */
    a = ok, a.state_batch_indices = ssmt_absent();
    m2_expect_fail("dst without state_batch_indices", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    /* cu_seqlens that does not end at T, or decreases */
    ssmt_set(&q.cu.t, R, (double)q.T - 1);
    a = ok;
    m2_expect_fail("cu_seqlens[R] != T", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    ssmt_set(&q.cu.t, R, (double)q.T);
    /* tables: 2 columns; rows 0..3 have 1, 2, 0, 1 tokens */
    const double table[8] = {4, -1, 5, 6, -1, -1, 7, -1};
    for (int64_t i = 0; i < 2 * R; ++i) ssmt_set(&tab.t, i, table[i]);
    a = ok, a.dst_state_batch_indices = tab.t;
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &m2_params, &a), SSM_STATUS_OK);
    ssmt_poison(&out.t), ssmt_poison(&inter.t);
    ssmt_set(&tab.t, 3, 4); /* row 1's second token writes row 0's slot */
    m2_expect_fail("a table writes one slot twice", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    ssmt_set(&tab.t, 3, 6);
    a.final_state = fin.t;
    m2_expect_fail("a table into a separate pool", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    const ssm_tensor narrow = ssmt_slice(&tab.t, 1, 0, 1);
    a = ok, a.dst_state_batch_indices = narrow;
    m2_expect_fail("a table narrower than a row's tokens", &a, SSM_STATUS_INVALID_SHAPE, &out, &inter, &pool, &fin);
    a = ok, a.cu_seqlens = ssmt_absent(), a.dst_state_batch_indices = tab.t;
    m2_expect_fail("a table without cu_seqlens", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    /* num_accepted_tokens */
    for (int64_t b = 0; b < R; ++b) ssmt_set(&acc.t, b, 1);
    a = ok, a.num_accepted_tokens = acc.t;
    m2_expect_fail("num_accepted_tokens with a 1-D read", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    for (int64_t b = 0; b < R; ++b) ssmt_set(&tab.t, 2 * b, (double)b), ssmt_set(&tab.t, 2 * b + 1, (double)(4 + b));
    a = ok, a.state_batch_indices = tab.t, a.num_accepted_tokens = acc.t; /* reads column 0, writes wr */
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &m2_params, &a), SSM_STATUS_OK);
    ssmt_poison(&out.t), ssmt_poison(&inter.t);
    ssmt_set(&acc.t, 2, 3);
    m2_expect_fail("num_accepted_tokens beyond the table", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    ssmt_set(&acc.t, 2, -1);
    m2_expect_fail("negative num_accepted_tokens", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    ssmt_free(&out), ssmt_free(&inter), ssmt_free(&pool), ssmt_free(&fin), ssmt_free(&rd), ssmt_free(&wr);
    ssmt_free(&tab), ssmt_free(&acc);
    m2_free(&q);
}

/* ==== Mamba-3 steps ===================================================================== */
/* The fields of a Mamba-3 step's args struct that this file touches. */
typedef struct m3_fields {
    ssm_tensor *in[4], *fin[4], *out, *idx, *dst;
} m3_fields;

#define M3_FIELDS(a)                                                                                      \
    (m3_fields) {                                                                                         \
        {&(a)->angle_state, &(a)->ssm_state, &(a)->k_state, &(a)->v_state},                              \
            {&(a)->final_angle_state, &(a)->final_ssm_state, &(a)->final_k_state, &(a)->final_v_state},  \
            &(a)->out, &(a)->state_batch_indices, &(a)->dst_state_batch_indices                          \
    }

/* One Mamba-3 step problem (args: inputs with separate final buffers, poisoned; B rows, a
 * pool of `slots`, state_batch_indices with padding rows). Sets dst: each non-padding row a
 * slot no row reads, row 0 none (−1). */
static void m3_set_dst(ssmt_rng * rng, const m3_fields * f, ssmt_host * dst, int64_t B, int64_t slots) {
    const int64_t s1[1] = {B};
    *dst = ssmt_alloc(SSM_DTYPE_I64, 1, s1);
    char *    read = calloc((size_t)slots, 1);
    int64_t * perm = malloc((size_t)slots * sizeof(int64_t));
    for (int64_t b = 0; b < B; ++b) {
        const int64_t r = (int64_t)ssmt_get(f->idx, b);
        if (r >= 0) read[r] = 1;
    }
    shuffle(rng, perm, slots);
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

/* The checks of one Mamba-3 step problem with dst set: args (the problem's struct, copied
 * into a buffer of args_size), its fields f into that copy. */
static void m3_check(const char * tag, void * args, size_t args_size, m3_fields f, ssmt_run_fn run, ssm_dtype compute,
                     ssm_dtype out_dtype, unsigned angle_outs, const char * op, int64_t B, int64_t slots) {
    /* the CPU against the reference (out and the four separate final pools) */
    ssmt_op_case oc = {0};
    oc.name = tag, oc.args = args, oc.args_size = args_size, oc.compute = compute, oc.out_dtype = out_dtype;
    oc.run = run, oc.angle_outs = angle_outs;
    ssmt_op_add_outs(&oc, op);
    TEST_CHECK(oc.nouts == 5, "%s: %d outputs", tag, oc.nouts);
    ssmt_op_run(&oc, ctx_ref, ctx_cpu, ctx_scalar);
    /* with dst against without: what a row puts in its write slot is what it would put in its
     * read slot; in place equals separate; unwritten slots keep their values */
    ssm_context *    ctxs[2] = {ctx_ref, ctx_cpu[2]};
    const ssm_tensor saved_dst = *f.dst, saved_in[4] = {*f.in[0], *f.in[1], *f.in[2], *f.in[3]};
    char *           written = calloc((size_t)slots, 1);
    for (int64_t b = 0; b < B; ++b) {
        const int64_t w = (int64_t)ssmt_get(&saved_dst, b);
        if (w >= 0) written[w] = 1;
    }
    for (int c = 0; c < 2; ++c) {
        const ssm_dtype cdt = c == 0 ? SSM_DTYPE_F64 : SSM_DTYPE_F32;
        ssmt_host       orig[4], pool[4], sep[4], nodst[4], outs[3];
        for (int i = 0; i < 4; ++i) {
            orig[i] = ssmt_clone(&saved_in[i], cdt), pool[i] = ssmt_clone(&saved_in[i], cdt);
            sep[i] = ssmt_alloc(cdt, saved_in[i].ndim, saved_in[i].shape), nodst[i] = ssmt_clone(&saved_in[i], cdt);
            *f.in[i] = orig[i].t, *f.fin[i] = sep[i].t;
        }
        for (int o = 0; o < 3; ++o) outs[o] = ssmt_alloc(cdt, f.out->ndim, f.out->shape);
        /* separate finals */
        *f.out = outs[0].t;
        TEST_CHECK_STATUS(run(ctxs[c], args), SSM_STATUS_OK);
        /* in place */
        for (int i = 0; i < 4; ++i) *f.in[i] = pool[i].t, *f.fin[i] = pool[i].t;
        *f.out = outs[1].t;
        TEST_CHECK_STATUS(run(ctxs[c], args), SSM_STATUS_OK);
        for (int i = 0; i < 4; ++i)
            TEST_CHECK(memcmp(pool[i].buf, sep[i].buf, pool[i].bytes) == 0, "%s %s: in place != separate (state %d)",
                       tag, c ? "cpu" : "ref", i);
        TEST_CHECK(memcmp(outs[0].buf, outs[1].buf, outs[0].bytes) == 0, "%s: in-place out differs", tag);
        /* without dst, in place on a fresh copy */
        for (int i = 0; i < 4; ++i) *f.in[i] = nodst[i].t, *f.fin[i] = nodst[i].t;
        *f.out = outs[2].t, *f.dst = ssmt_absent();
        TEST_CHECK_STATUS(run(ctxs[c], args), SSM_STATUS_OK);
        *f.dst = saved_dst;
        TEST_CHECK(memcmp(outs[0].buf, outs[2].buf, outs[0].bytes) == 0, "%s %s: out depends on dst", tag,
                   c ? "cpu" : "ref");
        for (int64_t b = 0; b < B; ++b) {
            const int64_t r = (int64_t)ssmt_get(f.idx, b), w = (int64_t)ssmt_get(&saved_dst, b);
            if (r < 0 || w < 0) continue;
            for (int i = 0; i < 4; ++i) {
                const ssm_tensor got = ssmt_pick(&sep[i].t, 0, w), want = ssmt_pick(&nodst[i].t, 0, r);
                ssmt_check_close("write slot == the read slot without dst", &got, &want, 0.0);
            }
        }
        for (int64_t s = 0; s < slots; ++s) {
            if (written[s]) continue;
            for (int i = 0; i < 4; ++i) {
                const ssm_tensor got = ssmt_pick(&sep[i].t, 0, s), want = ssmt_pick(&orig[i].t, 0, s);
                ssmt_check_close("a slot no row writes keeps its value", &got, &want, 0.0);
            }
        }
        for (int i = 0; i < 4; ++i) ssmt_free(&orig[i]), ssmt_free(&pool[i]), ssmt_free(&sep[i]), ssmt_free(&nodst[i]);
        for (int o = 0; o < 3; ++o) ssmt_free(&outs[o]);
    }
    for (int i = 0; i < 4; ++i) *f.in[i] = saved_in[i];
    free(written);
}

/* The slot rules on a Mamba-3 step (in place on f32 copies); failed calls write nothing. */
static void m3_rules(const char * tag, void * args, m3_fields f, ssmt_run_fn run, int64_t B) {
    ssmt_host        pool[4], out = ssmt_alloc(SSM_DTYPE_F32, f.out->ndim, f.out->shape);
    const ssm_tensor saved_in[4] = {*f.in[0], *f.in[1], *f.in[2], *f.in[3]}, saved_out = *f.out;
    const ssm_tensor saved_fin[4] = {*f.fin[0], *f.fin[1], *f.fin[2], *f.fin[3]};
    for (int i = 0; i < 4; ++i) {
        pool[i] = ssmt_clone(f.in[i], SSM_DTYPE_F32);
        *f.in[i] = pool[i].t, *f.fin[i] = pool[i].t;
    }
    *f.out = out.t;
    ssmt_host dst = ssmt_clone(f.dst, SSM_DTYPE_I64);
    *f.dst = dst.t;
    int64_t rows[2] = {-1, -1}, n = 0, pad = -1;
    for (int64_t b = 0; b < B; ++b) {
        const int64_t r = (int64_t)ssmt_get(f.idx, b);
        if (r < 0) pad = b;
        else if (n < 2 && b != 0) rows[n++] = b;
    }
    TEST_CHECK(n == 2 && pad >= 0, "%s: the problem lacks two writing rows and a padding row", tag);
    if (n == 2 && pad >= 0) {
        ssm_context * ctxs[2] = {ctx_ref, ctx_cpu[2]};
        const double  w0 = ssmt_get(&dst.t, rows[0]), w1 = ssmt_get(&dst.t, rows[1]);
        const double  r1 = ssmt_get(f.idx, rows[1]);
        for (int k = 0; k < 4; ++k) {
            const char * what = k == 0 ? "two rows write one slot" : k == 1 ? "a padding row writes"
                                : k == 2                                ? "in place read of another row's write slot"
                                                                        : "write slot beyond the pool";
            /* restored after each case */
            if (k == 0) ssmt_set(&dst.t, rows[1], w0);
            if (k == 1) ssmt_set(&dst.t, pad, w1), ssmt_set(&dst.t, rows[1], -1);
            if (k == 2) ssmt_set(&dst.t, rows[0], r1);
            if (k == 3) ssmt_set(&dst.t, rows[0], (double)f.in[0]->shape[0]);
            void * snap[5] = {ssmt_snapshot(&out), ssmt_snapshot(&pool[0]), ssmt_snapshot(&pool[1]),
                              ssmt_snapshot(&pool[2]), ssmt_snapshot(&pool[3])};
            for (int c = 0; c < 2; ++c) {
                const ssm_status st = run(ctxs[c], args);
                TEST_CHECK(st == SSM_STATUS_INVALID_ARGUMENT, "%s: %s (%s) returned %s (%s)", tag, what,
                           c ? "cpu" : "ref", ssm_status_string(st), ssm_context_last_error(ctxs[c]));
            }
            TEST_CHECK(ssmt_unchanged(&out, snap[0]) && ssmt_unchanged(&pool[0], snap[1]) &&
                           ssmt_unchanged(&pool[1], snap[2]) && ssmt_unchanged(&pool[2], snap[3]) &&
                           ssmt_unchanged(&pool[3], snap[4]),
                       "%s: %s: a failed call wrote an output", tag, what);
            for (int i = 0; i < 5; ++i) free(snap[i]);
            ssmt_set(&dst.t, rows[0], w0), ssmt_set(&dst.t, rows[1], w1), ssmt_set(&dst.t, pad, -1);
        }
        /* the read slot of rows[1] shared by rows[0] is fine when no row writes it */
        const double r0 = ssmt_get(f.idx, rows[0]);
        ssmt_set(f.idx, rows[0], r1);
        TEST_CHECK_STATUS(run(ctx_cpu[2], args), SSM_STATUS_OK);
        ssmt_set(f.idx, rows[0], r0);
    }
    for (int i = 0; i < 4; ++i) *f.in[i] = saved_in[i], *f.fin[i] = saved_fin[i], ssmt_free(&pool[i]);
    *f.out = saved_out;
    ssmt_free(&out), ssmt_free(&dst);
}

static void test_siso(ssmt_rng * rng) {
    static const int64_t shp[3][6] = {{5, 4, 2, 16, 8, 4}, {7, 2, 1, 8, 16, 0}, {4, 6, 3, 32, 8, 8}}; /* B H Hq K V A */
    for (int k = 0; k < 3; ++k) {
        const int64_t *    s = shp[k];
        ssmt_mamba3_config cfg;
        ssmt_mamba3_config_init(&cfg);
        cfg.batch = s[0], cfg.nheads = s[1], cfg.nheads_qk = s[2], cfg.dk = s[3], cfg.dv = s[4], cfg.nangles = s[5];
        cfg.dtype = k == 1 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32, cfg.has_z = k != 1;
        const int64_t            slots = 3 * s[0];
        ssmt_mamba3_step_problem pr;
        if (ssmt_mamba3_random_step(rng, &cfg, slots, 1, &pr) != 0) {
            TEST_CHECK(0, "could not build a siso step problem");
            continue;
        }
        ssmt_mamba3_params(&cfg, &siso_params);
        ssm_mamba3_siso_step_args a = pr.args;
        m3_fields                 f = M3_FIELDS(&a);
        ssmt_host                 dst;
        m3_set_dst(rng, &f, &dst, s[0], slots);
        char tag[100];
        snprintf(tag, sizeof tag, "siso dst[B%lld H%lld K%lld V%lld A%lld]", (long long)s[0], (long long)s[1],
                 (long long)s[3], (long long)s[4], (long long)s[5]);
        m3_check(tag, &a, sizeof a, f, run_siso, cfg.dtype, cfg.out_dtype, 1u << 1, "mamba3_siso_step", s[0], slots);
        m3_rules(tag, &a, f, run_siso, s[0]);
        ssmt_free(&dst);
        ssmt_mamba3_step_free(&pr);
    }
}

/* ==== Mamba-3 steps with several tokens per row (SISO and MIMO) ======================= */
/* Where a Mamba-3 step's args struct keeps the fields these tests touch: the two structs
 * name them alike, so one layout per operator serves every test below. */
typedef struct m3_layout {
    const char * op;
    ssmt_run_fn  run;
    size_t       size;
    unsigned     angle_outs;  /* outputs compared modulo 2π (ssmt_op_case)                */
    size_t       tok[8];      /* q, k, v, adt, dt, trap, angles, z: T tokens in dim 0      */
    size_t       in[4], fin[4], inter[4], out, idx, dst, cu, acc;
} m3_layout;

#define M3_STATES(T, p) {offsetof(T, p##angle_state), offsetof(T, p##ssm_state), offsetof(T, p##k_state), offsetof(T, p##v_state)}
#define M3_LAYOUT(T, op, run, angle_outs)                                                                     \
    {op, run, sizeof(T), angle_outs,                                                                          \
     {offsetof(T, q), offsetof(T, k), offsetof(T, v), offsetof(T, adt), offsetof(T, dt), offsetof(T, trap),   \
      offsetof(T, angles), offsetof(T, z)},                                                                   \
     M3_STATES(T, ), M3_STATES(T, final_), M3_STATES(T, intermediate_), offsetof(T, out),                    \
     offsetof(T, state_batch_indices), offsetof(T, dst_state_batch_indices), offsetof(T, cu_seqlens),         \
     offsetof(T, num_accepted_tokens)}

/* SISO stores θ wrapped to [0, 2π) (final and intermediate angle states); MIMO as is. */
static const m3_layout siso_layout =
    M3_LAYOUT(ssm_mamba3_siso_step_args, "mamba3_siso_step", run_siso, (1u << 1) | (1u << 5));
static const m3_layout mimo_layout = M3_LAYOUT(ssm_mamba3_mimo_step_args, "mamba3_mimo_step", run_mimo, 0u);

/* Storage for either step's args. */
typedef union m3_args {
    ssm_mamba3_siso_step_args siso;
    ssm_mamba3_mimo_step_args mimo;
} m3_args;

static ssm_tensor * fld(m3_args * a, size_t off) { return (ssm_tensor *)((char *)a + off); }

typedef struct m3_tokens {
    const m3_layout *        L;
    int64_t                  R, T, slots, lens[16];
    ssmt_mamba3_step_problem siso; /* T token rows; its pools have `slots` rows (SISO)    */
    ssmt_mimo_step_problem   mimo; /* the same for MIMO                                   */
    ssmt_host                cu, rd, wr;
    m3_args                  args; /* inputs, cu_seqlens, read and write slots            */
} m3_tokens;

/* The shape of intermediate state i: pool i's with T rows. */
static ssmt_host m3_inter_alloc(const ssm_tensor * pool, int64_t T, ssm_dtype dt) {
    int64_t sh[4];
    for (int i = 0; i < pool->ndim; ++i) sh[i] = pool->shape[i];
    sh[0] = T;
    return ssmt_alloc(dt, pool->ndim, sh);
}

/* Shapes: SISO {H, Hq, K, V, A, z}; MIMO {H, G, R, N, P, reduce_o, z}. */
static const int64_t siso_shapes[3][7] = {{4, 2, 16, 8, 4, 1, 0}, {2, 1, 8, 16, 0, 0, 0}, {6, 3, 32, 8, 8, 1, 0}};
static const int64_t mimo_shapes[3][7] = {{4, 2, 2, 16, 8, 1, 1}, {2, 1, 1, 8, 16, 0, 0}, {4, 4, 3, 16, 8, 1, 0}};

/* R rows of lens[] tokens of operator L (shape shp); row b reads slot perm[b] and writes
 * perm[R + b]; every fourth row (b % 4 == 1) is padding and row 2 writes nothing. Returns
 * nonzero on failure. */
static int m3_tokens_make(ssmt_rng * rng, m3_tokens * q, const m3_layout * L, int64_t R, const int64_t * lens,
                          const int64_t * shp, ssm_dtype dtype) {
    memset(q, 0, sizeof *q);
    q->L = L, q->R = R;
    for (int64_t b = 0; b < R; ++b) q->lens[b] = lens[b], q->T += lens[b];
    q->slots = 2 * R + 2 + q->T; /* room for a slot table (test_m3_tables) */
    if (L == &siso_layout) {
        ssmt_mamba3_config cfg;
        ssmt_mamba3_config_init(&cfg);
        cfg.batch = q->T, cfg.nheads = shp[0], cfg.nheads_qk = shp[1], cfg.dk = shp[2], cfg.dv = shp[3];
        cfg.nangles = shp[4], cfg.dtype = dtype, cfg.has_z = shp[5];
        ssmt_mamba3_params(&cfg, &siso_params);
        if (ssmt_mamba3_random_step(rng, &cfg, q->slots, 1, &q->siso) != 0) return -1;
        q->args.siso = q->siso.args;
    } else {
        ssmt_mimo_config cfg;
        ssmt_mimo_config_init(&cfg);
        cfg.batch = q->T, cfg.nheads = shp[0], cfg.ngroups = shp[1], cfg.rank = shp[2], cfg.dstate = shp[3];
        cfg.headdim = shp[4], cfg.reduce_o = (int32_t)shp[5], cfg.has_z = (int32_t)shp[6], cfg.dtype = dtype;
        if (ssmt_mimo_random_step(rng, &cfg, q->slots, 1, &q->mimo) != 0) return -1;
        mimo_params = q->mimo.params;
        q->args.mimo = q->mimo.args;
    }
    const int64_t sc[1] = {R + 1}, si[1] = {R};
    q->cu = ssmt_alloc(SSM_DTYPE_I64, 1, sc), q->rd = ssmt_alloc(SSM_DTYPE_I32, 1, si);
    q->wr = ssmt_alloc(SSM_DTYPE_I64, 1, si);
    int64_t perm[64], acc = 0;
    shuffle(rng, perm, q->slots);
    ssmt_set(&q->cu.t, 0, 0);
    for (int64_t b = 0; b < R; ++b) {
        acc += lens[b], ssmt_set(&q->cu.t, b + 1, (double)acc);
        const int pad = b % 4 == 1;
        ssmt_set(&q->rd.t, b, pad ? -1 : (double)perm[b]);
        ssmt_set(&q->wr.t, b, pad || b == 2 ? -1 : (double)perm[R + b]);
    }
    *fld(&q->args, L->cu) = q->cu.t, *fld(&q->args, L->idx) = q->rd.t, *fld(&q->args, L->dst) = q->wr.t;
    return 0;
}

static void m3_tokens_free(m3_tokens * q) {
    if (q->L == &siso_layout) ssmt_mamba3_step_free(&q->siso);
    else ssmt_mimo_step_free(&q->mimo);
    ssmt_free(&q->cu), ssmt_free(&q->rd), ssmt_free(&q->wr);
}

/* Every row's tokens one at a time through single-token steps on ctx (the four states
 * carried in one-slot buffers of dtype cdt, in place, from the input pools of q->args), into
 * out, inter[4] (T rows) and pool[4] (copies of the input pools, updated at the write
 * slots only). */
static void m3_one_by_one(ssm_context * ctx, const m3_tokens * q, ssm_dtype cdt, const ssm_tensor * out,
                          ssmt_host * inter, ssmt_host * pool) {
    const m3_layout * L = q->L;
    m3_args           a = q->args;
    ssmt_host         carry[4];
    int64_t           t0 = 0;
    for (int i = 0; i < 4; ++i) {
        const ssm_tensor * in = fld(&a, L->in[i]);
        int64_t            sh[4];
        for (int j = 0; j < in->ndim; ++j) sh[j] = in->shape[j];
        sh[0] = 1;
        carry[i] = ssmt_alloc(cdt, in->ndim, sh);
    }
    for (int64_t b = 0; b < q->R; t0 += q->lens[b], ++b) {
        const int64_t r = (int64_t)ssmt_get(&q->rd.t, b), w = (int64_t)ssmt_get(&q->wr.t, b);
        for (int64_t t = t0; t < t0 + q->lens[b] && r < 0; ++t) {
            const ssm_tensor o = ssmt_pick(out, 0, t);
            ssmt_fill_value(&o, 0.0);
            for (int i = 0; i < 4; ++i) {
                const ssm_tensor s = ssmt_pick(&inter[i].t, 0, t);
                ssmt_fill_value(&s, 0.0);
            }
        }
        if (r < 0) continue;
        for (int i = 0; i < 4; ++i) {
            const ssm_tensor src = ssmt_slice(fld(&a, L->in[i]), 0, r, 1);
            ssmt_copy(&carry[i].t, &src);
        }
        for (int64_t t = t0; t < t0 + q->lens[b]; ++t) {
            m3_args s = a;
            for (int i = 0; i < 8; ++i)
                if (fld(&a, L->tok[i])->data != NULL) *fld(&s, L->tok[i]) = ssmt_slice(fld(&a, L->tok[i]), 0, t, 1);
            *fld(&s, L->cu) = ssmt_absent(), *fld(&s, L->idx) = ssmt_absent(), *fld(&s, L->dst) = ssmt_absent();
            for (int i = 0; i < 4; ++i) *fld(&s, L->in[i]) = *fld(&s, L->fin[i]) = carry[i].t;
            *fld(&s, L->out) = ssmt_slice(out, 0, t, 1);
            TEST_CHECK_STATUS(L->run(ctx, &s), SSM_STATUS_OK);
            for (int i = 0; i < 4; ++i) {
                const ssm_tensor dst = ssmt_slice(&inter[i].t, 0, t, 1);
                ssmt_copy(&dst, &carry[i].t);
            }
        }
        for (int i = 0; i < 4 && w >= 0; ++i) {
            const ssm_tensor dst = ssmt_slice(&pool[i].t, 0, w, 1);
            ssmt_copy(&dst, &carry[i].t);
        }
    }
    for (int i = 0; i < 4; ++i) ssmt_free(&carry[i]);
}

/* One multi-token call on ctx (pools, intermediates and out of dtype cdt; in place or into
 * separate final pools) against m3_one_by_one: bitwise equal. */
static void m3_check_one_by_one(const m3_tokens * q, ssm_context * ctx, ssm_dtype cdt, int in_place,
                                const char * tag) {
    const m3_layout * L = q->L;
    m3_args           a = q->args;
    ssmt_host         pool[4], sep[4], inter[4], epool[4], einter[4];
    const ssm_tensor * o = fld(&a, L->out);
    ssmt_host         out = ssmt_alloc(cdt, o->ndim, o->shape), eout = ssmt_alloc(cdt, o->ndim, o->shape);
    for (int i = 0; i < 4; ++i) {
        const ssm_tensor * in = fld(&a, L->in[i]);
        pool[i] = ssmt_clone(in, cdt), epool[i] = ssmt_clone(in, cdt);
        sep[i] = ssmt_alloc(cdt, in->ndim, in->shape);
        inter[i] = m3_inter_alloc(in, q->T, cdt), einter[i] = m3_inter_alloc(in, q->T, cdt);
        ssmt_poison(&inter[i].t);
    }
    m3_one_by_one(ctx, q, cdt, &eout.t, einter, epool);
    for (int i = 0; i < 4; ++i) {
        *fld(&a, L->in[i]) = pool[i].t, *fld(&a, L->fin[i]) = in_place ? pool[i].t : sep[i].t;
        *fld(&a, L->inter[i]) = inter[i].t;
    }
    *fld(&a, L->out) = out.t;
    TEST_CHECK_STATUS(L->run(ctx, &a), SSM_STATUS_OK);
    TEST_CHECK(memcmp(out.buf, eout.buf, out.bytes) == 0, "%s: out differs from the tokens one by one", tag);
    for (int i = 0; i < 4; ++i) {
        const ssmt_host * res = in_place ? &pool[i] : &sep[i];
        TEST_CHECK(memcmp(inter[i].buf, einter[i].buf, inter[i].bytes) == 0,
                   "%s: intermediate state %d differs from one by one", tag, i);
        TEST_CHECK(memcmp(res->buf, epool[i].buf, res->bytes) == 0, "%s: pool %d differs from one by one (%s)", tag, i,
                   in_place ? "in place" : "separate");
    }
    for (int i = 0; i < 4; ++i) {
        ssmt_free(&pool[i]), ssmt_free(&sep[i]), ssmt_free(&inter[i]), ssmt_free(&epool[i]);
        ssmt_free(&einter[i]);
    }
    ssmt_free(&out), ssmt_free(&eout);
}

static void test_m3_tokens(ssmt_rng * rng, const m3_layout * L) {
    for (int k = 0; k < 9; ++k) {
        const int64_t * shp = L == &siso_layout ? siso_shapes[k % 3] : mimo_shapes[k % 3];
        const int64_t   R = 3 + k % 5;
        int64_t         lens[16];
        for (int64_t b = 0; b < R; ++b) lens[b] = ssmt_randint(rng, 0, 4);
        lens[0] = 0, lens[R - 1] = 1 + ssmt_randint(rng, 0, 3); /* a row of no token; T ≥ 1 */
        const ssm_dtype dt = k % 3 == 1 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
        m3_tokens       q;
        if (m3_tokens_make(rng, &q, L, R, lens, shp, dt) != 0) {
            TEST_CHECK(0, "could not build a %s tokens problem", L->op);
            continue;
        }
        char tag[160];
        snprintf(tag, sizeof tag, "%s tokens[R%lld T%lld shape %lld %lld %lld %lld %lld %lld %s]", L->op,
                 (long long)R, (long long)q.T, (long long)shp[0], (long long)shp[1], (long long)shp[2],
                 (long long)shp[3], (long long)shp[4], (long long)shp[5], ssm_dtype_name(dt));
        /* the CPU against the reference: out, the four separate final pools, the four
         * intermediate states */
        m3_args   a = q.args;
        ssmt_host inter[4];
        for (int i = 0; i < 4; ++i) {
            inter[i] = m3_inter_alloc(fld(&a, L->in[i]), q.T, SSM_DTYPE_F32);
            *fld(&a, L->inter[i]) = inter[i].t;
        }
        ssmt_op_case oc = {0};
        oc.name = tag, oc.args = &a, oc.args_size = L->size, oc.compute = dt, oc.out_dtype = SSM_DTYPE_F32;
        oc.run = L->run, oc.angle_outs = L->angle_outs;
        ssmt_op_add_outs(&oc, L->op);
        TEST_CHECK(oc.nouts >= 7, "%s: %d outputs", tag, oc.nouts);
        ssmt_op_run(&oc, ctx_ref, ctx_cpu, ctx_scalar);
        for (int i = 0; i < 4; ++i) ssmt_free(&inter[i]);
        /* against the tokens one by one */
        m3_check_one_by_one(&q, ctx_ref, SSM_DTYPE_F64, k % 2, tag);
        m3_check_one_by_one(&q, ctx_cpu[1 + k % 3], SSM_DTYPE_F32, k % 2 == 0, tag);
        m3_tokens_free(&q);
    }
}

/* Runs a on ctx expecting `want`; out, the intermediates and the pools unchanged after. */
static void m3_expect_fail(const char * what, ssm_context * ctx, const m3_layout * L, m3_args * a, ssm_status want) {
    const ssm_tensor * const watch[9] = {fld(a, L->out),      fld(a, L->in[0]),    fld(a, L->in[1]),
                                         fld(a, L->in[2]),    fld(a, L->in[3]),    fld(a, L->inter[0]),
                                         fld(a, L->inter[1]), fld(a, L->inter[2]), fld(a, L->inter[3])};
    ssmt_host                snap[9];
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
static void test_m3_tables(ssmt_rng * rng, const m3_layout * L, ssm_context * ctx, ssm_dtype cdt) {
    const int64_t R = 5, W = 4, lens[5] = {3, 0, 4, 1, 2};
    m3_tokens     q;
    if (m3_tokens_make(rng, &q, L, R, lens, L == &siso_layout ? siso_shapes[0] : mimo_shapes[0], SSM_DTYPE_F32) !=
        0) {
        TEST_CHECK(0, "could not build a %s tables problem", L->op);
        return;
    }
    m3_args   a = q.args;
    ssmt_host pool[4], poolC[4], inter[4];
    for (int i = 0; i < 4; ++i) {
        pool[i] = ssmt_clone(fld(&a, L->in[i]), cdt), inter[i] = m3_inter_alloc(fld(&a, L->in[i]), q.T, cdt);
        *fld(&a, L->in[i]) = pool[i].t, *fld(&a, L->fin[i]) = pool[i].t, *fld(&a, L->inter[i]) = inter[i].t;
    }
    const int64_t      st[2] = {R, W}, s1[1] = {R};
    const ssm_tensor * o = fld(&a, L->out);
    ssmt_host          tab = ssmt_alloc(SSM_DTYPE_I32, 2, st), acc = ssmt_alloc(SSM_DTYPE_I64, 1, s1);
    ssmt_host          rd1 = ssmt_alloc(SSM_DTYPE_I64, 1, s1);
    ssmt_host          out = ssmt_alloc(cdt, o->ndim, o->shape), outC = ssmt_alloc(cdt, o->ndim, o->shape);
    int64_t            perm[64], next = 0;
    shuffle(rng, perm, q.slots);
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
    *fld(&a, L->dst) = tab.t, *fld(&a, L->out) = out.t;
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
    m3_args c = a;
    for (int i = 0; i < 4; ++i) *fld(&c, L->in[i]) = poolC[i].t, *fld(&c, L->fin[i]) = poolC[i].t;
    *fld(&c, L->idx) = rd1.t, *fld(&c, L->out) = outC.t;
    TEST_CHECK_STATUS(L->run(ctx, &c), SSM_STATUS_OK);
    *fld(&a, L->idx) = tab.t, *fld(&a, L->acc) = acc.t, *fld(&a, L->dst) = ssmt_absent();
    TEST_CHECK_STATUS(L->run(ctx, &a), SSM_STATUS_OK);
    TEST_CHECK(memcmp(out.buf, outC.buf, out.bytes) == 0, "%s table: out with num_accepted_tokens differs", L->op);
    for (int i = 0; i < 4; ++i)
        TEST_CHECK(memcmp(pool[i].buf, poolC[i].buf, pool[i].bytes) == 0,
                   "%s table: pool %d with num_accepted_tokens differs", L->op, i);
    /* the rules: a row with more tokens than the table has columns; num_accepted_tokens
     * beyond the table; a table with a separate final pool */
    m3_args f = a;
    *fld(&f, L->idx) = ssmt_slice(&tab.t, 1, 0, W - 1), *fld(&f, L->acc) = ssmt_absent();
    m3_expect_fail("more tokens than table columns", ctx, L, &f, SSM_STATUS_INVALID_SHAPE);
    f = a;
    ssmt_set(&acc.t, 2, (double)W + 1);
    m3_expect_fail("num_accepted_tokens beyond the table", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    ssmt_set(&acc.t, 2, 1);
    *fld(&f, L->fin[2]) = poolC[2].t;
    m3_expect_fail("a table with a separate final pool", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    /* the slot rules with several tokens per row (1-D reads, the token table as dst): two
     * tokens write one slot; a table slot, a read slot beyond the pool; cu_seqlens not
     * ending at T */
    ssmt_host bad = ssmt_clone(&tab.t, SSM_DTYPE_I32), rdbad = ssmt_clone(&q.rd.t, SSM_DTYPE_I64);
    ssmt_host cubad = ssmt_clone(&q.cu.t, SSM_DTYPE_I64);
    f = a;
    *fld(&f, L->idx) = q.rd.t, *fld(&f, L->acc) = ssmt_absent(), *fld(&f, L->dst) = bad.t; /* row 0: 3 tokens */
    ssmt_set(&bad.t, 1, ssmt_get(&tab.t, 0));
    m3_expect_fail("two tokens write one slot", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    ssmt_set(&bad.t, 1, ssmt_get(&tab.t, 1)), ssmt_set(&bad.t, 0, (double)q.slots);
    m3_expect_fail("a table slot beyond the pool", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    ssmt_set(&bad.t, 0, ssmt_get(&tab.t, 0));
    TEST_CHECK_STATUS(L->run(ctx, &f), SSM_STATUS_OK); /* the restored table is valid */
    *fld(&f, L->idx) = rdbad.t;
    ssmt_set(&rdbad.t, 0, (double)q.slots);
    m3_expect_fail("a read slot beyond the pool", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    *fld(&f, L->idx) = q.rd.t, *fld(&f, L->cu) = cubad.t;
    ssmt_set(&cubad.t, R, (double)(q.T - 1));
    m3_expect_fail("cu_seqlens ending before T", ctx, L, &f, SSM_STATUS_INVALID_ARGUMENT);
    ssmt_free(&bad), ssmt_free(&rdbad), ssmt_free(&cubad);
    for (int i = 0; i < 4; ++i) ssmt_free(&pool[i]), ssmt_free(&poolC[i]), ssmt_free(&inter[i]);
    ssmt_free(&tab), ssmt_free(&acc), ssmt_free(&rd1), ssmt_free(&out), ssmt_free(&outC);
    m3_tokens_free(&q);
}

static void test_mimo(ssmt_rng * rng) {
    for (int k = 0; k < 3; ++k) {
        ssmt_mimo_config cfg;
        ssmt_mimo_config_init(&cfg);
        cfg.batch = 5 + k, cfg.nheads = 2 + 2 * (k % 2), cfg.ngroups = 1 + k % 2, cfg.rank = 1 + k, cfg.dstate = 16,
        cfg.headdim = 8 + 8 * k;
        const int64_t          B = cfg.batch, slots = 3 * B;
        ssmt_mimo_step_problem pr;
        if (ssmt_mimo_random_step(rng, &cfg, slots, 1, &pr) != 0) {
            TEST_CHECK(0, "could not build a mimo step problem");
            continue;
        }
        mimo_params                 = pr.params;
        ssm_mamba3_mimo_step_args a = pr.args;
        m3_fields                 f = M3_FIELDS(&a);
        ssmt_host                 dst;
        m3_set_dst(rng, &f, &dst, B, slots);
        char tag[100];
        snprintf(tag, sizeof tag, "mimo dst[B%lld H%lld R%lld P%lld]", (long long)B, (long long)cfg.nheads,
                 (long long)cfg.rank, (long long)cfg.headdim);
        m3_check(tag, &a, sizeof a, f, run_mimo, cfg.dtype, cfg.out_dtype, 0, "mamba3_mimo_step", B, slots);
        m3_rules(tag, &a, f, run_mimo, B);
        ssmt_free(&dst);
        ssmt_mimo_step_free(&pr);
    }
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261202u);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);
    for (int t = 1; t <= 3; ++t) ctx_cpu[t] = ssmt_make_ctx(SSM_BACKEND_CPU, t, SSM_ISA_AUTO);
    ctx_scalar = ssmt_make_ctx(SSM_BACKEND_CPU, 2, SSM_ISA_SCALAR);
    TEST_CHECK(ctx_ref && ctx_cpu[1] && ctx_cpu[2] && ctx_cpu[3] && ctx_scalar, "context creation failed");
    if (ssmt_failures) TEST_EXIT();
    test_m2_tokens(&rng);
    test_m2_tables(&rng, ctx_ref, SSM_DTYPE_F64);
    test_m2_tables(&rng, ctx_cpu[3], SSM_DTYPE_F32);
    test_m2_rules(&rng);
    test_siso(&rng);
    test_m3_tokens(&rng, &siso_layout);
    test_m3_tables(&rng, &siso_layout, ctx_ref, SSM_DTYPE_F64);
    test_m3_tables(&rng, &siso_layout, ctx_cpu[3], SSM_DTYPE_F32);
    test_mimo(&rng);
    test_m3_tokens(&rng, &mimo_layout);
    test_m3_tables(&rng, &mimo_layout, ctx_ref, SSM_DTYPE_F64);
    test_m3_tables(&rng, &mimo_layout, ctx_cpu[3], SSM_DTYPE_F32);
    for (int t = 1; t <= 3; ++t) ssm_context_free(ctx_cpu[t]);
    ssm_context_free(ctx_ref), ssm_context_free(ctx_scalar);
    TEST_EXIT();
}
