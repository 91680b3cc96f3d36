/* rmsnorm.cu — gated RMSNorm and its backward on CUDA (spec §6.3; docs/ops/layer.md §6-§7):
 * any group size, z or not, norm before or after the gate, any strides and float dtypes.
 *
 * One block per (row, group) in the forward and per (row block, group) in the backward, its
 * threads over the group's columns (thread i: columns i, i + T, …; T = 32..256 by the group
 * size). Group sums are block_sum (layer.cuh): a per-thread sum in column order, a xor
 * butterfly per warp, the warp sums in order — the same bits every run.
 *   forward:  Σv² → rstd → out, reading x and z again for the second pass.
 *   backward: per row of the block, in order: Σv² → rstd; Σ xh·w·e → c1 and the dweight
 *             partial of the row block (each column owned by one thread, accumulated in row
 *             order in the workspace); then dx, dz. The row blocks depend on M only; a second
 *             kernel adds the row blocks' partials in block order into dweight. */
#include <string.h>

#include "layer.cuh"

namespace ssmi_layer {
namespace {

constexpr long long kMaxRowBlocks = 1024; /* row blocks of the backward: bounds the partials */

struct norm_k {
    ssmi_cu_view x, z, w, out;    /* forward (the backward's forward inputs)          */
    ssmi_cu_view dout, dx, dz, dw; /* backward                                        */
    float *      partial;          /* backward: (NRB, D) dweight partials, or NULL    */
    long long    M, D, gs, RPB, NRB;
    float        eps;
    int          nbg;
};

__device__ __forceinline__ float sig_of(float z) { return ssmi_math::sigmoid(z); }

/* v of column c of row r: x·silu(z) when gating before the norm, else x. */
__device__ __forceinline__ float v_of(const norm_k & P, long long r, long long c, float xv) {
    if (P.z.p == NULL || P.nbg) return xv;
    return xv * ssmi_math::silu(ld(P.z, o2(P.z, r, c)));
}

/* rstd of the group starting at column c0 of row r. */
__device__ __forceinline__ float group_rstd(const norm_k & P, long long r, long long c0, float * sh) {
    float sum = 0.0f;
    for (long long i = threadIdx.x; i < P.gs; i += blockDim.x) {
        const float v = v_of(P, r, c0 + i, ld(P.x, o2(P.x, r, c0 + i)));
        sum = fmaf(v, v, sum);
    }
    sum = block_sum(sum, sh);
    return 1.0f / sqrtf(sum / (float)P.gs + P.eps);
}

__global__ void norm_fwd_kernel(norm_k P) {
    __shared__ float sh[32];
    const long long  groups = P.D / P.gs, units = P.M * groups;
    for (long long u = blockIdx.x; u < units; u += gridDim.x) {
        const long long r = u / groups, c0 = (u % groups) * P.gs;
        const float     rs = group_rstd(P, r, c0, sh);
        for (long long i = threadIdx.x; i < P.gs; i += blockDim.x) {
            const long long c = c0 + i;
            const float     xv = ld(P.x, o2(P.x, r, c)), wv = ld(P.w, o1(P.w, c));
            float           y;
            if (P.z.p != NULL && P.nbg) y = xv * rs * wv * ssmi_math::silu(ld(P.z, o2(P.z, r, c)));
            else y = v_of(P, r, c, xv) * rs * wv;
            st(P.out, o2(P.out, r, c), y);
        }
    }
}

__global__ void norm_bwd_kernel(norm_k P) {
    __shared__ float sh[32];
    const long long  groups = P.D / P.gs, units = P.NRB * groups;
    const bool       has_z = P.z.p != NULL;
    for (long long u = blockIdx.x; u < units; u += gridDim.x) {
        const long long rb = u / groups, c0 = (u % groups) * P.gs;
        const long long r0 = rb * P.RPB, r1 = r0 + P.RPB < P.M ? r0 + P.RPB : P.M;
        float *         part = P.partial != NULL ? P.partial + rb * P.D + c0 : NULL;
        if (part != NULL)
            for (long long i = threadIdx.x; i < P.gs; i += blockDim.x) part[i] = 0.0f;
        for (long long r = r0; r < r1; ++r) {
            const float rs = group_rstd(P, r, c0, sh);
            float       c1 = 0.0f;
            for (long long i = threadIdx.x; i < P.gs; i += blockDim.x) {
                const long long c = c0 + i;
                const float     xv = ld(P.x, o2(P.x, r, c)), wv = ld(P.w, o1(P.w, c));
                const float     xh = v_of(P, r, c, xv) * rs;
                float           e = ld(P.dout, o2(P.dout, r, c));
                if (has_z && P.nbg) e *= ssmi_math::silu(ld(P.z, o2(P.z, r, c)));
                c1 = fmaf(xh * wv, e, c1);
                if (part != NULL) part[i] = fmaf(e, xh, part[i]);
            }
            c1 = block_sum(c1, sh) / (float)P.gs;
            for (long long i = threadIdx.x; i < P.gs; i += blockDim.x) {
                const long long c = c0 + i;
                const float     xv = ld(P.x, o2(P.x, r, c)), wv = ld(P.w, o1(P.w, c)), dy = ld(P.dout, o2(P.dout, r, c));
                const float     xh = v_of(P, r, c, xv) * rs;
                if (!has_z) {
                    if (P.dx.p != NULL) st(P.dx, o2(P.dx, r, c), (wv * dy - xh * c1) * rs);
                    continue;
                }
                const float zv = ld(P.z, o2(P.z, r, c)), s = sig_of(zv), sg = zv * s;
                const float dsilu = s * (1.0f + zv * (1.0f - s));
                if (P.nbg) {
                    if (P.dz.p != NULL) st(P.dz, o2(P.dz, r, c), dy * xh * wv * dsilu);
                    if (P.dx.p != NULL) st(P.dx, o2(P.dx, r, c), (wv * (dy * sg) - xh * c1) * rs);
                } else {
                    const float dv = (wv * dy - xh * c1) * rs;
                    if (P.dz.p != NULL) st(P.dz, o2(P.dz, r, c), dv * xv * dsilu);
                    if (P.dx.p != NULL) st(P.dx, o2(P.dx, r, c), dv * sg);
                }
            }
        }
    }
}

/* dweight[c] = Σ over row blocks (in order) of the partials. */
__global__ void norm_wsum_kernel(norm_k P) {
    for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < P.D; c += (long long)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (long long rb = 0; rb < P.NRB; ++rb) s += P.partial[rb * P.D + c];
        st(P.dw, o1(P.dw, c), s);
    }
}

struct norm_problem {
    ssm_context * ctx;
    const char *  op;
    norm_k        k;
};

/* Threads per block: the smallest of 32, 64, 128, 256 that covers the group (256 beyond). */
int threads_for(long long gs) {
    int t = 32;
    while (t < 256 && t < gs) t *= 2;
    return t;
}

unsigned blocks_for(long long units) { return (unsigned)(units < (1LL << 20) ? units : (1LL << 20)); }

ssm_status launch_norm_fwd(const norm_problem & pb) {
    const long long units = pb.k.M * (pb.k.D / pb.k.gs);
    if (units == 0) return SSM_STATUS_OK;
    norm_fwd_kernel<<<blocks_for(units), threads_for(pb.k.gs), 0, ssmi_cuda_stream(pb.ctx)>>>(pb.k);
    SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "norm_fwd_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_norm_bwd(const norm_problem & pb) {
    const cudaStream_t s = ssmi_cuda_stream(pb.ctx);
    const long long    units = pb.k.NRB * (pb.k.D / pb.k.gs);
    if (units > 0) {
        norm_bwd_kernel<<<blocks_for(units), threads_for(pb.k.gs), 0, s>>>(pb.k);
        SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "norm_bwd_kernel");
    }
    if (pb.k.dw.p != NULL && pb.k.D > 0) {
        norm_wsum_kernel<<<grid_for(pb.k.D, 256), 256, 0, s>>>(pb.k);
        SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "norm_wsum_kernel");
    }
    return SSM_STATUS_OK;
}

const entry<norm_problem> kFwdTable[] = {
    {"block_per_group",
     "one block per (row, group), a fixed-order block sum: any group size, gate order, layout and dtype", "always",
     always<norm_problem>, launch_norm_fwd},
};
const entry<norm_problem> kBwdTable[] = {
    {"block_per_group",
     "one block per (row block, group): dx and dz per row, dweight as row-block partials summed in block order "
     "(deterministic, no atomics)",
     "always", always<norm_problem>, launch_norm_bwd},
};

norm_k norm_args_of(const ssmi_rmsnorm_dims * d, const ssm_rmsnorm_params * p, const ssm_tensor * x,
                    const ssm_tensor * z, const ssm_tensor * w) {
    norm_k k;
    memset(&k, 0, sizeof k);
    k.x = ssmi_cu_view_or_null(x), k.z = ssmi_cu_view_or_null(z), k.w = ssmi_cu_view_or_null(w);
    k.out = k.dout = k.dx = k.dz = k.dw = ssmi_cu_null_view();
    k.M = d->rows, k.D = d->dim, k.gs = d->group_size;
    k.eps = (float)p->eps, k.nbg = p->norm_before_gate != 0;
    return k;
}

} // namespace
} // namespace ssmi_layer

using namespace ssmi_layer;

extern "C" ssm_status ssmi_cuda_rmsnorm_gated(ssm_context * ctx, const ssm_rmsnorm_params * p,
                                              const ssmi_rmsnorm_dims * d, const ssm_rmsnorm_gated_args * a) {
    static const char op[] = "rmsnorm_gated";
    SSM_FORWARD_IF_ERROR(check_device_pointers(ctx, SSMI_OP_rmsnorm_gated, a));
    norm_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.ctx = ctx, pb.op = op;
    pb.k = norm_args_of(d, p, &a->x, &a->z, &a->weight);
    pb.k.out = ssmi_cu_view_or_null(&a->out);
    return run_table(ctx, SSMI_OP_rmsnorm_gated, kFwdTable, pb);
}

extern "C" ssm_status ssmi_cuda_rmsnorm_gated_bwd(ssm_context * ctx, const ssm_rmsnorm_params * p,
                                                  const ssmi_rmsnorm_dims * d, const ssm_rmsnorm_gated_bwd_args * a) {
    static const char op[] = "rmsnorm_gated_bwd";
    SSM_FORWARD_IF_ERROR(check_device_pointers(ctx, SSMI_OP_rmsnorm_gated_bwd, a));
    norm_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.ctx = ctx, pb.op = op;
    pb.k = norm_args_of(d, p, &a->x, &a->z, &a->weight);
    pb.k.dout = ssmi_cu_view_or_null(&a->dout), pb.k.dx = ssmi_cu_view_or_null(&a->dx), pb.k.dz = ssmi_cu_view_or_null(&a->dz);
    pb.k.dw = ssmi_cu_view_or_null(&a->dweight);
    const long long per = (d->rows + kMaxRowBlocks - 1) / kMaxRowBlocks;
    pb.k.RPB = per > 1 ? per : 1;
    pb.k.NRB = (d->rows + pb.k.RPB - 1) / pb.k.RPB;
    size_t     bytes = 0;
    scratch    sc = {{NULL, NULL, NULL, NULL}, 0};
    void *     part = NULL;
    ssm_status st = SSM_STATUS_OK;
    if (ssmi_present(&a->dweight)) {
        st = scratch_bytes(ctx, op, "the dweight partials", pb.k.NRB, d->dim, 1, sizeof(float), &bytes);
        if (st == SSM_STATUS_OK) st = scratch_alloc(ctx, op, "the dweight partials", &sc, bytes, &part);
    }
    pb.k.partial = (float *)part;
    if (st == SSM_STATUS_OK) st = run_table(ctx, SSMI_OP_rmsnorm_gated_bwd, kBwdTable, pb);
    return scratch_release(ctx, op, &sc, st);
}

/* The selection tables, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_rmsnorm_gated(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kFwdTable, i, out);
}
extern "C" int32_t ssmi_cuda_variants_rmsnorm_gated_bwd(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kBwdTable, i, out);
}
