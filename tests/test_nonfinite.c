/*
 * test_nonfinite.c — non-finite inputs propagate the same way on every backend (the contract
 * of docs/ops/nonfinite.md).
 *
 * For mamba2_scan, mamba2_step, mamba3_siso, mamba3_siso_step and mamba3_mimo, on seeded
 * random finite inputs, one element of one input at a time is set to NaN, +Inf or −Inf: in
 * every per-token input at the first token, inside a chunk, at the last token of a chunk and in
 * a chunk tail (and, with varlen, at sequence starts and ends), in every other input at two
 * random elements. The non-finite mask of every output (one flag per element: NaN or ±Inf)
 * from the reference is the oracle:
 *  - the reference obeys the contract's causality: an input of token t leaves every output of
 *    an earlier token, of another batch row and of another sequence finite, and the final
 *    states of the other sequences; an initial state reaches only its own sequence; a decode
 *    row reaches only its own output row and its own slot;
 *  - the CPU backend gives the same masks: AVX2 (where the host has it) on one and two
 *    threads, the scalar ISA on two;
 *  - with a CUDA device the CUDA backend gives the same masks on device copies of every
 *    tensor, on these shapes and on shapes that select its tensor-core / wgmma kernels (bf16):
 *    its automatic choice, then every entry of the operator's variant table forced through
 *    the context (entries that do not cover a problem are skipped); without a device that
 *    part prints one skip line and the CPU part still runs and counts.
 * Exceptions: nf_exceptions[] would list (operator, input, backend) combinations whose masks
 * are known to differ, each with its reason (docs/ops/nonfinite.md), a listed mismatch printed,
 * not counted; it has no entries.
 * Seed: SSMOPS_TEST_SEED (default 20261216).
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/ssmi.h"
#include "testutil.h"

/* ---- problems ------------------------------------------------------------------------- */
enum { NF_IN, NF_OUT, NF_IDX };

/* One tensor of an operator's args struct. */
typedef struct nf_slot {
    const char * name;
    int          kind;  /* NF_IN, NF_OUT, NF_IDX (index tensors: never injected, kept on the host) */
    size_t       off;   /* offsetof(args struct, field)                                            */
    ssmt_host *  h;     /* the buffer behind the view                                              */
    int          tok;   /* dim of the view that indexes tokens, −1: none                            */
    int          row;   /* dim that indexes batch rows (state = 0) or sequences / slots (state = 1) */
    int          state; /* the row dim indexes sequences (chunked ops) or pool slots (decode)       */
} nf_slot;

#define NF_MAX_SLOTS 32
#define NF_MAX_TOKENS 8

typedef struct nf_problem {
    const char * op; /* operator name without the prefix ("mamba2_scan") */
    char         tag[96];
    void *       args; /* host args struct */
    size_t       args_size;
    ssm_status (*run)(ssm_context * ctx, const void * params, void * args);
    const void *       params;
    nf_slot            slot[NF_MAX_SLOTS];
    int                nslot;
    int64_t            tokens[NF_MAX_TOKENS]; /* token positions of the injections          */
    int                ntokens;
    int                step;    /* decode operator: one token per row          */
    const ssm_tensor * cu;      /* cu_seqlens view (varlen) or NULL             */
    const ssm_tensor * seq_idx; /* seq_idx view or NULL                         */
    const ssm_tensor * sbi;     /* state_batch_indices view (decode) or NULL    */
    int                cpu;     /* run the CPU backend                          */
} nf_problem;

static ssm_tensor * nf_view(void * args, const nf_slot * s) { return (ssm_tensor *)((char *)args + s->off); }

static void nf_add(nf_problem * p, const char * name, int kind, size_t off, ssmt_host * h, int tok, int row,
                   int state) {
    if (p->nslot >= NF_MAX_SLOTS) {
        TEST_CHECK(0, "%s: too many slots", p->tag);
        return;
    }
    nf_slot * s = &p->slot[p->nslot++];
    s->name = name, s->kind = kind, s->off = off, s->h = h, s->tok = tok, s->row = row, s->state = state;
}

#define NF_SLOT(P, T, FIELD, HOST, KIND, TOK, ROW, STATE) \
    nf_add(P, #FIELD, KIND, offsetof(T, FIELD), HOST, TOK, ROW, STATE)

/* The tensors every Mamba-3 operator here shares, from a problem M whose fields have the
 * same names: TOK is the token dim of the (B, S, ...) tensors and TOKS of the (B, H, S) ones
 * (−1 for the decode step: one token per row). */
#define NF_M3_SLOTS(P, T, M, TOK, TOKS)                                             \
    do {                                                                            \
        NF_SLOT(P, T, q, &(M).q, NF_IN, TOK, 0, 0);                                 \
        NF_SLOT(P, T, k, &(M).k, NF_IN, TOK, 0, 0);                                 \
        NF_SLOT(P, T, v, &(M).v, NF_IN, TOK, 0, 0);                                 \
        NF_SLOT(P, T, adt, &(M).adt, NF_IN, TOKS, 0, 0);                            \
        NF_SLOT(P, T, dt, &(M).dt, NF_IN, TOKS, 0, 0);                              \
        NF_SLOT(P, T, trap, &(M).trap, NF_IN, TOKS, 0, 0);                          \
        NF_SLOT(P, T, q_bias, &(M).q_bias, NF_IN, -1, -1, 0);                       \
        NF_SLOT(P, T, k_bias, &(M).k_bias, NF_IN, -1, -1, 0);                       \
        NF_SLOT(P, T, angles, &(M).angles, NF_IN, TOK, 0, 0);                       \
        NF_SLOT(P, T, d, &(M).d, NF_IN, -1, -1, 0);                                 \
        NF_SLOT(P, T, z, &(M).z, NF_IN, TOK, 0, 0);                                 \
        NF_SLOT(P, T, angle_state, &(M).angle_state, NF_IN, -1, 0, 1);              \
        NF_SLOT(P, T, ssm_state, &(M).ssm_state, NF_IN, -1, 0, 1);                  \
        NF_SLOT(P, T, k_state, &(M).k_state, NF_IN, -1, 0, 1);                      \
        NF_SLOT(P, T, v_state, &(M).v_state, NF_IN, -1, 0, 1);                      \
        NF_SLOT(P, T, out, &(M).out, NF_OUT, TOK, 0, 0);                            \
        NF_SLOT(P, T, final_angle_state, &(M).final_angle_state, NF_OUT, -1, 0, 1); \
        NF_SLOT(P, T, final_ssm_state, &(M).final_ssm_state, NF_OUT, -1, 0, 1);     \
        NF_SLOT(P, T, final_k_state, &(M).final_k_state, NF_OUT, -1, 0, 1);         \
        NF_SLOT(P, T, final_v_state, &(M).final_v_state, NF_OUT, -1, 0, 1);         \
    } while (0)

/* ---- backends ------------------------------------------------------------------------- */
typedef struct nf_backend {
    const char *  name;
    ssm_context * ctx;
} nf_backend;

static ssm_context *ctx_ref, *ctx_cuda;
static nf_backend   cpu_backends[5];
static int          ncpu;
static int          have_cuda;
static int64_t      n_injections, n_runs, n_exceptions;

/* (operator tag prefix, input, backend prefix) whose masks are known to differ from the
 * reference, with the reason; docs/ops/nonfinite.md lists the same. */
typedef struct nf_exception {
    const char * op;
    const char * input;
    const char * backend;
    const char * reason;
} nf_exception;

/* An exception only admits EXTRA non-finite elements (the backend's mask a superset of the
 * reference's): an element the reference makes non-finite and the backend leaves finite is a
 * failure under an exception too. */
static const nf_exception nf_exceptions[] = {
    {NULL, NULL, NULL, NULL},
};

static const nf_exception * nf_find_exception(const char * tag, const char * input, const char * backend) {
    for (const nf_exception * e = nf_exceptions; e->op != NULL; ++e)
        if (strncmp(tag, e->op, strlen(e->op)) == 0 && strcmp(input, e->input) == 0 &&
            strncmp(backend, e->backend, strlen(e->backend)) == 0)
            return e;
    return NULL;
}

/* ---- masks ---------------------------------------------------------------------------- */
/* 1 where the element is NaN or ±Inf, walking the view in row-major order (any strides). */
static void nf_mask(const ssm_tensor * t, unsigned char * m) {
    const int64_t n = ssmt_numel(t);
    int64_t       idx[SSM_MAX_DIMS] = {0};
    const size_t  es = ssm_dtype_size((ssm_dtype)t->dtype);
    for (int64_t i = 0; i < n; ++i) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; ++d) off += idx[d] * t->strides[d];
        const char * p = (const char *)t->data + off * (int64_t)es;
        int          bad;
        if (t->dtype == SSM_DTYPE_F32) {
            float v;
            memcpy(&v, p, sizeof v);
            bad = !isfinite(v);
        } else if (t->dtype == SSM_DTYPE_F64) {
            double v;
            memcpy(&v, p, sizeof v);
            bad = !isfinite(v);
        } else { /* f16: exponent 0x1f; bf16: exponent 0xff */
            uint16_t v;
            memcpy(&v, p, sizeof v);
            bad = t->dtype == SSM_DTYPE_F16 ? (v & 0x7c00u) == 0x7c00u : (v & 0x7f80u) == 0x7f80u;
        }
        m[i] = (unsigned char)bad;
        for (int d = t->ndim - 1; d >= 0; --d) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* Row-major multi-index of linear index lin. */
static void nf_unravel(const ssm_tensor * t, int64_t lin, int64_t * idx) {
    for (int d = t->ndim - 1; d >= 0; --d) {
        idx[d] = t->shape[d] > 0 ? lin % t->shape[d] : 0;
        lin = t->shape[d] > 0 ? lin / t->shape[d] : 0;
    }
}

static int64_t nf_ravel(const ssm_tensor * t, const int64_t * idx) {
    int64_t lin = 0;
    for (int d = 0; d < t->ndim; ++d) lin = lin * t->shape[d] + idx[d];
    return lin;
}

static void nf_index_str(const ssm_tensor * t, int64_t lin, char * buf, size_t n) {
    int64_t idx[SSM_MAX_DIMS];
    nf_unravel(t, lin, idx);
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && used < n; ++d)
        used += (size_t)snprintf(buf + used, n - used, d ? ",%lld" : "%lld", (long long)idx[d]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

/* ---- running one backend -------------------------------------------------------------- */
typedef struct nf_masks {
    unsigned char * m[NF_MAX_SLOTS]; /* per output slot (NULL otherwise) */
} nf_masks;

static int nf_present(const nf_problem * p, int i) {
    const nf_slot * s = &p->slot[i];
    return s->h != NULL && nf_view(p->args, s)->data != NULL;
}

static void nf_masks_alloc(const nf_problem * p, nf_masks * m) {
    memset(m, 0, sizeof *m);
    for (int i = 0; i < p->nslot; ++i)
        if (p->slot[i].kind == NF_OUT && nf_present(p, i)) {
            const int64_t n = ssmt_numel(nf_view(p->args, &p->slot[i]));
            m->m[i] = malloc((size_t)(n > 0 ? n : 1));
        }
}

static void nf_masks_free(nf_masks * m) {
    for (int i = 0; i < NF_MAX_SLOTS; ++i) free(m->m[i]);
    memset(m, 0, sizeof *m);
}

/* Device copies of a problem's float tensors (index tensors stay on the host). */
typedef struct nf_dev {
    void * mem[NF_MAX_SLOTS];
} nf_dev;

static int nf_dev_alloc(const nf_problem * p, nf_dev * dv) {
    memset(dv, 0, sizeof *dv);
    for (int i = 0; i < p->nslot; ++i) {
        if (p->slot[i].kind == NF_IDX || !nf_present(p, i)) continue;
        const size_t bytes = p->slot[i].h->bytes > 64 ? p->slot[i].h->bytes : 64;
        if (ssm_cuda_malloc(NULL, &dv->mem[i], bytes) != SSM_STATUS_OK) return -1;
    }
    return 0;
}

static void nf_dev_free(nf_dev * dv) {
    for (int i = 0; i < NF_MAX_SLOTS; ++i)
        if (dv->mem[i] != NULL) ssm_cuda_free(NULL, dv->mem[i]);
    memset(dv, 0, sizeof *dv);
}

/* Poisons the outputs (all-ones bytes: NaN in every float dtype), runs the operator on ctx
 * (on device copies when dv != NULL) and fills the masks. 0 on success; 1 (not counted as a
 * failure) when `forced` and the forced kernel variant does not cover the problem. */
static int nf_run(const nf_problem * p, ssm_context * ctx, const nf_dev * dv, nf_masks * m, const char * what,
                  int forced) {
    for (int i = 0; i < p->nslot; ++i)
        if (p->slot[i].kind == NF_OUT && nf_present(p, i)) memset(p->slot[i].h->buf, 0xff, p->slot[i].h->bytes);
    ssm_status st;
    if (dv == NULL) {
        st = p->run(ctx, p->params, p->args);
    } else {
        void * dargs = malloc(p->args_size);
        if (dargs == NULL) {
            TEST_CHECK(0, "%s: out of memory", p->tag);
            return -1;
        }
        memcpy(dargs, p->args, p->args_size);
        for (int i = 0; i < p->nslot; ++i) {
            if (dv->mem[i] == NULL) continue;
            const nf_slot *    s = &p->slot[i];
            const ssm_tensor * hv = nf_view(p->args, s);
            ssm_tensor *       d = nf_view(dargs, s);
            TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, dv->mem[i], s->h->buf, s->h->bytes), SSM_STATUS_OK);
            d->data = (char *)dv->mem[i] + ((const char *)hv->data - (const char *)s->h->buf);
            d->device.type = SSM_DEVICE_CUDA;
            d->device.index = 0;
        }
        st = p->run(ctx, p->params, dargs);
        free(dargs);
        for (int i = 0; i < p->nslot; ++i)
            if (dv->mem[i] != NULL && p->slot[i].kind == NF_OUT)
                TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, p->slot[i].h->buf, dv->mem[i], p->slot[i].h->bytes),
                                  SSM_STATUS_OK);
    }
    if (forced && st == SSM_STATUS_UNSUPPORTED) return 1;
    ++n_runs;
    TEST_CHECK(st == SSM_STATUS_OK, "%s %s: %s (%s)", p->tag, what, ssm_status_string(st), ssm_context_last_error(ctx));
    if (st != SSM_STATUS_OK) return -1;
    for (int i = 0; i < p->nslot; ++i)
        if (m->m[i] != NULL) nf_mask(nf_view(p->args, &p->slot[i]), m->m[i]);
    return 0;
}

/* Backend masks against the reference's, one failure (or one listed exception) per output. */
static void nf_compare(const nf_problem * p, const char * what, const char * input, const char * backend,
                       const nf_masks * ref, const nf_masks * got) {
    for (int i = 0; i < p->nslot; ++i) {
        if (ref->m[i] == NULL) continue;
        const ssm_tensor * t = nf_view(p->args, &p->slot[i]);
        const int64_t      n = ssmt_numel(t);
        int64_t            diff = 0, first = -1, nref = 0, ngot = 0, missing = 0, first_missing = -1;
        for (int64_t e = 0; e < n; ++e) {
            nref += ref->m[i][e];
            ngot += got->m[i][e];
            if (ref->m[i][e] != got->m[i][e]) {
                if (first < 0) first = e;
                ++diff;
            }
            if (ref->m[i][e] && !got->m[i][e]) {
                if (first_missing < 0) first_missing = e;
                ++missing;
            }
        }
        ++ssmt_checks;
        if (diff == 0) continue;
        char where[96];
        nf_index_str(t, first, where, sizeof where);
        const nf_exception * ex = nf_find_exception(p->tag, input, backend);
        if (ex != NULL && missing > 0) { /* an exception admits extra non-finite elements only */
            ex = NULL;
            first = first_missing;
            nf_index_str(t, first, where, sizeof where);
        }
        if (ex != NULL) {
            ++n_exceptions;
            printf("known exception: %s %s %s: %s mask differs at %lld of %lld elements (%s); %s\n", p->tag, what,
                   backend, p->slot[i].name, (long long)diff, (long long)n, ex->reason, where);
            continue;
        }
        ++ssmt_failures;
        fprintf(stderr,
                "MASK MISMATCH %s %s %s: %s differs at %lld of %lld elements (ref non-finite %lld, %s %lld); first %s "
                "ref=%s %s=%s\n",
                p->tag, what, backend, p->slot[i].name, (long long)diff, (long long)n, (long long)nref, backend,
                (long long)ngot, where, ref->m[i][first] ? "non-finite" : "finite", backend,
                got->m[i][first] ? "non-finite" : "finite");
    }
}

/* ---- the contract's reach ------------------------------------------------------------- */
static int64_t nf_geti(const ssm_tensor * t, int64_t lin) { return (int64_t)llround(ssmt_get(t, lin)); }

/* Where an injection may make outputs non-finite. all = no constraint (a per-head
 * parameter); otherwise tokens [t0, t1) of row b, state row n (−1: none); for decode,
 * out row b and slot n (state injections: every row whose slot is n). */
typedef struct nf_reach {
    int     all;
    int64_t b, t0, t1, n;
    int     state_in; /* decode: a pool injection at slot n */
} nf_reach;

static int64_t nf_seqlen(const nf_problem * p) {
    for (int i = 0; i < p->nslot; ++i)
        if (p->slot[i].kind == NF_OUT && p->slot[i].tok >= 0 && nf_present(p, i))
            return nf_view(p->args, &p->slot[i])->shape[p->slot[i].tok];
    return 0;
}

static nf_reach nf_reach_of(const nf_problem * p, const nf_slot * s, const int64_t * idx) {
    nf_reach r = {1, -1, 0, 0, -1, 0};
    if (s->row < 0) return r;
    r.all = 0;
    const int64_t S = nf_seqlen(p);
    if (p->step) {
        if (s->state) {
            r.state_in = 1;
            r.n = idx[s->row];
        } else {
            r.b = idx[s->row];
            r.n = p->sbi ? nf_geti(p->sbi, r.b) : r.b;
            if (r.n < 0) r.b = -1; /* a padding row: out = 0, no slot touched */
        }
        return r;
    }
    if (s->tok >= 0) { /* token t of row b */
        const int64_t b = idx[s->row], t = idx[s->tok];
        r.b = b, r.t0 = t, r.t1 = S, r.n = b;
        if (p->cu != NULL) {
            const int64_t ns = p->cu->shape[0] - 1;
            for (int64_t q = 0; q < ns; ++q)
                if (nf_geti(p->cu, q) <= t && t < nf_geti(p->cu, q + 1)) r.n = q, r.t1 = nf_geti(p->cu, q + 1);
        } else if (p->seq_idx != NULL) {
            const int64_t id = nf_geti(p->seq_idx, b * S + t);
            int64_t       e = t;
            while (e < S && nf_geti(p->seq_idx, b * S + e) == id) ++e;
            r.t1 = e;
            r.n = e == S ? b : -1; /* final_states[b] is the state of the row's last sequence */
        }
        return r;
    }
    /* an initial state of sequence n */
    const int64_t n = idx[s->row];
    r.n = n;
    if (p->cu != NULL) {
        r.b = 0, r.t0 = nf_geti(p->cu, n), r.t1 = nf_geti(p->cu, n + 1);
    } else if (p->seq_idx != NULL) {
        const int64_t id0 = nf_geti(p->seq_idx, n * S);
        int64_t       e = 0;
        while (e < S && nf_geti(p->seq_idx, n * S + e) == id0) ++e;
        r.b = n, r.t0 = 0, r.t1 = id0 == 0 ? e : 0; /* initial_states[n] feeds the first run only if its id is 0 */
        if (!(id0 == 0 && e == S)) r.n = -1;
    } else {
        r.b = n, r.t0 = 0, r.t1 = S;
    }
    return r;
}

static int nf_allowed(const nf_problem * p, const nf_slot * o, const nf_reach * r, const int64_t * idx) {
    if (r->all) return 1;
    if (p->step) {
        if (o->state) return idx[o->row] == r->n;
        if (r->state_in) return p->sbi ? nf_geti(p->sbi, idx[o->row]) == r->n : idx[o->row] == r->n;
        return idx[o->row] == r->b;
    }
    if (o->tok >= 0) return idx[o->row] == r->b && idx[o->tok] >= r->t0 && idx[o->tok] < r->t1;
    return idx[o->row] == r->n;
}

static void nf_check_reach(const nf_problem * p, const nf_slot * s, const int64_t * sidx, const char * what,
                           const nf_masks * ref) {
    const nf_reach r = nf_reach_of(p, s, sidx);
    if (r.all) return;
    for (int i = 0; i < p->nslot; ++i) {
        if (ref->m[i] == NULL) continue;
        const nf_slot *    o = &p->slot[i];
        const ssm_tensor * t = nf_view(p->args, o);
        const int64_t      n = ssmt_numel(t);
        int64_t            bad = 0, first = -1;
        for (int64_t e = 0; e < n; ++e) {
            if (!ref->m[i][e]) continue;
            int64_t idx[SSM_MAX_DIMS];
            nf_unravel(t, e, idx);
            if (!nf_allowed(p, o, &r, idx)) {
                if (first < 0) first = e;
                ++bad;
            }
        }
        char where[96] = "";
        if (first >= 0) nf_index_str(t, first, where, sizeof where);
        TEST_CHECK(bad == 0, "%s %s: the reference's %s is non-finite outside the input's reach at %lld elements (%s)",
                   p->tag, what, o->name, (long long)bad, where);
    }
}

/* With SSMOPS_NONFINITE_VERBOSE set: one line per output of the reference, the count of
 * non-finite elements and, per dim, the indices they cover ({a,b} for up to four values,
 * [lo..hi]/count otherwise) — the reach that docs/ops/nonfinite.md describes. */
static void nf_describe(const nf_problem * p, const char * what, const nf_masks * ref) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("SSMOPS_NONFINITE_VERBOSE") != NULL;
    if (!verbose) return;
    for (int i = 0; i < p->nslot; ++i) {
        if (ref->m[i] == NULL) continue;
        const ssm_tensor * t = nf_view(p->args, &p->slot[i]);
        const int64_t      n = ssmt_numel(t);
        unsigned char *    hit[SSM_MAX_DIMS];
        int64_t            count = 0;
        for (int d = 0; d < t->ndim; ++d) hit[d] = calloc((size_t)(t->shape[d] > 0 ? t->shape[d] : 1), 1);
        for (int64_t e = 0; e < n; ++e) {
            if (!ref->m[i][e]) continue;
            ++count;
            int64_t idx[SSM_MAX_DIMS];
            nf_unravel(t, e, idx);
            for (int d = 0; d < t->ndim; ++d)
                if (hit[d] != NULL) hit[d][idx[d]] = 1;
        }
        char   line[512];
        size_t used = (size_t)snprintf(line, sizeof line, "  %s %s: %s %lld/%lld", p->tag, what, p->slot[i].name,
                                       (long long)count, (long long)n);
        for (int d = 0; count > 0 && d < t->ndim && used < sizeof line; ++d) {
            int64_t lo = -1, hi = -1, distinct = 0;
            for (int64_t x = 0; hit[d] != NULL && x < t->shape[d]; ++x)
                if (hit[d][x]) lo = lo < 0 ? x : lo, hi = x, ++distinct;
            if (distinct <= 4) {
                used += (size_t)snprintf(line + used, sizeof line - used, " {");
                for (int64_t x = 0, q = 0; x < t->shape[d] && used < sizeof line; ++x)
                    if (hit[d][x])
                        used += (size_t)snprintf(line + used, sizeof line - used, q++ ? ",%lld" : "%lld", (long long)x);
                if (used < sizeof line) used += (size_t)snprintf(line + used, sizeof line - used, "}");
            } else {
                used += (size_t)snprintf(line + used, sizeof line - used, " [%lld..%lld]/%lld", (long long)lo,
                                         (long long)hi, (long long)distinct);
            }
        }
        for (int d = 0; d < t->ndim; ++d) free(hit[d]);
        printf("%s\n", line);
    }
}

/* The CUDA backend: its automatic choice ("cuda"), then every entry of the operator's
 * selection table forced in turn ("cuda:NAME"; an entry that does not cover the problem is
 * skipped). */
static void nf_cuda(const nf_problem * p, const nf_dev * dv, const char * what, const char * input,
                    const nf_masks * ref, nf_masks * got) {
    if (nf_run(p, ctx_cuda, dv, got, what, 0) == 0) nf_compare(p, what, input, "cuda", ref, got);
    const int32_t nv = ssm_variant_count(SSM_BACKEND_CUDA, p->op);
    for (int32_t v = 0; v < nv; ++v) {
        const char * name = ssm_variant_name(SSM_BACKEND_CUDA, p->op, v);
        if (name == NULL) continue;
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, p->op, name), SSM_STATUS_OK);
        char backend[96];
        snprintf(backend, sizeof backend, "cuda:%s", name);
        if (nf_run(p, ctx_cuda, dv, got, what, 1) == 0) nf_compare(p, what, input, backend, ref, got);
    }
    if (nv > 0) TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, p->op, NULL), SSM_STATUS_OK);
}

/* ---- injections ----------------------------------------------------------------------- */
static void nf_inject_one(const nf_problem * p, const nf_slot * s, const int64_t * idx, nf_masks * ref, nf_masks * got,
                          const nf_dev * dv) {
    static const double values[3] = {NAN, INFINITY, -INFINITY};
    static const char * names[3] = {"NaN", "+Inf", "-Inf"};
    const ssm_tensor *  t = nf_view(p->args, s);
    const int64_t       lin = nf_ravel(t, idx);
    const double        old = ssmt_get(t, lin);
    for (int v = 0; v < 3; ++v) {
        char what[160], pos[96];
        nf_index_str(t, lin, pos, sizeof pos);
        snprintf(what, sizeof what, "%s%s=%s", s->name, pos, names[v]);
        ssmt_set(t, lin, values[v]);
        ++n_injections;
        if (nf_run(p, ctx_ref, NULL, ref, what, 0) == 0) {
            nf_describe(p, what, ref);
            nf_check_reach(p, s, idx, what, ref);
            if (p->cpu)
                for (int c = 0; c < ncpu; ++c)
                    if (nf_run(p, cpu_backends[c].ctx, NULL, got, what, 0) == 0)
                        nf_compare(p, what, s->name, cpu_backends[c].name, ref, got);
            if (dv != NULL) nf_cuda(p, dv, what, s->name, ref, got);
        }
        ssmt_set(t, lin, old);
    }
}

/* Every input of the problem, at the problem's token positions (per-token inputs) or at two
 * random elements (the others; three for decode). */
static void nf_inject_all(ssmt_rng * rng, const nf_problem * p, int with_cuda) {
    nf_masks ref, got;
    nf_dev   dv;
    nf_masks_alloc(p, &ref);
    nf_masks_alloc(p, &got);
    const int use_dev = with_cuda && have_cuda && nf_dev_alloc(p, &dv) == 0;
    TEST_CHECK(!(with_cuda && have_cuda) || use_dev, "%s: device allocation failed", p->tag);
    const int64_t before = n_injections;
    for (int i = 0; i < p->nslot; ++i) {
        const nf_slot * s = &p->slot[i];
        if (s->kind != NF_IN || !nf_present(p, i)) continue;
        const ssm_tensor * t = nf_view(p->args, s);
        const int64_t      numel = ssmt_numel(t);
        if (numel == 0) continue;
        int64_t idx[SSM_MAX_DIMS];
        if (s->tok >= 0) {
            for (int k = 0; k < p->ntokens; ++k) {
                if (p->tokens[k] >= t->shape[s->tok]) continue;
                nf_unravel(t, (int64_t)(ssmt_u64(rng) % (uint64_t)numel), idx);
                idx[s->tok] = p->tokens[k];
                if (s->row >= 0) idx[s->row] = k % t->shape[s->row];
                nf_inject_one(p, s, idx, &ref, &got, use_dev ? &dv : NULL);
            }
        } else {
            const int n = p->step ? 3 : 2;
            for (int k = 0; k < n; ++k) {
                nf_unravel(t, (int64_t)(ssmt_u64(rng) % (uint64_t)numel), idx);
                nf_inject_one(p, s, idx, &ref, &got, use_dev ? &dv : NULL);
            }
        }
    }
    printf("%s: %lld injections%s\n", p->tag, (long long)(n_injections - before),
           use_dev ? " (ref, cpu, cuda)" : (p->cpu ? " (ref, cpu)" : " (ref)"));
    if (use_dev) nf_dev_free(&dv);
    nf_masks_free(&ref);
    nf_masks_free(&got);
}

/* The common part of a problem: tag "op tag", the args struct and its runner, the token
 * positions; the slots are added by the caller. */
static void nf_init(nf_problem * p, const char * op, const char * tag, void * args, size_t args_size,
                    ssm_status (*run)(ssm_context *, const void *, void *), const void * params, int cpu,
                    const int64_t * tokens, int ntokens) {
    memset(p, 0, sizeof *p);
    p->op = op;
    snprintf(p->tag, sizeof p->tag, "%s %s", op, tag);
    p->args = args, p->args_size = args_size, p->run = run, p->params = params, p->cpu = cpu;
    for (int k = 0; k < ntokens && k < NF_MAX_TOKENS; ++k) p->tokens[p->ntokens++] = tokens[k];
}

/* Mamba-2 parameters: softplus on, dt_limit (0.002, 0.05) with limit, else (0, +inf). */
static void nf_mamba2_params(ssm_mamba2_params * prm, int64_t chunk, int limit) {
    ssm_mamba2_params_init(prm);
    if (chunk > 0) prm->chunk_size = chunk;
    prm->dt_softplus = 1;
    if (limit) prm->dt_limit_lo = 0.002, prm->dt_limit_hi = 0.05;
}

/* ---- mamba2_scan ---------------------------------------------------------------------- */
static ssm_status run_mamba2_scan(ssm_context * ctx, const void * prm, void * args) {
    return ssm_mamba2_scan(ctx, (const ssm_mamba2_params *)prm, (const ssm_mamba2_scan_args *)args, NULL, 0);
}

/* limit: dt_limit (0.002, 0.05) instead of (0, +inf). */
static void test_mamba2_scan(ssmt_rng * rng, const ssmt_mamba2_config * cfg, int64_t chunk, int limit,
                             const int64_t * tokens, int ntokens, const char * tag, int cpu) {
    ssmt_mamba2_problem m;
    if (ssmt_mamba2_random_args(rng, cfg, &m) != 0) {
        TEST_CHECK(0, "mamba2_scan %s: allocation failed", tag);
        return;
    }
    if (m.seq_idx.t.data != NULL) { /* runs that end inside a chunk, right after an injected token */
        static const int64_t change[2][2] = {{20, 35}, {14, 66}}, first[2] = {0, 1};
        const int64_t        S = m.seq_idx.t.shape[1];
        for (int64_t b = 0; b < m.seq_idx.t.shape[0]; ++b)
            for (int64_t t = 0; t < S; ++t) {
                const int64_t id = first[b % 2] + (t >= change[b % 2][0]) + 2 * (t >= change[b % 2][1]);
                ssmt_set(&m.seq_idx.t, b * S + t, (double)id);
            }
    }
    ssm_mamba2_params prm;
    nf_mamba2_params(&prm, chunk, limit);
    nf_problem p;
    nf_init(&p, "mamba2_scan", tag, &m.args, sizeof m.args, run_mamba2_scan, &prm, cpu, tokens, ntokens);
    typedef ssm_mamba2_scan_args A;
    NF_SLOT(&p, A, x, &m.x, NF_IN, 1, 0, 0);
    NF_SLOT(&p, A, dt, &m.dt, NF_IN, 1, 0, 0);
    NF_SLOT(&p, A, a, &m.a, NF_IN, -1, -1, 0);
    NF_SLOT(&p, A, b, &m.b, NF_IN, 1, 0, 0);
    NF_SLOT(&p, A, c, &m.c, NF_IN, 1, 0, 0);
    NF_SLOT(&p, A, d, &m.d, NF_IN, -1, -1, 0);
    NF_SLOT(&p, A, z, &m.z, NF_IN, 1, 0, 0);
    NF_SLOT(&p, A, dt_bias, &m.dt_bias, NF_IN, -1, -1, 0);
    NF_SLOT(&p, A, initial_states, &m.initial_states, NF_IN, -1, 0, 1);
    NF_SLOT(&p, A, seq_idx, &m.seq_idx, NF_IDX, -1, -1, 0);
    NF_SLOT(&p, A, cu_seqlens, &m.cu_seqlens, NF_IDX, -1, -1, 0);
    NF_SLOT(&p, A, out, &m.out, NF_OUT, 1, 0, 0);
    NF_SLOT(&p, A, final_states, &m.final_states, NF_OUT, -1, 0, 1);
    p.cu = m.cu_seqlens.t.data ? &m.args.cu_seqlens : NULL;
    p.seq_idx = m.seq_idx.t.data ? &m.args.seq_idx : NULL;
    nf_inject_all(rng, &p, 1);
    ssmt_mamba2_problem_free(&m);
}

static void mamba2_scan_cases(ssmt_rng * rng) {
    ssmt_mamba2_config cfg;
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = 2, cfg.seqlen = 77, cfg.nheads = 4, cfg.headdim = 20, cfg.dstate = 12, cfg.ngroups = 2;
    cfg.d_mode = 2, cfg.has_z = 1, cfg.has_dt_bias = 1, cfg.has_initial = 1, cfg.has_final = 1, cfg.dt_softplus = 1;
    /* first token; inside a chunk; last token of a 32-chunk (CPU) / 16-chunk (reference); last token of a
     * 64-chunk; a tail */
    static const int64_t tok[5] = {0, 13, 31, 63, 70};
    test_mamba2_scan(rng, &cfg, 16, 0, tok, 5, "dense f32", 1);
    cfg.d_mode = 1, cfg.seq_segments = 3;
    test_mamba2_scan(rng, &cfg, 16, 1, tok, 5, "seq_idx dt_limit f32", 1);
    static const int64_t lens[3] = {37, 0, 45};
    static const int64_t vtok[5] = {0, 20, 36, 37, 81}; /* a sequence's start, middle, end; the next start; the end */
    cfg.seq_segments = 0, cfg.nseq = 3, cfg.seqlens = lens, cfg.dtype = SSM_DTYPE_BF16, cfg.has_final = 1;
    test_mamba2_scan(rng, &cfg, 16, 0, vtok, 5, "varlen bf16", 1);
    if (have_cuda) { /* shapes of the CUDA tensor-core / wgmma kernels: 16-bit in and out, N = 64, 256-token chunks */
        ssmt_mamba2_config_init(&cfg);
        cfg.batch = 1, cfg.seqlen = 300, cfg.nheads = 2, cfg.headdim = 64, cfg.dstate = 64, cfg.ngroups = 1;
        cfg.dtype = SSM_DTYPE_BF16, cfg.out_dtype = SSM_DTYPE_BF16;
        cfg.d_mode = 1, cfg.has_z = 1, cfg.has_dt_bias = 1, cfg.has_initial = 1, cfg.has_final = 1, cfg.dt_softplus = 1;
        static const int64_t ktok[4] = {0, 100, 255, 290};
        test_mamba2_scan(rng, &cfg, 64, 0, ktok, 4, "kernel-shape bf16", 0);
    }
}

/* ---- mamba2_step ---------------------------------------------------------------------- */
typedef struct m2step {
    ssmt_host            x, dt, a, b, c, d, z, bias, idx, state, out, fin;
    ssm_mamba2_step_args args;
} m2step;

static ssm_status run_mamba2_step(ssm_context * ctx, const void * prm, void * args) {
    return ssm_mamba2_step(ctx, (const ssm_mamba2_params *)prm, (const ssm_mamba2_step_args *)args);
}

/* A parameter tensor of shape full[0..ndim): allocated whole, or (per_head) with its first
 * `keep` dims only and viewed with stride 0 over the others (the per-head form of the
 * decode step). */
static ssm_tensor nf_param(ssmt_host * h, ssm_dtype dtype, int per_head, int32_t ndim, const int64_t * full,
                           int32_t keep) {
    *h = ssmt_alloc(dtype, per_head ? keep : ndim, full);
    ssm_tensor v = h->t;
    for (int32_t i = v.ndim; per_head && i < ndim; ++i) v.shape[i] = full[i], v.strides[i] = 0;
    v.ndim = ndim;
    return v;
}

static void m2step_free(m2step * q) {
    ssmt_host * all[] = {&q->x, &q->dt,   &q->a,   &q->b,     &q->c,   &q->d,
                         &q->z, &q->bias, &q->idx, &q->state, &q->out, &q->fin};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
}

/* B rows over a pool of `slots` (a random injective map, every third row padding), per-head
 * (stride-0 a, dt, dt_bias, d) or general form, d, dt_bias and z present. */
static int m2step_make(ssmt_rng * rng, m2step * q, const int64_t * dims, int64_t slots, int per_head, ssm_dtype dtype,
                       ssm_dtype sdt) {
    memset(q, 0, sizeof *q);
    const int64_t B = dims[0], H = dims[1], P = dims[2], N = dims[3], G = dims[4];
    const int64_t sx[3] = {B, H, P}, sb[3] = {B, G, N}, sa[3] = {H, P, N}, shp[2] = {H, P}, sst[4] = {slots, H, P, N};
    const int64_t si[1] = {B};
    q->x = ssmt_alloc(dtype, 3, sx), q->z = ssmt_alloc(dtype, 3, sx), q->out = ssmt_alloc(dtype, 3, sx);
    q->b = ssmt_alloc(dtype, 3, sb), q->c = ssmt_alloc(dtype, 3, sb);
    q->state = ssmt_alloc(sdt, 4, sst), q->fin = ssmt_alloc(sdt, 4, sst);
    q->idx = ssmt_alloc(SSM_DTYPE_I32, 1, si);
    ssm_mamba2_step_args * a = &q->args;
    a->a = nf_param(&q->a, SSM_DTYPE_F32, per_head, 3, sa, 1);
    a->dt = nf_param(&q->dt, dtype, per_head, 3, sx, 2);
    a->dt_bias = nf_param(&q->bias, SSM_DTYPE_F32, per_head, 2, shp, 1);
    a->d = nf_param(&q->d, SSM_DTYPE_F32, per_head, 2, shp, 1);
    ssmt_host * all[] = {&q->x, &q->dt,   &q->a,   &q->b,     &q->c,   &q->d,
                         &q->z, &q->bias, &q->idx, &q->state, &q->out, &q->fin};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i]->t.data == NULL) return -1;
    ssmt_fill_normal(rng, &q->x.t, 0, 1), ssmt_fill_normal(rng, &q->z.t, 0, 1);
    ssmt_fill_normal(rng, &q->b.t, 0, 1), ssmt_fill_normal(rng, &q->c.t, 0, 1);
    ssmt_fill_normal(rng, &q->state.t, 0, 1);
    ssmt_fill_uniform(rng, &q->a.t, -8.0, -0.5), ssmt_fill_uniform(rng, &q->dt.t, -3.0, 1.0);
    ssmt_fill_uniform(rng, &q->bias.t, -2.0, 0.0), ssmt_fill_normal(rng, &q->d.t, 0, 1);
    int64_t perm[64];
    if (slots > 64) return -1;
    for (int64_t k = 0; k < slots; ++k) perm[k] = k;
    for (int64_t k = slots - 1; k > 0; --k) {
        const int64_t j = ssmt_randint(rng, 0, k), t = perm[k];
        perm[k] = perm[j], perm[j] = t;
    }
    for (int64_t r = 0; r < B; ++r) ssmt_set(&q->idx.t, r, r % 3 == 2 ? -1.0 : (double)perm[r]);
    a->x = q->x.t, a->b = q->b.t, a->c = q->c.t, a->z = q->z.t, a->state = q->state.t;
    a->state_batch_indices = q->idx.t, a->out = q->out.t, a->final_state = q->fin.t;
    return 0;
}

static void test_mamba2_step(ssmt_rng * rng, const int64_t * dims, int64_t slots, int per_head, int limit,
                             ssm_dtype dtype, ssm_dtype sdt, const char * tag, int cpu) {
    m2step q;
    if (m2step_make(rng, &q, dims, slots, per_head, dtype, sdt) != 0) {
        TEST_CHECK(0, "mamba2_step %s: allocation failed", tag);
        m2step_free(&q);
        return;
    }
    ssm_mamba2_params prm;
    nf_mamba2_params(&prm, 0, limit);
    nf_problem p;
    nf_init(&p, "mamba2_step", tag, &q.args, sizeof q.args, run_mamba2_step, &prm, cpu, NULL, 0);
    p.step = 1, p.sbi = &q.args.state_batch_indices;
    typedef ssm_mamba2_step_args A;
    NF_SLOT(&p, A, x, &q.x, NF_IN, -1, 0, 0);
    NF_SLOT(&p, A, dt, &q.dt, NF_IN, -1, 0, 0);
    NF_SLOT(&p, A, a, &q.a, NF_IN, -1, -1, 0);
    NF_SLOT(&p, A, b, &q.b, NF_IN, -1, 0, 0);
    NF_SLOT(&p, A, c, &q.c, NF_IN, -1, 0, 0);
    NF_SLOT(&p, A, d, &q.d, NF_IN, -1, -1, 0);
    NF_SLOT(&p, A, z, &q.z, NF_IN, -1, 0, 0);
    NF_SLOT(&p, A, dt_bias, &q.bias, NF_IN, -1, -1, 0);
    NF_SLOT(&p, A, state, &q.state, NF_IN, -1, 0, 1);
    NF_SLOT(&p, A, state_batch_indices, &q.idx, NF_IDX, -1, -1, 0);
    NF_SLOT(&p, A, out, &q.out, NF_OUT, -1, 0, 0);
    NF_SLOT(&p, A, final_state, &q.fin, NF_OUT, -1, 0, 1);
    nf_inject_all(rng, &p, 1);
    m2step_free(&q);
}

static void mamba2_step_cases(ssmt_rng * rng) {
    static const int64_t dims[5] = {5, 4, 12, 20, 2}; /* B, H, P, N, G */
    test_mamba2_step(rng, dims, 7, 0, 0, SSM_DTYPE_F32, SSM_DTYPE_F32, "general f32", 1);
    test_mamba2_step(rng, dims, 7, 1, 0, SSM_DTYPE_F32, SSM_DTYPE_F32, "per-head f32", 1);
    test_mamba2_step(rng, dims, 7, 1, 1, SSM_DTYPE_BF16, SSM_DTYPE_BF16, "per-head dt_limit bf16", 1);
    if (have_cuda) { /* the CUDA streaming kernels: contiguous aligned pools, N = 64 */
        static const int64_t kd[5] = {6, 4, 64, 64, 1};
        test_mamba2_step(rng, kd, 8, 1, 1, SSM_DTYPE_BF16, SSM_DTYPE_F32, "kernel-shape per-head dt_limit", 0);
        test_mamba2_step(rng, kd, 8, 0, 0, SSM_DTYPE_F32, SSM_DTYPE_F32, "kernel-shape general", 0);
    }
}

/* ---- mamba3_siso ---------------------------------------------------------------------- */
static ssm_status run_siso(ssm_context * ctx, const void * prm, void * args) {
    return ssm_mamba3_siso(ctx, (const ssm_mamba3_params *)prm, (const ssm_mamba3_siso_args *)args);
}

static void test_siso(ssmt_rng * rng, const ssmt_mamba3_config * cfg, const int64_t * tokens, int ntokens,
                      const char * tag, int cpu) {
    ssmt_mamba3_problem m;
    if (ssmt_mamba3_random_args(rng, cfg, &m) != 0) {
        TEST_CHECK(0, "mamba3_siso %s: allocation failed", tag);
        return;
    }
    ssm_mamba3_params prm;
    ssmt_mamba3_params(cfg, &prm);
    nf_problem p;
    nf_init(&p, "mamba3_siso", tag, &m.args, sizeof m.args, run_siso, &prm, cpu, tokens, ntokens);
    typedef ssm_mamba3_siso_args A;
    NF_M3_SLOTS(&p, A, m, 1, 2);
    NF_SLOT(&p, A, cu_seqlens, &m.cu_seqlens, NF_IDX, -1, -1, 0);
    p.cu = m.cu_seqlens.t.data ? &m.args.cu_seqlens : NULL;
    nf_inject_all(rng, &p, 1);
    ssmt_mamba3_problem_free(&m);
}

static void siso_cases(ssmt_rng * rng) {
    ssmt_mamba3_config cfg;
    ssmt_mamba3_config_init(&cfg);
    cfg.batch = 2, cfg.seqlen = 77, cfg.nheads = 4, cfg.nheads_qk = 2, cfg.dk = 20, cfg.dv = 18, cfg.nangles = 6;
    cfg.chunk = 16, cfg.has_states = 1, cfg.has_final = 1, cfg.trap_randn = 1;
    static const int64_t tok[5] = {0, 13, 31, 63, 70};
    test_siso(rng, &cfg, tok, 5, "dense f32", 1);
    static const int64_t lens[3] = {37, 0, 45};
    static const int64_t vtok[5] = {0, 20, 36, 37, 81};
    cfg.nseq = 3, cfg.seqlens = lens, cfg.angles_broadcast = 1, cfg.dtype = SSM_DTYPE_BF16;
    test_siso(rng, &cfg, vtok, 5, "varlen angles-broadcast bf16", 1);
    if (have_cuda) { /* the CUDA tensor-core / wgmma kernels: 16-bit in and out, K = 64, 64-token chunks */
        ssmt_mamba3_config_init(&cfg);
        cfg.batch = 1, cfg.seqlen = 150, cfg.nheads = 2, cfg.nheads_qk = 1, cfg.dk = 64, cfg.dv = 64, cfg.nangles = 16;
        cfg.chunk = 64, cfg.has_states = 1, cfg.has_final = 1, cfg.dtype = SSM_DTYPE_BF16,
        cfg.out_dtype = SSM_DTYPE_BF16;
        static const int64_t ktok[4] = {0, 30, 63, 140};
        test_siso(rng, &cfg, ktok, 4, "kernel-shape bf16", 0);
    }
}

/* ---- mamba3_siso_step ----------------------------------------------------------------- */
static ssm_status run_siso_step(ssm_context * ctx, const void * prm, void * args) {
    return ssm_mamba3_siso_step(ctx, (const ssm_mamba3_params *)prm, (const ssm_mamba3_siso_step_args *)args);
}

static void test_siso_step(ssmt_rng * rng, const ssmt_mamba3_config * cfg, int64_t slots, const char * tag, int cpu) {
    ssmt_mamba3_step_problem m;
    if (ssmt_mamba3_random_step(rng, cfg, slots, 1, &m) != 0) {
        TEST_CHECK(0, "mamba3_siso_step %s: allocation failed", tag);
        return;
    }
    ssm_mamba3_params prm;
    ssmt_mamba3_params(cfg, &prm);
    nf_problem p;
    nf_init(&p, "mamba3_siso_step", tag, &m.args, sizeof m.args, run_siso_step, &prm, cpu, NULL, 0);
    p.step = 1, p.sbi = &m.args.state_batch_indices;
    typedef ssm_mamba3_siso_step_args A;
    NF_M3_SLOTS(&p, A, m, -1, -1);
    NF_SLOT(&p, A, state_batch_indices, &m.state_batch_indices, NF_IDX, -1, -1, 0);
    nf_inject_all(rng, &p, 1);
    ssmt_mamba3_step_free(&m);
}

static void siso_step_cases(ssmt_rng * rng) {
    ssmt_mamba3_config cfg;
    ssmt_mamba3_config_init(&cfg);
    cfg.batch = 5, cfg.nheads = 4, cfg.nheads_qk = 2, cfg.dk = 20, cfg.dv = 18, cfg.nangles = 6, cfg.trap_randn = 1;
    test_siso_step(rng, &cfg, 7, "f32", 1);
    if (have_cuda) { /* vectorised fp32 pools */
        cfg.batch = 6, cfg.nheads = 2, cfg.nheads_qk = 1, cfg.dk = 64, cfg.dv = 64, cfg.nangles = 16;
        test_siso_step(rng, &cfg, 8, "kernel-shape f32", 0);
    }
}

/* ---- mamba3_mimo ---------------------------------------------------------------------- */
static ssm_status run_mimo(ssm_context * ctx, const void * prm, void * args) {
    return ssm_mamba3_mimo(ctx, (const ssm_mamba3_mimo_params *)prm, (const ssm_mamba3_mimo_args *)args);
}

static void test_mimo(ssmt_rng * rng, const ssmt_mimo_config * cfg, const int64_t * tokens, int ntokens,
                      const char * tag, int cpu) {
    ssmt_mimo_problem m;
    if (ssmt_mimo_random_args(rng, cfg, &m) != 0) {
        TEST_CHECK(0, "mamba3_mimo %s: allocation failed", tag);
        return;
    }
    nf_problem p;
    nf_init(&p, "mamba3_mimo", tag, &m.args, sizeof m.args, run_mimo, &m.params, cpu, tokens, ntokens);
    typedef ssm_mamba3_mimo_args A;
    NF_M3_SLOTS(&p, A, m, 1, 2);
    NF_SLOT(&p, A, mimo_v, &m.mimo_v, NF_IN, -1, -1, 0);
    NF_SLOT(&p, A, mimo_z, &m.mimo_z, NF_IN, -1, -1, 0);
    NF_SLOT(&p, A, mimo_o, &m.mimo_o, NF_IN, -1, -1, 0);
    NF_SLOT(&p, A, outproj_norm_weight, &m.norm_weight, NF_IN, -1, -1, 0);
    NF_SLOT(&p, A, cu_seqlens, &m.cu_seqlens, NF_IDX, -1, -1, 0);
    p.cu = m.cu_seqlens.t.data ? &m.args.cu_seqlens : NULL;
    nf_inject_all(rng, &p, 1);
    ssmt_mimo_problem_free(&m);
}

static void mimo_cases(ssmt_rng * rng) {
    ssmt_mimo_config cfg;
    ssmt_mimo_config_init(&cfg);
    cfg.batch = 2, cfg.seqlen = 45, cfg.nheads = 4, cfg.ngroups = 2, cfg.rank = 2, cfg.dstate = 16, cfg.headdim = 20;
    cfg.chunk = 8, cfg.has_states = 1, cfg.has_final = 1;
    /* first token; inside a chunk; last token of a chunk; a 16-chunk's last token; a tail */
    static const int64_t tok[5] = {0, 5, 7, 31, 43};
    test_mimo(rng, &cfg, tok, 5, "dense reduce_o f32", 1);
    cfg.reduce_o = 0, cfg.has_z = 0, cfg.rank = 3, cfg.div = 2;
    test_mimo(rng, &cfg, tok, 5, "dense per-rank R3 f32", 1);
    static const int64_t lens[3] = {19, 0, 26};
    static const int64_t vtok[5] = {0, 10, 18, 19, 44};
    ssmt_mimo_config_init(&cfg);
    cfg.nheads = 4, cfg.ngroups = 2, cfg.rank = 4, cfg.dstate = 16, cfg.headdim = 12, cfg.chunk = 4;
    cfg.has_states = 1, cfg.has_final = 1, cfg.fused = 1, cfg.has_norm_weight = 1, cfg.nseq = 3, cfg.seqlens = lens;
    cfg.dtype = SSM_DTYPE_BF16;
    test_mimo(rng, &cfg, vtok, 5, "varlen fused-norm bf16", 1);
    if (have_cuda) { /* the CUDA output kernel's one 64×64 tile: C·R = 64, P = 64 */
        ssmt_mimo_config_init(&cfg);
        cfg.batch = 1, cfg.seqlen = 70, cfg.nheads = 2, cfg.ngroups = 1, cfg.rank = 4, cfg.dstate = 32;
        cfg.headdim = 64, cfg.chunk = 16, cfg.has_states = 1, cfg.has_final = 1, cfg.dtype = SSM_DTYPE_BF16;
        static const int64_t ktok[4] = {0, 7, 15, 69};
        test_mimo(rng, &cfg, ktok, 4, "kernel-shape bf16", 0);
    }
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261216);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);
    TEST_CHECK(ctx_ref != NULL, "reference context");
    /* every ISA the host has (ssmi_best_isa: the ISAs form a chain), the vector ones at 1 and 2 threads */
    const ssm_isa best = ssmi_best_isa(ssm_cpu_features());
    static const struct {
        const char * name;
        int          threads;
        ssm_isa      isa;
    } cpus[5] = {
        {"cpu-avx512-1t", 1, SSM_ISA_AVX512},
        {"cpu-avx512-2t", 2, SSM_ISA_AVX512},
        {"cpu-avx2-1t", 1, SSM_ISA_AVX2},
        {"cpu-avx2-2t", 2, SSM_ISA_AVX2},
        {"cpu-scalar-2t", 2, SSM_ISA_SCALAR},
    };
    for (int i = 0; i < 5; ++i) {
        if (cpus[i].isa > best) continue;
        ssm_context * c = ssmt_make_ctx(SSM_BACKEND_CPU, cpus[i].threads, cpus[i].isa);
        TEST_CHECK(c != NULL, "context %s", cpus[i].name);
        if (c != NULL) cpu_backends[ncpu].name = cpus[i].name, cpu_backends[ncpu++].ctx = c;
    }
    printf("test_nonfinite: cpu ISAs up to %s\n", ssm_isa_name(best));
    have_cuda = ssm_cuda_device_count() > 0;
    if (have_cuda) {
        ctx_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 1, SSM_ISA_AUTO);
        TEST_CHECK(ctx_cuda != NULL, "CUDA context");
        have_cuda = ctx_cuda != NULL;
    } else {
        printf("test_nonfinite: no CUDA device: the CUDA part is skipped (the reference and CPU parts run)\n");
    }
    if (ctx_ref != NULL) {
        mamba2_scan_cases(&rng);
        mamba2_step_cases(&rng);
        siso_cases(&rng);
        siso_step_cases(&rng);
        mimo_cases(&rng);
    }
    printf("%lld injections, %lld runs, %lld known exceptions\n", (long long)n_injections, (long long)n_runs,
           (long long)n_exceptions);
    ssm_context_free(ctx_ref);
    ssm_context_free(ctx_cuda);
    for (int i = 0; i < ncpu; ++i) ssm_context_free(cpu_backends[i].ctx);
    TEST_EXIT();
}
