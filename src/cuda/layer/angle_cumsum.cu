/* angle_cumsum.cu — the Mamba-3 angle cumsum and its backward on CUDA (spec §3.2, §6.6;
 * docs/ops/mamba3_siso.md): batch rows or packed sequences (cu_seqlens, empty ones too),
 * optional initial / final angle states and their gradients, any strides (stride 0 over heads
 * included) and float dtypes.
 *   forward:  one thread per (sequence, head, angle), walking the sequence's tokens in order:
 *             θ = wrap(θ + (π·tanh(raw))·dt) in fp32, as the CPU does, stored per token.
 *   backward: one warp per (sequence, head), from the last token down; lane l owns angles
 *             l, l + 32, … and their running G = Σ_{u≥t} dθ_u + dθ_final (in a workspace of
 *             NS·H·A floats, each element touched by its lane only). Per token:
 *             dangles = (π·dt)·(1 − tanh²)·G, and ddt = π·Σ_a tanh_a·G_a: each lane's angles in
 *             order, then a xor butterfly over the warp (a fixed order). */
#include <string.h>

#include "layer.cuh"

namespace ssmi_layer {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

struct angle_k {
    ssmi_cu_view      angles, dt, state, out, fin;        /* forward                         */
    ssmi_cu_view      dcum, dfin, dangles, ddt, dstate;   /* backward                        */
    const long long * cu;                                 /* (NS + 1) sequence starts, or NULL */
    float *           G;                                  /* backward: (NS, H, A)            */
    long long         NS, S, H, A;
};

/* Sequence s: its batch row, first token and length. */
__device__ __forceinline__ void sequence(const angle_k & P, long long s, long long * row, long long * t0,
                                         long long * len) {
    if (P.cu != NULL) *row = 0, *t0 = P.cu[s], *len = P.cu[s + 1] - P.cu[s];
    else *row = s, *t0 = 0, *len = P.S;
}

__global__ void angle_fwd_kernel(angle_k P) {
    const long long n = P.NS * P.H * P.A;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long a = i % P.A, r = i / P.A, h = r % P.H, s = r / P.H;
        long long       row, t0, len;
        sequence(P, s, &row, &t0, &len);
        float th = P.state.p != NULL ? ld(P.state, o3(P.state, s, h, a)) : 0.0f;
        for (long long t = t0; t < t0 + len; ++t) {
            const float rate = ssmi_math::kPi * tanhf(ld(P.angles, o4(P.angles, row, t, h, a)));
            th = ssmi_math::wrap_2pi(th + rate * ld(P.dt, o3(P.dt, row, h, t)));
            if (P.out.p != NULL) st(P.out, o4(P.out, row, t, h, a), th);
        }
        if (P.fin.p != NULL) st(P.fin, o3(P.fin, s, h, a), th);
    }
}

__global__ void angle_bwd_kernel(angle_k P) {
    const int       lane = (int)(threadIdx.x & 31);
    const long long units = P.NS * P.H;
    for (long long u = blockIdx.x * (long long)kWarps + (threadIdx.x >> 5); u < units;
         u += (long long)gridDim.x * kWarps) {
        const long long h = u % P.H, s = u / P.H;
        float *         G = P.G + u * P.A;
        long long       row, t0, len;
        sequence(P, s, &row, &t0, &len);
        for (long long a = lane; a < P.A; a += 32) G[a] = P.dfin.p != NULL ? ld(P.dfin, o3(P.dfin, s, h, a)) : 0.0f;
        for (long long t = t0 + len - 1; t >= t0; --t) {
            const float pdt = ssmi_math::kPi * ld(P.dt, o3(P.dt, row, h, t));
            float       part = 0.0f;
            for (long long a = lane; a < P.A; a += 32) {
                const float tn = tanhf(ld(P.angles, o4(P.angles, row, t, h, a)));
                const float g = G[a] + ld(P.dcum, o4(P.dcum, row, t, h, a));
                G[a] = g;
                part = fmaf(tn, g, part);
                if (P.dangles.p != NULL) st(P.dangles, o4(P.dangles, row, t, h, a), pdt * (1.0f - tn * tn) * g);
            }
            for (int off = 16; off > 0; off >>= 1) part += __shfl_xor_sync(0xffffffffu, part, off);
            if (lane == 0 && P.ddt.p != NULL) st(P.ddt, o3(P.ddt, row, h, t), ssmi_math::kPi * part);
        }
        if (P.dstate.p != NULL)
            for (long long a = lane; a < P.A; a += 32) st(P.dstate, o3(P.dstate, s, h, a), G[a]);
    }
}

struct angle_problem {
    ssm_context * ctx;
    const char *  op;
    angle_k       k;
};

ssm_status launch_fwd(const angle_problem & pb) {
    const long long n = pb.k.NS * pb.k.H * pb.k.A;
    if (n == 0) return SSM_STATUS_OK;
    angle_fwd_kernel<<<grid_for(n, kThreads), kThreads, 0, ssmi_cuda_stream(pb.ctx)>>>(pb.k);
    SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "angle_fwd_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_bwd(const angle_problem & pb) {
    const long long units = pb.k.NS * pb.k.H;
    if (units == 0) return SSM_STATUS_OK;
    const long long blocks = (units + kWarps - 1) / kWarps;
    angle_bwd_kernel<<<(unsigned)(blocks < (1LL << 20) ? blocks : (1LL << 20)), kThreads, 0,
                       ssmi_cuda_stream(pb.ctx)>>>(pb.k);
    SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "angle_bwd_kernel");
    return SSM_STATUS_OK;
}

const entry<angle_problem> kFwdTable[] = {
    {"sequential_per_angle",
     "one thread per (sequence, head, angle) walking its tokens in order (the wrap after every step makes the sum "
     "sequential): any A, layout, dtype, varlen",
     "always", always<angle_problem>, launch_fwd},
};
const entry<angle_problem> kBwdTable[] = {
    {"warp_per_head",
     "one warp per (sequence, head) walking its tokens backwards, the angles over the lanes, ddt by a fixed-order warp "
     "sum: any A, layout, dtype, varlen",
     "always", always<angle_problem>, launch_bwd},
};

angle_k angle_args_of(const ssmi_mamba3_dims * d, const ssm_tensor * angles, const ssm_tensor * dt) {
    angle_k k;
    memset(&k, 0, sizeof k);
    k.angles = ssmi_cu_view_or_null(angles), k.dt = ssmi_cu_view_or_null(dt);
    k.state = k.out = k.fin = k.dcum = k.dfin = k.dangles = k.ddt = k.dstate = ssmi_cu_null_view();
    k.NS = d->nseq, k.S = d->seqlen, k.H = d->nheads, k.A = d->nangles;
    return k;
}

} // namespace
} // namespace ssmi_layer

using namespace ssmi_layer;

extern "C" ssm_status ssmi_cuda_mamba3_angle_cumsum(ssm_context * ctx, const ssm_mamba3_params * p,
                                                    const ssmi_mamba3_dims * d,
                                                    const ssm_mamba3_angle_cumsum_args * a) {
    static const char op[] = "mamba3_angle_cumsum";
    (void)p;
    SSM_FORWARD_IF_ERROR(check_device_pointers(ctx, SSMI_OP_mamba3_angle_cumsum, a));
    angle_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.ctx = ctx, pb.op = op;
    pb.k = angle_args_of(d, &a->angles, &a->dt);
    pb.k.state = ssmi_cu_view_or_null(&a->angle_state), pb.k.out = ssmi_cu_view_or_null(&a->angles_cumsum);
    pb.k.fin = ssmi_cu_view_or_null(&a->final_angle_state);
    scratch    sc = {{NULL, NULL, NULL, NULL}, 0};
    ssm_status st = upload_index(ctx, op, "cu_seqlens", &sc, &a->cu_seqlens, &pb.k.cu);
    if (st == SSM_STATUS_OK) st = run_table(ctx, SSMI_OP_mamba3_angle_cumsum, kFwdTable, pb);
    return scratch_release(ctx, op, &sc, st);
}

extern "C" ssm_status ssmi_cuda_mamba3_angle_cumsum_bwd(ssm_context * ctx, const ssm_mamba3_params * p,
                                                        const ssmi_mamba3_dims * d,
                                                        const ssm_mamba3_angle_cumsum_bwd_args * a) {
    static const char op[] = "mamba3_angle_cumsum_bwd";
    (void)p;
    SSM_FORWARD_IF_ERROR(check_device_pointers(ctx, SSMI_OP_mamba3_angle_cumsum_bwd, a));
    angle_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.ctx = ctx, pb.op = op;
    pb.k = angle_args_of(d, &a->angles, &a->dt);
    pb.k.dcum = ssmi_cu_view_or_null(&a->dangles_cumsum), pb.k.dfin = ssmi_cu_view_or_null(&a->dfinal_angle_state);
    pb.k.dangles = ssmi_cu_view_or_null(&a->dangles), pb.k.ddt = ssmi_cu_view_or_null(&a->ddt);
    pb.k.dstate = ssmi_cu_view_or_null(&a->dangle_state);
    size_t     bytes = 0;
    scratch    sc = {{NULL, NULL, NULL, NULL}, 0};
    void *     g = NULL;
    ssm_status st = scratch_bytes(ctx, op, "the running angle gradients", d->nseq, d->nheads, d->nangles,
                                  sizeof(float), &bytes);
    if (st == SSM_STATUS_OK) st = upload_index(ctx, op, "cu_seqlens", &sc, &a->cu_seqlens, &pb.k.cu);
    if (st == SSM_STATUS_OK) st = scratch_alloc(ctx, op, "the running angle gradients", &sc, bytes, &g);
    pb.k.G = (float *)g;
    if (st == SSM_STATUS_OK) st = run_table(ctx, SSMI_OP_mamba3_angle_cumsum_bwd, kBwdTable, pb);
    return scratch_release(ctx, op, &sc, st);
}

/* The selection tables, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba3_angle_cumsum(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kFwdTable, i, out);
}
extern "C" int32_t ssmi_cuda_variants_mamba3_angle_cumsum_bwd(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kBwdTable, i, out);
}
