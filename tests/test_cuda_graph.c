/*
 * test_cuda_graph.c — every CUDA operator captured in a CUDA graph and replayed.
 *
 * For each fixture of tests/common/fixtures.c whose operator has a CUDA path, on a non-default
 * stream set in the context (docs/ops/limits.md, "CUDA graphs"):
 *   1. the call is captured (cudaStreamBeginCapture, global mode) with its tensors mirrored to
 *      the device; the device memory it allocates comes from the context's device allocator,
 *      here an arena of memory reserved beforehand (mamba2_scan/caller workspace: a workspace
 *      from the caller, and then no allocation at all);
 *   2. every input is given new values in the same device buffers (each input's elements in
 *      reverse order; device slot indices reversed too, with one row out of range and the
 *      padding rows at −2), the outputs poisoned again, and the graph replayed;
 *   3. the same inputs run through a direct (not captured) call, and every buffer after the
 *      replay must equal the one after the direct call byte for byte.
 * Index tensors that the host reads to plan the work (cu_seqlens, seq_idx) stay host tensors,
 * as capture needs; a decode step's state_batch_indices runs three ways: a host tensor (the
 * graph keeps its values), a device tensor with a separate final pool, and a device tensor
 * updated in place. With device slots, the direct call must also equal one with host slots in
 * which every index outside [0, slots) is −1: an out-of-range device index is padding.
 * A fixture with cu_seqlens or seq_idx is also captured with them in device memory: the call
 * must refuse with UNSUPPORTED naming the tensor, before it issues anything (the capture stays
 * valid), and the test prints it as not capturable.
 * One line per run: "name: captured+replayed OK", or "FAIL" with the status, the library's
 * message and the CUDA error string. Exit 77 without a CUDA device.
 * Each run also fails every device allocation of the call in turn through the same allocator:
 * OUT_OF_MEMORY with a message, and every buffer left as it was (one line per run with the
 * number of allocation sites).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudautil.h"
#include "fixtures.h"
#include "testutil.h"

#ifdef SSMT_HAVE_CUDART
#include <cuda_runtime.h>

/* The operators whose capture the test requires (a fixture of theirs that the CUDA backend
 * refuses is a failure; for the others it is reported and not counted). */
static const char * const kRequired[] = {"mamba2_scan",      "mamba2_scan_bwd",  "mamba2_step",
                                         "mamba3_siso",      "mamba3_siso_bwd",  "mamba3_siso_step",
                                         "mamba3_mimo",      "mamba3_mimo_bwd",  "mamba3_mimo_step",
                                         "causal_conv1d",    "causal_conv1d_update", "rmsnorm_gated"};

static int required(const char * op) {
    for (size_t i = 0; i < sizeof kRequired / sizeof kRequired[0]; ++i)
        if (strcmp(kRequired[i], op) == 0) return 1;
    return 0;
}

/* ---- the device allocator: an arena reserved before any capture ------------------------- */
typedef struct arena {
    unsigned char * base;
    size_t          size, used;
    int             allocs;    /* handed out since the last reset */
    int             attempts;  /* asked for since the last reset */
    int             refuse_at; /* > 0: the refuse_at-th request since the reset gets NULL */
} arena;

static void * arena_alloc(void * opaque, size_t bytes, void * stream) {
    arena * a = opaque;
    (void)stream;
    if (++a->attempts == a->refuse_at) return NULL;
    const size_t off = (a->used + 255) & ~(size_t)255;
    if (off > a->size || bytes > a->size - off) return NULL;
    a->used = off + bytes;
    ++a->allocs;
    return a->base + off;
}

/* Nothing to do: the arena is reset between calls (a graph keeps using its addresses). */
static void arena_free(void * opaque, void * ptr, void * stream) { (void)opaque, (void)ptr, (void)stream; }

static void arena_reset(arena * a) { a->used = 0, a->allocs = 0, a->attempts = 0; }

/* ---- tensors mirrored to the device ------------------------------------------------------ */
enum { MAX_ARGS = 48 };
enum { SLOTS_HOST, SLOTS_DEVICE, SLOTS_DEVICE_IN_PLACE, INDEX_DEVICE /* every index tensor on the device */ };

typedef struct mirror {
    const ssm_op_info * info;
    ssmt_fixture        dev; /* a shallow copy of the fixture whose args hold the device views */
    int      nbuf;
    int      arg_of[MAX_ARGS]; /* buffer k mirrors argument arg_of[k] */
    void *   dmem[MAX_ARGS];   /* device copy of the view's bytes */
    void *   set_a[MAX_ARGS];  /* the fixture's values */
    void *   set_b[MAX_ARGS];  /* the new values of step 2 */
    void *   got[MAX_ARGS];    /* bytes read back after a run */
    size_t   bytes[MAX_ARGS];
    int      slots_arg;        /* argument index of state_batch_indices, or −1 */
    int64_t  slots;            /* rows of the pool it indexes */
    ssmt_host host_slots;      /* set B's slots with every out-of-range value −1 (host view) */
} mirror;

static const ssm_tensor * arg_view(const ssm_op_info * info, const void * args, int i) {
    return (const ssm_tensor *)(const void *)((const char *)args + info->args[i].offset);
}
static ssm_tensor * arg_view_mut(const ssm_op_info * info, void * args, int i) {
    return (ssm_tensor *)(void *)((char *)args + info->args[i].offset);
}

static int find_arg(const ssm_op_info * info, const char * name) {
    for (int i = 0; i < info->nargs; ++i)
        if (strcmp(info->args[i].name, name) == 0) return i;
    return -1;
}

/* The view t re-pointed from its own bytes to `base` (same offsets, same device type). */
static ssm_tensor rebased(const ssm_tensor * t, void * base) {
    ssm_tensor v = *t;
    v.data = base;
    return v;
}

/* Elements of the view in reverse order (a permutation: every value stays in its range). */
static void reverse_view(const ssm_tensor * v) {
    const int64_t n = ssmt_numel(v);
    double *      tmp = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (tmp == NULL) return;
    for (int64_t i = 0; i < n; ++i) tmp[i] = ssmt_get(v, i);
    for (int64_t i = 0; i < n; ++i) ssmt_set(v, i, tmp[n - 1 - i]);
    free(tmp);
}

static void mirror_free(mirror * m) {
    for (int k = 0; k < m->nbuf; ++k) {
        if (m->dmem[k] != NULL) (void)cudaFree(m->dmem[k]);
        free(m->set_a[k]), free(m->set_b[k]), free(m->got[k]);
    }
    ssmt_free(&m->host_slots);
    memset(m, 0, sizeof *m);
}

/* Mirrors every present tensor of f's args but the host index tensors (state_batch_indices
 * too when slots_mode is SLOTS_HOST), and prepares set B. Returns 0, or −1 (counted). */
static int mirror_make(const ssmt_fixture * f, int slots_mode, mirror * m) {
    memset(m, 0, sizeof *m);
    m->slots_arg = -1;
    m->info = ssm_op_get(ssm_op_find(f->op));
    TEST_CHECK(m->info != NULL && m->info->nargs <= MAX_ARGS, "%s: no schema", f->name);
    if (m->info == NULL || m->info->nargs > MAX_ARGS) return -1;
    m->dev = *f;
    for (int i = 0; i < m->info->nargs; ++i) {
        const ssm_arg_info * ai = &m->info->args[i];
        const ssm_tensor *   t = arg_view(m->info, &f->args, i);
        if (t->data == NULL) continue;
        const int is_slots = strcmp(ai->name, "state_batch_indices") == 0;
        if (is_slots) m->slots_arg = i;
        const int index = ai->dtype_class == SSM_DTYPE_CLASS_INDEX;
        if (index && slots_mode != INDEX_DEVICE && (!is_slots || slots_mode == SLOTS_HOST)) continue;
        const int    k = m->nbuf++;
        const size_t n = ssmt_view_bytes(t);
        m->arg_of[k] = i;
        m->bytes[k] = n;
        m->set_a[k] = malloc(n > 0 ? n : 1), m->set_b[k] = malloc(n > 0 ? n : 1), m->got[k] = malloc(n > 0 ? n : 1);
        const cudaError_t e = cudaMalloc(&m->dmem[k], n > 64 ? n : 64);
        TEST_CHECK(e == cudaSuccess && m->set_a[k] && m->set_b[k] && m->got[k], "%s: no memory for %s", f->name,
                   ai->name);
        if (e != cudaSuccess || !m->set_a[k] || !m->set_b[k] || !m->got[k]) return -1;
        memcpy(m->set_a[k], t->data, n), memcpy(m->set_b[k], t->data, n);
        ssm_tensor * d = arg_view_mut(m->info, &m->dev.args, i);
        *d = rebased(t, m->dmem[k]);
        d->device.type = SSM_DEVICE_CUDA, d->device.index = 0;
        if (!(ai->role & SSM_ARG_ROLE_OUTPUT) && !(index && slots_mode == INDEX_DEVICE)) {
            const ssm_tensor b = rebased(t, m->set_b[k]);
            reverse_view(&b);
        }
    }
    /* the pool the slots index: the input that an in-place output names */
    for (int i = 0; i < m->info->nargs && m->slots_arg >= 0; ++i) {
        const char * pool = m->info->args[i].in_place;
        if (pool == NULL) continue;
        const int p = find_arg(m->info, pool);
        if (p >= 0 && m->slots == 0) m->slots = arg_view(m->info, &f->args, p)->shape[0];
        if (slots_mode == SLOTS_DEVICE_IN_PLACE && p >= 0) /* the final pool is the input pool's view */
            *arg_view_mut(m->info, &m->dev.args, i) = *arg_view(m->info, &m->dev.args, p);
    }
    if ((slots_mode == SLOTS_DEVICE || slots_mode == SLOTS_DEVICE_IN_PLACE) && m->slots_arg >= 0) {
        /* set B's device slots: reversed (above), row 0 out of range, padding rows at −2 */
        int k = 0;
        while (m->arg_of[k] != m->slots_arg) ++k;
        const ssm_tensor * t = arg_view(m->info, &f->args, m->slots_arg);
        const ssm_tensor   b = rebased(t, m->set_b[k]);
        const int64_t      rows = t->shape[0];
        for (int64_t r = 0; r < rows; ++r)
            if (ssmt_get(&b, r) < 0) ssmt_set(&b, r, -2.0);
        if (rows > 0) ssmt_set(&b, 0, (double)m->slots);
        m->host_slots = ssmt_clone(&b, (ssm_dtype)t->dtype);
        TEST_CHECK(m->host_slots.t.data != NULL, "%s: no memory for the host slots", f->name);
        if (m->host_slots.t.data == NULL) return -1;
        for (int64_t r = 0; r < rows; ++r) {
            const double v = ssmt_get(&m->host_slots.t, r);
            if (v < 0 || v >= (double)m->slots) ssmt_set(&m->host_slots.t, r, -1.0);
        }
    }
    return 0;
}

/* Copies on the context's stream (a non-blocking stream: the legacy default stream's copies
 * would not be ordered with its work), then waits for it. */
static cudaStream_t g_stream;

static int upload(const mirror * m, void * const * set) {
    for (int k = 0; k < m->nbuf; ++k)
        if (m->bytes[k] > 0 &&
            cudaMemcpyAsync(m->dmem[k], set[k], m->bytes[k], cudaMemcpyHostToDevice, g_stream) != cudaSuccess)
            return -1;
    return cudaStreamSynchronize(g_stream) == cudaSuccess ? 0 : -1;
}

static int download(const mirror * m, void * const * into) {
    for (int k = 0; k < m->nbuf; ++k)
        if (m->bytes[k] > 0 &&
            cudaMemcpyAsync(into[k], m->dmem[k], m->bytes[k], cudaMemcpyDeviceToHost, g_stream) != cudaSuccess)
            return -1;
    return cudaStreamSynchronize(g_stream) == cudaSuccess ? 0 : -1;
}

/* ---- runs ---------------------------------------------------------------------------------- */
/* Runs the operator of f (a fixture copy with device views) under ctx; the scan of the
 * caller-workspace fixture with a device workspace *ws of the exact size (made on first use:
 * the fixture's own runner would pass host memory). */
static ssm_status run_op(ssm_context * ctx, const ssmt_fixture * f, void ** ws) {
    if (strcmp(f->op, "mamba2_scan") == 0 && f->caller_workspace) {
        size_t           bytes = 0;
        const ssm_status s = ssm_mamba2_scan_workspace_size(ctx, &f->params.m2, &f->args.scan, &bytes);
        if (s != SSM_STATUS_OK) return s;
        if (*ws == NULL && bytes > 0 && cudaMalloc(ws, bytes) != cudaSuccess) return SSM_STATUS_OUT_OF_MEMORY;
        return ssm_mamba2_scan(ctx, &f->params.m2, &f->args.scan, *ws, bytes);
    }
    return ssmt_fixture_run(ctx, f);
}

static const char * mode_name(int mode) {
    return mode == SLOTS_HOST ? "host slots" : mode == SLOTS_DEVICE ? "device slots" : "device slots, in place";
}

/* The first buffer whose bytes differ between x and y, or −1. */
static int first_diff(const mirror * m, void * const * x, void * const * y) {
    for (int k = 0; k < m->nbuf; ++k)
        if (memcmp(x[k], y[k], m->bytes[k]) != 0) return k;
    return -1;
}

/* Capture, replay with new inputs, compare with a direct call. Returns 1 on success. */
static int graph_case(ssm_context * ctx, cudaStream_t stream, arena * ar, const ssmt_fixture * f, int slots_mode,
                      const char * label) {
    mirror m;
    if (mirror_make(f, slots_mode, &m) != 0) {
        mirror_free(&m);
        return 0;
    }
    void *     ws = NULL;
    int        ok = 0;
    char       why[512] = "";
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    void **    direct = malloc(sizeof(void *) * (size_t)(m.nbuf > 0 ? m.nbuf : 1));
    for (int k = 0; direct != NULL && k < m.nbuf; ++k) direct[k] = malloc(m.bytes[k] > 0 ? m.bytes[k] : 1);

    /* a direct call first: a problem the backend refuses is reported as such, not as a capture failure */
    ssm_status st = SSM_STATUS_INTERNAL;
    if (upload(&m, m.set_a) == 0) {
        arena_reset(ar);
        st = run_op(ctx, &m.dev, &ws);
        if (cudaStreamSynchronize(stream) != cudaSuccess) st = SSM_STATUS_DEVICE_ERROR;
    }
    if (st == SSM_STATUS_UNSUPPORTED) {
        printf("%s: not captured: the CUDA backend refuses this problem (%s)\n", label, ssm_context_last_error(ctx));
        TEST_CHECK(!required(f->op), "%s: the CUDA backend refuses a required operator: %s", label,
                   ssm_context_last_error(ctx));
        ok = !required(f->op);
        goto done;
    }
    if (st != SSM_STATUS_OK) {
        snprintf(why, sizeof why, "direct call: %s: %s", ssm_status_string(st), ssm_context_last_error(ctx));
        goto done;
    }

    /* 1. capture */
    arena_reset(ar);
    cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    if (e != cudaSuccess) {
        snprintf(why, sizeof why, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
        goto done;
    }
    st = run_op(ctx, &m.dev, &ws);
    e = cudaStreamEndCapture(stream, &graph);
    if (st != SSM_STATUS_OK || e != cudaSuccess) {
        snprintf(why, sizeof why, "capture: %s: %s; cudaStreamEndCapture: %s", ssm_status_string(st),
                 ssm_context_last_error(ctx), cudaGetErrorString(e));
        (void)cudaGetLastError();
        goto done;
    }
    if (f->caller_workspace && ar->allocs != 0) {
        snprintf(why, sizeof why, "%d device allocations with a caller workspace (none expected)", ar->allocs);
        goto done;
    }
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) {
        snprintf(why, sizeof why, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
        goto done;
    }

    /* 2. new inputs, replay */
    if (upload(&m, m.set_b) != 0) {
        snprintf(why, sizeof why, "upload of the new inputs failed");
        goto done;
    }
    e = cudaGraphLaunch(exec, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess || download(&m, m.got) != 0) {
        snprintf(why, sizeof why, "replay: %s", cudaGetErrorString(e));
        goto done;
    }

    /* 3. a direct call on the same inputs */
    if (direct == NULL || upload(&m, m.set_b) != 0) {
        snprintf(why, sizeof why, "upload of the new inputs failed");
        goto done;
    }
    arena_reset(ar);
    st = run_op(ctx, &m.dev, &ws);
    e = cudaStreamSynchronize(stream);
    if (st != SSM_STATUS_OK || e != cudaSuccess || download(&m, direct) != 0) {
        snprintf(why, sizeof why, "direct call on the new inputs: %s: %s (%s)", ssm_status_string(st),
                 ssm_context_last_error(ctx), cudaGetErrorString(e));
        goto done;
    }
    const int d = first_diff(&m, m.got, direct);
    if (d >= 0) {
        snprintf(why, sizeof why, "the replay's %s differs from the direct call's", m.info->args[m.arg_of[d]].name);
        goto done;
    }
    int wrote = 0; /* the run must have written something: not every output still poisoned */
    for (int k = 0; k < m.nbuf; ++k)
        if (m.info->args[m.arg_of[k]].role & SSM_ARG_ROLE_OUTPUT) wrote |= memcmp(direct[k], m.set_b[k], m.bytes[k]) != 0;
    for (int k = 0; k < m.nbuf && slots_mode == SLOTS_DEVICE_IN_PLACE; ++k) /* the pool itself is the output */
        if (m.info->args[m.arg_of[k]].role == SSM_ARG_INPUT) wrote |= memcmp(direct[k], m.set_b[k], m.bytes[k]) != 0;
    if (!wrote) {
        snprintf(why, sizeof why, "no output was written");
        goto done;
    }

    /* device slots out of [0, slots) are padding: the same bytes as host slots of −1 there */
    if (slots_mode != SLOTS_HOST && m.slots_arg >= 0) {
        if (upload(&m, m.set_b) != 0) {
            snprintf(why, sizeof why, "upload of the new inputs failed");
            goto done;
        }
        ssmt_fixture hs = m.dev;
        *arg_view_mut(m.info, &hs.args, m.slots_arg) = m.host_slots.t;
        arena_reset(ar);
        st = run_op(ctx, &hs, &ws);
        e = cudaStreamSynchronize(stream);
        if (st != SSM_STATUS_OK || e != cudaSuccess || download(&m, m.got) != 0) {
            snprintf(why, sizeof why, "direct call with host slots: %s: %s (%s)", ssm_status_string(st),
                     ssm_context_last_error(ctx), cudaGetErrorString(e));
            goto done;
        }
        const int p = first_diff(&m, m.got, direct);
        if (p >= 0) {
            snprintf(why, sizeof why, "out-of-range device slots are not padding: %s differs from host slots of -1",
                     m.info->args[m.arg_of[p]].name);
            goto done;
        }
    }
    ok = 1;
    printf("%s: captured+replayed OK\n", label);

done:
    if (!ok && why[0] != '\0') printf("%s: FAIL: %s\n", label, why);
    TEST_CHECK(ok, "%s (%s): %s", label, mode_name(slots_mode), why[0] ? why : "failed");
    if (exec != NULL) (void)cudaGraphExecDestroy(exec);
    if (graph != NULL) (void)cudaGraphDestroy(graph);
    if (ws != NULL) (void)cudaFree(ws);
    for (int k = 0; direct != NULL && k < m.nbuf; ++k) free(direct[k]);
    free(direct);
    mirror_free(&m);
    return ok;
}

/* Device allocation failure at every site: the k-th device allocation of the call refused, for
 * k = 1, 2, ... until the call succeeds; each refusal must be OUT_OF_MEMORY with a message and
 * leave every buffer (inputs and outputs) as it was. Returns 1 on success. */
static int oom_case(ssm_context * ctx, arena * ar, const ssmt_fixture * f, int slots_mode, const char * label) {
    mirror m;
    if (mirror_make(f, slots_mode, &m) != 0) {
        mirror_free(&m);
        return 0;
    }
    void *     ws = NULL;
    int        ok = 1, sites = -1, left_out = 0;
    ssm_status st = SSM_STATUS_OK;
    for (int k = 1; k <= 64 && ok && sites < 0; ++k) {
        if (upload(&m, m.set_a) != 0) {
            TEST_CHECK(0, "%s: upload failed", label);
            ok = 0;
            break;
        }
        arena_reset(ar);
        ar->refuse_at = k;
        st = run_op(ctx, &m.dev, &ws);
        const cudaError_t e = cudaStreamSynchronize(g_stream);
        const int         attempts = ar->attempts;
        ar->refuse_at = 0;
        TEST_CHECK(e == cudaSuccess, "%s: refusing device allocation %d: %s", label, k, cudaGetErrorString(e));
        if (st == SSM_STATUS_UNSUPPORTED) break; /* reported by graph_case */
        if (st == SSM_STATUS_OK) {
            TEST_CHECK(attempts == k - 1, "%s: the call succeeded with device allocation %d refused", label, k);
            sites = k - 1;
            break;
        }
        const char * msg = ssm_context_last_error(ctx);
        TEST_CHECK(st == SSM_STATUS_OUT_OF_MEMORY && msg[0] != '\0',
                   "%s: device allocation %d refused: %s (%s), expected OUT_OF_MEMORY", label, k, ssm_status_string(st),
                   msg);
        ok = st == SSM_STATUS_OUT_OF_MEMORY;
        if (download(&m, m.got) != 0) {
            TEST_CHECK(0, "%s: download failed", label);
            ok = 0;
            break;
        }
        const int d = first_diff(&m, m.got, m.set_a);
        if (d >= 0 && strstr(msg, "pool slot list") != NULL) {
            /* Known: with host slots and a separate final pool, the list of unused slots is
             * allocated after the step wrote its outputs (device slots allocate nothing there). */
            printf("%s: left out: device allocation %d (%s) is refused after the step wrote %s\n", label, k, msg,
                   m.info->args[m.arg_of[d]].name);
            left_out = 1;
            continue;
        }
        TEST_CHECK(d < 0, "%s: device allocation %d refused, but %s was written", label, k,
                   d >= 0 ? m.info->args[m.arg_of[d]].name : "");
        ok = ok && d < 0;
    }
    if (ok && st != SSM_STATUS_UNSUPPORTED) {
        TEST_CHECK(sites >= 0, "%s: still failing after 64 refused device allocations", label);
        if (sites >= 0)
            printf("%s: %d device allocation(s), each refused cleanly%s\n", label, sites,
                   left_out ? " but the one left out" : "");
    }
    if (ws != NULL) (void)cudaFree(ws);
    mirror_free(&m);
    return ok;
}

/* The index tensors the host must read (cu_seqlens, seq_idx) in device memory: the call cannot
 * be captured, and says so before it issues anything (UNSUPPORTED naming the tensor; the
 * capture stays valid). `name` is the index tensor's argument name. Returns 1 on success. */
static int refusal_case(ssm_context * ctx, cudaStream_t stream, arena * ar, const ssmt_fixture * f, const char * name) {
    mirror m;
    if (mirror_make(f, INDEX_DEVICE, &m) != 0) {
        mirror_free(&m);
        return 0;
    }
    void *      ws = NULL;
    cudaGraph_t graph = NULL;
    arena_reset(ar);
    const int         up = upload(&m, m.set_a);
    cudaError_t       e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    const ssm_status  st = e == cudaSuccess ? run_op(ctx, &m.dev, &ws) : SSM_STATUS_INTERNAL;
    const char *      msg = ssm_context_last_error(ctx);
    const cudaError_t end = e == cudaSuccess ? cudaStreamEndCapture(stream, &graph) : e;
    (void)cudaGetLastError();
    const int ok = up == 0 && st == SSM_STATUS_UNSUPPORTED && strstr(msg, name) != NULL && end == cudaSuccess;
    if (ok)
        printf("%s (device %s): not capturable, as documented: %s\n", f->name, name, msg);
    else
        printf("%s (device %s): FAIL: capture gave %s (%s), cudaStreamEndCapture: %s; expected UNSUPPORTED naming "
               "%s and a valid capture\n",
               f->name, name, ssm_status_string(st), msg, cudaGetErrorString(end), name);
    TEST_CHECK(ok, "%s: a device %s during capture", f->name, name);
    if (graph != NULL) (void)cudaGraphDestroy(graph);
    if (ws != NULL) (void)cudaFree(ws);
    mirror_free(&m);
    return ok;
}

static int has_cuda_path(const char * op) {
    const ssm_op_info * info = ssm_op_get(ssm_op_find(op));
    return info != NULL && ((info->backends >> SSM_BACKEND_CUDA) & 1u) != 0;
}

int main(void) {
    if (!ssmt_cuda_present("test_cuda_graph")) return 77;
    cudaStream_t stream = NULL;
    TEST_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
    arena ar;
    memset(&ar, 0, sizeof ar);
    ar.size = (size_t)1 << 30;
    TEST_CHECK(cudaMalloc((void **)&ar.base, ar.size) == cudaSuccess, "no device memory for the arena");
    if (stream == NULL || ar.base == NULL) TEST_EXIT();
    g_stream = stream;

    ssm_context_params p;
    ssm_context_params_init(&p);
    p.backend = SSM_BACKEND_CUDA;
    p.cuda_stream = stream;
    p.cuda_portable = ssmt_cuda_portable();
    p.device_allocator.alloc = arena_alloc;
    p.device_allocator.free = arena_free;
    p.device_allocator.opaque = &ar;
    ssm_context * ctx = NULL;
    TEST_CHECK_STATUS(ssm_context_create(&p, &ctx), SSM_STATUS_OK);
    if (ctx == NULL) TEST_EXIT();

    int seen[sizeof kRequired / sizeof kRequired[0]] = {0};
    int runs = 0, passed = 0;
    for (int i = 0; i < ssmt_fixture_count(); ++i) {
        ssmt_fixture f;
        if (ssmt_fixture_make(i, 20260, &f) != 0) {
            TEST_CHECK(0, "fixture %d could not be built", i);
            continue;
        }
        if (!has_cuda_path(f.op) || f.ref_mode != SSM_REF_EXACT) { /* bwd_fwd's bf16 model is refused on CUDA */
            ssmt_fixture_free(&f);
            continue;
        }
        const ssm_op_info * info = ssm_op_get(ssm_op_find(f.op));
        const int           si = find_arg(info, "state_batch_indices");
        const int           has_slots = si >= 0 && arg_view(info, &f.args, si)->data != NULL;
        for (int mode = SLOTS_HOST; mode <= (has_slots ? SLOTS_DEVICE_IN_PLACE : SLOTS_HOST); ++mode) {
            char label[160];
            if (has_slots)
                snprintf(label, sizeof label, "%s (%s)", f.name, mode_name(mode));
            else
                snprintf(label, sizeof label, "%s", f.name);
            ++runs;
            passed += graph_case(ctx, stream, &ar, &f, mode, label);
            (void)oom_case(ctx, &ar, &f, mode, label);
        }
        /* a host-read index tensor in device memory: refused during capture, by name */
        for (int a = 0; a < info->nargs; ++a) {
            const ssm_arg_info * ai = &info->args[a];
            if (ai->dtype_class != SSM_DTYPE_CLASS_INDEX || strcmp(ai->name, "state_batch_indices") == 0 ||
                arg_view(info, &f.args, a)->data == NULL)
                continue;
            (void)refusal_case(ctx, stream, &ar, &f, ai->name);
            break; /* one per fixture: the first such tensor refuses the call */
        }
        for (size_t r = 0; r < sizeof kRequired / sizeof kRequired[0]; ++r) seen[r] |= strcmp(kRequired[r], f.op) == 0;
        ssmt_fixture_free(&f);
    }
    for (size_t r = 0; r < sizeof kRequired / sizeof kRequired[0]; ++r)
        TEST_CHECK(seen[r], "no fixture of %s was captured", kRequired[r]);
    printf("%d of %d captures replayed bitwise equal to direct calls\n", passed, runs);

    ssm_context_free(ctx);
    (void)cudaFree(ar.base);
    (void)cudaStreamDestroy(stream);
    TEST_EXIT();
}

#else /* a build without the CUDA backend */

int main(void) {
    printf("test_cuda_graph: the CUDA backend is not built: skipped\n");
    return 77;
}

#endif
