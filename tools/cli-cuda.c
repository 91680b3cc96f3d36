/*
 * cli-cuda.c — `--backend cuda` for check, run and bench, and `bench --ceilings --backend
 * cuda`. Uses only the public CUDA helpers of ssmops.h (ssm_cuda_*):
 *   - a call mirrors the problem's float buffers on the device (inputs and the poisoned
 *     outputs copied up, the same views re-pointed, device.type = CUDA; an output borrowed
 *     from an input, as a decode step's in-place pool, shares its device copy), calls the
 *     operator with a device workspace of the size it asks for, and copies the outputs back.
 *     Index tensors (seq_idx, cu_seqlens, state_batch_indices) stay in host memory: the
 *     operators read their values on the host, and a device copy would cost a
 *     synchronisation per call (the fastest decode passes them from the host);
 *   - bench times with CUDA events on the context's stream (ssm_cuda_time_cold): warm-up, then
 *     the median of many calls, the device's L2 overwritten before each call so that no call
 *     finds its operands there (as triton.testing.do_bench, the timer upstream's numbers use);
 *   - the ceilings: device-to-device copy bandwidth (bytes read + written). No tensor-core
 *     GEMM rate: that needs cuBLAS, which the library does not link; the anchors'
 *     (ANCHORS.md) rate is not assumed either, so peak_fraction is 0 and says so.
 */
#define _XOPEN_SOURCE 700

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CUDA_WARMUP_CALLS 3
#define CUDA_DEFAULT_REPS 50

/* The operators with a CUDA path: the schema says which. */
int cli_cuda_supported(const cli_op * op) {
    const ssm_op_info * info = cli_op_info(op);
    return info != NULL && ((info->backends >> SSM_BACKEND_CUDA) & 1u) != 0;
}

static int cuda_preflight(const cli_op * op) {
    if (!cli_cuda_supported(op))
        return cli_fail("%s: SSM_STATUS_UNSUPPORTED: the CUDA backend has no path for %s (`ssmops list` names the "
                        "operators it has)",
                        op->name, op->name);
    if (ssm_cuda_device_count() == 0)
        return cli_fail("%s: SSM_STATUS_UNSUPPORTED_HARDWARE: no CUDA device (or no CUDA backend in this build)",
                        op->name);
    return CLI_EXIT_OK;
}

/* One device mirror of a problem: device memory per argument and the problem seen through it. */
typedef struct cuda_mirror {
    void *      mem[CLI_MAX_ARGS];
    size_t      bytes[CLI_MAX_ARGS];
    cli_problem pb; /* shallow copy of the host problem with device views */
    void *      ws;
    size_t      ws_bytes;
} cuda_mirror;

static size_t buf_bytes(const cli_buf * b) {
    return (size_t)cli_numel(b->mem_ndim, b->mem_shape) * ssm_dtype_size((ssm_dtype)b->view.dtype);
}

static void mirror_free(cuda_mirror * m) {
    for (int i = 0; i < CLI_MAX_ARGS; ++i) {
        int shared = 0; /* an in-place output shares another argument's memory */
        for (int j = 0; j < i; ++j) shared |= m->mem[j] == m->mem[i];
        if (m->mem[i] && !shared) (void)ssm_cuda_free(NULL, m->mem[i]);
    }
    (void)ssm_cuda_free(NULL, m->ws);
    memset(m, 0, sizeof *m);
}

/* Copies every present argument (inputs and outputs) to the device; sizes the workspace. */
static int mirror_make(ssm_context * ctx, const cli_problem * pb, cuda_mirror * m) {
    memset(m, 0, sizeof *m);
    m->pb = *pb;
    for (int i = 0; i < pb->info->nargs; ++i) {
        const cli_buf * b = &pb->arg[i];
        if (!b->mem || !cli_is_float((ssm_dtype)b->view.dtype)) continue; /* index tensors stay on the host */
        for (int j = 0; j < i; ++j)
            if (pb->arg[j].mem == b->mem) m->mem[i] = m->mem[j], m->bytes[i] = m->bytes[j];
        if (!m->mem[i]) {
            m->bytes[i] = buf_bytes(b);
            /* ≥ 64 bytes: an empty tensor still needs a device address */
            ssm_status st = ssm_cuda_malloc(NULL, &m->mem[i], m->bytes[i] > 64 ? m->bytes[i] : 64);
            if (st == SSM_STATUS_OK) st = ssm_cuda_memcpy(NULL, m->mem[i], b->mem, m->bytes[i]);
            if (st != SSM_STATUS_OK) {
                mirror_free(m);
                return cli_lib_error(NULL, st, "copying the inputs to the device");
            }
        }
        ssm_tensor * v = &m->pb.arg[i].view;
        v->data = (char *)m->mem[i] + ((const char *)b->view.data - (const char *)b->mem);
        v->device.type = SSM_DEVICE_CUDA;
        v->device.index = 0;
    }
    if (pb->op->workspace_size) {
        ssm_status st = pb->op->workspace_size(ctx, &m->pb, &m->ws_bytes);
        if (st == SSM_STATUS_OK) st = ssm_cuda_malloc(NULL, &m->ws, m->ws_bytes);
        if (st != SSM_STATUS_OK) {
            mirror_free(m);
            return cli_lib_error(ctx, st, pb->op->name);
        }
    }
    return CLI_EXIT_OK;
}

static int mirror_outputs_to_host(const cuda_mirror * m, const cli_problem * pb) {
    for (int i = 0; i < pb->info->nargs; ++i) {
        if (!cli_arg_is_output(&pb->info->args[i]) || !pb->arg[i].mem || !m->mem[i]) continue;
        const ssm_status st = ssm_cuda_memcpy(NULL, pb->arg[i].mem, m->mem[i], m->bytes[i]);
        if (st != SSM_STATUS_OK) return cli_lib_error(NULL, st, "copying the outputs to the host");
    }
    return CLI_EXIT_OK;
}

int cli_cuda_run(ssm_context * ctx, const cli_problem * pb, const char * what) {
    int rc = cuda_preflight(pb->op);
    if (rc != CLI_EXIT_OK) return rc;
    cuda_mirror m;
    rc = mirror_make(ctx, pb, &m);
    if (rc != CLI_EXIT_OK) return rc;
    const ssm_status st = pb->op->call(ctx, &m.pb, m.ws, m.ws_bytes);
    rc = st == SSM_STATUS_OK ? mirror_outputs_to_host(&m, pb) : cli_lib_error(ctx, st, what);
    mirror_free(&m);
    return rc;
}

/* ---- bench ------------------------------------------------------------------------------- */

typedef struct timed_calls {
    ssm_context *       ctx;
    const cuda_mirror * m;
} timed_calls;

static ssm_status timed_call(void * arg, int32_t rep) {
    const timed_calls * t = arg;
    (void)rep;
    return t->m->pb.op->call(t->ctx, &t->m->pb, t->m->ws, t->m->ws_bytes);
}

static int cmp_float(const void * a, const void * b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Device copy bandwidth, GB/s counting bytes read + written (median of 20 copies). */
static ssm_status copy_call(void * arg, int32_t rep) {
    void ** bufs = arg;
    (void)rep;
    return ssm_cuda_memcpy(NULL, bufs[1], bufs[0], (size_t)(uintptr_t)bufs[2]);
}

static int measure_copy_gbps(int buffer_mib, double * gbps) {
    const size_t bytes = (size_t)(buffer_mib > 0 ? buffer_mib : 1024) << 20;
    void *       bufs[3] = {NULL, NULL, (void *)(uintptr_t)bytes};
    float        ms[20];
    ssm_status   st = ssm_cuda_malloc(NULL, &bufs[0], bytes);
    if (st == SSM_STATUS_OK) st = ssm_cuda_malloc(NULL, &bufs[1], bytes);
    if (st == SSM_STATUS_OK) st = ssm_cuda_time(NULL, copy_call, bufs, 3, ms); /* warm-up */
    if (st == SSM_STATUS_OK) st = ssm_cuda_time(NULL, copy_call, bufs, 20, ms);
    (void)ssm_cuda_free(NULL, bufs[0]);
    (void)ssm_cuda_free(NULL, bufs[1]);
    if (st != SSM_STATUS_OK) return cli_lib_error(NULL, st, "measuring the device copy bandwidth");
    qsort(ms, 20, sizeof ms[0], cmp_float);
    *gbps = 2.0 * (double)bytes / (0.5 * (ms[9] + ms[10]) * 1e-3) * 1e-9;
    return CLI_EXIT_OK;
}

int cli_cuda_ceilings(const cli_options * opt) {
    if (ssm_cuda_device_count() == 0) return cli_fail("SSM_STATUS_UNSUPPORTED_HARDWARE: no CUDA device");
    double    gbps = 0.0;
    const int rc = measure_copy_gbps(opt->buffer_mib > 0 ? opt->buffer_mib : 1024, &gbps);
    if (rc != CLI_EXIT_OK) return rc;
    printf("cuda ceilings (device 0)\n");
    printf("  copy bandwidth   %.1f GB/s (device to device, bytes read + written)\n", gbps);
    printf("  tensor GEMM rate not measured (needs cuBLAS, which ssmops does not link)\n");
    if (opt->json) {
        FILE * f = fopen(opt->json, "w");
        if (!f) return cli_fail("cannot write %s", opt->json);
        fprintf(f, "[\n  {\"op\": \"ceilings\", \"backend\": \"cuda\", \"copy_bw_gbps\": %.6g, \"gemm_tflops\": null}\n]\n",
                gbps);
        if (fclose(f) != 0) return cli_fail("cannot write %s", opt->json);
    }
    return CLI_EXIT_OK;
}

static void json_kv(FILE * f, const cli_key * keys, const cli_value * values) {
    fputc('{', f);
    for (int i = 0; keys[i].name; ++i) {
        fprintf(f, "%s\"%s\": ", i ? ", " : "", keys[i].name);
        if (keys[i].type == CLI_KEY_INT)
            fprintf(f, "%lld", (long long)values[i].i);
        else
            fprintf(f, "\"%s\"", values[i].text);
    }
    fputc('}', f);
}

int cli_cuda_bench(const cli_options * opt, const cli_problem * pb, ssm_context * ctx, double tokens) {
    int rc = cuda_preflight(pb->op);
    if (rc != CLI_EXIT_OK) return rc;
    const cli_op * op = pb->op;
    cuda_mirror    m;
    if ((rc = mirror_make(ctx, pb, &m)) != CLI_EXIT_OK) return rc;
    const int reps = opt->reps > 0 ? opt->reps : CUDA_DEFAULT_REPS;
    float *   ms = malloc(sizeof(float) * (size_t)(reps > CUDA_WARMUP_CALLS ? reps : CUDA_WARMUP_CALLS));
    double    gbps_copy = 0.0;
    if (!ms) rc = cli_fail("out of memory");
    if (rc == CLI_EXIT_OK) {
        timed_calls tc = {ctx, &m};
        ssm_status  st = ssm_cuda_time(ctx, timed_call, &tc, CUDA_WARMUP_CALLS, ms);
        if (st == SSM_STATUS_OK) st = ssm_cuda_time_cold(ctx, timed_call, &tc, reps, ms);
        if (st != SSM_STATUS_OK) rc = cli_lib_error(ctx, st, op->name);
    }
    if (rc == CLI_EXIT_OK) {
        qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
        const double med = (reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2])) * 1e-3;
        const double mn = ms[0] * 1e-3, mx = ms[reps - 1] * 1e-3;
        rc = measure_copy_gbps(opt->buffer_mib > 0 ? opt->buffer_mib : 1024, &gbps_copy);
        if (rc == CLI_EXIT_OK) {
            const double flop = op->flops(pb), bytes = op->bytes(pb);
            const double gflops = flop / med * 1e-9, gbps = bytes / med * 1e-9;
            const double floor_s = gbps_copy > 0 ? bytes / (gbps_copy * 1e9) : 0.0;
            char         shape_text[256], param_text[512];
            cli_format_shape(pb, shape_text, sizeof shape_text);
            cli_format_params(pb, param_text, sizeof param_text);
            printf("%s  backend=cuda dtype=%s (CUDA events, the L2 cleared before every call)\n", op->name,
                   ssm_dtype_name(pb->dtype));
            printf("  shape       %s\n", shape_text);
            printf("  params      %s\n", param_text[0] ? param_text : "-");
            printf("  time        median %.4f ms  min %.4f ms  max %.4f ms  (%d reps)\n", med * 1e3, mn * 1e3,
                   mx * 1e3, reps);
            printf("  tokens/s    %.1f\n", tokens / med);
            printf("  GFLOP/s     %.1f  (%.4g GFLOP per call; tensor-core rate not measured)\n", gflops, flop * 1e-9);
            printf("  GB/s        %.1f  (%.1f%% of copy bandwidth %.1f GB/s; %.4g MB per call; byte floor %.4f ms)\n",
                   gbps, gbps_copy > 0 ? 100.0 * gbps / gbps_copy : 0.0, gbps_copy, bytes * 1e-6, floor_s * 1e3);
            printf("  workspace   %zu bytes (device)\n", m.ws_bytes);
            if (opt->json) {
                FILE * f = fopen(opt->json, "w");
                if (!f) {
                    rc = cli_fail("cannot write %s", opt->json);
                } else {
                    fprintf(f, "[\n  {\"op\": \"%s\", \"backend\": \"cuda\", \"dtype\": \"%s\", \"shape\": ", op->name,
                            ssm_dtype_name(pb->dtype));
                    json_kv(f, op->shape_keys, pb->shape);
                    fprintf(f, ", \"params\": ");
                    json_kv(f, op->param_keys, pb->param);
                    fprintf(f,
                            ", \"threads\": 1, \"reps\": %d, \"l2_cleared\": true, \"median_s\": %.9g, \"min_s\": %.9g, "
                            "\"max_s\": %.9g, \"tokens_per_s\": %.6g, \"gflop\": %.6g, \"gflops\": %.6g, \"gbytes\": "
                            "%.6g, \"gbps\": %.6g, \"copy_bw_gbps\": %.6g, \"byte_floor_s\": %.9g, \"gemm_tflops\": "
                            "null, \"peak_fraction\": 0, \"bw_fraction\": %.6g, \"workspace_bytes\": %zu, "
                            "\"version\": \"%s\"}\n]\n",
                            reps, med, mn, mx, tokens / med, flop * 1e-9, gflops, bytes * 1e-9, gbps, gbps_copy,
                            floor_s, gbps_copy > 0 ? gbps / gbps_copy : 0.0, m.ws_bytes, ssm_version());
                    if (fclose(f) != 0) rc = cli_fail("cannot write %s", opt->json);
                }
            }
        }
    }
    free(ms);
    mirror_free(&m);
    return rc;
}
