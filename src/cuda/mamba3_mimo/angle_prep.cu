/*
 * angle_prep.cu — the forward's θ prep of the CUDA Mamba-3 MIMO: θ = wrap(θ + π·tanh(raw)·dt)
 * token by token from angle_state (spec §2.2), and the chunk-local inclusive cumsum cm of adt
 * (da_cs = cm, da_cs_rev = cm_last − cm, segsum = cm_i − cm_j, formed where used), computed by
 * segments so that a long sequence is not one thread's dependent chain.
 *
 * A segment is cps whole chunks of one sequence (T = cps·C tokens; it starts at a chunk with
 * c % cps == 0, so the chunk-local cumsum never crosses one). Three passes:
 *   seg_sum_kernel    per (segment, head, angle): L = the wrapped sum of the segment's
 *                     increments from 0 (wrap after every token, as a token pass);
 *   seg_scan_kernel   per (sequence, head, angle): the segments in order, start_0 = angle_state
 *                     (or 0), start_{j+1} = wrap(start_j + L_j); start_j replaces L_j;
 *   seg_theta_kernel  per (segment, head, angle): θ = wrap(θ + inc) from start_j, token by
 *                     token; per (segment, head): the chunk-local cumsum of adt.
 * Every θ stays in [0, 2π) after each add, as in a token pass, so the rounding is of the same
 * size; the additions are associated per segment, so θ may differ in the last bits from a
 * strictly sequential pass (the CPU's). Loads come in batches of kSegU tokens ahead of the
 * dependent chain.
 */
#include "mimo.cuh"

namespace ssmi_mimo {
namespace {

__device__ __forceinline__ float theta_inc(const mc_args & A, int row, long long t, int h, int a) {
    return ssmi_math::kPi * tanhf(ldv(A.angles, o4(A.angles, row, t, h, a))) * ldv(A.dt, o3(A.dt, row, h, t));
}

/* inc[u] for tokens t0 + u < t1 (0 beyond) */
__device__ __forceinline__ void theta_batch(const mc_args & A, int row, long long t0, long long t1, int h, int a,
                                            float (&inc)[kSegU]) {
#pragma unroll
    for (int u = 0; u < kSegU; ++u) inc[u] = t0 + u < t1 ? theta_inc(A, row, t0 + u, h, a) : 0.0f;
}

__global__ void seg_sum_kernel(const mc_args A, int cps) {
    const mc_chunk ck = A.chunks[blockIdx.x];
    const int      e = blockIdx.y * blockDim.x + threadIdx.x;
    if (ck.c % cps != 0 || e >= A.H * A.A) return;
    const int       h = e / A.A, a = e - h * A.A;
    const long long t1 = min(ck.t0 + (long long)cps * A.C, ck.t_end);
    float           acc = 0.0f;
    for (long long t0 = ck.t0; t0 < t1; t0 += kSegU) {
        float inc[kSegU];
        theta_batch(A, ck.b, t0, t1, h, a, inc);
#pragma unroll
        for (int u = 0; u < kSegU; ++u)
            if (t0 + u < t1) acc = ssmi_math::wrap_2pi(acc + inc[u]);
    }
    A.ws_seg[((long long)blockIdx.x * A.H + h) * A.A + a] = acc;
}

__global__ void seg_scan_kernel(const mc_args A, int cps) {
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= (long long)A.nseq * A.H * A.A) return;
    const int    s = (int)(g / ((long long)A.H * A.A)), rem = (int)(g - (long long)s * A.H * A.A);
    const int    h = rem / A.A, a = rem - h * A.A;
    const mc_seq sq = A.seqs[s];
    const int    nseg = (sq.count + cps - 1) / cps;
    float        th = A.has_states ? ldv(A.angle_state, o3(A.angle_state, s, h, a)) : 0.0f;
    for (int j0 = 0; j0 < nseg; j0 += kSegU) {
        float L[kSegU];
#pragma unroll
        for (int u = 0; u < kSegU; ++u) {
            const long long w = sq.first + (long long)(j0 + u) * cps;
            L[u] = j0 + u < nseg ? A.ws_seg[(w * A.H + h) * A.A + a] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kSegU; ++u) {
            if (j0 + u >= nseg) break;
            const long long w = sq.first + (long long)(j0 + u) * cps;
            A.ws_seg[(w * A.H + h) * A.A + a] = th;
            th = ssmi_math::wrap_2pi(th + L[u]);
        }
    }
}

/* threads e < H·A: θ of (head, angle); H·A ≤ e < H·(A + 1): the cumsum of head e − H·A */
__global__ void seg_theta_kernel(const mc_args A, int cps) {
    const mc_chunk ck = A.chunks[blockIdx.x];
    const int      e = blockIdx.y * blockDim.x + threadIdx.x;
    if (ck.c % cps != 0 || e >= A.H * (A.A + 1)) return;
    const long long t1 = min(ck.t0 + (long long)cps * A.C, ck.t_end);
    if (e >= A.H * A.A) {
        const int h = e - A.H * A.A;
        float *   cm = A.ws_cm + ((long long)ck.b * A.H + h) * A.S;
        float     acc = 0.0f;
        for (long long t0 = ck.t0; t0 < t1; t0 += kSegU) {
            float x[kSegU];
#pragma unroll
            for (int u = 0; u < kSegU; ++u) x[u] = t0 + u < t1 ? ldv(A.adt, o3(A.adt, ck.b, h, t0 + u)) : 0.0f;
#pragma unroll
            for (int u = 0; u < kSegU; ++u) {
                const long long t = t0 + u;
                if (t >= t1) break;
                acc = ((t - ck.t0) % A.C == 0) ? x[u] : acc + x[u]; /* the segment starts a chunk */
                cm[t] = acc;
            }
        }
        return;
    }
    const int h = e / A.A, a = e - h * A.A;
    float     th = A.ws_seg[((long long)blockIdx.x * A.H + h) * A.A + a];
    for (long long t0 = ck.t0; t0 < t1; t0 += kSegU) {
        float inc[kSegU];
        theta_batch(A, ck.b, t0, t1, h, a, inc);
#pragma unroll
        for (int u = 0; u < kSegU; ++u) {
            const long long t = t0 + u;
            if (t >= t1) break;
            th = ssmi_math::wrap_2pi(th + inc[u]);
            A.ws_theta[(((long long)ck.b * A.S + t) * A.H + h) * A.A + a] = th;
        }
    }
}

} // namespace

/* Segment sums, the scan over segments, θ and the cumsum per segment. */
ssm_status launch_angle_prep(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s) {
    if (A.W == 0 || A.H == 0) return SSM_STATUS_OK; /* only empty sequences: no token to prepare */
    const int cps = seg_chunks(A.C);
    if (A.A > 0) {
        seg_sum_kernel<<<dim3((unsigned)A.W, (unsigned)((A.H * A.A + 127) / 128)), 128, 0, s>>>(A, cps);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "seg_sum_kernel");
        const long long threads = (long long)A.nseq * A.H * A.A;
        seg_scan_kernel<<<(unsigned)((threads + 127) / 128), 128, 0, s>>>(A, cps);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "seg_scan_kernel");
    }
    seg_theta_kernel<<<dim3((unsigned)A.W, (unsigned)((A.H * (A.A + 1) + 127) / 128)), 128, 0, s>>>(A, cps);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "seg_theta_kernel");
    return SSM_STATUS_OK;
}

} // namespace ssmi_mimo
