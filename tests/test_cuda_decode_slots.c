/*
 * test_cuda_decode_slots.c — the decode steps' slot forms on the CUDA backend
 * (docs/ops/mamba2.md "Decode slots"), on the problems of test_decode_slots
 * (common/decode_slots.c):
 *  - mamba2_step, mamba3_siso_step, mamba3_mimo_step with several tokens per row
 *    (cu_seqlens, rows of 0..4 tokens), padding rows, read slots ≠ write slots, a row that
 *    writes nothing, intermediate states; f32 and bf16 inputs, f32 and 16-bit pools, in place
 *    and into separate final pools; one token per row with dst_state_batch_indices: every
 *    output against the float64 reference (the input dtype's bar) and the CPU backend (the
 *    fp32 bar), padding rows' out exactly 0, outputs poisoned before, a second run
 *    byte-identical; index tensors on the host and on the device; mamba2_step through both
 *    of its kernels that take these forms ("vector" and "generic");
 *  - vLLM's slot tables: a 2-D state_batch_indices with num_accepted_tokens as the read slots
 *    and the token table, in place, on each step against the reference and the CPU, the table
 *    on the host and on the device; the loops of test_decode_slots (2-D
 *    dst_state_batch_indices, then 2-D state_batch_indices) and their rules run on the device:
 *    a table slot holds the intermediate state; num_accepted_tokens equals the spelled-out
 *    read slots; repeated write slots, slots beyond the pool, too-narrow tables and bad
 *    cu_seqlens rejected with nothing written;
 *  - mamba2_step's slot rules on the device (two rows writing one slot, a write slot beyond
 *    the pool: INVALID_ARGUMENT, nothing written) and device read slots out of range: a
 *    padding row, as the reference with that row's slots −1.
 * Exit 77 without a CUDA device. Seed: SSMOPS_TEST_SEED (default 20261202).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cudautil.h"
#include "decode_slots.h"
#include "testutil.h"

static ssm_context *ctx_ref, *ctx_cpu, *ctx_cuda, *ctx_cuda_generic;

static ssm_tensor * field(void * args, size_t off) { return (ssm_tensor *)((char *)args + off); }

/* Room for any step's args struct. */
typedef union step_args {
    ssm_mamba2_step_args      m2;
    ssm_mamba3_siso_step_args siso;
    ssm_mamba3_mimo_step_args mimo;
} step_args;

/* ---- one call on the three backends ------------------------------------------------------ */

enum { COPIES_MAX = 24 };
typedef struct copies {
    ssmt_host h[COPIES_MAX];
    int       n;
} copies;

static void copies_free(copies * c) {
    for (int i = 0; i < c->n; ++i) ssmt_free(&c->h[i]);
    c->n = 0;
}

/* args (operator op's struct) into dst with every present output in a buffer of its own, of
 * dtype dt (dt < 0: the output's dtype): an output with an input's data pointer (a pool
 * updated in place) gets a copy of that input, which the input then uses too; the other
 * outputs are poisoned. */
static void copy_outputs(const char * op, const void * args, void * dst, int dt, copies * c) {
    const ssm_op_info * info = ssm_op_get(ssm_op_find(op));
    memcpy(dst, args, info->args_size);
    c->n = 0;
    for (int32_t o = 0; o < info->nargs; ++o) {
        if (!(info->args[o].role & SSM_ARG_ROLE_OUTPUT)) continue;
        ssm_tensor *       out = field(dst, info->args[o].offset);
        const void * const host = out->data;
        if (host == NULL || c->n == COPIES_MAX) continue;
        const ssm_dtype d = dt < 0 ? (ssm_dtype)out->dtype : (ssm_dtype)dt;
        ssm_tensor *    in = NULL;
        for (int32_t i = 0; i < info->nargs && in == NULL; ++i)
            if (!(info->args[i].role & SSM_ARG_ROLE_OUTPUT) &&
                field((void *)(uintptr_t)args, info->args[i].offset)->data == host)
                in = field(dst, info->args[i].offset);
        if (in != NULL) {
            if (in->data == host) { /* not copied yet */
                c->h[c->n] = ssmt_clone(in, d);
                *in = c->h[c->n++].t;
            }
            *out = *in;
        } else {
            c->h[c->n] = ssmt_alloc(d, out->ndim, out->shape);
            ssmt_poison(&c->h[c->n].t);
            *out = c->h[c->n++].t;
        }
    }
}

/* One step call (args: the problem's inputs and outputs, host tensors; run: an ssmt_ds_run_*,
 * which mirrors a CUDA context's call to the device) on the reference (F64 outputs), the CPU
 * (F32 outputs) and CUDA (the problem's output dtypes) under cuda: CUDA
 * within the bar of `compute` of the reference and the fp32 bar of the CPU (16-bit outputs:
 * beyond their own rounding), then a second CUDA run byte-identical; index tensors on the host
 * and then on the device. siso: angle outputs compared modulo 2π. Returns nonzero when the
 * calls ran. */
static int check_call(const char * tag, const char * op, ssmt_run_fn run, const void * args, ssm_dtype compute,
                      int siso, ssm_context * cuda) {
    const ssm_op_info * info = ssm_op_get(ssm_op_find(op));
    step_args           ra, ca, d1, d2;
    TEST_CHECK(info != NULL && info->args_size <= sizeof ra, "%s: %s args", tag, op);
    if (info == NULL || info->args_size > sizeof ra) return 0;
    copies cr, cc, c1, c2;
    copy_outputs(op, args, &ra, SSM_DTYPE_F64, &cr);
    copy_outputs(op, args, &ca, SSM_DTYPE_F32, &cc);
    ssm_status st = run(ctx_ref, &ra);
    TEST_CHECK(st == SSM_STATUS_OK, "%s: reference %s (%s)", tag, ssm_status_string(st),
               ssm_context_last_error(ctx_ref));
    const ssm_status sc = run(ctx_cpu, &ca);
    TEST_CHECK(sc == SSM_STATUS_OK, "%s: cpu %s (%s)", tag, ssm_status_string(sc), ssm_context_last_error(ctx_cpu));
    int ran = st == SSM_STATUS_OK && sc == SSM_STATUS_OK;
    for (int index_dev = 0; index_dev < 2 && ran; ++index_dev) {
        copy_outputs(op, args, &d1, -1, &c1);
        copy_outputs(op, args, &d2, -1, &c2);
        ssmt_ds_index_dev = index_dev;
        st = run(cuda, &d1);
        TEST_CHECK(st == SSM_STATUS_OK, "%s: cuda (%s indices) %s (%s)", tag, index_dev ? "device" : "host",
                   ssm_status_string(st), ssm_context_last_error(cuda));
        const ssm_status s2 = st == SSM_STATUS_OK ? run(cuda, &d2) : st;
        for (int32_t o = 0; o < info->nargs && st == SSM_STATUS_OK; ++o) {
            const ssm_arg_info * ai = &info->args[o];
            const ssm_tensor *   got = field(&d1, ai->offset);
            if (!(ai->role & SSM_ARG_ROLE_OUTPUT) || got->data == NULL) continue;
            const ssm_tensor * ref = field(&ra, ai->offset);
            const ssm_tensor * cpu = field(&ca, ai->offset);
            /* SISO's angles modulo 2π: the reference's moved to got's side (got keeps its dtype,
             * so a 16-bit one is measured beyond its own rounding) */
            const int angle = siso && strstr(ai->name, "angle") != NULL;
            ssmt_host u = angle ? ssmt_unwrap_angles(ref, got) : (ssmt_host){0};
            ssmt_host uc = angle ? ssmt_unwrap_angles(cpu, got) : (ssmt_host){0};
            char      label[600];
            snprintf(label, sizeof label, "%.400s %s indices: %s vs reference", tag, index_dev ? "device" : "host",
                     ai->name);
            ssmt_check_bar_rounded(label, got, angle ? &u.t : ref, compute);
            snprintf(label, sizeof label, "%.400s %s indices: %s vs cpu", tag, index_dev ? "device" : "host", ai->name);
            ssmt_check_bar_rounded(label, got, angle ? &uc.t : cpu, SSM_DTYPE_F32);
            if (angle) ssmt_free(&u), ssmt_free(&uc);
            const ssm_tensor * again = field(&d2, ai->offset);
            const size_t       n = ssmt_numel(got) * ssm_dtype_size((ssm_dtype)got->dtype);
            TEST_CHECK(s2 == SSM_STATUS_OK && memcmp(got->data, again->data, n) == 0, "%s: %s differs between two runs",
                       tag, ai->name);
        }
        copies_free(&c1), copies_free(&c2);
        ssmt_ds_index_dev = 0;
        ran = st == SSM_STATUS_OK;
    }
    copies_free(&cr), copies_free(&cc);
    return ran;
}

/* out of every token of each padding row (read slot < 0 in rd) exactly 0: rows of T tokens,
 * row b's tokens [cu[b], cu[b+1]) (cu NULL: token b). */
static void check_padding_zero(const char * tag, const char * op, ssmt_run_fn run, void * args, size_t out_off,
                               const ssm_tensor * rd, const ssm_tensor * cu) {
    step_args d;
    copies    c;
    copy_outputs(op, args, &d, -1, &c);
    TEST_CHECK_STATUS(run(ctx_cuda, &d), SSM_STATUS_OK);
    const ssm_tensor * out = field(&d, out_off);
    for (int64_t b = 0; b < rd->shape[0]; ++b) {
        if (ssmt_get(rd, b) >= 0) continue;
        const int64_t t0 = cu ? (int64_t)ssmt_get(cu, b) : b, t1 = cu ? (int64_t)ssmt_get(cu, b + 1) : b + 1;
        for (int64_t t = t0; t < t1; ++t) {
            const ssm_tensor row = ssmt_pick(out, 0, t);
            int              zero = 1;
            for (int64_t i = 0; i < ssmt_numel(&row); ++i) zero = zero && ssmt_get(&row, i) == 0.0;
            TEST_CHECK(zero, "%s: padding row %lld, token %lld: out is not 0", tag, (long long)b, (long long)t);
        }
    }
    copies_free(&c);
}

/* ---- mamba2_step ------------------------------------------------------------------------- */

static void test_m2_tokens(ssmt_rng * rng) {
    static const ssm_dtype dts[2] = {SSM_DTYPE_F32, SSM_DTYPE_BF16};
    static const ssm_dtype sdts[3] = {SSM_DTYPE_F32, SSM_DTYPE_BF16, SSM_DTYPE_F16};
    /* H P N G; the last: N = 4096 (the rows kernel's shared memory beyond 48 KiB) */
    static const int64_t shp[5][4] = {{4, 8, 16, 2}, {6, 5, 20, 3}, {2, 32, 64, 1}, {4, 3, 8, 4}, {1, 4, 4096, 1}};
    for (int k = 0; k < 12; ++k) {
        const int64_t * s = shp[k < 11 ? k % 4 : 4];
        const int64_t   R = 3 + k % 5;
        int64_t         lens[16];
        for (int64_t b = 0; b < R; ++b) lens[b] = ssmt_randint(rng, 0, 4);
        lens[0] = 0, lens[R - 1] = 1 + ssmt_randint(rng, 0, 3); /* a row of no token; T ≥ 1 */
        const int       varlen = k % 6 != 5, per_head = k % 2, has_z = k % 3 != 0, in_place = k % 4 < 2;
        const ssm_dtype dt = dts[k % 2], sdt = sdts[(k / 2) % 3];
        ssmt_ds_m2      q;
        ssmt_ds_m2_make(rng, &q, R, lens, varlen, s[0], s[1], s[2], s[3], dt, sdt, per_head, has_z);
        ssm_mamba2_params_init(&ssmt_ds_m2_params);
        ssmt_ds_m2_params.dt_softplus = 1;
        char tag[200];
        snprintf(tag, sizeof tag, "m2 tokens[R%lld T%lld H%lld P%lld N%lld G%lld %s pool %s%s%s%s]", (long long)R,
                 (long long)q.T, (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3], ssm_dtype_name(dt),
                 ssm_dtype_name(sdt), per_head ? " per-head" : "", varlen ? " varlen" : "",
                 in_place ? " in place" : "");
        ssm_mamba2_step_args a = q.args;
        const int64_t        si[4] = {q.T, s[0], s[1], s[2]};
        ssmt_host            fin = ssmt_alloc(sdt, 4, q.state.t.shape), inter = ssmt_alloc(sdt, 4, si);
        ssmt_host            out = ssmt_alloc(dt, 3, q.x.t.shape);
        a.out = out.t, a.final_state = in_place ? a.state : fin.t, a.intermediate_states = inter.t;
        if (k % 5 == 4) a.intermediate_states = ssmt_absent();
        if (check_call(tag, "mamba2_step", ssmt_ds_run_m2, &a, dt, 0, ctx_cuda)) {
            check_call(tag, "mamba2_step", ssmt_ds_run_m2, &a, dt, 0, ctx_cuda_generic);
            check_padding_zero(tag, "mamba2_step", ssmt_ds_run_m2, &a, offsetof(ssm_mamba2_step_args, out), &q.rd.t,
                               varlen ? &q.cu.t : NULL);
        }
        ssmt_free(&fin), ssmt_free(&inter), ssmt_free(&out);
        ssmt_ds_m2_free(&q);
    }
}

/* A call on CUDA that must fail with `want` and write nothing (out and the pool unchanged). */
static void m2_expect_fail(const char * what, ssm_mamba2_step_args * a, ssm_status want, int index_dev) {
    ssmt_host out = ssmt_clone(&a->out, (ssm_dtype)a->out.dtype);
    ssmt_host pool = ssmt_clone(&a->state, (ssm_dtype)a->state.dtype);
    ssmt_ds_index_dev = index_dev;
    const ssm_status st = ssmt_ds_run_m2(ctx_cuda, a);
    ssmt_ds_index_dev = 0;
    TEST_CHECK(st == want, "m2 rules (%s indices): %s: got %s (%s), want %s", index_dev ? "device" : "host", what,
               ssm_status_string(st), ssm_context_last_error(ctx_cuda), ssm_status_string(want));
    ssmt_host out2 = ssmt_clone(&a->out, (ssm_dtype)a->out.dtype),
              pool2 = ssmt_clone(&a->state, (ssm_dtype)a->state.dtype);
    TEST_CHECK(memcmp(out.buf, out2.buf, out.bytes) == 0 && memcmp(pool.buf, pool2.buf, pool.bytes) == 0,
               "m2 rules: %s: a failed call wrote an output", what);
    ssmt_free(&out), ssmt_free(&pool), ssmt_free(&out2), ssmt_free(&pool2);
}

/* The write-slot rules on the device (host and device read slots: dst is read on the host
 * either way), and device read slots beyond the pool as padding rows. */
static void test_m2_rules(ssmt_rng * rng) {
    const int64_t R = 5, H = 2, P = 8, N = 16, G = 1;
    int64_t       lens[5] = {1, 2, 0, 3, 1};
    ssmt_ds_m2    q;
    ssmt_ds_m2_make(rng, &q, R, lens, 1, H, P, N, G, SSM_DTYPE_F32, SSM_DTYPE_F32, 1, 1);
    ssm_mamba2_params_init(&ssmt_ds_m2_params);
    const int64_t so[3] = {q.T, H, P};
    ssmt_host     out = ssmt_alloc(SSM_DTYPE_F32, 3, so), pool = ssmt_clone(&q.state.t, SSM_DTYPE_F32);
    ssmt_poison(&out.t);
    ssm_mamba2_step_args a = q.args;
    a.state = a.final_state = pool.t, a.out = out.t;
    for (int index_dev = 0; index_dev < 2; ++index_dev) {
        const double w0 = ssmt_get(&q.wr.t, 0), w3 = ssmt_get(&q.wr.t, 3);
        ssmt_set(&q.wr.t, 3, w0);
        m2_expect_fail("two rows write one slot", &a, SSM_STATUS_INVALID_ARGUMENT, index_dev);
        ssmt_set(&q.wr.t, 3, (double)q.slots);
        m2_expect_fail("a write slot beyond the pool", &a, SSM_STATUS_INVALID_ARGUMENT, index_dev);
        ssmt_set(&q.wr.t, 3, w3);
    }
    /* a device read slot beyond the pool is a padding row: the reference with its slots −1 */
    int64_t b = 0;
    while (b < R && (ssmt_get(&q.rd.t, b) < 0 || lens[b] == 0)) ++b;
    ssmt_host rd = ssmt_clone(&q.rd.t, SSM_DTYPE_I64), wr = ssmt_clone(&q.wr.t, SSM_DTYPE_I64);
    ssmt_set(&rd.t, b, (double)q.slots + 5);
    ssm_mamba2_step_args d = a;
    d.state_batch_indices = rd.t, d.dst_state_batch_indices = wr.t;
    ssmt_host outd = ssmt_clone(&out.t, SSM_DTYPE_F32), poold = ssmt_clone(&q.state.t, SSM_DTYPE_F32);
    d.out = outd.t, d.state = d.final_state = poold.t;
    ssmt_ds_index_dev = 1;
    TEST_CHECK_STATUS(ssmt_ds_run_m2(ctx_cuda, &d), SSM_STATUS_OK);
    ssmt_ds_index_dev = 0;
    ssmt_set(&rd.t, b, -1), ssmt_set(&wr.t, b, -1);
    ssmt_host            outr = ssmt_alloc(SSM_DTYPE_F64, 3, so), poolr = ssmt_clone(&q.state.t, SSM_DTYPE_F64);
    ssm_mamba2_step_args r = d;
    r.out = outr.t, r.state = r.final_state = poolr.t;
    TEST_CHECK_STATUS(ssmt_ds_run_m2(ctx_ref, &r), SSM_STATUS_OK);
    ssmt_check_bar("device read slot beyond the pool: out", &outd.t, &outr.t, SSM_DTYPE_F32);
    ssmt_check_bar("device read slot beyond the pool: pool", &poold.t, &poolr.t, SSM_DTYPE_F32);
    ssmt_free(&rd), ssmt_free(&wr), ssmt_free(&outd), ssmt_free(&poold), ssmt_free(&outr), ssmt_free(&poolr);
    ssmt_free(&out), ssmt_free(&pool);
    ssmt_ds_m2_free(&q);
}

/* ---- Mamba-3 steps ----------------------------------------------------------------------- */

/* Several tokens per row: out, the four final pools (separate, or in place), the four
 * intermediate states; f32 and bf16 inputs, the pools as made or bf16. */
static void test_m3_tokens(ssmt_rng * rng, const ssmt_ds_layout * L) {
    const int siso = L == &ssmt_ds_siso_layout;
    for (int k = 0; k < 9; ++k) {
        const int       in_place = k % 2, pools16 = k % 4 == 2;
        const int64_t * shp;
        ssm_dtype       dt;
        ssmt_ds_tokens  q;
        if (ssmt_ds_tokens_case(rng, &q, L, k, &shp, &dt) != 0) {
            TEST_CHECK(0, "could not build a %s tokens problem", L->op);
            continue;
        }
        char tag[200];
        snprintf(tag, sizeof tag, "%s tokens[R%lld T%lld shape %lld %lld %lld %lld %lld %lld %s%s%s]", L->op,
                 (long long)q.R, (long long)q.T, (long long)shp[0], (long long)shp[1], (long long)shp[2],
                 (long long)shp[3], (long long)shp[4], (long long)shp[5], ssm_dtype_name(dt),
                 pools16 ? " bf16 pools" : "", in_place ? " in place" : "");
        ssmt_ds_args a = q.args;
        ssmt_host    pool[4], inter[4];
        for (int i = 0; i < 4; ++i) {
            const ssm_tensor * in = ssmt_ds_fld(&a, L->in[i]);
            const ssm_dtype    pdt = pools16 ? SSM_DTYPE_BF16 : (ssm_dtype)in->dtype;
            pool[i] = ssmt_clone(in, pdt);
            inter[i] = ssmt_ds_inter_alloc(in, q.T, pools16 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32);
            *ssmt_ds_fld(&a, L->in[i]) = pool[i].t, *ssmt_ds_fld(&a, L->inter[i]) = inter[i].t;
            if (in_place) *ssmt_ds_fld(&a, L->fin[i]) = pool[i].t;
        }
        if (k % 3 == 2) *ssmt_ds_fld(&a, L->inter[1]) = ssmt_absent(); /* some intermediates only */
        if (check_call(tag, L->op, L->run, &a, dt, siso, ctx_cuda))
            check_padding_zero(tag, L->op, L->run, &a, L->out, &q.rd.t, &q.cu.t);
        for (int i = 0; i < 4; ++i) ssmt_free(&pool[i]), ssmt_free(&inter[i]);
        ssmt_ds_tokens_free(&q);
    }
}

/* One token per row with dst_state_batch_indices (no cu_seqlens): the general form with
 * each row's state streamed through. */
static void test_m3_dst(ssmt_rng * rng) {
    for (int k = 0; k < 4; ++k) {
        const int64_t B = 5 + k, slots = 3 * B;
        char          tag[100];
        ssmt_host     dst;
        if (k % 2 == 0) {
            ssmt_mamba3_config cfg;
            ssmt_mamba3_config_init(&cfg);
            cfg.batch = B, cfg.nheads = 4, cfg.nheads_qk = 2, cfg.dk = 16 << (k / 2), cfg.dv = 8, cfg.nangles = 4;
            cfg.dtype = k == 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32, cfg.has_z = 1;
            ssmt_mamba3_step_problem pr;
            if (ssmt_mamba3_random_step(rng, &cfg, slots, 1, &pr) != 0) {
                TEST_CHECK(0, "could not build a siso step problem");
                continue;
            }
            ssmt_mamba3_params(&cfg, &ssmt_ds_siso_params);
            ssm_mamba3_siso_step_args a = pr.args;
            ssmt_ds_fields            f = SSMT_DS_FIELDS(&a);
            ssmt_ds_set_dst(rng, &f, &dst, B, slots);
            snprintf(tag, sizeof tag, "siso dst[B%lld K%lld]", (long long)B, (long long)cfg.dk);
            if (check_call(tag, "mamba3_siso_step", ssmt_ds_run_siso, &a, cfg.dtype, 1, ctx_cuda))
                check_padding_zero(tag, "mamba3_siso_step", ssmt_ds_run_siso, &a,
                                   offsetof(ssm_mamba3_siso_step_args, out), &pr.args.state_batch_indices, NULL);
            ssmt_free(&dst);
            ssmt_mamba3_step_free(&pr);
        } else {
            ssmt_mimo_config cfg;
            ssmt_mimo_config_init(&cfg);
            cfg.batch = B, cfg.nheads = 2 + 2 * (k / 2), cfg.ngroups = 1 + k / 2, cfg.rank = 2, cfg.dstate = 16;
            cfg.headdim = 8 + 8 * (k / 2);
            ssmt_mimo_step_problem pr;
            if (ssmt_mimo_random_step(rng, &cfg, slots, 1, &pr) != 0) {
                TEST_CHECK(0, "could not build a mimo step problem");
                continue;
            }
            ssmt_ds_mimo_params = pr.params;
            ssm_mamba3_mimo_step_args a = pr.args;
            ssmt_ds_fields            f = SSMT_DS_FIELDS(&a);
            ssmt_ds_set_dst(rng, &f, &dst, B, slots);
            snprintf(tag, sizeof tag, "mimo dst[B%lld P%lld]", (long long)B, (long long)cfg.headdim);
            if (check_call(tag, "mamba3_mimo_step", ssmt_ds_run_mimo, &a, cfg.dtype, 0, ctx_cuda))
                check_padding_zero(tag, "mamba3_mimo_step", ssmt_ds_run_mimo, &a,
                                   offsetof(ssm_mamba3_mimo_step_args, out), &pr.args.state_batch_indices, NULL);
            ssmt_free(&dst);
            ssmt_mimo_step_free(&pr);
        }
    }
}

/* ---- vLLM's slot tables, every step ------------------------------------------------------ */

/* A speculative step's table (R × W, lens[b] ≤ W): row b reads tab[b, max(k_b − 1, 0)]
 * (k_b = acc[b]) and stores the state after its token j in tab[b, j]; a padding row (rd[b]
 * < 0) is −1 throughout; the other entries a row uses are distinct slots below `slots`, the
 * rest −1. */
static void make_table(ssmt_rng * rng, const int64_t * lens, const ssm_tensor * rd, int64_t R, int64_t W, int64_t slots,
                       ssmt_host * tab, ssmt_host * acc) {
    const int64_t st[2] = {R, W}, s1[1] = {R};
    *tab = ssmt_alloc(SSM_DTYPE_I64, 2, st), *acc = ssmt_alloc(SSM_DTYPE_I32, 1, s1);
    int64_t *perm = malloc((size_t)slots * sizeof(int64_t)), next = 0;
    TEST_CHECK(perm != NULL, "no memory for a permutation");
    if (perm == NULL) return;
    ssmt_ds_shuffle(rng, perm, slots);
    for (int64_t b = 0; b < R; ++b) {
        const int64_t k = ssmt_randint(rng, 0, W), col = k > 0 ? k - 1 : 0;
        const int     pad = ssmt_get(rd, b) < 0;
        ssmt_set(&acc->t, b, (double)k);
        for (int64_t j = 0; j < W; ++j)
            ssmt_set(&tab->t, b * W + j, !pad && (j < lens[b] || j == col) ? (double)perm[next++] : -1.0);
    }
    TEST_CHECK(next <= slots, "the table needs %lld slots of %lld", (long long)next, (long long)slots);
    free(perm);
}

/* The table as the read slots (with num_accepted_tokens) and as the token table, in place,
 * on each step: against the reference and the CPU, with the table on the host and then on
 * the device (read there). */
static void test_tables(ssmt_rng * rng) {
    const int64_t W = 4;
    for (int k = 0; k < 6; ++k) {
        const int64_t R = 4 + k % 3;
        int64_t       lens[16];
        for (int64_t b = 0; b < R; ++b) lens[b] = ssmt_randint(rng, 0, W);
        lens[R - 1] = 1 + ssmt_randint(rng, 0, W - 1); /* T ≥ 1 */
        const ssm_dtype dt = k % 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32, pdt = k % 3 == 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
        char            tag[160];
        ssmt_host       tab, acc;
        if (k < 2) { /* mamba2_step, a pool of T + R + 2 slots */
            ssmt_ds_m2 q;
            ssmt_ds_m2_make(rng, &q, R, lens, 1, 4, 8, 16, 2, dt, pdt, k % 2, 1);
            ssm_mamba2_params_init(&ssmt_ds_m2_params);
            ssmt_ds_m2_params.dt_softplus = 1;
            const int64_t slots = q.T + R + 2, sp[4] = {slots, 4, 8, 16}, si[4] = {q.T, 4, 8, 16};
            ssmt_host     pool = ssmt_alloc(pdt, 4, sp), inter = ssmt_alloc(pdt, 4, si),
                      out = ssmt_alloc(dt, 3, q.x.t.shape);
            ssmt_fill_normal(rng, &pool.t, 0, 1);
            make_table(rng, lens, &q.rd.t, R, W, slots, &tab, &acc);
            ssm_mamba2_step_args a = q.args;
            a.state = a.final_state = pool.t, a.out = out.t, a.intermediate_states = inter.t;
            a.state_batch_indices = tab.t, a.num_accepted_tokens = acc.t, a.dst_state_batch_indices = ssmt_absent();
            snprintf(tag, sizeof tag, "m2 table[R%lld T%lld %s pool %s]", (long long)R, (long long)q.T,
                     ssm_dtype_name(dt), ssm_dtype_name(pdt));
            check_call(tag, "mamba2_step", ssmt_ds_run_m2, &a, dt, 0, ctx_cuda);
            ssmt_free(&pool), ssmt_free(&inter), ssmt_free(&out);
            ssmt_ds_m2_free(&q);
        } else { /* the Mamba-3 steps: their pools have 2R + 2 + T slots */
            const ssmt_ds_layout * L = k < 4 ? &ssmt_ds_siso_layout : &ssmt_ds_mimo_layout;
            ssmt_ds_tokens         q;
            if (ssmt_ds_tokens_make(rng, &q, L, R, lens,
                                    L == &ssmt_ds_siso_layout ? ssmt_ds_siso_shapes[k % 3] : ssmt_ds_mimo_shapes[k % 3],
                                    dt) != 0) {
                TEST_CHECK(0, "could not build a %s tables problem", L->op);
                continue;
            }
            make_table(rng, lens, &q.rd.t, R, W, q.slots, &tab, &acc);
            ssmt_ds_args a = q.args;
            ssmt_host    pool[4], inter[4];
            for (int i = 0; i < 4; ++i) {
                const ssm_tensor * in = ssmt_ds_fld(&a, L->in[i]);
                pool[i] = ssmt_clone(in, pdt), inter[i] = ssmt_ds_inter_alloc(in, q.T, pdt);
                *ssmt_ds_fld(&a, L->in[i]) = *ssmt_ds_fld(&a, L->fin[i]) = pool[i].t;
                *ssmt_ds_fld(&a, L->inter[i]) = inter[i].t;
            }
            *ssmt_ds_fld(&a, L->idx) = tab.t, *ssmt_ds_fld(&a, L->acc) = acc.t;
            *ssmt_ds_fld(&a, L->dst) = ssmt_absent();
            snprintf(tag, sizeof tag, "%s table[R%lld T%lld %s pools %s]", L->op, (long long)R, (long long)q.T,
                     ssm_dtype_name(dt), ssm_dtype_name(pdt));
            check_call(tag, L->op, L->run, &a, dt, L == &ssmt_ds_siso_layout, ctx_cuda);
            for (int i = 0; i < 4; ++i) ssmt_free(&pool[i]), ssmt_free(&inter[i]);
            ssmt_ds_tokens_free(&q);
        }
        ssmt_free(&tab), ssmt_free(&acc);
    }
}

int main(void) {
    if (!ssmt_cuda_present("test_cuda_decode_slots")) return 77;
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261202u);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);
    ctx_cpu = ssmt_make_ctx(SSM_BACKEND_CPU, 2, SSM_ISA_AUTO);
    ctx_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 0, SSM_ISA_AUTO);
    ctx_cuda_generic = ssmt_make_ctx(SSM_BACKEND_CUDA, 0, SSM_ISA_AUTO);
    TEST_CHECK(ctx_ref && ctx_cpu && ctx_cuda && ctx_cuda_generic, "context creation failed");
    if (ssmt_failures) TEST_EXIT();
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda_generic, "mamba2_step", "generic"), SSM_STATUS_OK);
    test_m2_tokens(&rng);
    test_m2_rules(&rng);
    test_m3_tokens(&rng, &ssmt_ds_siso_layout);
    test_m3_tokens(&rng, &ssmt_ds_mimo_layout);
    test_m3_dst(&rng);
    test_tables(&rng);
    /* the slot-table loops of test_decode_slots, every run on the device (host indices: the
     * rules they check are host rules) */
    ssmt_ds_m2_tables(&rng, ctx_cuda, SSM_DTYPE_F32);
    ssmt_ds_m2_tables(&rng, ctx_cuda, SSM_DTYPE_BF16);
    ssmt_ds_m3_tables(&rng, &ssmt_ds_siso_layout, ctx_cuda, SSM_DTYPE_F32);
    ssmt_ds_m3_tables(&rng, &ssmt_ds_siso_layout, ctx_cuda, SSM_DTYPE_BF16);
    ssmt_ds_m3_tables(&rng, &ssmt_ds_mimo_layout, ctx_cuda, SSM_DTYPE_F32);
    ssmt_ds_m3_tables(&rng, &ssmt_ds_mimo_layout, ctx_cuda, SSM_DTYPE_BF16);
    ssm_context_free(ctx_ref), ssm_context_free(ctx_cpu), ssm_context_free(ctx_cuda);
    ssm_context_free(ctx_cuda_generic);
    TEST_EXIT();
}
