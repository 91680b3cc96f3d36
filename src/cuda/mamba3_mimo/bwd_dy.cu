/*
 * bwd_dy.cu — the output stage backward of the CUDA Mamba-3 MIMO backward: one block per (work
 * chunk w, head h), a thread per (r, p) walking the chunk's tokens. From the recomputed pre-gate Y (spec §2.2, §3.4, §4):
 *   pre = Y (or Y·rstd ⊙ w with the fused norm), gate = silu(z ⊙ mimo_z[r]);
 *   reduced: dpre = dout ⊙ mimo_o[r], dmimo_o += dout ⊙ pre ⊙ gate;  per rank: dpre = dout[r];
 *   z: dzz = dpre ⊙ pre ⊙ silu'(zz), dz = Σ_r dzz ⊙ mimo_z[r], dmimo_z += dzz ⊙ z, dpre ⊙= gate;
 *   fused: dw += dpre ⊙ Y·rstd, dx̂ = dpre ⊙ w, dY = rstd·(dx̂ − x̂·mean_P(dx̂ ⊙ x̂));  else dY = dpre.
 * dY goes to the chunk tile; the partial sums (per (w, h, r, p), over the chunk's tokens in
 * order) are summed over the work chunks by bwd_reduce.cu; dz sums the ranks in order from the
 * per-row dzz ⊙ mimo_z, staged in the chunk's dU tile (grads_kernel writes dU later).
 */
#include "bwd.cuh"

namespace ssmi_mimo {
namespace {

__device__ __forceinline__ long long y_off(const mb_args & A, int b, long long t, int h, int r, int p) {
    return ((((long long)b * A.S + t) * A.H + h) * A.R + r) * A.P + p;
}

/* Four blocks per SM (64 registers, no spills; 80 registers unbounded fit three): the token loop
 * waits on loads, so more warps per SM hide more of that. */
__global__ void __launch_bounds__(kBwdThreads, 4) dy_kernel(const mb_args A) {
    __shared__ float rstd[128], dm[128]; /* per row x = i·R + r (C·R ≤ 128) */
    const int      w = blockIdx.x, h = blockIdx.y;
    const mc_chunk ck = A.chunks[w];
    const int      R = A.R, P = A.P, n = ck.len, L = n * R;
    const int      warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long T = tile_row(A, w, h);
    float *        DY = A.dy + T * P;
    float *        DZ = A.du + T * P; /* scratch (dU is written later): dzz ⊙ mimo_z per row */
    if (A.fused) {
        for (int x = warp; x < L; x += kBwdThreads / 32) {
            const int i = x / R, r = x - i * R;
            float     s = 0.0f;
            for (int p = lane; p < P; p += 32) {
                const float y = A.y[y_off(A, ck.b, ck.t0 + i, h, r, p)];
                s = fmaf(y, y, s);
            }
            s = warp_sum(s);
            if (lane == 0) rstd[x] = 1.0f / sqrtf(s / (float)P + A.eps);
        }
        __syncthreads();
    }
    /* a thread per (r, p): the chunk's tokens in order, the partial sums in registers */
    for (int e = threadIdx.x; e < R * P; e += blockDim.x) {
        const int       r = e / P, p = e - r * P;
        const long long po = (((long long)w * A.H + h) * R + r) * P + p;
        const float     nw = !A.fused || A.norm_w.p == NULL
                                 ? 1.0f
                                 : ldv(A.norm_w, A.nw_1d ? o1(A.norm_w, (long long)h * P + p) : o2(A.norm_w, h, p));
        const float     mz = A.has_z ? ldv(A.mimo_z, o3(A.mimo_z, h, r, p)) : 0.0f;
        const float     mo = A.reduce ? ldv(A.mimo_o, o3(A.mimo_o, h, r, p)) : 0.0f;
        float           so = 0.0f, sz = 0.0f, sw = 0.0f;
        /* unrolled: the loads of four tokens in flight together (the sums stay in token order) */
#pragma unroll 4
        for (int i = 0; i < n; ++i) {
            const long long t = ck.t0 + i;
            const int       x = i * R + r;
            const float     y = A.y[y_off(A, ck.b, t, h, r, p)];
            const float     rs = A.fused ? rstd[x] : 1.0f;
            const float     pre = A.fused ? y * rs * nw : y;
            float           gate = 1.0f, gsd = 0.0f, z = 0.0f;
            if (A.has_z) {
                z = ldv(A.z, o4(A.z, ck.b, t, h, p));
                const float zz = z * mz, sg = ssmi_math::sigmoid(zz);
                gate = zz * sg;
                gsd = sg * (1.0f + zz * (1.0f - sg));
            }
            float dyp;
            if (A.reduce) {
                const float dred = ldv(A.dout, o4(A.dout, ck.b, t, h, p));
                dyp = dred * mo;
                so += dred * pre * gate;
            } else {
                dyp = ldv(A.dout, o5(A.dout, ck.b, t, r, h, p));
            }
            if (A.has_z) {
                const float dzz = dyp * pre * gsd;
                DZ[(long long)x * P + p] = dzz * mz;
                sz += dzz * z;
                dyp *= gate;
            }
            if (A.fused) {
                sw += dyp * y * rs;
                dyp *= nw;
            }
            DY[(long long)x * P + p] = dyp;
        }
        if (A.reduce) A.p_o[po] = so;
        if (A.has_z) A.p_z[po] = sz;
        if (A.fused) A.p_w[po] = sw;
    }
    __syncthreads();
    /* dz = Σ_r dzz ⊙ mimo_z, ranks in order */
    if (A.has_z && A.dz.p != NULL)
        for (int e = threadIdx.x; e < n * P; e += blockDim.x) {
            const int i = e / P, p = e - i * P;
            float     s = 0.0f;
            for (int r = 0; r < R; ++r) s += DZ[(long long)(i * R + r) * P + p];
            stv(A.dz, o4(A.dz, ck.b, ck.t0 + i, h, p), s);
        }
    if (!A.fused) return;
    /* dY = rstd·(dx̂ − x̂·dm), dm = Σ_p dx̂ ⊙ Y · rstd / P: a warp per row */
    for (int x = warp; x < L; x += kBwdThreads / 32) {
        const int i = x / R, r = x - i * R;
        float     s = 0.0f;
        for (int p = lane; p < P; p += 32) s = fmaf(DY[(long long)x * P + p], A.y[y_off(A, ck.b, ck.t0 + i, h, r, p)], s);
        s = warp_sum(s);
        if (lane == 0) dm[x] = s * rstd[x] / (float)P;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < L * P; e += blockDim.x) {
        const int   x = e / P, p = e - x * P, i = x / R, r = x - i * R;
        const float y = A.y[y_off(A, ck.b, ck.t0 + i, h, r, p)], rs = rstd[x];
        DY[e] = rs * (DY[e] - y * rs * dm[x]);
    }
}

} // namespace

ssm_status launch_bwd_dy(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s) {
    if (A.W == 0 || A.H == 0) return SSM_STATUS_OK;
    dy_kernel<<<dim3((unsigned)A.W, (unsigned)A.H), kBwdThreads, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "dy_kernel");
    return SSM_STATUS_OK;
}

} // namespace ssmi_mimo
