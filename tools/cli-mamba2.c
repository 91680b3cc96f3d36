/*
 * cli-mamba2.c — the Mamba-2 (SSD) entries of the CLI operator table (spec mamba2_ssd.md).
 *
 * Inputs are drawn like a trained Mamba-2 layer's (spec §2): x, B, C, z, D and initial
 * states N(0,1); A = −exp(U(log 1, log 16)); dt such that the processed dt
 * softplus(dt + dt_bias) lies in [1e-3, 1e-1] log-uniformly. Activations are rounded to the
 * compute dtype and stored in it; A, D, dt_bias and initial states are fp32. The inputs of
 * the middle operators (chunk_state, state_passing, chunk_scan) are the fp32 intermediates
 * the chain really produces, computed with the reference backend from such raw inputs.
 *
 * Cost models are the spec's §5.1 formulas (B = batch, X = B·NC·H·P·N); states that ssmops
 * materialises in fp32 count 4 bytes (e_s = 4).
 */
#define _XOPEN_SOURCE 700

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ---- dimensions and params ------------------------------------------------------------- */

typedef struct m2dims {
    int64_t B, S, H, P, N, G, Q, NC;
} m2dims;



static m2dims dims_of(const cli_problem * pb) {
    m2dims d = {cli_shape_or(pb, "B", 1), cli_shape_or(pb, "S", 1),     cli_shape_or(pb, "H", 1),
                cli_shape_or(pb, "P", 1), cli_shape_or(pb, "N", 1),     cli_shape_or(pb, "G", 1),
                cli_shape_or(pb, "chunk", 256), 0};
    d.NC = d.Q > 0 ? (d.S + d.Q - 1) / d.Q : 0;
    return d;
}

static int is_cann(const cli_problem * pb) {
    return cli_has_param(pb, "layout") && strcmp(cli_param_word(pb, "layout"), "cann") == 0;
}

static ssm_mamba2_params params_of(const cli_problem * pb) {
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    p.chunk_size = dims_of(pb).Q;
    if (cli_has_param(pb, "dt_softplus")) p.dt_softplus = (int32_t)cli_param_int(pb, "dt_softplus");
    if (cli_has_param(pb, "dt_limit")) {
        double lo, hi;
        cli_param_range(pb, "dt_limit", &lo, &hi);
        p.dt_limit_lo = lo;
        p.dt_limit_hi = hi;
    }
    return p;
}

/* ---- keys ---------------------------------------------------------------------------------- */

#define K_B     CLI_KEY_INT("B", "2", "batch")
#define K_S     CLI_KEY_INT("S", "300", "sequence length (tokens per batch row)")
#define K_H     CLI_KEY_INT("H", "8", "heads")
#define K_P     CLI_KEY_INT("P", "64", "head dimension")
#define K_N     CLI_KEY_INT("N", "64", "state size")
#define K_G     CLI_KEY_INT("G", "2", "groups sharing B and C (H % G == 0)")
#define K_CHUNK CLI_KEY_INT("chunk", "64", "chunk size Q")

#define P_HAS_INIT    CLI_KEY_INT("has_init", "1", "initial states input")
#define P_HAS_FINAL   CLI_KEY_INT("has_final", "1", "final states output")
#define P_SEQ_IDX     CLI_KEY_INT("seq_idx", "0", "seq_idx with this many sequences per row (0 = off)")
#define P_LAYOUT      {"layout", CLI_KEY_WORD, "std", "std, or cann: x/b [B,NC,L,.,.], dt/da_cumsum [B,NC,L,H], states [B,NC,H,N,P]", "std|cann"}

/* ---- random raw inputs ------------------------------------------------------------------------ */

enum {
    RAW_X       = 1 << 0,
    RAW_DT      = 1 << 1,
    RAW_A       = 1 << 2,
    RAW_B       = 1 << 3,
    RAW_C       = 1 << 4,
    RAW_D       = 1 << 5,
    RAW_Z       = 1 << 6,
    RAW_DT_BIAS = 1 << 7,
    RAW_INIT    = 1 << 8,
    RAW_SEQ_IDX = 1 << 9,
    RAW_CU      = 1 << 10
};

typedef struct m2raw {
    cli_buf x, dt, a, b, c, d, z, dt_bias, init, seq_idx, cu;
} m2raw;

static void raw_free(m2raw * r) {
    cli_buf * all[] = {&r->x, &r->dt, &r->a, &r->b, &r->c, &r->d, &r->z, &r->dt_bias, &r->init, &r->seq_idx, &r->cu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) cli_buf_free(all[i]);
}

/* Hands a buffer over to an argument of the problem. */
static void give(cli_problem * pb, const char * name, cli_buf * from) {
    cli_buf * to = cli_arg_buf(pb, name);
    cli_buf_free(to);
    *to = *from;
    memset(from, 0, sizeof *from);
}

static void fill_normal(cli_buf * buf, cli_rng * rng) {
    const int64_t n = cli_numel(buf->mem_ndim, buf->mem_shape);
    for (int64_t k = 0; k < n; ++k) cli_set(&buf->view, k, cli_rng_normal(rng));
}

static double log_uniform(cli_rng * rng, double lo, double hi) {
    return exp(log(lo) + (log(hi) - log(lo)) * cli_rng_uniform(rng));
}

static double inv_softplus(double y) {
    return log(expm1(y));
}

/* seq_idx (B,S): `count` sequences per row, ids 0..count−1, boundaries at random tokens;
 * row 0 gets a boundary exactly on the first chunk boundary when it can (spec T-cases). */
static void fill_seq_idx(cli_buf * buf, const m2dims * d, int64_t count, cli_rng * rng) {
    int32_t * ids = (int32_t *)buf->mem;
    for (int64_t b = 0; b < d->B; ++b) {
        int32_t * row = ids + b * d->S;
        memset(row, 0, (size_t)d->S * sizeof *row);
        int64_t placed = 0;
        if (b == 0 && count > 1 && d->Q < d->S) {
            row[d->Q] = 1; /* marks a start */
            placed    = 1;
        }
        while (placed < count - 1) {
            const int64_t t = 1 + (int64_t)(cli_rng_uniform(rng) * (double)(d->S - 1));
            if (t < d->S && !row[t]) {
                row[t] = 1;
                ++placed;
            }
        }
        int32_t id = 0;
        for (int64_t t = 0; t < d->S; ++t) {
            id += row[t];
            row[t] = id;
        }
    }
}

/* cu_seqlens (nseq+1): random cuts in [0, S], empty sequences allowed. */
static void fill_cu_seqlens(cli_buf * buf, const m2dims * d, int64_t nseq, cli_rng * rng) {
    int32_t * cu = (int32_t *)buf->mem;
    cu[0]        = 0;
    cu[nseq]     = (int32_t)d->S;
    for (int64_t s = 1; s < nseq; ++s) cu[s] = (int32_t)(cli_rng_uniform(rng) * (double)(d->S + 1));
    for (int64_t i = 1; i < nseq; ++i) /* insertion sort of the inner cuts */
        for (int64_t j = i; j > 1 && cu[j - 1] > cu[j]; --j) {
            const int32_t t = cu[j];
            cu[j]           = cu[j - 1];
            cu[j - 1]       = t;
        }
}

static int raw_alloc(const cli_problem * pb, cli_buf * buf, ssm_dtype dtype, int32_t ndim, const int64_t * shape,
                     char * err, size_t errlen) {
    if (cli_buf_alloc(buf, dtype, ndim, shape) == 0) return 0;
    snprintf(err, errlen, "%s: out of memory for the inputs", pb->op->name);
    return -1;
}

/* Draws the raw inputs named in `which` (the ones the op's params switch on). */
static int draw_raw(const cli_problem * pb, unsigned which, uint64_t seed, m2raw * r, char * err, size_t errlen) {
    const m2dims    d        = dims_of(pb);
    const ssm_dtype act      = pb->dtype;
    const int       softplus = (int)cli_param_or(pb, "dt_softplus", 1);
    const int64_t   nseq     = cli_param_or(pb, "nseq", 0);
    const int64_t   nseq_idx = cli_param_or(pb, "seq_idx", 0);
    cli_rng         rng;
    cli_rng_seed(&rng, seed);
    memset(r, 0, sizeof *r);

    const int64_t bshp[4]  = {d.B, d.S, d.H, d.P};
    const int64_t gshp[4]  = {d.B, d.S, d.G, d.N};
    const int64_t dtshp[3] = {d.B, d.S, d.H};
    const int64_t hshp[2]  = {d.H, d.P};
    const int64_t ishp[4]  = {nseq > 0 ? nseq : d.B, d.H, d.P, d.N};
    const int64_t sshp[2]  = {d.B, d.S};
    const int64_t cshp[1]  = {nseq + 1};

    if (which & RAW_X) {
        if (raw_alloc(pb, &r->x, act, 4, bshp, err, errlen)) return -1;
        fill_normal(&r->x, &rng);
    }
    if (which & RAW_Z) {
        if (raw_alloc(pb, &r->z, act, 4, bshp, err, errlen)) return -1;
        fill_normal(&r->z, &rng);
    }
    if (which & RAW_B) {
        if (raw_alloc(pb, &r->b, act, 4, gshp, err, errlen)) return -1;
        fill_normal(&r->b, &rng);
    }
    if (which & RAW_C) {
        if (raw_alloc(pb, &r->c, act, 4, gshp, err, errlen)) return -1;
        fill_normal(&r->c, &rng);
    }
    if (which & RAW_A) {
        if (raw_alloc(pb, &r->a, SSM_DTYPE_F32, 1, hshp, err, errlen)) return -1;
        for (int64_t h = 0; h < d.H; ++h) cli_set(&r->a.view, h, -log_uniform(&rng, 1.0, 16.0));
    }
    if (which & RAW_D) {
        const int two_d = cli_param_or(pb, "has_d", 1) == 2;
        if (raw_alloc(pb, &r->d, SSM_DTYPE_F32, two_d ? 2 : 1, hshp, err, errlen)) return -1;
        fill_normal(&r->d, &rng);
    }
    if (which & RAW_INIT) {
        if (raw_alloc(pb, &r->init, SSM_DTYPE_F32, 4, ishp, err, errlen)) return -1;
        fill_normal(&r->init, &rng);
    }
    /* dt: pick the processed value first (log-uniform in [1e-3, 1e-1]) and invert the
     * processing, so softplus(dt + dt_bias) lands where trained models keep it. */
    double * bias = calloc((size_t)d.H, sizeof *bias);
    if (!bias) return -1;
    if (which & RAW_DT_BIAS) {
        if (raw_alloc(pb, &r->dt_bias, SSM_DTYPE_F32, 1, hshp, err, errlen)) {
            free(bias);
            return -1;
        }
        for (int64_t h = 0; h < d.H; ++h) {
            const double target = log_uniform(&rng, 1e-3, 1e-1);
            bias[h]             = (float)(softplus ? inv_softplus(target) : 0.5 * target);
            cli_set(&r->dt_bias.view, h, bias[h]);
        }
    }
    if (which & RAW_DT) {
        if (raw_alloc(pb, &r->dt, act, 3, dtshp, err, errlen)) {
            free(bias);
            return -1;
        }
        for (int64_t k = 0; k < d.B * d.S; ++k)
            for (int64_t h = 0; h < d.H; ++h) {
                const double target = log_uniform(&rng, 1e-3, 1e-1);
                const double pre    = softplus ? inv_softplus(target) : target;
                cli_set(&r->dt.view, k * d.H + h, pre - bias[h]);
            }
    }
    free(bias);
    if ((which & RAW_SEQ_IDX) && nseq_idx > 0) {
        if (raw_alloc(pb, &r->seq_idx, SSM_DTYPE_I32, 2, sshp, err, errlen)) return -1;
        fill_seq_idx(&r->seq_idx, &d, nseq_idx, &rng);
    }
    if ((which & RAW_CU) && nseq > 0) {
        if (raw_alloc(pb, &r->cu, SSM_DTYPE_I32, 1, cshp, err, errlen)) return -1;
        fill_cu_seqlens(&r->cu, &d, nseq, &rng);
    }
    return 0;
}

/* draw_raw, and on failure the inputs drawn so far freed (r holds none). */
static int gen_raw(const cli_problem * pb, unsigned which, uint64_t seed, m2raw * r, char * err, size_t errlen) {
    if (draw_raw(pb, which, seed, r, err, errlen) == 0) return 0;
    raw_free(r);
    return -1;
}

/* ---- intermediates with the reference backend (fp32, as upstream materialises them) ------------ */

static int ref_failed(ssm_context * ctx, ssm_status st, const char * what, char * err, size_t errlen) {
    snprintf(err, errlen, "making inputs: reference %s failed: %s: %s", what, ssm_status_string(st),
             ssm_context_last_error(ctx));
    return -1;
}

/* A zeroed fp32 buffer for an intermediate; −1 with a message. */
static int alloc_intermediate(cli_buf * buf, int32_t ndim, const int64_t * shape, char * err, size_t errlen) {
    if (cli_buf_alloc(buf, SSM_DTYPE_F32, ndim, shape) == 0) return 0;
    snprintf(err, errlen, "out of memory");
    return -1;
}

/* dt_out, da_cumsum (B,H,NC,Q) fp32 from raw dt, A, dt_bias. */
static int ref_cumsum(ssm_context * ctx, const cli_problem * pb, const m2raw * r, cli_buf * dt_out, cli_buf * dacs,
                      char * err, size_t errlen) {
    const m2dims      d = dims_of(pb);
    const int64_t     shp[4] = {d.B, d.H, d.NC, d.Q};
    ssm_mamba2_params p      = params_of(pb);
    p.dt_softplus            = (int32_t)cli_param_or(pb, "dt_softplus", 1);
    if (alloc_intermediate(dt_out, 4, shp, err, errlen) || alloc_intermediate(dacs, 4, shp, err, errlen)) return -1;
    ssm_mamba2_chunk_cumsum_args a;
    memset(&a, 0, sizeof a);
    a.dt        = r->dt.view;
    a.a         = r->a.view;
    a.dt_bias   = r->dt_bias.mem ? r->dt_bias.view : a.dt_bias;
    a.dt_out    = dt_out->view;
    a.da_cumsum = dacs->view;
    const ssm_status st = ssm_mamba2_chunk_cumsum(ctx, &p, &a);
    return st == SSM_STATUS_OK ? 0 : ref_failed(ctx, st, "mamba2_chunk_cumsum", err, errlen);
}

/* Chunk-local states (B,NC,H,P,N) fp32. */
static int ref_chunk_state(ssm_context * ctx, const cli_problem * pb, const m2raw * r, const cli_buf * dt_out,
                           const cli_buf * dacs, cli_buf * states, char * err, size_t errlen) {
    const m2dims      d      = dims_of(pb);
    const int64_t     shp[5] = {d.B, d.NC, d.H, d.P, d.N};
    ssm_mamba2_params p      = params_of(pb);
    if (alloc_intermediate(states, 5, shp, err, errlen)) return -1;
    ssm_mamba2_chunk_state_args a;
    memset(&a, 0, sizeof a);
    a.b         = r->b.view;
    a.x         = r->x.view;
    a.dt        = dt_out->view;
    a.da_cumsum = dacs->view;
    if (r->seq_idx.mem) a.seq_idx = r->seq_idx.view;
    a.states            = states->view;
    const ssm_status st = ssm_mamba2_chunk_state(ctx, &p, &a);
    return st == SSM_STATUS_OK ? 0 : ref_failed(ctx, st, "mamba2_chunk_state", err, errlen);
}

/* da_chunk_cumsum (B,H,NC) = da_cumsum[..., Q−1], as a contiguous fp32 copy. */
static int chunk_totals(const cli_buf * dacs, cli_buf * out) {
    const ssm_tensor * t = &dacs->view;
    ssm_tensor         last;
    memset(&last, 0, sizeof last);
    last.data  = (float *)t->data + (t->shape[3] - 1);
    last.dtype = SSM_DTYPE_F32;
    last.ndim  = 3;
    for (int i = 0; i < 3; ++i) {
        last.shape[i]   = t->shape[i];
        last.strides[i] = t->strides[i];
    }
    return cli_buf_clone(out, &last, SSM_DTYPE_F32);
}

/* states_in (B,NC,H,P,N) fp32 from chunk-local states, with initial states and seq_idx. */
static int ref_state_passing(ssm_context * ctx, const cli_problem * pb, const m2raw * r, const cli_buf * states,
                             const cli_buf * totals, cli_buf * states_in, char * err, size_t errlen) {
    const m2dims      d      = dims_of(pb);
    const int64_t     shp[5] = {d.B, d.NC, d.H, d.P, d.N};
    ssm_mamba2_params p      = params_of(pb);
    if (alloc_intermediate(states_in, 5, shp, err, errlen)) return -1;
    ssm_mamba2_state_passing_args a;
    memset(&a, 0, sizeof a);
    a.states          = states->view;
    a.da_chunk_cumsum = totals->view;
    if (r->init.mem) a.initial_states = r->init.view;
    if (r->seq_idx.mem) a.seq_idx = r->seq_idx.view;
    a.states_in         = states_in->view;
    const ssm_status st = ssm_mamba2_state_passing(ctx, &p, &a);
    return st == SSM_STATUS_OK ? 0 : ref_failed(ctx, st, "mamba2_state_passing", err, errlen);
}

static int ref_bmm(ssm_context * ctx, const cli_problem * pb, const m2raw * r, cli_buf * cb, char * err,
                   size_t errlen) {
    const m2dims      d      = dims_of(pb);
    const int64_t     shp[5] = {d.B, d.NC, d.G, d.Q, d.Q};
    ssm_mamba2_params p      = params_of(pb);
    if (alloc_intermediate(cb, 5, shp, err, errlen)) return -1;
    ssm_mamba2_bmm_args a;
    memset(&a, 0, sizeof a);
    a.c = r->c.view;
    a.b = r->b.view;
    if (r->seq_idx.mem) a.seq_idx = r->seq_idx.view;
    a.cb                = cb->view;
    const ssm_status st = ssm_mamba2_bmm(ctx, &p, &a);
    return st == SSM_STATUS_OK ? 0 : ref_failed(ctx, st, "mamba2_bmm", err, errlen);
}

static int ref_context(ssm_context ** ctx, char * err, size_t errlen) {
    const ssm_status st = cli_context_create(SSM_BACKEND_REF, 1, ctx);
    if (st == SSM_STATUS_OK) return 0;
    snprintf(err, errlen, "cannot create a reference context: %s: %s", ssm_status_string(st),
             ssm_context_last_error(NULL));
    return -1;
}

/* What the generators of the middle operators hold: the raw inputs, a reference context and
 * the fp32 intermediates of the chain computed from them (each absent until computed). */
typedef struct m2chain {
    m2raw         r;
    ssm_context * ctx;
    cli_buf       dt_out, dacs, states, totals, states_in, cb;
} m2chain;

/* Draws the raw inputs named in `which` and creates the reference context; chain_end frees c
 * whether this fails or not. */
static int chain_begin(m2chain * c, const cli_problem * pb, unsigned which, uint64_t seed, char * err, size_t errlen) {
    memset(c, 0, sizeof *c);
    if (gen_raw(pb, which, seed, &c->r, err, errlen) != 0) return -1;
    return ref_context(&c->ctx, err, errlen);
}

/* Frees what c still holds (what was not given to the problem); returns rc. */
static int chain_end(m2chain * c, int rc) {
    ssm_context_free(c->ctx);
    cli_buf * all[] = {&c->dt_out, &c->dacs, &c->states, &c->totals, &c->states_in, &c->cb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) cli_buf_free(all[i]);
    raw_free(&c->r);
    return rc;
}

/* dt_out and da_cumsum, the chunk-local states and their totals da_chunk_cumsum. */
static int ref_chunk_states(m2chain * c, const cli_problem * pb, char * err, size_t errlen) {
    if (ref_cumsum(c->ctx, pb, &c->r, &c->dt_out, &c->dacs, err, errlen) ||
        ref_chunk_state(c->ctx, pb, &c->r, &c->dt_out, &c->dacs, &c->states, err, errlen))
        return -1;
    if (chunk_totals(&c->dacs, &c->totals) == 0) return 0;
    snprintf(err, errlen, "out of memory");
    return -1;
}

/* ---- shared validation (usage errors) ------------------------------------------------------------ */

static int m2_validate(const cli_problem * pb, char * err, size_t errlen) {
    static const char * const bools[] = {"has_z", "has_dt_bias", "dt_softplus", "has_init", "has_final", NULL};
    if (cli_check_shape_positive(pb, err, errlen) || cli_check_bools(pb, bools, err, errlen)) return -1;
    const m2dims d = dims_of(pb);
    if (cli_param_or(pb, "has_d", 0) < 0 || cli_param_or(pb, "has_d", 0) > 2) {
        snprintf(err, errlen, "%s: has_d=%lld must be 0, 1 (D of shape H) or 2 (D of shape H,P)", pb->op->name,
                 (long long)cli_param_or(pb, "has_d", 0));
        return -1;
    }
    const int64_t nseq_idx = cli_param_or(pb, "seq_idx", 0), nseq = cli_param_or(pb, "nseq", 0);
    if (nseq_idx < 0 || nseq_idx > d.S) {
        snprintf(err, errlen, "%s: seq_idx=%lld sequences per row must be in [0, S=%lld]", pb->op->name,
                 (long long)nseq_idx, (long long)d.S);
        return -1;
    }
    if (nseq < 0 || nseq > 1000000) {
        snprintf(err, errlen, "%s: nseq=%lld must be in [0, 1000000]", pb->op->name, (long long)nseq);
        return -1;
    }
    if (nseq > 0 && (d.B != 1 || nseq_idx > 0)) {
        snprintf(err, errlen, "%s: nseq=%lld (cu_seqlens) needs B=1 and seq_idx=0", pb->op->name, (long long)nseq);
        return -1;
    }
    if (is_cann(pb) && nseq_idx > 0) {
        snprintf(err, errlen, "%s: layout=cann has no seq_idx", pb->op->name);
        return -1;
    }
    return 0;
}




/* `run`: the shape keys and presence params from the inputs; the chunk: given, else the Q of
 * a (…, NC, Q) input, else 256. */
int cli_mamba2_bind(cli_problem * pb, char * err, size_t errlen) {
    if (!pb->shape[cli_key_index(pb->op->shape_keys, "chunk")].given) cli_set_shape(pb, "chunk", 256);
    if (cli_bind_shapes(pb, NULL, "batch=B,Q=chunk", err, errlen)) return -1;
    cli_bind_flags(pb);
    return 0;
}

/* An alloc_outputs' failure: the message, −1. */
static int outputs_oom(char * err, size_t errlen) {
    snprintf(err, errlen, "out of memory for the outputs");
    return -1;
}

static double e_act(const cli_problem * pb) {
    return (double)ssm_dtype_size(pb->dtype);
}

/* ======================================================================================
 * mamba2_chunk_cumsum (spec §2.1)
 * ====================================================================================== */

static const cli_key cumsum_shape[] = {K_B, K_S, K_H, K_CHUNK, CLI_KEY_END};
static const cli_key cumsum_param[] = {CLI_M2_KEY_HAS_DT_BIAS, CLI_M2_KEY_SOFTPLUS, CLI_M2_KEY_DT_LIMIT, CLI_KEY_END};
static const char * const cumsum_cases[] = {
    "B=1,S=1,H=1,chunk=1;", "B=2,S=75,H=4,chunk=32;", "B=1,S=64,H=3,chunk=16;dt_limit=0.01:0.05",
    "B=2,S=40,H=2,chunk=16;has_dt_bias=0,dt_softplus=0", "B=1,S=1000,H=5,chunk=256;has_dt_bias=0", NULL,
};

static int cumsum_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    m2raw    r;
    unsigned which = RAW_DT | RAW_A | (cli_param_int(pb, "has_dt_bias") ? RAW_DT_BIAS : 0);
    if (gen_raw(pb, which, seed, &r, err, errlen) != 0) return -1;
    give(pb, "dt", &r.dt);
    give(pb, "a", &r.a);
    give(pb, "dt_bias", &r.dt_bias);
    raw_free(&r);
    return 0;
}


static int cumsum_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const m2dims  d      = dims_of(pb);
    const int64_t shp[4] = {d.B, d.H, d.NC, d.Q};
    if (cli_alloc_arg(pb, "dt_out", f64, 4, shp) || cli_alloc_arg(pb, "da_cumsum", f64, 4, shp))
        return outputs_oom(err, errlen);
    return 0;
}

CLI_DEFINE_CALL(mamba2_chunk_cumsum, ssm_mamba2_params, params_of)

static double cumsum_flops(const cli_problem * pb) {
    const m2dims d = dims_of(pb);
    return 4.0 * (double)(d.B * d.S * d.H);
}

static double cumsum_bytes(const cli_problem * pb) {
    const m2dims d = dims_of(pb);
    return (e_act(pb) + 8.0) * (double)(d.B * d.S * d.H);
}

CLI_OP(mamba2_chunk_cumsum, "dt bias, softplus, clamp and the in-chunk cumsum of dt*A (docs/ops/mamba2.md)", cumsum_shape,
       cumsum_param, CLI_BENCH("B=1,S=2048,H=48,chunk=256", NULL, NULL), cumsum_cases,
       CLI_FNS(m2_validate, cumsum_generate, cli_mamba2_bind, cumsum_alloc), NULL, cumsum_flops, cumsum_bytes);

/* ======================================================================================
 * mamba2_chunk_state (spec §2.2, CANN layout §0.2)
 * ====================================================================================== */

static const cli_key cstate_shape[] = {K_B, K_S, K_H, K_P, K_N, K_G, K_CHUNK, CLI_KEY_END};
static const cli_key cstate_param[] = {P_SEQ_IDX, P_LAYOUT, CLI_KEY_END};
static const char * const cstate_cases[] = {
    "B=2,S=70,H=4,P=16,N=32,G=2,chunk=32;", "B=1,S=64,H=4,P=16,N=64,G=1,chunk=16;",
    "B=1,S=96,H=4,P=8,N=32,G=4,chunk=32;", "B=2,S=50,H=4,P=8,N=16,G=2,chunk=16;seq_idx=3",
    "B=1,S=88,H=4,P=16,N=32,G=2,chunk=32;layout=cann", "B=2,S=64,H=4,P=8,N=16,G=2,chunk=16;layout=cann",
    "B=1,S=37,H=3,P=5,N=7,G=1,chunk=8;", NULL,
};

/* CANN memory for a (B, S, K, M) activation: [B, NC, Q, K, M] zero-padded to NC·Q tokens.
 * The operator sees it as (B, NC·Q, K, M): the same bytes (spec §0.2). */
static int cann_activation(cli_buf * buf, const m2dims * d) {
    const ssm_tensor * src = &buf->view;
    const int64_t      K = src->shape[2], M = src->shape[3];
    const int64_t      mem[5] = {d->B, d->NC, d->Q, K, M};
    cli_buf            out;
    memset(&out, 0, sizeof out);
    if (cli_buf_alloc(&out, (ssm_dtype)src->dtype, 5, mem)) return -1;
    const int64_t prefix_shape[4]   = {d->B, d->S, K, M};
    const int64_t prefix_strides[4] = {d->NC * d->Q * K * M, K * M, M, 1};
    cli_buf_set_view(&out, 4, prefix_shape, prefix_strides);
    cli_copy(&out.view, src);
    const int64_t full_shape[4] = {d->B, d->NC * d->Q, K, M};
    cli_buf_set_view(&out, 4, full_shape, prefix_strides);
    cli_buf_free(buf);
    *buf = out;
    return 0;
}

/* CANN view of a (B, H, NC, Q) tensor held as [B, NC, Q, H] memory. */
static void cann_time_major_view(cli_buf * buf, int64_t B, int64_t H, int64_t NC, int64_t Q) {
    const int64_t shape[4]   = {B, H, NC, Q};
    const int64_t strides[4] = {NC * Q * H, 1, Q * H, H};
    cli_buf_set_view(buf, 4, shape, strides);
}

static int cann_time_major(cli_buf * buf, const m2dims * d) {
    const int64_t mem[4] = {d->B, d->NC, d->Q, d->H};
    cli_buf       out;
    memset(&out, 0, sizeof out);
    if (cli_buf_alloc(&out, (ssm_dtype)buf->view.dtype, 4, mem)) return -1;
    cann_time_major_view(&out, d->B, d->H, d->NC, d->Q);
    cli_copy(&out.view, &buf->view);
    cli_buf_free(buf);
    *buf = out;
    return 0;
}

static int cstate_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    m2chain c;
    int     rc = -1;
    if (chain_begin(&c, pb, RAW_X | RAW_B | RAW_DT | RAW_A | RAW_DT_BIAS | RAW_SEQ_IDX, seed, err, errlen) == 0 &&
        ref_cumsum(c.ctx, pb, &c.r, &c.dt_out, &c.dacs, err, errlen) == 0) {
        rc = 0;
        if (is_cann(pb)) {
            /* CANN pads the sequence with zeros to NC·Q tokens; dt_out is 0 there already. */
            const m2dims d = dims_of(pb);
            if (cann_activation(&c.r.x, &d) || cann_activation(&c.r.b, &d) || cann_time_major(&c.dt_out, &d) ||
                cann_time_major(&c.dacs, &d)) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
            }
            cli_set_shape(pb, "S", d.NC * d.Q);
        }
        give(pb, "x", &c.r.x);
        give(pb, "b", &c.r.b);
        give(pb, "seq_idx", &c.r.seq_idx);
        give(pb, "dt", &c.dt_out);
        give(pb, "da_cumsum", &c.dacs);
    }
    return chain_end(&c, rc);
}

static int cstate_bind(cli_problem * pb, char * err, size_t errlen) {
    if (is_cann(pb)) {
        /* x [B,NC,L,H,P], b [B,NC,L,G,N], dt/da_cumsum [B,NC,L,H] (spec §0.2) */
        if (cli_need_ndim(pb, "x", 5, err, errlen) || cli_need_ndim(pb, "b", 5, err, errlen) ||
            cli_need_ndim(pb, "dt", 4, err, errlen) || cli_need_ndim(pb, "da_cumsum", 4, err, errlen))
            return -1;
        const char *  names[] = {"x", "b"};
        for (int i = 0; i < 2; ++i) {
            cli_buf *     buf      = cli_arg_buf(pb, names[i]);
            const int64_t K        = buf->mem_shape[3], M = buf->mem_shape[4];
            const int64_t shape[4] = {buf->mem_shape[0], buf->mem_shape[1] * buf->mem_shape[2], K, M};
            const int64_t strd[4]  = {shape[1] * K * M, K * M, M, 1};
            cli_buf_set_view(buf, 4, shape, strd);
        }
        const char * tm[] = {"dt", "da_cumsum"};
        for (int i = 0; i < 2; ++i) {
            cli_buf * buf = cli_arg_buf(pb, tm[i]);
            cann_time_major_view(buf, buf->mem_shape[0], buf->mem_shape[3], buf->mem_shape[1], buf->mem_shape[2]);
        }
    }
    return cli_mamba2_bind(pb, err, errlen);
}

static int cstate_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const m2dims d = dims_of(pb);
    if (is_cann(pb)) {
        /* states [B,NC,H,N,P] in memory, seen as (B,NC,H,P,N) */
        const int64_t mem[5] = {d.B, d.NC, d.H, d.N, d.P};
        if (cli_alloc_arg(pb, "states", f64, 5, mem)) return outputs_oom(err, errlen);
        const int64_t shape[5]   = {d.B, d.NC, d.H, d.P, d.N};
        const int64_t strides[5] = {d.NC * d.H * d.N * d.P, d.H * d.N * d.P, d.N * d.P, 1, d.P};
        cli_buf_set_view(cli_arg_buf(pb, "states"), 5, shape, strides);
        return 0;
    }
    const int64_t shp[5] = {d.B, d.NC, d.H, d.P, d.N};
    if (cli_alloc_arg(pb, "states", f64, 5, shp)) return outputs_oom(err, errlen);
    return 0;
}

CLI_DEFINE_CALL(mamba2_chunk_state, ssm_mamba2_params, params_of)

static double cstate_flops(const cli_problem * pb) {
    const m2dims d = dims_of(pb);
    return 2.0 * (double)(d.B * d.S * d.H) * (double)(d.P * d.N);
}

static double cstate_bytes(const cli_problem * pb) {
    const m2dims d = dims_of(pb);
    const double X = (double)(d.B * d.NC * d.H) * (double)(d.P * d.N);
    const double e = e_act(pb);
    return e * (double)(d.B * d.S * d.H * d.P) + e * (double)(d.B * d.S * d.G * d.N) + 8.0 * (double)(d.B * d.S * d.H) +
           4.0 * X;
}

/* the CANN seed test shape (NC = 4) */
CLI_OP(mamba2_chunk_state, "per-chunk local states; layout=cann for the CANN tensor order (docs/ops/mamba2.md)",
       cstate_shape, cstate_param, CLI_BENCH("B=1,S=1024,H=128,P=64,N=128,G=8,chunk=256", NULL, "f16"), cstate_cases,
       CLI_FNS(m2_validate, cstate_generate, cstate_bind, cstate_alloc), NULL, cstate_flops, cstate_bytes);

/* ======================================================================================
 * mamba2_state_passing (spec §2.3)
 * ====================================================================================== */

static const cli_key spass_shape[] = {K_B, K_S, K_H, K_P, K_N, K_G, K_CHUNK, CLI_KEY_END};
static const cli_key spass_param[] = {P_HAS_INIT, P_HAS_FINAL, P_SEQ_IDX, CLI_KEY_END};
static const char * const spass_cases[] = {
    "B=2,S=300,H=4,P=16,N=16,G=2,chunk=64;", "B=2,S=300,H=4,P=16,N=16,G=2,chunk=64;has_init=0,has_final=0",
    "B=2,S=70,H=4,P=8,N=16,G=2,chunk=16;seq_idx=3", "B=1,S=16,H=2,P=4,N=4,G=1,chunk=16;",
    "B=1,S=37,H=3,P=5,N=7,G=3,chunk=8;has_init=0", NULL,
};

static int spass_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    m2chain        c;
    int            rc = -1;
    const unsigned which = RAW_X | RAW_B | RAW_DT | RAW_A | RAW_DT_BIAS | RAW_SEQ_IDX |
                           (cli_param_int(pb, "has_init") ? RAW_INIT : 0);
    if (chain_begin(&c, pb, which, seed, err, errlen) == 0 && ref_chunk_states(&c, pb, err, errlen) == 0) {
        give(pb, "states", &c.states);
        give(pb, "da_chunk_cumsum", &c.totals);
        give(pb, "initial_states", &c.r.init);
        give(pb, "seq_idx", &c.r.seq_idx);
        rc = 0;
    }
    return chain_end(&c, rc);
}

static int spass_bind(cli_problem * pb, char * err, size_t errlen) {
    if (cli_mamba2_bind(pb, err, errlen)) return -1;
    /* S: from seq_idx when given, else NC·Q (only seq_idx needs the true length) */
    if (!cli_present(pb, "seq_idx")) cli_set_shape(pb, "S", cli_dim(pb, "states", 1) * cli_shape(pb, "chunk"));
    return 0;
}

static int spass_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const m2dims  d        = dims_of(pb);
    const int64_t NC       = cli_present(pb, "states") ? cli_dim(pb, "states", 1) : d.NC;
    const int64_t shp[5]   = {d.B, NC, d.H, d.P, d.N};
    const int64_t fshp[4]  = {d.B, d.H, d.P, d.N};
    if (cli_alloc_arg(pb, "states_in", f64, 5, shp) ||
        (cli_param_int(pb, "has_final") && cli_alloc_arg(pb, "final_states", f64, 4, fshp)))
        return outputs_oom(err, errlen);
    return 0;
}

CLI_DEFINE_CALL(mamba2_state_passing, ssm_mamba2_params, params_of)

static double spass_flops(const cli_problem * pb) {
    const m2dims d = dims_of(pb);
    return 2.0 * (double)(d.B * d.NC * d.H) * (double)(d.P * d.N);
}

static double spass_bytes(const cli_problem * pb) {
    const m2dims d = dims_of(pb);
    const double X = (double)(d.B * d.NC * d.H) * (double)(d.P * d.N);
    return 4.0 * X + e_act(pb) * X + 4.0 * (double)(d.B * d.H * d.P * d.N);
}

CLI_OP(mamba2_state_passing, "inter-chunk recurrence with initial/final states and seq_idx resets (docs/ops/mamba2.md)",
       spass_shape, spass_param, CLI_BENCH("B=1,S=2048,H=48,P=64,N=128,G=1,chunk=256", NULL, NULL), spass_cases,
       CLI_FNS(m2_validate, spass_generate, spass_bind, spass_alloc), NULL, spass_flops, spass_bytes);

/* ======================================================================================
 * mamba2_bmm (spec §2.4)
 * ====================================================================================== */

static const cli_key bmm_shape[] = {K_B, K_S, K_G, K_N, K_CHUNK, CLI_KEY_END};
static const cli_key bmm_param[] = {P_SEQ_IDX, CLI_KEY_END};
static const char * const bmm_cases[] = {
    "B=2,S=70,G=2,N=16,chunk=32;", "B=1,S=64,G=1,N=64,chunk=64;", "B=2,S=50,G=2,N=8,chunk=16;seq_idx=4",
    "B=1,S=37,G=3,N=5,chunk=8;", NULL,
};

static int bmm_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    m2raw r;
    if (gen_raw(pb, RAW_B | RAW_C | RAW_SEQ_IDX, seed, &r, err, errlen) != 0) return -1;
    give(pb, "c", &r.c);
    give(pb, "b", &r.b);
    give(pb, "seq_idx", &r.seq_idx);
    raw_free(&r);
    return 0;
}


static int bmm_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const m2dims  d      = dims_of(pb);
    const int64_t shp[5] = {d.B, d.NC, d.G, d.Q, d.Q};
    if (cli_alloc_arg(pb, "cb", f64, 5, shp)) return outputs_oom(err, errlen);
    return 0;
}

CLI_DEFINE_CALL(mamba2_bmm, ssm_mamba2_params, params_of)

static double bmm_flops(const cli_problem * pb) {
    const m2dims d = dims_of(pb);
    return 2.0 * (double)(d.B * d.S * d.Q) * (double)(d.G * d.N);
}

static double bmm_bytes(const cli_problem * pb) {
    const m2dims d = dims_of(pb);
    return 2.0 * e_act(pb) * (double)(d.B * d.S * d.G * d.N) + 4.0 * (double)(d.B * d.S * d.G * d.Q);
}

CLI_OP(mamba2_bmm, "CB = C*B^T per chunk and group (docs/ops/mamba2.md)", bmm_shape, bmm_param,
       CLI_BENCH("B=1,S=2048,G=1,N=128,chunk=256", NULL, NULL), bmm_cases,
       CLI_FNS(m2_validate, bmm_generate, cli_mamba2_bind, bmm_alloc), NULL, bmm_flops, bmm_bytes);

/* ======================================================================================
 * mamba2_chunk_scan (spec §2.5)
 * ====================================================================================== */

static const cli_key cscan_shape[] = {K_B, K_S, K_H, K_P, K_N, K_G, K_CHUNK, CLI_KEY_END};
static const cli_key cscan_param[] = {CLI_M2_KEY_HAS_D, CLI_M2_KEY_HAS_Z, P_HAS_INIT, P_SEQ_IDX, CLI_KEY_END};
static const char * const cscan_cases[] = {
    "B=2,S=70,H=4,P=16,N=16,G=2,chunk=32;", "B=2,S=70,H=4,P=16,N=16,G=2,chunk=32;has_d=2,has_z=0",
    "B=1,S=64,H=4,P=8,N=32,G=1,chunk=16;has_d=0,has_z=1,has_init=0", "B=2,S=50,H=4,P=8,N=16,G=4,chunk=16;seq_idx=3",
    "B=1,S=37,H=3,P=5,N=7,G=1,chunk=8;", NULL,
};

static int cscan_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    m2chain        c;
    int            rc = -1;
    const unsigned which = RAW_X | RAW_B | RAW_C | RAW_DT | RAW_A | RAW_DT_BIAS | RAW_SEQ_IDX |
                           (cli_param_int(pb, "has_init") ? RAW_INIT : 0) |
                           (cli_param_int(pb, "has_d") ? RAW_D : 0) | (cli_param_int(pb, "has_z") ? RAW_Z : 0);
    if (chain_begin(&c, pb, which, seed, err, errlen) == 0 && ref_chunk_states(&c, pb, err, errlen) == 0 &&
        ref_state_passing(c.ctx, pb, &c.r, &c.states, &c.totals, &c.states_in, err, errlen) == 0 &&
        ref_bmm(c.ctx, pb, &c.r, &c.cb, err, errlen) == 0) {
        give(pb, "cb", &c.cb);
        give(pb, "x", &c.r.x);
        give(pb, "dt", &c.dt_out);
        give(pb, "da_cumsum", &c.dacs);
        give(pb, "c", &c.r.c);
        give(pb, "states_in", &c.states_in);
        give(pb, "d", &c.r.d);
        give(pb, "z", &c.r.z);
        give(pb, "seq_idx", &c.r.seq_idx);
        rc = 0;
    }
    return chain_end(&c, rc);
}


static int cscan_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const m2dims  d      = dims_of(pb);
    const int64_t shp[4] = {d.B, d.S, d.H, d.P};
    if (cli_alloc_arg(pb, "out", f64, 4, shp) || (cli_present(pb, "z") && cli_alloc_arg(pb, "out_x", f64, 4, shp)))
        return outputs_oom(err, errlen);
    return 0;
}

CLI_DEFINE_CALL(mamba2_chunk_scan, ssm_mamba2_params, params_of)

static double cscan_flops(const cli_problem * pb) {
    const m2dims d = dims_of(pb);
    return 2.0 * (double)(d.B * d.S * d.H) * (double)(d.P * d.N) + 2.0 * (double)(d.B * d.S * d.Q) * (double)(d.H * d.P);
}

static double cscan_bytes(const cli_problem * pb) {
    const m2dims d    = dims_of(pb);
    const double e    = e_act(pb);
    const double X    = (double)(d.B * d.NC * d.H) * (double)(d.P * d.N);
    const double bshp = (double)(d.B * d.S * d.H * d.P);
    double       n    = 4.0 * (double)(d.B * d.S * d.G * d.Q) + 2.0 * e * bshp + e * (double)(d.B * d.S * d.G * d.N) +
                 4.0 * X + 8.0 * (double)(d.B * d.S * d.H);
    if (cli_param_int(pb, "has_z")) n += 2.0 * e * bshp;
    return n;
}

CLI_OP(mamba2_chunk_scan, "outputs from CB, the passed states, D and z (docs/ops/mamba2.md)", cscan_shape, cscan_param,
       CLI_BENCH("B=1,S=2048,H=48,P=64,N=128,G=1,chunk=256", "has_z=0", NULL), cscan_cases,
       CLI_FNS(m2_validate, cscan_generate, cli_mamba2_bind, cscan_alloc), NULL, cscan_flops, cscan_bytes);

/* ======================================================================================
 * mamba2_scan: the combined forward (spec §2.6, §2.8)
 * ====================================================================================== */

static const cli_key scan_shape[] = {K_B, K_S, K_H, K_P, K_N, K_G, K_CHUNK, CLI_KEY_END};
static const cli_key scan_param[] = {
    CLI_M2_KEY_HAS_D, CLI_M2_KEY_HAS_Z, CLI_M2_KEY_HAS_DT_BIAS, CLI_M2_KEY_SOFTPLUS, CLI_M2_KEY_DT_LIMIT, P_HAS_INIT,
    P_HAS_FINAL, P_SEQ_IDX, CLI_KEY_NSEQ, CLI_KEY_END,
};
static const char * const scan_cases[] = {
    "B=2,S=77,H=4,P=16,N=64,G=2,chunk=32;has_d=2,dt_limit=0:0.08", "B=2,S=80,H=4,P=16,N=16,G=1,chunk=32;",
    "B=1,S=96,H=4,P=8,N=32,G=4,chunk=32;has_d=2,has_z=0,dt_limit=0.01:0.05,has_init=0",
    "B=1,S=33,H=2,P=8,N=8,G=1,chunk=16;has_d=0,has_z=0,has_dt_bias=0,dt_softplus=0,has_init=0",
    "B=1,S=48,H=2,P=64,N=32,G=1,chunk=16;has_final=0", "B=2,S=70,H=4,P=16,N=16,G=2,chunk=16;seq_idx=3",
    "B=1,S=60,H=4,P=8,N=16,G=2,chunk=16;nseq=4", "B=1,S=60,H=4,P=8,N=16,G=2,chunk=16;nseq=7,has_init=0",
    "B=1,S=1,H=1,P=1,N=1,G=1,chunk=1;", "B=1,S=300,H=2,P=64,N=128,G=1,chunk=256;", NULL,
};

static int scan_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    m2raw          r;
    const unsigned which = RAW_X | RAW_DT | RAW_A | RAW_B | RAW_C | RAW_SEQ_IDX | RAW_CU |
                           (cli_param_int(pb, "has_d") ? RAW_D : 0) | (cli_param_int(pb, "has_z") ? RAW_Z : 0) |
                           (cli_param_int(pb, "has_dt_bias") ? RAW_DT_BIAS : 0) |
                           (cli_param_int(pb, "has_init") ? RAW_INIT : 0);
    if (gen_raw(pb, which, seed, &r, err, errlen) != 0) return -1;
    give(pb, "x", &r.x);
    give(pb, "dt", &r.dt);
    give(pb, "a", &r.a);
    give(pb, "b", &r.b);
    give(pb, "c", &r.c);
    give(pb, "d", &r.d);
    give(pb, "z", &r.z);
    give(pb, "dt_bias", &r.dt_bias);
    give(pb, "initial_states", &r.init);
    give(pb, "seq_idx", &r.seq_idx);
    give(pb, "cu_seqlens", &r.cu);
    raw_free(&r);
    return 0;
}


static int scan_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const m2dims  d       = dims_of(pb);
    const int64_t nseq    = cli_param_int(pb, "nseq");
    const int64_t shp[4]  = {d.B, d.S, d.H, d.P};
    const int64_t fshp[4] = {nseq > 0 ? nseq : d.B, d.H, d.P, d.N};
    if (cli_alloc_arg(pb, "out", f64, 4, shp) ||
        (cli_param_int(pb, "has_final") && cli_alloc_arg(pb, "final_states", f64, 4, fshp)))
        return outputs_oom(err, errlen);
    return 0;
}

static ssm_status mamba2_scan_call(ssm_context * ctx, const cli_problem * pb, void * ws, size_t wsz) {
    const ssm_mamba2_params p = params_of(pb);
    ssm_mamba2_scan_args    a;
    cli_args_struct(pb, &a);
    return ssm_mamba2_scan(ctx, &p, &a, ws, wsz);
}

static ssm_status scan_workspace(ssm_context * ctx, const cli_problem * pb, size_t * bytes) {
    const ssm_mamba2_params p = params_of(pb);
    ssm_mamba2_scan_args    a;
    cli_args_struct(pb, &a);
    return ssm_mamba2_scan_workspace_size(ctx, &p, &a, bytes);
}

/* The combined forward's chunk size is not semantic and backends tile it their own way
 * (the CPU runs 32-token chunks whatever chunk= says), so the spec §5.1 formula at the
 * user's chunk overstates the work (its full Q×Q diagonal blocks grow with Q). Count the
 * chunk-independent part every chunked algorithm must do — chunk states and off-diagonal
 * outputs, 4·B·S·H·P·N, plus the state passing 2·X — so GFLOP/s and peak_fraction are
 * lower bounds on the arithmetic actually sustained. */
static double scan_flops(const cli_problem * pb) {
    const m2dims d = dims_of(pb);
    const double X = (double)(d.B * d.NC * d.H) * (double)(d.P * d.N);
    return 4.0 * (double)(d.B * d.S * d.H) * (double)(d.P * d.N) + 2.0 * X;
}

static double scan_bytes(const cli_problem * pb) {
    const m2dims d    = dims_of(pb);
    const double e    = e_act(pb), e_dt = e, e_s = 4.0;
    const double X    = (double)(d.B * d.NC * d.H) * (double)(d.P * d.N);
    const double bshp = (double)(d.B * d.S * d.H * d.P);
    double       n    = (e_dt + 24.0) * (double)(d.B * d.S * d.H) + 3.0 * e * bshp + 4.0 * e * (double)(d.B * d.S * d.G * d.N) +
                 8.0 * (double)(d.B * d.S * d.G * d.Q) + (8.0 + 2.0 * e_s) * X + 4.0 * (double)(d.B * d.H * d.P * d.N);
    if (cli_param_int(pb, "has_z")) n += 2.0 * e * bshp;
    return n;
}

/* the benchmark shape of record */
CLI_OP(mamba2_scan, "the combined Mamba-2 forward: chunked scan with D, z, states, seq_idx, varlen (docs/ops/mamba2.md)",
       scan_shape, scan_param,
       CLI_BENCH("B=1,S=2048,H=48,P=64,N=128,G=1,chunk=256",
                 "has_d=1,has_z=0,has_dt_bias=1,dt_softplus=1,has_init=0,has_final=1", NULL),
       scan_cases, CLI_FNS(m2_validate, scan_generate, cli_mamba2_bind, scan_alloc), scan_workspace, scan_flops,
       scan_bytes);

/* ---- shared with cli-mamba2-train.c ---------------------------------------------------------- */

int cli_mamba2_validate(const cli_problem * pb, char * err, size_t errlen) {
    return m2_validate(pb, err, errlen);
}

int cli_mamba2_scan_inputs(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    return scan_generate(pb, seed, err, errlen);
}

ssm_mamba2_params cli_mamba2_params(const cli_problem * pb) {
    return params_of(pb);
}
