/*
 * Mamba-2 combined forward on the CPU (spec §1.3, §1.4, §2.6, §2.8):
 * "fused per head, sequential over chunks".
 *
 * Segments. The work is first cut into segments (batch row, first token, length, initial
 * state or none, final-state slot or none) inside which the recurrence never resets:
 * one per batch row; with seq_idx one per run of equal ids (the first run of row b starts
 * from initial_states[b] only if its id is 0 — the recurrence with seq_{−1} := 0 — and
 * the last run writes final_states[b]); with cu_seqlens one per sequence with its own
 * initial/final slot. Chunks are aligned to the segment start, so no mask is needed. With
 * chunk_states a chunk also ends at each chunk boundary of the sequence (its state stored).
 *
 * Tasks. One task per (segment, group, block of heads of the group). A task walks its
 * chunks in order; per chunk (len ≤ Q tokens):
 *   CB = C·Bᵀ (len×len over N), once for the group, reused by every head of the block;
 *   per head: dt processing and the fp32 inclusive cumsum cm (cl = cm[len−1]),
 *     Y  = diag(exp(cm))·C·S                       (state entering the chunk)
 *     Y += Mdiag·X,  Mdiag[i][j] = CB[i][j]·exp(cm_i − cm_j)·dt_j  (j ≤ i, causal GEMM)
 *     out = (Y + D·x)·silu(z)
 *     S  = exp(cl)·S + W·X,  W[n][j] = B[j][n]·exp(cl − cm_j)·dt_j
 * The state of each head is N×P fp32 (P contiguous), so all three GEMMs have P as the
 * vector dimension of their B operand and output. The decomposition is exact, so the
 * result does not depend on the chunk beyond rounding: this driver ignores
 * params->chunk_size and uses SCAN_CHUNK (the public header allows it). The causal
 * diagonal blocks cost 2·S·Q·H·P/2 FLOPs against 4·S·H·P·N for states and off-diagonal
 * outputs. Measured at B=1 S=2048 H=48 P=64 N=128 G=1 fp32, 2 threads (AMD EPYC, AVX2):
 * Q=64 19.6 ms, Q=32 18.1 ms (less diagonal work outweighs the shorter k of the state GEMM).
 *
 * Threads: tasks go to ssmi_parallel_for; each output element and each final state is
 * produced by exactly one task in a fixed order, so results are bitwise equal for any
 * thread count (the head block size may change with the thread count, but a head's
 * arithmetic does not depend on its block). With fewer tasks than threads (one row, one
 * group, few heads) threads idle; splitting one segment across threads needs the
 * state-combine of DESIGN §8 and is left for later.
 *
 * Workspace (exact, 64-byte aligned pieces): the segment list, then one scratch block per
 * thread: head-block states, C, Bᵀ, CB, W, Mdiag, X, Y tiles and small rows.
 */
#include <string.h>

#include "ssmi_cpu.h"
#include "cpu_common.h"

#define SCAN_CHUNK        32           /* internal chunk (see above)                             */
#define SCAN_STATE_BUDGET (512 * 1024) /* bytes of head-block states per thread: half an L2     */

typedef struct scan_segment {
    int64_t row;   /* batch row                              */
    int64_t t0;    /* first token                            */
    int64_t len;   /* tokens                                 */
    int64_t init;  /* index into initial_states, −1 = zeros  */
    int64_t final; /* index into final_states, −1 = none     */
    int64_t start; /* absolute position of the first token   */
    int64_t crow;  /* its first chunk_states row, −1 = none  */
} scan_segment;

typedef struct scan_layout {
    int64_t head_block;     /* heads per task                           */
    int64_t max_segments;   /* entries reserved for the segment list     */
    int64_t segment_bytes;  /* segment list, rounded to lines            */
    int64_t thread_floats;  /* one thread's scratch, whole lines         */
} scan_layout;

static int64_t max_segments(const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a) {
    if (ssmi_present(&a->cu_seqlens)) return d->nseq;
    if (ssmi_present(&a->seq_idx)) return d->batch * (d->seqlen > 0 ? d->seqlen : 1);
    return d->batch;
}

static scan_layout plan_scan(const ssm_context * ctx, const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a) {
    const int64_t Q = SCAN_CHUNK, P = d->headdim, N = d->dstate;
    const int64_t R       = d->ngroups > 0 ? d->nheads / d->ngroups : 0;
    const int64_t threads = ssmi_num_threads(ctx);
    const int64_t rows    = ssmi_present(&a->cu_seqlens) ? d->nseq : d->batch;
    const int64_t state_b = N * P * (int64_t) sizeof(float);
    int64_t       hb      = R > 0 ? R : 1;
    const int64_t cap     = state_b > 0 && SCAN_STATE_BUDGET / state_b > 1 ? SCAN_STATE_BUDGET / state_b : 1;
    if (hb > cap) hb = cap;
    /* enough tasks to keep every thread busy, twice over, when the shape allows it */
    hb = ssmi_cpu_head_block(R, hb, rows * d->ngroups, 2 * threads);
    scan_layout l;
    l.head_block    = hb;
    l.max_segments  = max_segments(d, a);
    /* saturated: a valid but empty call may count 2^61 segments (its workspace request then
     * fails as too large instead of overflowing int64) */
    l.segment_bytes = l.max_segments > (INT64_MAX - SSMI_ALIGN) / (int64_t) sizeof(scan_segment)
                          ? INT64_MAX & ~(int64_t) (SSMI_ALIGN - 1)
                          : ((l.max_segments * (int64_t) sizeof(scan_segment)) + SSMI_ALIGN - 1) & ~(int64_t) (SSMI_ALIGN - 1);
    l.thread_floats = ssmi_cpu_lines(hb * ssmi_cpu_lines(N * P)) + 3 * ssmi_cpu_lines(Q * N) +
                      2 * ssmi_cpu_lines(Q * Q) + 2 * ssmi_cpu_lines(Q * P) + ssmi_cpu_lines(N) +
                      4 * ssmi_cpu_lines(Q) + 2 * ssmi_cpu_lines(P);
    return l;
}

size_t ssmi_cpu_mamba2_scan_workspace_size(const ssm_context * ctx, const ssm_mamba2_params * p,
                                           const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a) {
    (void) p;
    const scan_layout l = plan_scan(ctx, d, a);
    return (size_t) l.segment_bytes + (size_t) ssmi_num_threads(ctx) * (size_t) l.thread_floats * sizeof(float);
}

/* Fills seg[] (at most max_segments entries) and returns the count. With chunk_states
 * (never with seq_idx) each segment is one sequence and gets its first chunk_states row. */
static int64_t build_segments(const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                              const ssm_mamba2_scan_args * a, scan_segment * seg) {
    const int has_init = ssmi_present(&a->initial_states), has_final = ssmi_present(&a->final_states);
    const int has_chunks = ssmi_present(&a->chunk_states);
    int64_t   count    = 0, crow = 0;
    if (ssmi_present(&a->cu_seqlens)) {
        const ssm_tensor * cu = &a->cu_seqlens;
        for (int64_t s = 0; s < d->nseq; ++s) {
            const int64_t st = ssmi_get_i64(cu, ssmi_off1(cu, s)), en = ssmi_get_i64(cu, ssmi_off1(cu, s + 1));
            const int64_t start = ssmi_computed_tokens(&a->num_computed_tokens, s);
            seg[count++] = (scan_segment) { 0, st, en - st, has_init ? s : -1, has_final ? s : -1, start,
                                            has_chunks ? crow : -1 };
            crow += has_chunks ? ssmi_chunk_state_rows(start, en - st, p->chunk_size) : 0;
        }
        return count;
    }
    for (int64_t b = 0; b < d->batch; ++b) {
        if (!ssmi_present(&a->seq_idx) || d->seqlen == 0) {
            const int64_t start = ssmi_computed_tokens(&a->num_computed_tokens, b);
            seg[count++] = (scan_segment) { b, 0, d->seqlen, has_init ? b : -1, has_final ? b : -1, start,
                                            has_chunks ? crow : -1 };
            crow += has_chunks ? ssmi_chunk_state_rows(start, d->seqlen, p->chunk_size) : 0;
            continue;
        }
        for (int64_t t0 = 0, t1, id; t0 < d->seqlen; t0 = t1) {
            t1 = ssmi_cpu_seq_run(&a->seq_idx, b, t0, d->seqlen, &id);
            seg[count++] = (scan_segment) { b, t0, t1 - t0, (t0 == 0 && has_init && id == 0) ? b : -1,
                                            (t1 == d->seqlen && has_final) ? b : -1, 0, -1 };
        }
    }
    return count;
}

typedef struct scan_job {
    const ssm_mamba2_params *    params;
    const ssmi_mamba2_dims *     dims;
    const ssm_mamba2_scan_args * args;
    const ssmi_cpu_kernels *     kernels;
    const scan_segment *         segments;
    int64_t                      head_blocks; /* per group */
    int64_t                      head_block;
    float *                      scratch;
    int64_t                      thread_floats;
} scan_job;

/* Asks for the next head's x (and z) rows of this chunk while this head computes: the
 * rows are H·P elements apart, a stride the hardware prefetcher follows poorly (memcpy of
 * those rows took a third of the time with z before this). */
static void prefetch_rows(const ssm_tensor * t, int64_t row, int64_t t0, int64_t len, int64_t h, int64_t P) {
    const size_t es   = ssm_dtype_size((ssm_dtype) t->dtype);
    const size_t span = (size_t) (P > 0 ? (P - 1) * t->strides[3] : 0) * es;
    for (int64_t i = 0; i < len; ++i) {
        const char * p = (const char *) t->data + (size_t) ssmi_off4(t, row, t0 + i, h, 0) * es;
        for (size_t o = 0; o <= span; o += 64) __builtin_prefetch(p + o);
    }
}

/* Processed dt and its fp32 inclusive cumsum for tokens [t0, t0+len) of head h. */
static void chunk_dt(const scan_job * job, int64_t row, int64_t t0, int64_t len, int64_t h, float * dtv,
                     float * cm) {
    const ssm_mamba2_scan_args * a    = job->args;
    const ssm_mamba2_params *    prm  = job->params;
    const float                  ah   = ssmi_get_f32(&a->a, ssmi_off1(&a->a, h));
    const float bias = ssmi_present(&a->dt_bias) ? ssmi_get_f32(&a->dt_bias, ssmi_off1(&a->dt_bias, h)) : 0.0f;
    float       run  = 0.0f;
    for (int64_t i = 0; i < len; ++i) {
        const float v = ssmi_cpu_process_dt(ssmi_get_f32(&a->dt, ssmi_off3(&a->dt, row, t0 + i, h)) + bias,
                                            prm->dt_softplus, prm->dt_limit_lo, prm->dt_limit_hi);
        run += v * ah;
        dtv[i] = v;
        cm[i]  = run;
    }
}

static void scan_task(void * arg, int64_t task, int32_t thread) {
    const scan_job *             job = (const scan_job *) arg;
    const ssm_mamba2_scan_args * a   = job->args;
    const ssmi_mamba2_dims *     d   = job->dims;
    const ssmi_cpu_kernels *     k   = job->kernels;
    const int64_t H = d->nheads, P = d->headdim, N = d->dstate, G = d->ngroups, R = H / G, Q = SCAN_CHUNK;
    const int64_t        per_seg = G * job->head_blocks;
    const scan_segment * seg     = &job->segments[task / per_seg];
    const int64_t        g       = (task % per_seg) / job->head_blocks;
    const int64_t        h0      = g * R + (task % job->head_blocks) * job->head_block;
    const int64_t        nh      = (g + 1) * R - h0 < job->head_block ? (g + 1) * R - h0 : job->head_block;
    const int64_t        row     = seg->row;

    float * st   = job->scratch + (int64_t) thread * job->thread_floats; /* states [nh][N][P] */
    float * ct   = st + ssmi_cpu_lines(job->head_block * ssmi_cpu_lines(N * P));
    float * bt   = ct + ssmi_cpu_lines(Q * N);   /* Bᵀ     [N][Q]   */
    float * w    = bt + ssmi_cpu_lines(Q * N);   /* W      [N][Q]   */
    float * cb   = w + ssmi_cpu_lines(Q * N);    /* CB     [Q][Q]   */
    float * mm   = cb + ssmi_cpu_lines(Q * Q);   /* Mdiag  [Q][Q]   */
    float * xt   = mm + ssmi_cpu_lines(Q * Q);   /* X      [len][P] */
    float * yt   = xt + ssmi_cpu_lines(Q * P);   /* Y      [len][P] */
    float * brow = yt + ssmi_cpu_lines(Q * P);   /* one B row [N]   */
    float * dtv  = brow + ssmi_cpu_lines(N);     /* [Q] */
    float * cm   = dtv + ssmi_cpu_lines(Q);      /* [Q] */
    float * ecm  = cm + ssmi_cpu_lines(Q);       /* [Q] */
    float * wexp = ecm + ssmi_cpu_lines(Q);      /* [Q] */
    float * dvec = wexp + ssmi_cpu_lines(Q);     /* [P] */
    float * zrow = dvec + ssmi_cpu_lines(P);     /* [P] */
    const int64_t state_stride = ssmi_cpu_lines(N * P);

    const ssm_tensor * init = &a->initial_states;
    for (int64_t hh = 0; hh < nh; ++hh) {
        float * s = st + hh * state_stride;
        if (seg->init >= 0) {
            for (int64_t n = 0; n < N; ++n)
                k->load_row(s + n * P, init->data, init->dtype, ssmi_off4(init, seg->init, h0 + hh, 0, n),
                            init->strides[2], P);
        } else {
            memset(s, 0, (size_t) (N * P) * sizeof(float));
        }
    }

    /* With chunk_states a chunk also ends at every chunk boundary of the sequence (absolute
     * position + 1 a multiple of params->chunk_size), where the state is stored. */
    const int64_t K    = job->params->chunk_size;
    int64_t       crow = seg->crow;
    for (int64_t c0 = 0, L = 0; c0 < seg->len; c0 += L) {
        L = seg->len - c0 < Q ? seg->len - c0 : Q;
        const int64_t to_boundary = K - (seg->start + c0) % K;
        if (crow >= 0 && to_boundary < L) L = to_boundary;
        const int64_t t0 = seg->t0 + c0;
        for (int64_t j = 0; j < L; ++j) {
            k->load_row(ct + j * N, a->c.data, a->c.dtype, ssmi_off4(&a->c, row, t0 + j, g, 0), a->c.strides[3], N);
            k->load_row(brow, a->b.data, a->b.dtype, ssmi_off4(&a->b, row, t0 + j, g, 0), a->b.strides[3], N);
            for (int64_t n = 0; n < N; ++n) bt[n * Q + j] = brow[n];
        }
        k->gemm(L, L, N, ct, N, 1, bt, Q, cb, Q, NULL, 0.0f, 0);

        for (int64_t hh = 0; hh < nh; ++hh) {
            const int64_t h = h0 + hh;
            float *       s = st + hh * state_stride;
            if (hh + 1 < nh && a->x.strides[3] == 1) {
                prefetch_rows(&a->x, row, t0, L, h + 1, P);
                if (ssmi_present(&a->z) && a->z.strides[3] == 1) prefetch_rows(&a->z, row, t0, L, h + 1, P);
            }
            chunk_dt(job, row, t0, L, h, dtv, cm);
            const float cl = cm[L - 1];
            for (int64_t j = 0; j < L; ++j) wexp[j] = cl - cm[j];
            k->vexp(L, wexp, wexp);
            for (int64_t j = 0; j < L; ++j) wexp[j] *= dtv[j];
            k->vexp(L, cm, ecm);
            float ecl = cl;
            k->vexp(1, &ecl, &ecl);
            for (int64_t j = 0; j < L; ++j)
                k->load_row(xt + j * P, a->x.data, a->x.dtype, ssmi_off4(&a->x, row, t0 + j, h, 0), a->x.strides[3], P);

            /* outputs: Y = diag(exp cm)·C·S + Mdiag·X, then D, z, store */
            k->gemm(L, P, N, ct, N, 1, s, P, yt, P, ecm, 0.0f, 0);
            k->decay_rows(L, L, cb, Q, cm, dtv, mm, Q);
            k->gemm(L, P, L, mm, Q, 1, xt, P, yt, P, NULL, 1.0f, 1);
            const int has_d = ssmi_present(&a->d);
            if (has_d) {
                if (a->d.ndim == 2) {
                    k->load_row(dvec, a->d.data, a->d.dtype, ssmi_off2(&a->d, h, 0), a->d.strides[1], P);
                } else {
                    const float dh = ssmi_get_f32(&a->d, ssmi_off1(&a->d, h));
                    for (int64_t p = 0; p < P; ++p) dvec[p] = dh;
                }
            }
            for (int64_t i = 0; i < L; ++i) {
                float *       y = yt + i * P;
                const float * x = xt + i * P;
                if (has_d)
                    for (int64_t p = 0; p < P; ++p) y[p] += dvec[p] * x[p];
                if (ssmi_present(&a->z)) {
                    k->load_row(zrow, a->z.data, a->z.dtype, ssmi_off4(&a->z, row, t0 + i, h, 0), a->z.strides[3], P);
                    k->silu_gate(P, y, zrow, y);
                }
                k->store_row(a->out.data, a->out.dtype, ssmi_off4(&a->out, row, t0 + i, h, 0), a->out.strides[3], y, P);
            }

            /* state: S = exp(cl)·S + W·X */
            for (int64_t n = 0; n < N; ++n) {
                const float * bn = bt + n * Q;
                float *       wn = w + n * Q;
                for (int64_t j = 0; j < L; ++j) wn[j] = bn[j] * wexp[j];
            }
            k->gemm(N, P, L, w, Q, 1, xt, P, s, P, NULL, ecl, 0);
        }
        if (crow >= 0 && L == to_boundary) {
            const ssm_tensor * cs = &a->chunk_states;
            for (int64_t hh = 0; hh < nh; ++hh)
                for (int64_t n = 0; n < N; ++n)
                    k->store_row(cs->data, cs->dtype, ssmi_off4(cs, crow, h0 + hh, 0, n), cs->strides[2],
                                 st + hh * state_stride + n * P, P);
            ++crow;
        }
    }

    if (seg->final >= 0) {
        const ssm_tensor * fs = &a->final_states;
        for (int64_t hh = 0; hh < nh; ++hh)
            for (int64_t n = 0; n < N; ++n)
                k->store_row(fs->data, fs->dtype, ssmi_off4(fs, seg->final, h0 + hh, 0, n), fs->strides[2],
                             st + hh * state_stride + n * P, P);
    }
}

ssm_status ssmi_cpu_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                const ssm_mamba2_scan_args * a, void * workspace) {
    if (d->nheads == 0 || d->ngroups == 0 || d->headdim == 0) return SSM_STATUS_OK;
    const scan_layout l        = plan_scan(ctx, d, a);
    scan_segment *    segments = (scan_segment *) workspace;
    const int64_t     nseg     = build_segments(p, d, a, segments);
    scan_job          job;
    job.params        = p;
    job.dims          = d;
    job.args          = a;
    job.kernels       = ssmi_cpu_kernels_for(ctx);
    job.segments      = segments;
    job.head_block    = l.head_block;
    job.head_blocks   = (d->nheads / d->ngroups + l.head_block - 1) / l.head_block;
    job.scratch       = (float *) ((char *) workspace + l.segment_bytes);
    job.thread_floats = l.thread_floats;
    ssmi_parallel_for(ctx, nseg * d->ngroups * job.head_blocks, scan_task, &job);
    return SSM_STATUS_OK;
}
