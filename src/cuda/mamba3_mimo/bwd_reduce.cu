/*
 * bwd_reduce.cu — the last kernels of the CUDA Mamba-3 MIMO backward:
 *   trapezoid_kernel  per (work chunk, head), threads over tokens: with dgam = dfactor +
 *                     dgamma_diag and dsg the previous token's dfactor (the fold's dc at a
 *                     sequence's first token with initial states, else 0):
 *                     ddt = dgam·λ + dsg·(1 − λ) + Σ_a π·tanh·G, dtrap = (dgam − dsg)·dt·λ(1 − λ);
 *   group_kernel      dq, dk = Σ over the value heads of each Q/K group, in head order;
 *   param_kernel      a parameter gradient = Σ over work chunks (and sequences), in order.
 */
#include "bwd.cuh"

namespace ssmi_mimo {
namespace {

__global__ void trapezoid_kernel(const mb_args A) {
    const int      w = blockIdx.x, h = blockIdx.y;
    const mc_chunk ck = A.chunks[w];
    for (int i = threadIdx.x; i < ck.len; i += blockDim.x) {
        const long long t = ck.t0 + i, bh = ((long long)ck.b * A.H + h) * A.S;
        const float     lam = ssmi_math::sigmoid(ldv(A.trap, o3(A.trap, ck.b, h, t)));
        const float     dtv = ldv(A.dt, o3(A.dt, ck.b, h, t));
        const float     dgam = A.dfac[bh + t] + A.dgd[bh + t];
        float           dsg;
        if (ck.c == 0 && i == 0) dsg = A.has_states ? A.dc[(long long)ck.seq * A.H + h] : 0.0f;
        else dsg = A.dfac[bh + t - 1];
        float dda = 0.0f;
        for (int a = 0; a < A.A; ++a) dda += A.dth[(bh + t) * A.A + a];
        if (A.ddt.p != NULL) stv(A.ddt, o3(A.ddt, ck.b, h, t), dgam * lam + dsg * (1.0f - lam) + dda);
        if (A.dtrap.p != NULL) stv(A.dtrap, o3(A.dtrap, ck.b, h, t), (dgam * dtv - dsg * dtv) * lam * (1.0f - lam));
    }
}

__global__ void group_kernel(const mb_args A) {
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long total = (long long)A.B * A.S * A.R * A.G * A.N;
    if (e >= total) return;
    long long rest = e;
    const int nn = (int)(rest % A.N);
    rest /= A.N;
    const int g = (int)(rest % A.G);
    rest /= A.G;
    const int r = (int)(rest % A.R);
    rest /= A.R;
    const long long t = rest % A.S;
    const int       b = (int)(rest / A.S);
    const int       hg = A.H / A.G;
    const long long base = (((long long)b * A.S + t) * A.R + r) * A.H;
    float           sq = 0.0f, sk = 0.0f;
    for (int j = 0; j < hg; ++j) {
        const long long o = (base + (long long)g * hg + j) * A.N + nn;
        sq += A.dqh[o];
        sk += A.dkh[o];
    }
    if (A.dq.p != NULL) stv(A.dq, o5(A.dq, b, t, r, g, nn), sq);
    if (A.dk.p != NULL) stv(A.dk, o5(A.dk, b, t, r, g, nn), sk);
}

__global__ void param_kernel(const ssmi_cu_view out, int kind, const float * part, int nrows, const float * extra,
                             int nextra, int H, int R, int X) {
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (kind >= 2) { /* (h, p) = Σ_w Σ_r part[w][h][r][p]; kind 3: a 1-D (H·P) output */
        if (e >= (long long)H * X) return;
        const int h = (int)(e / X), p = (int)(e - (long long)h * X);
        float     s = 0.0f;
#pragma unroll 8
        for (int w = 0; w < nrows; ++w)
            for (int r = 0; r < R; ++r) s += part[(((long long)w * H + h) * R + r) * X + p];
        stv(out, kind == 3 ? o1(out, e) : o2(out, h, p), s);
        return;
    }
    if (e >= (long long)H * R * X) return;
    const int h = (int)(e / ((long long)R * X)), rem = (int)(e - (long long)h * R * X), r = rem / X, x = rem - r * X;
    float     s = 0.0f;
#pragma unroll 8 /* independent loads ahead of the fixed-order chain */
    for (int w = 0; w < nrows; ++w) s += part[(((long long)w * H + h) * R + r) * X + x];
    if (extra != NULL)
        for (int q = 0; q < nextra; ++q) s += extra[(((long long)q * H + h) * R + r) * X + x];
    stv(out, kind == 1 ? o1(out, h) : o3(out, h, r, x), s);
}

} // namespace

ssm_status launch_bwd_trapezoid(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s) {
    if (A.W == 0 || A.H == 0 || (A.ddt.p == NULL && A.dtrap.p == NULL)) return SSM_STATUS_OK;
    trapezoid_kernel<<<dim3((unsigned)A.W, (unsigned)A.H), 128, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "trapezoid_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_bwd_group_sums(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s) {
    const long long total = (long long)A.B * A.S * A.R * A.G * A.N;
    if (total == 0 || (A.dq.p == NULL && A.dk.p == NULL)) return SSM_STATUS_OK;
    group_kernel<<<(unsigned)((total + 255) / 256), 256, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "group_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_bwd_param_sum(ssm_context * ctx, const char * op, const mb_args & A, ssmi_cu_view out, int kind,
                                const float * part, int nrows, const float * extra, int nextra, int R, int X,
                                cudaStream_t s) {
    if (out.p == NULL) return SSM_STATUS_OK;
    const long long total = (long long)A.H * (kind >= 2 ? 1 : R) * X;
    if (total == 0) return SSM_STATUS_OK;
    param_kernel<<<(unsigned)((total + 255) / 256), 256, 0, s>>>(out, kind, part, nrows, extra, nextra, A.H, R, X);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "param_kernel");
    return SSM_STATUS_OK;
}

} // namespace ssmi_mimo
