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
 * The problems and the slot-table loops live in common/decode_slots.c (test_cuda_decode_slots
 * runs them on the CUDA backend).
 * Seed: SSMOPS_TEST_SEED (default 20261202).
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "decode_slots.h"
#include "testutil.h"

static ssm_context *ctx_ref, *ctx_cpu[4], *ctx_scalar;

/* ==== mamba2_step ======================================================================= */

/* Runs every row's tokens one at a time through single-token steps on ctx (state carried in
 * a (1,H,P,N) buffer of dtype cdt), into out, inter (T rows) and the pool `pool` (a copy of
 * the input pool, updated at the write slots only). Padding rows: out and inter zero. */
static void m2_one_by_one(ssm_context * ctx, const ssmt_ds_m2 * q, ssm_dtype cdt, const ssm_tensor * out,
                          const ssm_tensor * inter, const ssm_tensor * pool) {
    const int64_t sc[4] = {1, q->H, q->P, q->N};
    ssmt_host     carry = ssmt_alloc(cdt, 4, sc);
    ssmt_host     snapshot_pool = ssmt_clone(pool, (ssm_dtype)pool->dtype); /* the input pool */
    for (int64_t b = 0; b < q->R; ++b) {
        const int64_t t0 = ssmt_ds_m2_cu(q, b), L = q->lens[b];
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
            TEST_CHECK_STATUS(ssm_mamba2_step(ctx, &ssmt_ds_m2_params, &s), SSM_STATUS_OK);
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
static void m2_check_one_by_one(const ssmt_ds_m2 * q, ssm_context * ctx, ssm_dtype cdt, int in_place,
                                const char * tag) {
    const int64_t so[3] = {q->T, q->H, q->P}, si[4] = {q->T, q->H, q->P, q->N};
    ssmt_host     out = ssmt_alloc(cdt, 3, so), inter = ssmt_alloc(cdt, 4, si);
    ssmt_host     pool = ssmt_clone(&q->state.t, cdt), fin = ssmt_alloc(cdt, 4, q->state.t.shape);
    ssmt_host     eout = ssmt_alloc(cdt, 3, so), einter = ssmt_alloc(cdt, 4, si), epool = ssmt_clone(&q->state.t, cdt);
    m2_one_by_one(ctx, q, cdt, &eout.t, &einter.t, &epool.t);
    ssm_mamba2_step_args a = q->args;
    a.state = pool.t, a.final_state = in_place ? pool.t : fin.t, a.out = out.t, a.intermediate_states = inter.t;
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx, &ssmt_ds_m2_params, &a), SSM_STATUS_OK);
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
        ssmt_ds_m2      q;
        ssmt_ds_m2_make(rng, &q, R, lens, varlen, s[0], s[1], s[2], s[3], dt, sdt, per_head, has_z);
        ssm_mamba2_params_init(&ssmt_ds_m2_params);
        ssmt_ds_m2_params.dt_softplus = 1;
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
        ssmt_op_case oc = ssmt_op_case_make(tag, "mamba2_step", &a, sizeof a, dt, SSM_DTYPE_F32, ssmt_ds_run_m2);
        TEST_CHECK(oc.nouts == 3, "%s: %d outputs", tag, oc.nouts);
        ssmt_op_run(&oc, ctx_ref, ctx_cpu, ctx_scalar);
        ssmt_free(&fin), ssmt_free(&inter), ssmt_free(&out);
        /* against the tokens one by one */
        m2_check_one_by_one(&q, ctx_ref, SSM_DTYPE_F64, k % 2, tag);
        m2_check_one_by_one(&q, ctx_cpu[1 + k % 3], SSM_DTYPE_F32, k % 2 == 0, tag);
        ssmt_ds_m2_free(&q);
    }
}


/* A call that must fail with `want` and leave out, final, inter and pool untouched. */
static void m2_expect_fail(const char * what, const ssm_mamba2_step_args * a, ssm_status want, const ssmt_host * out,
                           const ssmt_host * inter, const ssmt_host * pool, const ssmt_host * fin) {
    void *           s[4] = {ssmt_snapshot(out), ssmt_snapshot(inter), ssmt_snapshot(pool), ssmt_snapshot(fin)};
    ssm_context *    ctxs[2] = {ctx_ref, ctx_cpu[2]};
    for (int i = 0; i < 2; ++i) {
        const ssm_status st = ssm_mamba2_step(ctxs[i], &ssmt_ds_m2_params, a);
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
    ssmt_ds_m2    q;
    ssmt_ds_m2_make(rng, &q, R, lens, 1, H, P, N, G, SSM_DTYPE_F32, SSM_DTYPE_F32, 0, 0);
    ssm_mamba2_params_init(&ssmt_ds_m2_params);
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
    const ssm_status base = ssm_mamba2_step(ctx_ref, &ssmt_ds_m2_params, &ok);
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
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &ssmt_ds_m2_params, &a), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_ref, &ssmt_ds_m2_params, &a), SSM_STATUS_OK);
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
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &ssmt_ds_m2_params, &a), SSM_STATUS_OK);
    ssmt_set(&rd.t, 0, 0), a = ok;
    /* in place: a row writing its own read slot is fine */
    ssmt_set(&wr.t, 0, 0);
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &ssmt_ds_m2_params, &a), SSM_STATUS_OK);
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
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &ssmt_ds_m2_params, &a), SSM_STATUS_OK);
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
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &ssmt_ds_m2_params, &a), SSM_STATUS_OK);
    ssmt_poison(&out.t), ssmt_poison(&inter.t);
    ssmt_set(&acc.t, 2, 3);
    m2_expect_fail("num_accepted_tokens beyond the table", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    ssmt_set(&acc.t, 2, -1);
    m2_expect_fail("negative num_accepted_tokens", &a, SSM_STATUS_INVALID_ARGUMENT, &out, &inter, &pool, &fin);
    ssmt_free(&out), ssmt_free(&inter), ssmt_free(&pool), ssmt_free(&fin), ssmt_free(&rd), ssmt_free(&wr);
    ssmt_free(&tab), ssmt_free(&acc);
    ssmt_ds_m2_free(&q);
}

/* ==== Mamba-3 steps ===================================================================== */

/* The checks of one Mamba-3 step problem with dst set: args (the problem's struct, copied
 * into a buffer of args_size), its fields f into that copy. */
static void m3_check(const char * tag, void * args, size_t args_size, ssmt_ds_fields f, ssmt_run_fn run, ssm_dtype compute,
                     ssm_dtype out_dtype, unsigned angle_outs, const char * op, int64_t B, int64_t slots) {
    /* the CPU against the reference (out and the four separate final pools) */
    ssmt_op_case oc = ssmt_op_case_make(tag, op, args, args_size, compute, out_dtype, run);
    oc.angle_outs = angle_outs;
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
static void m3_rules(const char * tag, void * args, ssmt_ds_fields f, ssmt_run_fn run, int64_t B) {
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
        ssmt_mamba3_params(&cfg, &ssmt_ds_siso_params);
        ssm_mamba3_siso_step_args a = pr.args;
        ssmt_ds_fields                 f = SSMT_DS_FIELDS(&a);
        ssmt_host                 dst;
        ssmt_ds_set_dst(rng, &f, &dst, s[0], slots);
        char tag[100];
        snprintf(tag, sizeof tag, "siso dst[B%lld H%lld K%lld V%lld A%lld]", (long long)s[0], (long long)s[1],
                 (long long)s[3], (long long)s[4], (long long)s[5]);
        m3_check(tag, &a, sizeof a, f, ssmt_ds_run_siso, cfg.dtype, cfg.out_dtype, 1u << 1, "mamba3_siso_step", s[0], slots);
        m3_rules(tag, &a, f, ssmt_ds_run_siso, s[0]);
        ssmt_free(&dst);
        ssmt_mamba3_step_free(&pr);
    }
}

/* ==== Mamba-3 steps with several tokens per row (SISO and MIMO) ======================= */

/* Every row's tokens one at a time through single-token steps on ctx (the four states
 * carried in one-slot buffers of dtype cdt, in place, from the input pools of q->args), into
 * out, inter[4] (T rows) and pool[4] (copies of the input pools, updated at the write
 * slots only). */
static void m3_one_by_one(ssm_context * ctx, const ssmt_ds_tokens * q, ssm_dtype cdt, const ssm_tensor * out,
                          ssmt_host * inter, ssmt_host * pool) {
    const ssmt_ds_layout * L = q->L;
    ssmt_ds_args           a = q->args;
    ssmt_host         carry[4];
    int64_t           t0 = 0;
    for (int i = 0; i < 4; ++i) {
        const ssm_tensor * in = ssmt_ds_fld(&a, L->in[i]);
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
            const ssm_tensor src = ssmt_slice(ssmt_ds_fld(&a, L->in[i]), 0, r, 1);
            ssmt_copy(&carry[i].t, &src);
        }
        for (int64_t t = t0; t < t0 + q->lens[b]; ++t) {
            ssmt_ds_args s = a;
            for (int i = 0; i < 8; ++i)
                if (ssmt_ds_fld(&a, L->tok[i])->data != NULL) *ssmt_ds_fld(&s, L->tok[i]) = ssmt_slice(ssmt_ds_fld(&a, L->tok[i]), 0, t, 1);
            *ssmt_ds_fld(&s, L->cu) = ssmt_absent(), *ssmt_ds_fld(&s, L->idx) = ssmt_absent(), *ssmt_ds_fld(&s, L->dst) = ssmt_absent();
            for (int i = 0; i < 4; ++i) *ssmt_ds_fld(&s, L->in[i]) = *ssmt_ds_fld(&s, L->fin[i]) = carry[i].t;
            *ssmt_ds_fld(&s, L->out) = ssmt_slice(out, 0, t, 1);
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
static void m3_check_one_by_one(const ssmt_ds_tokens * q, ssm_context * ctx, ssm_dtype cdt, int in_place,
                                const char * tag) {
    const ssmt_ds_layout * L = q->L;
    ssmt_ds_args           a = q->args;
    ssmt_host         pool[4], sep[4], inter[4], epool[4], einter[4];
    const ssm_tensor * o = ssmt_ds_fld(&a, L->out);
    ssmt_host         out = ssmt_alloc(cdt, o->ndim, o->shape), eout = ssmt_alloc(cdt, o->ndim, o->shape);
    for (int i = 0; i < 4; ++i) {
        const ssm_tensor * in = ssmt_ds_fld(&a, L->in[i]);
        pool[i] = ssmt_clone(in, cdt), epool[i] = ssmt_clone(in, cdt);
        sep[i] = ssmt_alloc(cdt, in->ndim, in->shape);
        inter[i] = ssmt_ds_inter_alloc(in, q->T, cdt), einter[i] = ssmt_ds_inter_alloc(in, q->T, cdt);
        ssmt_poison(&inter[i].t);
    }
    m3_one_by_one(ctx, q, cdt, &eout.t, einter, epool);
    for (int i = 0; i < 4; ++i) {
        *ssmt_ds_fld(&a, L->in[i]) = pool[i].t, *ssmt_ds_fld(&a, L->fin[i]) = in_place ? pool[i].t : sep[i].t;
        *ssmt_ds_fld(&a, L->inter[i]) = inter[i].t;
    }
    *ssmt_ds_fld(&a, L->out) = out.t;
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

static void test_m3_tokens(ssmt_rng * rng, const ssmt_ds_layout * L) {
    for (int k = 0; k < 9; ++k) {
        const int64_t * shp;
        ssm_dtype       dt;
        ssmt_ds_tokens  q;
        if (ssmt_ds_tokens_case(rng, &q, L, k, &shp, &dt) != 0) {
            TEST_CHECK(0, "could not build a %s tokens problem", L->op);
            continue;
        }
        char tag[160];
        snprintf(tag, sizeof tag, "%s tokens[R%lld T%lld shape %lld %lld %lld %lld %lld %lld %s]", L->op,
                 (long long)q.R, (long long)q.T, (long long)shp[0], (long long)shp[1], (long long)shp[2],
                 (long long)shp[3], (long long)shp[4], (long long)shp[5], ssm_dtype_name(dt));
        /* the CPU against the reference: out, the four separate final pools, the four
         * intermediate states */
        ssmt_ds_args   a = q.args;
        ssmt_host inter[4];
        for (int i = 0; i < 4; ++i) {
            inter[i] = ssmt_ds_inter_alloc(ssmt_ds_fld(&a, L->in[i]), q.T, SSM_DTYPE_F32);
            *ssmt_ds_fld(&a, L->inter[i]) = inter[i].t;
        }
        ssmt_op_case oc = ssmt_op_case_make(tag, L->op, &a, L->size, dt, SSM_DTYPE_F32, L->run);
        oc.angle_outs = L->angle_outs;
        TEST_CHECK(oc.nouts >= 7, "%s: %d outputs", tag, oc.nouts);
        ssmt_op_run(&oc, ctx_ref, ctx_cpu, ctx_scalar);
        for (int i = 0; i < 4; ++i) ssmt_free(&inter[i]);
        /* against the tokens one by one */
        m3_check_one_by_one(&q, ctx_ref, SSM_DTYPE_F64, k % 2, tag);
        m3_check_one_by_one(&q, ctx_cpu[1 + k % 3], SSM_DTYPE_F32, k % 2 == 0, tag);
        ssmt_ds_tokens_free(&q);
    }
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
        ssmt_ds_mimo_params                 = pr.params;
        ssm_mamba3_mimo_step_args a = pr.args;
        ssmt_ds_fields                 f = SSMT_DS_FIELDS(&a);
        ssmt_host                 dst;
        ssmt_ds_set_dst(rng, &f, &dst, B, slots);
        char tag[100];
        snprintf(tag, sizeof tag, "mimo dst[B%lld H%lld R%lld P%lld]", (long long)B, (long long)cfg.nheads,
                 (long long)cfg.rank, (long long)cfg.headdim);
        m3_check(tag, &a, sizeof a, f, ssmt_ds_run_mimo, cfg.dtype, cfg.out_dtype, 0, "mamba3_mimo_step", B, slots);
        m3_rules(tag, &a, f, ssmt_ds_run_mimo, B);
        ssmt_free(&dst);
        ssmt_mimo_step_free(&pr);
    }
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261202u);
    if (!ssmt_make_cpu_ctxs(&ctx_ref, ctx_cpu, &ctx_scalar)) TEST_EXIT();
    test_m2_tokens(&rng);
    ssmt_ds_m2_tables(&rng, ctx_ref, SSM_DTYPE_F64);
    ssmt_ds_m2_tables(&rng, ctx_cpu[3], SSM_DTYPE_F32);
    test_m2_rules(&rng);
    test_siso(&rng);
    test_m3_tokens(&rng, &ssmt_ds_siso_layout);
    ssmt_ds_m3_tables(&rng, &ssmt_ds_siso_layout, ctx_ref, SSM_DTYPE_F64);
    ssmt_ds_m3_tables(&rng, &ssmt_ds_siso_layout, ctx_cpu[3], SSM_DTYPE_F32);
    test_mimo(&rng);
    test_m3_tokens(&rng, &ssmt_ds_mimo_layout);
    ssmt_ds_m3_tables(&rng, &ssmt_ds_mimo_layout, ctx_ref, SSM_DTYPE_F64);
    ssmt_ds_m3_tables(&rng, &ssmt_ds_mimo_layout, ctx_cpu[3], SSM_DTYPE_F32);
    ssmt_free_cpu_ctxs(ctx_ref, ctx_cpu, ctx_scalar);
    TEST_EXIT();
}
