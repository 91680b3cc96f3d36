/*
 * step_kernel.cu — the decode step of the CUDA Mamba-3 MIMO (mamba3_mimo_step, spec §3.9):
 * one block per (row, head). The old state of the slot (k, v, angle) is read into shared
 * memory before anything is written (in-place pools are safe); the ssm state is streamed once
 * (read, update, write) with 16-byte accesses when the pool is contiguous fp32 and aligned
 * (st_args.vec), through strides otherwise; y_r = h·q̃_r by fixed-order warp reductions; then
 * the forward's output stage (z gate / fused norm / mimo_o sum). A row's slot comes from the
 * device slot list, from the list passed by value (islot), or is the row itself. The general form
 * (several tokens per row, write slots, slot tables, intermediate_*) runs the same body over the
 * rows of the plan (common/step_plan.cuh), a token at a time, its states carried in shared memory.
 */
#include "mimo.cuh"

namespace ssmi_mimo {
namespace {

/* A block's body, (row b, head h). The single-token form: token b from slot slots[b] / islot[b]
 * (or b) to the same slot of the finals. GENERAL: row b's tokens tok[b] .. tok[b+1] − 1 of the
 * plan from its read slot, a token at a time: θ and k̃ carried in shared memory, the previous
 * token's v read again from v, the P×N state in shared memory when A.keep (each element by the
 * thread that owns it every token), else read from the pool for the row's only token; after
 * token j the intermediate_* rows and, with a token table, slot table[b, j]; after the last
 * token (the read slot's states for a row of none) the write slot. */
template <bool GENERAL>
__device__ __forceinline__ void step_body(const st_args & A, float * sm) {
    const int b = blockIdx.x, h = blockIdx.y, R = A.R, N = A.N, P = A.P, NA = A.A;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    const int       t0 = GENERAL ? A.plan.tok[b] : b, t1 = GENERAL ? A.plan.tok[b + 1] : b + 1;
    const long long slot = GENERAL           ? (long long)A.plan.read[b]
                           : A.slots != NULL ? A.slots[b]
                           : A.n_islot > 0   ? (long long)A.islot[b]
                                             : (long long)b;
    if (slot < 0) { /* padding row: out (and intermediate_*) 0, no state touched */
        for (int t = t0; t < t1; ++t) {
            for (int e = tid; e < (A.reduce ? P : R * P); e += blockDim.x) {
                if (A.reduce)
                    stv(A.out, o3(A.out, t, h, e), 0.0f);
                else
                    stv(A.out, o4(A.out, t, e / P, h, e % P), 0.0f);
            }
            if (GENERAL) {
                for (int e = tid; e < NA && A.inter_angle.p != NULL; e += blockDim.x)
                    stv(A.inter_angle, o3(A.inter_angle, t, h, e), 0.0f);
                for (int e = tid; e < P * N && A.inter_ssm.p != NULL; e += blockDim.x)
                    stv(A.inter_ssm, o4(A.inter_ssm, t, h, e / N, e % N), 0.0f);
                for (int e = tid; e < R * N && A.inter_k.p != NULL; e += blockDim.x)
                    stv(A.inter_k, o4(A.inter_k, t, e / N, h, e % N), 0.0f);
                for (int e = tid; e < P && A.inter_v.p != NULL; e += blockDim.x)
                    stv(A.inter_v, o3(A.inter_v, t, h, e), 0.0f);
            }
        }
        return;
    }
    /* the slot written after the last token: the read slot (single-token form), the plan's write
     * slot, or none (a token table writes per token) */
    const long long wlast = !GENERAL ? slot : A.plan.table == NULL ? (long long)A.plan.write[b] : -1;
    if (GENERAL && t0 == t1) { /* a row of no token: its states from the read slot to the write slot */
        if (wlast < 0) return;
        for (int e = tid; e < NA && A.final_angle.p != NULL; e += blockDim.x)
            stv(A.final_angle, o3(A.final_angle, wlast, h, e), ldv(A.angle_state, o3(A.angle_state, slot, h, e)));
        for (int e = tid; e < P * N && A.final_ssm.p != NULL; e += blockDim.x)
            stv(A.final_ssm, o4(A.final_ssm, wlast, h, e / N, e % N),
                ldv(A.ssm_state, o4(A.ssm_state, slot, h, e / N, e % N)));
        for (int e = tid; e < R * N && A.final_k.p != NULL; e += blockDim.x)
            stv(A.final_k, o4(A.final_k, wlast, e / N, h, e % N), ldv(A.k_state, o4(A.k_state, slot, e / N, h, e % N)));
        for (int e = tid; e < P && A.final_v.p != NULL; e += blockDim.x)
            stv(A.final_v, o3(A.final_v, wlast, h, e), ldv(A.v_state, o3(A.v_state, slot, h, e)));
        return;
    }
    const int g = h / (A.H / A.G);
    float *qt = sm, *kt = qt + R * N, *kp = kt + R * N, *cg = kp + R * N, *cb = cg + R * P, *u = cb + R * P;
    float *y = u + R * P, *hrow = y + R * P, *theta = hrow + nwarps * N, *rstd = theta + NA;
    float *     hs = rstd + R; /* P×N: the state between tokens (GENERAL with A.keep) */
    const bool  keep = GENERAL && A.keep;
    const float dsk = A.has_d ? ldv(A.d, o1(A.d, h)) : 0.0f;
    for (int t = t0; t < t1; ++t) {
        const bool first = t == t0;
        if (!first) __syncthreads(); /* every read of the previous token's shared values is done */
        const long long ws = GENERAL && A.plan.table != NULL
                                 ? (long long)A.plan.table[(long long)b * A.plan.LC + (t - t0)]
                             : t == t1 - 1 ? wlast
                                           : -1;
        const float     adt = ldv(A.adt, o2(A.adt, t, h)), dt = ldv(A.dt, o2(A.dt, t, h));
        const float     lam = ssmi_math::sigmoid(ldv(A.trap, o2(A.trap, t, h)));
        const float     alpha = expf(adt), gamma = dt * lam, beta = (1.0f - lam) * dt * alpha;
        /* the old k, v, θ (the slot's before any write, or the previous token's); the new θ, q̄,
         * k̄, u, the coefficients */
        for (int a = tid; a < NA; a += blockDim.x)
            theta[a] = (first ? ldv(A.angle_state, o3(A.angle_state, slot, h, a)) : theta[a]) +
                       ssmi_math::kPi * tanhf(ldv(A.angles, o3(A.angles, t, h, a))) * dt;
        for (int e = tid; e < R * N; e += blockDim.x) {
            const int r = e / N, nn = e - r * N;
            kp[e] = first ? ldv(A.k_state, o4(A.k_state, slot, r, h, nn)) : kt[e];
            qt[e] = ldv(A.q, o4(A.q, t, r, g, nn)) + ldv(A.q_bias, o3(A.q_bias, h, r, nn));
            kt[e] = ldv(A.k, o4(A.k, t, r, g, nn)) + ldv(A.k_bias, o3(A.k_bias, h, r, nn));
        }
        for (int e = tid; e < R * P; e += blockDim.x) {
            const int   r = e / P, p = e - r * P;
            const float mv = ldv(A.mimo_v, o3(A.mimo_v, h, r, p));
            const float vo = first ? ldv(A.v_state, o3(A.v_state, slot, h, p)) : ldv(A.v, o3(A.v, t - 1, h, p));
            u[e] = ldv(A.v, o3(A.v, t, h, p)) * mv;
            cg[e] = gamma * u[e];
            cb[e] = beta * (vo * mv);
        }
        __syncthreads();
        for (int e = tid; e < R * NA; e += blockDim.x) {
            const int r = e / NA, a = e - r * NA;
            float     sn, cs;
            sincosf(theta[a], &sn, &cs);
            float *     q0 = qt + r * N, *k0 = kt + r * N;
            const float qa = q0[a], qb = q0[a + N / 2], ka = k0[a], kb = k0[a + N / 2];
            q0[a] = cs * qa - sn * qb, q0[a + N / 2] = sn * qa + cs * qb;
            k0[a] = cs * ka - sn * kb, k0[a + N / 2] = sn * ka + cs * kb;
        }
        __syncthreads();
        /* h ← α·h + Σ_r γu_r ⊗ k̃_r + Σ_r βu'_r ⊗ k_state_r, row p per warp; y_r[p] = h_p·q̃_r + D·u_r */
        for (int p = warp; p < P; p += nwarps) {
            float * hr = keep ? hs + (long long)p * N : hrow + warp * N;
            if (!GENERAL && A.vec) {
                const float4 * src = (const float4 *)((const float *)A.ssm_state.p + o4(A.ssm_state, slot, h, p, 0));
                float4 *       dst =
                    A.final_ssm.p != NULL
                              ? (float4 *)((float *)const_cast<void *>(A.final_ssm.p) + o4(A.final_ssm, slot, h, p, 0))
                              : NULL;
                for (int n4 = lane; n4 < N / 4; n4 += 32) {
                    float4 hv = src[n4];
                    float  o[4] = {hv.x, hv.y, hv.z, hv.w};
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        const int nn = 4 * n4 + c;
                        float     acc = 0.0f;
                        for (int r = 0; r < R; ++r) acc = fmaf(cg[r * P + p], kt[r * N + nn], acc);
                        for (int r = 0; r < R; ++r) acc = fmaf(cb[r * P + p], kp[r * N + nn], acc);
                        o[c] = fmaf(alpha, o[c], acc);
                        hr[nn] = o[c];
                    }
                    if (dst != NULL) dst[n4] = make_float4(o[0], o[1], o[2], o[3]);
                }
            } else {
                for (int nn = lane; nn < N; nn += 32) {
                    float acc = 0.0f;
                    for (int r = 0; r < R; ++r) acc = fmaf(cg[r * P + p], kt[r * N + nn], acc);
                    for (int r = 0; r < R; ++r) acc = fmaf(cb[r * P + p], kp[r * N + nn], acc);
                    const float old = keep && !first ? hr[nn] : ldv(A.ssm_state, o4(A.ssm_state, slot, h, p, nn));
                    const float hn = fmaf(alpha, old, acc);
                    hr[nn] = hn;
                    if (A.final_ssm.p != NULL && ws >= 0) stv(A.final_ssm, o4(A.final_ssm, ws, h, p, nn), hn);
                    if (GENERAL && A.inter_ssm.p != NULL) stv(A.inter_ssm, o4(A.inter_ssm, t, h, p, nn), hn);
                }
            }
            __syncwarp();
            for (int r = 0; r < R; ++r) {
                float s = 0.0f;
                for (int nn = lane; nn < N; nn += 32) s = fmaf(hr[nn], qt[r * N + nn], s);
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
                if (lane == 0) y[r * P + p] = s + dsk * u[r * P + p];
            }
            __syncwarp();
        }
        __syncthreads();
        /* output stage (z gate / fused norm / mimo_o sum), as the forward */
        if (A.fused)
            for (int r = warp; r < R; r += nwarps) {
                float ss = 0.0f;
                for (int p = lane; p < P; p += 32) ss += y[r * P + p] * y[r * P + p];
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
                if (lane == 0) rstd[r] = 1.0f / sqrtf(ss / (float)P + A.eps);
            }
        __syncthreads();
        for (int p = tid; p < P; p += blockDim.x) {
            const float zv = A.has_z ? ldv(A.z, o3(A.z, t, h, p)) : 0.0f;
            const float nw = !A.fused || A.norm_w.p == NULL ? 1.0f
                             : A.nw_1d                      ? ldv(A.norm_w, o1(A.norm_w, (long long)h * P + p))
                                                            : ldv(A.norm_w, o2(A.norm_w, h, p));
            float       acc = 0.0f;
            for (int r = 0; r < R; ++r) {
                float yv = y[r * P + p];
                if (A.has_z) {
                    const float zz = zv * ldv(A.mimo_z, o3(A.mimo_z, h, r, p));
                    const float sz = ssmi_math::silu(zz);
                    yv = A.fused ? yv * rstd[r] * nw * sz : yv * sz;
                }
                if (A.reduce) {
                    const float t2 = yv * ldv(A.mimo_o, o3(A.mimo_o, h, r, p));
                    acc = r == 0 ? t2 : acc + t2;
                } else {
                    stv(A.out, o4(A.out, t, r, h, p), yv);
                }
            }
            if (A.reduce) stv(A.out, o3(A.out, t, h, p), acc);
            const float vt = ldv(A.v, o3(A.v, t, h, p));
            if (A.final_v.p != NULL && ws >= 0) stv(A.final_v, o3(A.final_v, ws, h, p), vt);
            if (GENERAL && A.inter_v.p != NULL) stv(A.inter_v, o3(A.inter_v, t, h, p), vt);
        }
        for (int a = tid; a < NA; a += blockDim.x) {
            if (A.final_angle.p != NULL && ws >= 0) stv(A.final_angle, o3(A.final_angle, ws, h, a), theta[a]);
            if (GENERAL && A.inter_angle.p != NULL) stv(A.inter_angle, o3(A.inter_angle, t, h, a), theta[a]);
        }
        for (int e = tid; e < R * N; e += blockDim.x) {
            if (A.final_k.p != NULL && ws >= 0) stv(A.final_k, o4(A.final_k, ws, e / N, h, e % N), kt[e]);
            if (GENERAL && A.inter_k.p != NULL) stv(A.inter_k, o4(A.inter_k, t, e / N, h, e % N), kt[e]);
        }
    }
}

__global__ void __launch_bounds__(kStepThreads) step_kernel(const st_args A) {
    extern __shared__ float sm[];
    step_body<false>(A, sm);
}

/* The general form: one block per SM is enough to hold its registers without a spill (the token
 * loop keeps more values live than the single-token form). */
__global__ void __launch_bounds__(kStepThreads, 1) step_general_kernel(const st_args A) {
    extern __shared__ float sm[];
    step_body<true>(A, sm);
}

} // namespace

ssm_status launch_step(ssm_context * ctx, const char * op, const st_args & A, long long batch, long long nheads,
                       size_t smem, cudaStream_t s) {
    if (A.general) {
        SSM_FORWARD_IF_ERROR(set_smem(ctx, op, SM_STEP_GENERAL, (const void *)step_general_kernel, smem));
        step_general_kernel<<<dim3((unsigned)batch, (unsigned)nheads), kStepThreads, smem, s>>>(A);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "step_general_kernel");
        return SSM_STATUS_OK;
    }
    SSM_FORWARD_IF_ERROR(set_smem(ctx, op, SM_STEP, (const void *)step_kernel, smem));
    step_kernel<<<dim3((unsigned)batch, (unsigned)nheads), kStepThreads, smem, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "step_kernel");
    return SSM_STATUS_OK;
}

} // namespace ssmi_mimo
