/* serving_loop.c — a continuous-batching serving loop over one Mamba-2 layer and one Mamba-3
 * SISO layer, checked token for token against running each request alone.
 *
 * NREQ requests with random prompt and decode lengths arrive over time. Each iteration:
 *   decode   every request past its prefill gets 1 verified token plus k draft tokens
 *            (k random on odd iterations, 0 on even ones); the engine accepts a random
 *            number of them (at least 1). The batch is padded with rows of read slot −1
 *            at random places. Mamba-2: one ssm_mamba2_step with cu_seqlens, a 2-D slot
 *            table (the request's L slots, vLLM's layout) and num_accepted_tokens, the
 *            pool updated in place. Mamba-3 SISO: one ssm_mamba3_siso_step per token
 *            column, token j reading the slot token j−1 wrote and writing table[j], so
 *            the pool again holds the state after every token and the next step starts
 *            from table[accepted − 1].
 *   prefill  arrived requests get a slot table from the free lists and are prefilled in
 *            chunks under a token budget: one ssm_mamba2_scan and one ssm_mamba3_siso
 *            per iteration, sequences packed with cu_seqlens, initial / final states read
 *            from / written to the pools (initial index −1 for a prompt's first chunk).
 *   finish   a request whose decode tokens are all accepted frees its slots (poisoned
 *            with NaN, so a stale read shows) for the requests that arrive later.
 * The check: each request's accepted tokens (prompt, then the accepted decode tokens) run
 * alone through ssm_mamba2_scan / ssm_mamba3_siso; its served outputs and its final states
 * must meet the fp32 bar (DESIGN §5: rel_rms ≤ 1e-5, max_rel ≤ 1e-3) against them. Not
 * bitwise: the packed prefill and the decode steps compute in other orders (chunking,
 * recurrence) than a lone forward. Bitwise checks: padding rows' outputs are exactly 0,
 * and the decode step's intermediate_states row of a request's last accepted token equals
 * the pool slot the next step reads. Exit status 1 on any mismatch.
 * Backends: `serving_loop` runs on the CPU; `serving_loop cuda` on the CUDA backend (exit 77
 * without a device): the pools live in device memory, every host array a call reads is copied
 * to a device twin before it and every array it writes is copied back after it
 * (ssm_cuda_malloc / ssm_cuda_memcpy), and the engine's reads and writes of pool slots are
 * device copies. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssmops.h"

enum {
    NREQ = 32,    /* requests                                          */
    MAXRUN = 8,   /* requests holding slots at once                     */
    KMAX = 3,     /* draft tokens per speculative step                  */
    L = KMAX + 1, /* slots per request: the state after each row token  */
    SLOTS = MAXRUN * L,
    PBUDGET = 96, /* prefill tokens per iteration                       */
    MAXPROMPT = 70,
    MAXDECODE = 20,
    CAP = MAXPROMPT + MAXDECODE,
    TMAX = PBUDGET > MAXRUN * L + MAXRUN ? PBUDGET : MAXRUN * L + MAXRUN, /* tokens in one call */
    ROWMAX = 2 * MAXRUN, /* decode rows with padding                   */
};
/* Mamba-2 layer */
enum { H2 = 4, P2 = 8, N2 = 16, G2 = 2 };
/* Mamba-3 SISO layer */
enum { H3 = 4, HQ3 = 2, K3 = 16, V3 = 8, A3 = 4 };

/* Per-token inputs of each layer: one token-major array per field. */
enum { X2, DT2, B2, C2, Z2, NF2 };
static const int W2[NF2] = {H2 * P2, H2, G2 * N2, G2 * N2, H2 * P2};
enum { Q3, K3F, V3F, ADT3, DT3, TRAP3, ANG3, Z3, NF3 };
static const int W3[NF3] = {HQ3 * K3, HQ3 * K3, H3 * V3, H3, H3, H3, H3 * A3, H3 * V3};
enum { OUT2 = H2 * P2, OUT3 = H3 * V3, ST2 = H2 * P2 * N2 };
static const int ST3W[4] = {H3 * A3, H3 * V3 * K3, H3 * K3, H3 * V3}; /* angle, ssm, k, v */

static uint32_t seed = 12345;
static uint32_t rnd(void) {
    seed = seed * 1664525u + 1013904223u;
    return seed >> 8;
}
static float uni(float lo, float hi) { return lo + (hi - lo) * (float)rnd() / 16777216.0f; }
static int   irange(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); } /* [lo, hi] */

typedef enum { WAITING, PREFILL, DECODE, DONE } req_state;

typedef struct {
    int       arrival, prompt, decode; /* decode: accepted decode tokens to produce */
    req_state state;
    int       pos;                 /* tokens processed and accepted so far      */
    int       accepted;            /* accepted in the last step (column to read) */
    int       slot2[L], slot3[L];  /* slot tables in the two pools              */
    float *   in2[NF2], *in3[NF3]; /* CAP tokens of inputs                      */
    float *   out2, *out3;         /* served outputs of the accepted tokens     */
    float *   fin2, *fin3[4];      /* final states, copied from the pools       */
} request;

static request req[NREQ];
static float * pool2;                      /* (SLOTS, H2, P2, N2), in tensor memory  */
static float * pool3[4];                   /* (SLOTS, ...): angle, ssm, k, v        */
static int     free2[SLOTS], free3[SLOTS]; /* 1 = free                             */
static int     failures;

/* ---- host arrays and tensor memory ----------------------------------------------------- */

static ssm_context * g_ctx;
static int           on_cuda; /* the CUDA backend: tensors in device memory */

static void check_status(ssm_status st, ssm_context * ctx, const char * what) {
    if (st != SSM_STATUS_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, ssm_status_string(st), ssm_context_last_error(ctx));
        exit(1);
    }
}

/* Every host array a call may read or write, with its device twin on CUDA (made on first
 * use) and, while a call is being set up, the floats it writes there. */
typedef struct {
    float * host;
    float * dev;
    size_t  n, out;
} tracked;
static tracked * arrays;
static size_t    narrays, cap_arrays;

static void track(float * host, size_t n) {
    if (narrays == cap_arrays) {
        cap_arrays = cap_arrays ? 2 * cap_arrays : 256;
        arrays = realloc(arrays, cap_arrays * sizeof *arrays);
        if (arrays == NULL) {
            fprintf(stderr, "out of memory\n");
            exit(2);
        }
    }
    arrays[narrays++] = (tracked){host, NULL, n, 0};
}

static float * alloc_floats(size_t n) {
    float * p = malloc(n * sizeof *p);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    track(p, n);
    return p;
}

static tracked * find(const float * host) {
    for (size_t i = 0; i < narrays; i++)
        if (arrays[i].host == host) return &arrays[i];
    fprintf(stderr, "internal: an untracked array\n");
    exit(2);
}

static void free_floats(float * p) {
    tracked * t = find(p);
    if (t->dev != NULL) check_status(ssm_cuda_free(g_ctx, t->dev), g_ctx, "ssm_cuda_free");
    *t = arrays[--narrays];
    free(p);
}

/* Copies n floats between host memory and tensor memory (memcpy on the CPU backend). */
static void copy_floats(float * dst, const float * src, size_t n) {
    if (on_cuda)
        check_status(ssm_cuda_memcpy(g_ctx, dst, src, n * sizeof(float)), g_ctx, "ssm_cuda_memcpy");
    else
        memcpy(dst, src, n * sizeof(float));
}

/* Tensor memory of n floats: a pool (device memory on CUDA). */
static float * alloc_tensor(size_t n) {
    if (!on_cuda) return alloc_floats(n);
    void * p = NULL;
    check_status(ssm_cuda_malloc(g_ctx, &p, n * sizeof(float)), g_ctx, "ssm_cuda_malloc");
    return p;
}

static void free_tensor(float * p) {
    if (on_cuda)
        check_status(ssm_cuda_free(g_ctx, p), g_ctx, "ssm_cuda_free");
    else
        free_floats(p);
}

/* The memory a call reads the first n floats of host array `host` from: the array itself on
 * the CPU backend, its device twin (with a copy of those floats) on CUDA. */
static float * in_(float * host, size_t n) {
    if (!on_cuda) return host;
    tracked * t = find(host);
    if (t->dev == NULL) {
        void * p = NULL;
        check_status(ssm_cuda_malloc(g_ctx, &p, t->n * sizeof(float)), g_ctx, "ssm_cuda_malloc");
        t->dev = p;
    }
    copy_floats(t->dev, host, n);
    return t->dev;
}

/* The memory a call writes n floats of host array `host` to; after the call done_call()
 * brings them to the host array. */
static float * out_(float * host, size_t n) {
    float * d = in_(host, n); /* the twin holds the host bytes: unwritten floats stay */
    if (on_cuda) find(host)->out = n;
    return d;
}

/* After a call: its outputs into their host arrays. */
static void done_call(void) {
    for (size_t i = 0; i < narrays; i++)
        if (arrays[i].out > 0) {
            copy_floats(arrays[i].host, arrays[i].dev, arrays[i].out);
            arrays[i].out = 0;
        }
}

/* NaN into n floats of tensor memory (a pool's freed slots). */
static void poison_tensor(float * p, size_t n) {
    static float nan_row[H2 * P2 * N2 > 4096 ? H2 * P2 * N2 : 4096];
    for (size_t i = 0; i < sizeof nan_row / sizeof nan_row[0]; i++) nan_row[i] = NAN;
    for (size_t at = 0; at < n;) {
        const size_t k = n - at < sizeof nan_row / sizeof nan_row[0] ? n - at : sizeof nan_row / sizeof nan_row[0];
        copy_floats(p + at, nan_row, k);
        at += k;
    }
}

static void fill(float * v, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) v[i] = uni(lo, hi);
}

static void poison(float * v, size_t n) {
    for (size_t i = 0; i < n; i++) v[i] = NAN;
}

/* A float tensor in tensor memory (on CUDA: device 0). */
static ssm_tensor view(void * data, int32_t ndim, const int64_t * shape, const int64_t * strides) {
    ssm_tensor t = ssm_tensor_make(data, SSM_DTYPE_F32, ndim, shape);
    if (strides != NULL) memcpy(t.strides, strides, (size_t)ndim * sizeof strides[0]);
    if (on_cuda) t.device.type = SSM_DEVICE_CUDA, t.device.index = 0;
    return t;
}
#define T_(data, ...) \
    view((data), (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}, NULL)
#define I32(data, ...)                                                                                    \
    ssm_tensor_make((data), SSM_DTYPE_I32, (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                    (int64_t[]){__VA_ARGS__})

/* Layer parameters */
static float a2[H2], dtb2[H2], d2[H2];
static float qb3[H3 * K3], kb3[H3 * K3], d3[H3];

static int take_slot(int * freelist) {
    int nfree = 0;
    for (int s = 0; s < SLOTS; s++) nfree += freelist[s];
    int pick = (int)(rnd() % (uint32_t)nfree);
    for (int s = 0; s < SLOTS; s++)
        if (freelist[s] && pick-- == 0) {
            freelist[s] = 0;
            return s;
        }
    return -1; /* not reached: a seat guarantees L free slots */
}

/* ---- the two layers' calls over a batch of packed tokens ------------------------------ */

static void mamba2_forward(ssm_context * ctx, float * const in[NF2], int S, int nseq, int32_t * cu, int32_t * init_idx,
                           int32_t * fin_idx, float * out, float * fin_states) {
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    p.chunk_size = 16;
    p.dt_softplus = 1;
    ssm_mamba2_scan_args a = {0};
    a.x = T_(in_(in[X2], (size_t)S * W2[X2]), 1, S, H2, P2);
    a.dt = T_(in_(in[DT2], (size_t)S * W2[DT2]), 1, S, H2);
    a.a = T_(in_(a2, H2), H2);
    a.b = T_(in_(in[B2], (size_t)S * W2[B2]), 1, S, G2, N2);
    a.c = T_(in_(in[C2], (size_t)S * W2[C2]), 1, S, G2, N2);
    a.d = T_(in_(d2, H2), H2);
    a.z = T_(in_(in[Z2], (size_t)S * W2[Z2]), 1, S, H2, P2);
    a.dt_bias = T_(in_(dtb2, H2), H2);
    a.cu_seqlens = I32(cu, nseq + 1);
    a.out = T_(out_(out, (size_t)S * OUT2), 1, S, H2, P2);
    if (init_idx != NULL) { /* into the pool */
        a.initial_states = T_(pool2, SLOTS, H2, P2, N2);
        a.final_states = a.initial_states;
        a.initial_state_indices = I32(init_idx, nseq);
        a.final_state_indices = I32(fin_idx, nseq);
    } else {
        a.final_states = T_(out_(fin_states, (size_t)nseq * ST2), nseq, H2, P2, N2);
    }
    check_status(ssm_mamba2_scan(ctx, &p, &a, NULL, 0), ctx, "mamba2_scan");
    done_call();
}

static void mamba3_forward(ssm_context * ctx, float * const in[NF3], int S, int nseq, int32_t * cu, int32_t * init_idx,
                           int32_t * fin_idx, float * out, float * const fin_states[4]) {
    ssm_mamba3_params p;
    ssm_mamba3_params_init(&p);
    p.chunk_size = 16;
    ssm_mamba3_siso_args a = {0};
    const int64_t        hs[] = {(int64_t)S * H3, 1, H3}; /* (1, H, S) over token-major storage */
#define IN3(f) in_(in[f], (size_t)S * W3[f])
    a.q = T_(IN3(Q3), 1, S, HQ3, K3);
    a.k = T_(IN3(K3F), 1, S, HQ3, K3);
    a.v = T_(IN3(V3F), 1, S, H3, V3);
    a.adt = view(IN3(ADT3), 3, (int64_t[]){1, H3, S}, hs);
    a.dt = view(IN3(DT3), 3, (int64_t[]){1, H3, S}, hs);
    a.trap = view(IN3(TRAP3), 3, (int64_t[]){1, H3, S}, hs);
    a.q_bias = T_(in_(qb3, H3 * K3), H3, K3);
    a.k_bias = T_(in_(kb3, H3 * K3), H3, K3);
    a.angles = T_(IN3(ANG3), 1, S, H3, A3);
    a.d = T_(in_(d3, H3), H3);
    a.z = T_(IN3(Z3), 1, S, H3, V3);
#undef IN3
    a.cu_seqlens = I32(cu, nseq + 1);
    a.out = T_(out_(out, (size_t)S * OUT3), 1, S, H3, V3);
    const int64_t rows = init_idx != NULL ? SLOTS : nseq;
    float *       st[4]; /* the pools, or the outputs of a lone run */
    for (int k = 0; k < 4; k++) st[k] = init_idx != NULL ? pool3[k] : out_(fin_states[k], (size_t)nseq * ST3W[k]);
    a.final_angle_state = T_(st[0], rows, H3, A3);
    a.final_ssm_state = T_(st[1], rows, H3, V3, K3);
    a.final_k_state = T_(st[2], rows, H3, K3);
    a.final_v_state = T_(st[3], rows, H3, V3);
    if (init_idx != NULL) { /* into the pool, in place */
        a.angle_state = a.final_angle_state;
        a.ssm_state = a.final_ssm_state;
        a.k_state = a.final_k_state;
        a.v_state = a.final_v_state;
        a.initial_state_indices = I32(init_idx, nseq);
        a.final_state_indices = I32(fin_idx, nseq);
    }
    check_status(ssm_mamba3_siso(ctx, &p, &a), ctx, "mamba3_siso");
    done_call();
}

/* ---- one decode iteration ------------------------------------------------------------- */

static float *bat2[NF2], *bat3[NF3], *bout2, *bout3, *inter2; /* batch buffers (TMAX tokens) */
static float *col3[NF3], *cout3;                              /* one token column (ROWMAX)   */
static int    steps, spec_rows, drafted, rejected, pad_rows, prefill_calls, prefill_chunks;

static void copy_token(float * const dst[], int t, float * const src[], int s, const int * w, int nf) {
    for (int f = 0; f < nf; f++)
        memcpy(dst[f] + (size_t)t * w[f], src[f] + (size_t)s * w[f], (size_t)w[f] * sizeof(float));
}

static void decode_iteration(ssm_context * ctx, int it) {
    int rowreq[ROWMAX], nrun = 0;
    for (int r = 0; r < NREQ; r++)
        if (req[r].state == DECODE) rowreq[nrun++] = r;
    if (nrun == 0) return;
    const int npad = irange(0, ROWMAX - nrun < 3 ? ROWMAX - nrun : 3);
    int       rows = nrun + npad;
    for (int i = nrun; i < rows; i++) rowreq[i] = -1;
    for (int i = rows - 1; i > 0; i--) { /* padding rows at random places */
        int j = (int)(rnd() % (uint32_t)(i + 1)), tmp = rowreq[i];
        rowreq[i] = rowreq[j];
        rowreq[j] = tmp;
    }
    int32_t cu[ROWMAX + 1], table2[ROWMAX][L], nacc[ROWMAX];
    int     ntok[ROWMAX], acc[ROWMAX];
    cu[0] = 0;
    for (int b = 0; b < rows; b++) {
        const int r = rowreq[b];
        if (r < 0) { /* padding: one token of junk, no slots */
            ntok[b] = 1;
            acc[b] = 0;
            nacc[b] = 0;
            for (int j = 0; j < L; j++) table2[b][j] = -1;
        } else {
            request * q = &req[r];
            const int left = q->decode - (q->pos - q->prompt);
            ntok[b] = (it % 2 == 1) ? 1 + irange(0, KMAX) : 1;
            acc[b] = irange(1, ntok[b] < left ? ntok[b] : left);
            nacc[b] = q->accepted;
            for (int j = 0; j < L; j++) table2[b][j] = q->slot2[j];
            spec_rows += ntok[b] > 1;
            drafted += ntok[b] - 1;
            rejected += ntok[b] - acc[b];
        }
        for (int j = 0; j < ntok[b]; j++) { /* accepted tokens: the request's; the rest: junk */
            const int t = cu[b] + j;
            if (j < acc[b]) {
                copy_token(bat2, t, req[r].in2, req[r].pos + j, W2, NF2);
                copy_token(bat3, t, req[r].in3, req[r].pos + j, W3, NF3);
            } else {
                for (int f = 0; f < NF2; f++) fill(bat2[f] + (size_t)t * W2[f], (size_t)W2[f], -1.0f, 1.0f);
                for (int f = 0; f < NF3; f++) fill(bat3[f] + (size_t)t * W3[f], (size_t)W3[f], -1.0f, 1.0f);
            }
        }
        cu[b + 1] = cu[b] + ntok[b];
    }
    const int T = cu[rows];
    pad_rows += npad;
    steps++;

    /* Mamba-2: one multi-token step over the slot tables, pool in place. */
    ssm_mamba2_params p2;
    ssm_mamba2_params_init(&p2);
    p2.dt_softplus = 1;
    ssm_mamba2_step_args s = {0};
    s.x = T_(in_(bat2[X2], (size_t)T * W2[X2]), T, H2, P2);
    s.dt = view(in_(bat2[DT2], (size_t)T * W2[DT2]), 3, (int64_t[]){T, H2, P2}, (int64_t[]){H2, 1, 0});
    s.a = view(in_(a2, H2), 3, (int64_t[]){H2, P2, N2}, (int64_t[]){1, 0, 0});
    s.b = T_(in_(bat2[B2], (size_t)T * W2[B2]), T, G2, N2);
    s.c = T_(in_(bat2[C2], (size_t)T * W2[C2]), T, G2, N2);
    s.d = view(in_(d2, H2), 2, (int64_t[]){H2, P2}, (int64_t[]){1, 0});
    s.z = T_(in_(bat2[Z2], (size_t)T * W2[Z2]), T, H2, P2);
    s.dt_bias = view(in_(dtb2, H2), 2, (int64_t[]){H2, P2}, (int64_t[]){1, 0});
    s.state = T_(pool2, SLOTS, H2, P2, N2);
    s.final_state = s.state;
    s.state_batch_indices = I32(&table2[0][0], rows, L);
    s.num_accepted_tokens = I32(nacc, rows);
    s.cu_seqlens = I32(cu, rows + 1);
    poison(bout2, (size_t)T * OUT2);
    s.out = T_(out_(bout2, (size_t)T * OUT2), T, H2, P2);
    s.intermediate_states = T_(out_(inter2, (size_t)T * ST2), T, H2, P2, N2);
    check_status(ssm_mamba2_step(ctx, &p2, &s), ctx, "mamba2_step");
    done_call();

    /* Mamba-3 SISO: token column j of every row in one step, read slot = the slot the
     * previous token wrote (the accepted column of the last step for j = 0). */
    ssm_mamba3_params p3;
    ssm_mamba3_params_init(&p3);
    for (int j = 0; j < L; j++) {
        int32_t rd[ROWMAX], wr[ROWMAX];
        int     any = 0;
        for (int b = 0; b < rows; b++) {
            const int r = rowreq[b], has = r >= 0 && j < ntok[b];
            rd[b] = !has     ? -1
                    : j == 0 ? req[r].slot3[req[r].accepted > 0 ? req[r].accepted - 1 : 0]
                             : req[r].slot3[j - 1];
            wr[b] = has ? req[r].slot3[j] : -1;
            any |= has;
            copy_token(col3, b, bat3, has ? cu[b] + j : cu[b], W3, NF3); /* padding: junk */
        }
        if (!any) break;
        ssm_mamba3_siso_step_args m = {0};
#define COL3(f) in_(col3[f], (size_t)rows * W3[f])
        m.q = T_(COL3(Q3), rows, HQ3, K3);
        m.k = T_(COL3(K3F), rows, HQ3, K3);
        m.v = T_(COL3(V3F), rows, H3, V3);
        m.adt = T_(COL3(ADT3), rows, H3);
        m.dt = T_(COL3(DT3), rows, H3);
        m.trap = T_(COL3(TRAP3), rows, H3);
        m.q_bias = T_(in_(qb3, H3 * K3), H3, K3);
        m.k_bias = T_(in_(kb3, H3 * K3), H3, K3);
        m.angles = T_(COL3(ANG3), rows, H3, A3);
        m.d = T_(in_(d3, H3), H3);
        m.z = T_(COL3(Z3), rows, H3, V3);
#undef COL3
        m.angle_state = T_(pool3[0], SLOTS, H3, A3);
        m.ssm_state = T_(pool3[1], SLOTS, H3, V3, K3);
        m.k_state = T_(pool3[2], SLOTS, H3, K3);
        m.v_state = T_(pool3[3], SLOTS, H3, V3);
        m.final_angle_state = m.angle_state;
        m.final_ssm_state = m.ssm_state;
        m.final_k_state = m.k_state;
        m.final_v_state = m.v_state;
        m.state_batch_indices = I32(rd, rows);
        m.dst_state_batch_indices = I32(wr, rows);
        poison(cout3, (size_t)rows * OUT3);
        m.out = T_(out_(cout3, (size_t)rows * OUT3), rows, H3, V3);
        check_status(ssm_mamba3_siso_step(ctx, &p3, &m), ctx, "mamba3_siso_step");
        done_call();
        for (int b = 0; b < rows; b++)
            if (rowreq[b] < 0 || j < ntok[b])
                memcpy(bout3 + (size_t)(cu[b] + (rowreq[b] < 0 ? 0 : j)) * OUT3, cout3 + (size_t)b * OUT3,
                       OUT3 * sizeof(float));
    }

    /* The engine's side: keep the accepted tokens' outputs, check padding and the state the
     * next step reads, finish requests. */
    for (int b = 0; b < rows; b++) {
        const int r = rowreq[b];
        if (r < 0) {
            for (int i = 0; i < OUT2; i++) failures += bout2[(size_t)cu[b] * OUT2 + i] != 0.0f;
            for (int i = 0; i < OUT3; i++) failures += bout3[(size_t)cu[b] * OUT3 + i] != 0.0f;
            continue;
        }
        request * q = &req[r];
        memcpy(q->out2 + (size_t)q->pos * OUT2, bout2 + (size_t)cu[b] * OUT2, (size_t)acc[b] * OUT2 * sizeof(float));
        memcpy(q->out3 + (size_t)q->pos * OUT3, bout3 + (size_t)cu[b] * OUT3, (size_t)acc[b] * OUT3 * sizeof(float));
        const float * last = inter2 + (size_t)(cu[b] + acc[b] - 1) * ST2;
        float         slot[ST2];
        copy_floats(slot, pool2 + (size_t)q->slot2[acc[b] - 1] * ST2, ST2);
        if (memcmp(last, slot, ST2 * sizeof(float)) != 0) {
            fprintf(stderr, "request %d: intermediate state differs from its pool slot\n", r);
            failures++;
        }
        q->pos += acc[b];
        q->accepted = acc[b];
        if (q->pos == q->prompt + q->decode) { /* finished: keep the states, free the slots */
            copy_floats(q->fin2, pool2 + (size_t)q->slot2[acc[b] - 1] * ST2, ST2);
            for (int k = 0; k < 4; k++)
                copy_floats(q->fin3[k], pool3[k] + (size_t)q->slot3[acc[b] - 1] * ST3W[k], (size_t)ST3W[k]);
            for (int j = 0; j < L; j++) {
                poison_tensor(pool2 + (size_t)q->slot2[j] * ST2, ST2);
                for (int k = 0; k < 4; k++) poison_tensor(pool3[k] + (size_t)q->slot3[j] * ST3W[k], (size_t)ST3W[k]);
                free2[q->slot2[j]] = free3[q->slot3[j]] = 1;
            }
            q->state = DONE;
        }
    }
}

/* ---- one prefill iteration: chunks of the admitted prompts under a token budget -------- */

static void prefill_iteration(ssm_context * ctx) {
    int32_t cu[MAXRUN + 1], init2[MAXRUN], fin2[MAXRUN], init3[MAXRUN], fin3[MAXRUN];
    int     seqreq[MAXRUN], chunk[MAXRUN], nseq = 0;
    cu[0] = 0;
    for (int r = 0; r < NREQ && cu[nseq] < PBUDGET; r++) {
        request * q = &req[r];
        if (q->state != PREFILL) continue;
        int n = q->prompt - q->pos, room = PBUDGET - cu[nseq];
        n = n < room ? n : room;
        n = irange(1, n); /* a random chunk: prompts span several iterations */
        for (int i = 0; i < n; i++) {
            copy_token(bat2, cu[nseq] + i, q->in2, q->pos + i, W2, NF2);
            copy_token(bat3, cu[nseq] + i, q->in3, q->pos + i, W3, NF3);
        }
        init2[nseq] = q->pos > 0 ? q->slot2[0] : -1; /* a first chunk starts from zeros */
        init3[nseq] = q->pos > 0 ? q->slot3[0] : -1;
        fin2[nseq] = q->slot2[0];
        fin3[nseq] = q->slot3[0];
        seqreq[nseq] = r;
        chunk[nseq] = n;
        cu[nseq + 1] = cu[nseq] + n;
        nseq++;
    }
    if (nseq == 0) return;
    const int S = cu[nseq];
    poison(bout2, (size_t)S * OUT2);
    poison(bout3, (size_t)S * OUT3);
    mamba2_forward(ctx, bat2, S, nseq, cu, init2, fin2, bout2, NULL);
    mamba3_forward(ctx, bat3, S, nseq, cu, init3, fin3, bout3, NULL);
    prefill_calls++;
    prefill_chunks += nseq;
    for (int i = 0; i < nseq; i++) {
        request * q = &req[seqreq[i]];
        memcpy(q->out2 + (size_t)q->pos * OUT2, bout2 + (size_t)cu[i] * OUT2, (size_t)chunk[i] * OUT2 * sizeof(float));
        memcpy(q->out3 + (size_t)q->pos * OUT3, bout3 + (size_t)cu[i] * OUT3, (size_t)chunk[i] * OUT3 * sizeof(float));
        q->pos += chunk[i];
        if (q->pos == q->prompt) {
            q->state = DECODE;
            q->accepted = 1; /* the next step reads column 0, where the prefill wrote */
        }
    }
}

/* ---- the check: each request alone --------------------------------------------------- */

static double worst_rms, worst_max;

static int compare(const float * got, const float * ref, size_t n, int r, const char * what) {
    double err2 = 0.0, ref2 = 0.0, max_err = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - (double)ref[i]);
        err2 += e * e;
        ref2 += (double)ref[i] * ref[i];
        max_err = (e > max_err || isnan(e)) ? e : max_err;
    }
    const double rel_rms = ref2 > 0.0 ? sqrt(err2 / ref2) : sqrt(err2),
                 max_rel = ref2 > 0.0 ? max_err / sqrt(ref2 / (double)n) : max_err;
    worst_rms = rel_rms > worst_rms || isnan(rel_rms) ? rel_rms : worst_rms;
    worst_max = max_rel > worst_max || isnan(max_rel) ? max_rel : worst_max;
    if (rel_rms <= 1e-5 && max_rel <= 1e-3) return 0;
    fprintf(stderr, "request %d %s: rel_rms %.2e max_rel %.2e\n", r, what, rel_rms, max_rel);
    return 1;
}

static void check_request(ssm_context * ctx, int r) {
    request * q = &req[r];
    const int S = q->prompt + q->decode;
    int32_t   cu[2] = {0, S};
    float *   out = alloc_floats((size_t)S * (OUT2 > OUT3 ? OUT2 : OUT3));
    float *   st2 = alloc_floats(ST2), *st3[4];
    for (int k = 0; k < 4; k++) st3[k] = alloc_floats((size_t)ST3W[k]);
    mamba2_forward(ctx, q->in2, S, 1, cu, NULL, NULL, out, st2);
    failures += compare(q->out2, out, (size_t)S * OUT2, r, "mamba2 out");
    failures += compare(q->fin2, st2, ST2, r, "mamba2 final state");
    mamba3_forward(ctx, q->in3, S, 1, cu, NULL, NULL, out, st3);
    failures += compare(q->out3, out, (size_t)S * OUT3, r, "mamba3 out");
    static const char * names[4] = {"mamba3 angle state", "mamba3 ssm state", "mamba3 k state", "mamba3 v state"};
    for (int k = 0; k < 4; k++) failures += compare(q->fin3[k], st3[k], (size_t)ST3W[k], r, names[k]);
    free_floats(out);
    free_floats(st2);
    for (int k = 0; k < 4; k++) free_floats(st3[k]);
}

int main(int argc, char ** argv) {
    on_cuda = argc > 1 && strcmp(argv[1], "cuda") == 0;
    if (argc > 1 && !on_cuda) {
        fprintf(stderr, "usage: %s [cuda]\n", argv[0]);
        return 2;
    }
    if (on_cuda && ssm_cuda_device_count() == 0) {
        printf("serving loop: no CUDA device (or a build without the CUDA backend): skipped\n");
        return 77;
    }
    ssm_context_params cp;
    ssm_context_params_init(&cp);
    cp.backend = on_cuda ? SSM_BACKEND_CUDA : SSM_BACKEND_CPU;
    cp.num_threads = 2;
    ssm_context * ctx = NULL;
    if (ssm_context_create(&cp, &ctx) != SSM_STATUS_OK) return 1;
    g_ctx = ctx;
    track(a2, H2), track(dtb2, H2), track(d2, H2), track(qb3, H3 * K3), track(kb3, H3 * K3), track(d3, H3);

    fill(a2, H2, -2.0f, -0.5f);
    fill(dtb2, H2, -3.0f, -1.0f);
    fill(d2, H2, 0.5f, 1.5f);
    fill(qb3, H3 * K3, -0.5f, 0.5f);
    fill(kb3, H3 * K3, -0.5f, 0.5f);
    fill(d3, H3, 0.5f, 1.5f);
    static const float lo2[NF2] = {-1, -4, -1, -1, -2}, hi2[NF2] = {1, 0, 1, 1, 2};
    static const float lo3[NF3] = {-1, -1, -1, -1.0f, 0.05f, -2, -1, -2}, hi3[NF3] = {1, 1, 1, -0.05f, 0.5f, 2, 1, 2};
    for (int r = 0; r < NREQ; r++) {
        request * q = &req[r];
        q->arrival = irange(0, 40);
        q->prompt = irange(1, MAXPROMPT);
        q->decode = irange(1, MAXDECODE);
        q->state = WAITING;
        for (int f = 0; f < NF2; f++)
            fill(q->in2[f] = alloc_floats((size_t)CAP * W2[f]), (size_t)CAP * W2[f], lo2[f], hi2[f]);
        for (int f = 0; f < NF3; f++)
            fill(q->in3[f] = alloc_floats((size_t)CAP * W3[f]), (size_t)CAP * W3[f], lo3[f], hi3[f]);
        poison(q->out2 = alloc_floats((size_t)CAP * OUT2), (size_t)CAP * OUT2);
        poison(q->out3 = alloc_floats((size_t)CAP * OUT3), (size_t)CAP * OUT3);
        q->fin2 = alloc_floats(ST2);
        for (int k = 0; k < 4; k++) q->fin3[k] = alloc_floats((size_t)ST3W[k]);
    }
    poison_tensor(pool2 = alloc_tensor((size_t)SLOTS * ST2), (size_t)SLOTS * ST2);
    for (int k = 0; k < 4; k++)
        poison_tensor(pool3[k] = alloc_tensor((size_t)SLOTS * ST3W[k]), (size_t)SLOTS * ST3W[k]);
    for (int s = 0; s < SLOTS; s++) free2[s] = free3[s] = 1;
    for (int f = 0; f < NF2; f++) bat2[f] = alloc_floats((size_t)TMAX * W2[f]);
    for (int f = 0; f < NF3; f++)
        bat3[f] = alloc_floats((size_t)TMAX * W3[f]), col3[f] = alloc_floats((size_t)ROWMAX * W3[f]);
    bout2 = alloc_floats((size_t)TMAX * OUT2);
    bout3 = alloc_floats((size_t)TMAX * OUT3);
    cout3 = alloc_floats((size_t)ROWMAX * OUT3);
    inter2 = alloc_floats((size_t)TMAX * ST2);

    int done = 0, it = 0, reused = 0, peak = 0;
    for (; done < NREQ; it++) {
        decode_iteration(ctx, it);
        int running = 0;
        for (int r = 0; r < NREQ; r++) running += req[r].state == PREFILL || req[r].state == DECODE;
        for (int r = 0; r < NREQ && running < MAXRUN; r++) /* admit arrivals into free seats */
            if (req[r].state == WAITING && req[r].arrival <= it) {
                for (int j = 0; j < L; j++) {
                    req[r].slot2[j] = take_slot(free2);
                    req[r].slot3[j] = take_slot(free3);
                }
                req[r].state = PREFILL;
                reused += done > 0;
                running++;
            }
        peak = running > peak ? running : peak;
        prefill_iteration(ctx);
        done = 0;
        for (int r = 0; r < NREQ; r++) done += req[r].state == DONE;
    }

    for (int r = 0; r < NREQ; r++) check_request(ctx, r);
    int ptok = 0, dtok = 0;
    for (int r = 0; r < NREQ; r++) ptok += req[r].prompt, dtok += req[r].decode;
    printf(
        "serving loop: %d requests (%d prompt + %d decode tokens), %d iterations, %d slots, peak %d running,\n"
        "  %d admitted after a request finished; %d prefill calls (%d chunks); %d decode steps,\n"
        "  %d speculative rows (%d draft tokens, %d rejected), %d padding rows\n",
        NREQ, ptok, dtok, it, SLOTS, peak, reused, prefill_calls, prefill_chunks, steps, spec_rows, drafted, rejected,
        pad_rows);
    printf(
        "vs each request alone (mamba2_scan / mamba3_siso): worst rel_rms %.2e (bar 1e-5), worst max_rel %.2e "
        "(bar 1e-3)  %s\n",
        worst_rms, worst_max, failures == 0 ? "PASS" : "FAIL");

    for (int r = 0; r < NREQ; r++) {
        for (int f = 0; f < NF2; f++) free_floats(req[r].in2[f]);
        for (int f = 0; f < NF3; f++) free_floats(req[r].in3[f]);
        free_floats(req[r].out2);
        free_floats(req[r].out3);
        free_floats(req[r].fin2);
        for (int k = 0; k < 4; k++) free_floats(req[r].fin3[k]);
    }
    free_tensor(pool2);
    for (int k = 0; k < 4; k++) free_tensor(pool3[k]);
    for (int f = 0; f < NF2; f++) free_floats(bat2[f]);
    for (int f = 0; f < NF3; f++) free_floats(bat3[f]), free_floats(col3[f]);
    free_floats(bout2);
    free_floats(bout3);
    free_floats(cout3);
    free_floats(inter2);
    for (size_t i = 0; i < narrays; i++) /* the layer parameters' twins */
        if (arrays[i].dev != NULL) check_status(ssm_cuda_free(ctx, arrays[i].dev), ctx, "ssm_cuda_free");
    free(arrays);
    ssm_context_free(ctx);
    return failures == 0 ? 0 : 1;
}
