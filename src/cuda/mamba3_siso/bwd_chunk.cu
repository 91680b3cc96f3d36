/*
 * bwd_chunk.cu — the per-(chunk, head) kernels of the CUDA Mamba-3 SISO backward (spec §6.3), one
 * block of kBwdThreads per (chunk, head), plain fp32 through shared memory.
 *
 * Both kernels first load the chunk (load_chunk): the scalars that bwd_prep_kernel left in the
 * workspace, e^{c}, e^{c_last − c}, q̃ = q + q_bias and k̃ = k + k_bias, d = q̃·k̃, then q̂ = R(θ)q̃ and
 * k̂ = R(θ)k̃ in place, v and dy = dout ⊙ silu(z).
 *
 * bwd_chunk_sums_kernel: the chunk's state contribution Vcᵀ·diag(e^{c_last−c}·σ)·K̂ into st and
 * its state-gradient contribution dYᵀ·diag(e^c)·Q̂ into dst, and c_last; the passes of bwd_scan.cu
 * turn them into the state entering the chunk (S_c) and the carry dS of the chunk.
 *
 * bwd_chunk_grads_kernel, with S_c and dS (spec §6.3):
 *   Pm_ij = e^{c_i−c_j}·σ_j·(q̂_i·k̂_j), E_ij = e^{c_i−c_j}·(dy_i·v_j), W_ij = Pm_ij·(dy_i·v_j)  (i > j)
 *   dq̂ = diag(e^c)·dY·S_c + E·K̂s;   dK̂s = diag(e^{c_last−c})·Vc·dS + Eᵀ·Q̂
 *   dv = Pmᵀ·dY + diag(e^{c_last−c}·σ)·K̂·dSᵀ + diag(D + γ·d)·dY (+ dfinal_v_state at the end)
 *   y = diag(e^c)·Q̂·S_cᵀ + Pm·Vc + diag(D + γ·d)·Vc (for dz only)
 *   r_i = e^{c_i}·dy_i·(S_c q̂_i) + Σ_j W_ij − Σ_j W_ji,  m_j = e^{c_last−c_j}·σ_j·v_jᵀ·dS·k̂_j,
 *   μ = e^{c_last}·⟨S_c, dS⟩,  dadt_i = Σ_{i'≥i} r_i' + Σ_{j<i} m_j + μ
 *   (the readout and m reuse the inter-chunk parts of dq̂ and dK̂s, computed first)
 * then the preprocessing chain per token (spec §6.2): dσ = dK̂s·k̂, dk̂ = σ·dK̂s (+ dfinal_k_state at
 * the end), dθ from the rotated q̂, k̂ (dθ_p = −g_{2p}·x̂_{2p+1} + g_{2p+1}·x̂_{2p}), dq̃ = R(θ)ᵀdq̂ +
 * dQK·γ·k̃, dk̃ = R(θ)ᵀdk̂ + dQK·γ·q̃, dγ = dQK·d + dσ. Writes dv, dz, dadt, and into the workspace
 * dq̃, dk̃ (per V-head), dθ, dσ, dγ, and the chunk's sums of dq̃, dk̃ and dQK (bias and dd partials).
 */
#include "bwd.cuh"

using namespace ssmi_siso;

namespace ssmi_siso_bwd {

namespace {

/* A chunk's shared memory (chunk_smem_floats). */
struct bw_smem {
    float *dt, *lam, *gam, *sig, *cm, *ec, *wl, *dqk, *dQK, *rr, *mm, *dsg; /* C each */
    float *red;                                                        /* kBwdThreads */
    float *qh, *kh, *v, *dy;                                           /* C×K, C×K, C×V, C×V */
    float *dqh, *dks, *pm, *ee, *ww;                                   /* C×K, C×K, C×C ×3 */
};

__device__ inline bw_smem carve(float * base, int C, int K, int V, bool grads) {
    bw_smem s;
    float * o = base;
    float ** rows[kScal] = {&s.dt, &s.lam, &s.gam, &s.sig, &s.cm, &s.ec, &s.wl, &s.dqk, &s.dQK, &s.rr, &s.mm, &s.dsg};
    for (int i = 0; i < kScal; ++i) *rows[i] = o, o += C;
    s.red = o, o += kBwdThreads;
    s.qh = o, o += C * K;
    s.kh = o, o += C * K;
    s.v = o, o += C * V;
    s.dy = o, o += C * V;
    s.dqh = s.dks = s.pm = s.ee = s.ww = nullptr;
    if (grads) {
        s.dqh = o, o += C * K;
        s.dks = o, o += C * K;
        s.pm = o, o += C * C;
        s.ee = o, o += C * C;
        s.ww = o;
    }
    return s;
}

/* The chunk's scalars, q̂, k̂ (and d), v and dy into shared memory; returns c_last. */
__device__ float load_chunk(const bw_args & P, const bw_chunk & ch, int h, const bw_smem & s) {
    const int L = ch.len, K = P.K, V = P.V, A = P.A, g = h / P.G, tid = threadIdx.x, nt = blockDim.x;
    for (int i = tid; i < L; i += nt) {
        const float * sc = P.sc + ((ch.tok + i) * P.H + h) * kScalWs;
        s.dt[i] = sc[0], s.lam[i] = sc[1], s.gam[i] = sc[2], s.sig[i] = sc[3], s.cm[i] = sc[4];
    }
    for (int e = tid; e < L * K; e += nt) {
        const int       i = e / K, c = e % K;
        const long long t = ch.t0 + i;
        s.qh[e] = ld4(P.q, ch.row, t, g, c) + ld2(P.qb, h, c);
        s.kh[e] = ld4(P.k, ch.row, t, g, c) + ld2(P.kb, h, c);
    }
    for (int e = tid; e < L * V; e += nt) {
        const int       i = e / V, r = e % V;
        const long long t = ch.t0 + i;
        s.v[e] = ld4(P.v, ch.row, t, h, r);
        const float dO = ld4(P.dout, ch.row, t, h, r);
        if (P.has_z) {
            const float z = ld4(P.z, ch.row, t, h, r);
            s.dy[e] = dO * z * sigmoidf(z);
        } else {
            s.dy[e] = dO;
        }
    }
    __syncthreads();
    const float cl = s.cm[L - 1];
    for (int i = tid; i < L; i += nt) {
        s.ec[i] = expf(s.cm[i]);
        s.wl[i] = expf(cl - s.cm[i]);
        float d = 0.0f;
        for (int c = 0; c < K; ++c) d += s.qh[i * K + c] * s.kh[i * K + c];
        s.dqk[i] = d;
    }
    __syncthreads();
    const int K2 = K / 2;
    for (int e = tid; e < L * K2; e += nt) {
        const int i = e / K2, p = e % K2;
        if (p >= A) continue;
        float sn, cs;
        sincosf(P.th[((ch.tok + i) * P.H + h) * A + p], &sn, &cs);
        float *     q = s.qh + i * K + 2 * p, *k = s.kh + i * K + 2 * p;
        const float q0 = q[0], q1 = q[1], k0 = k[0], k1 = k[1];
        q[0] = q0 * cs - q1 * sn, q[1] = q0 * sn + q1 * cs;
        k[0] = k0 * cs - k1 * sn, k[1] = k0 * sn + k1 * cs;
    }
    __syncthreads();
    return cl;
}

__global__ void __launch_bounds__(kBwdThreads) bwd_chunk_sums_kernel(const bw_args P) {
    extern __shared__ float smem[];
    const int      w = blockIdx.x, h = blockIdx.y;
    const bw_chunk ch = P.chunks[w];
    const bw_smem  s = carve(smem, P.C, P.K, P.V, false);
    const float    cl = load_chunk(P, ch, h, s);
    const int      L = ch.len, K = P.K, VK = P.V * P.K;
    for (int i = threadIdx.x; i < L; i += blockDim.x) s.wl[i] *= s.sig[i]; /* e^{c_last−c}·σ */
    __syncthreads();
    float * st = P.st + ((long long)w * P.H + h) * VK;
    float * dst = P.dst + ((long long)w * P.H + h) * VK;
    for (int e = threadIdx.x; e < VK; e += blockDim.x) {
        const int r = e / K, c = e % K;
        float     a = 0.0f, b = 0.0f;
        for (int i = 0; i < L; ++i) {
            a += s.v[i * P.V + r] * s.wl[i] * s.kh[i * K + c];
            b += s.dy[i * P.V + r] * s.ec[i] * s.qh[i * K + c];
        }
        st[e] = a;
        dst[e] = b;
    }
    if (threadIdx.x == 0) P.cl[(long long)w * P.H + h] = cl;
}

__global__ void __launch_bounds__(kBwdThreads) bwd_chunk_grads_kernel(const bw_args P) {
    extern __shared__ float smem[];
    const int      w = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const bw_chunk ch = P.chunks[w];
    const bw_smem  s = carve(smem, P.C, P.K, P.V, true);
    const float    cl = load_chunk(P, ch, h, s);
    const int      L = ch.len, K = P.K, V = P.V, A = P.A, C = P.C, VK = V * K, g = h / P.G;
    const float    dskip = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, (long long)h * P.d.s[0]) : 0.0f;
    const float *  Sc = P.st + ((long long)w * P.H + h) * VK;  /* state entering the chunk */
    const float *  dS = P.dst + ((long long)w * P.H + h) * VK; /* the carry of the chunk   */
    const bool     seq_end = ch.last != 0;

    /* Pm, E, W (strictly lower) and dQK */
    for (int e = tid; e < C * C; e += nt) {
        const int i = e / C, j = e % C;
        float     pm = 0.0f, ee = 0.0f, ww = 0.0f;
        if (i < L && j < i) {
            float qk = 0.0f, dv = 0.0f;
            for (int c = 0; c < K; ++c) qk += s.qh[i * K + c] * s.kh[j * K + c];
            for (int r = 0; r < V; ++r) dv += s.dy[i * V + r] * s.v[j * V + r];
            const float dec = expf(s.cm[i] - s.cm[j]);
            pm = dec * s.sig[j] * qk;
            ee = dec * dv;
            ww = pm * dv;
        }
        s.pm[e] = pm, s.ee[e] = ee, s.ww[e] = ww;
    }
    for (int i = tid; i < L; i += nt) {
        float a = 0.0f;
        for (int r = 0; r < V; ++r) a += s.dy[i * V + r] * s.v[i * V + r];
        s.dQK[i] = a;
    }
    /* the inter-chunk parts of dq̂ and dK̂s */
    for (int e = tid; e < L * K; e += nt) {
        const int i = e / K, c = e % K;
        float     a = 0.0f, b = 0.0f;
        for (int r = 0; r < V; ++r) {
            a += s.dy[i * V + r] * Sc[r * K + c];
            b += s.v[i * V + r] * dS[r * K + c];
        }
        s.dqh[e] = s.ec[i] * a;
        s.dks[e] = s.wl[i] * b;
    }
    /* μ: per-thread partials in a fixed stride, summed in thread order below */
    {
        float a = 0.0f;
        for (int e = tid; e < VK; e += nt) a += Sc[e] * dS[e];
        s.red[tid] = a;
    }
    __syncthreads();
    /* r (readout + W rows − W columns) and m */
    for (int i = tid; i < L; i += nt) {
        float ro = 0.0f, mk = 0.0f;
        for (int c = 0; c < K; ++c) {
            ro += s.qh[i * K + c] * s.dqh[i * K + c];
            mk += s.kh[i * K + c] * s.dks[i * K + c];
        }
        float rw = 0.0f, cw = 0.0f;
        for (int j = 0; j < i; ++j) rw += s.ww[i * C + j];
        for (int j = i + 1; j < L; ++j) cw += s.ww[j * C + i];
        s.rr[i] = ro + rw - cw;
        s.mm[i] = s.sig[i] * mk;
    }
    __syncthreads();
    /* the intra-chunk parts of dq̂ and dK̂s */
    for (int e = tid; e < L * K; e += nt) {
        const int i = e / K, c = e % K;
        float     a = 0.0f, b = 0.0f;
        for (int j = 0; j < i; ++j) a += s.ee[i * C + j] * s.sig[j] * s.kh[j * K + c];
        for (int j = i + 1; j < L; ++j) b += s.ee[j * C + i] * s.qh[j * K + c];
        s.dqh[e] += a;
        s.dks[e] += b;
    }
    /* dv and dz */
    const bool want_dv = P.dv.present != 0, want_dz = P.dz.present != 0 && P.has_z;
    if (want_dv || want_dz)
        for (int e = tid; e < L * V; e += nt) {
            const int       j = e / V, r = e % V;
            const long long t = ch.t0 + j;
            const float     diag = dskip + s.gam[j] * s.dqk[j];
            if (want_dv) {
                float a = 0.0f, b = 0.0f;
                for (int i = j + 1; i < L; ++i) a += s.pm[i * C + j] * s.dy[i * V + r];
                for (int c = 0; c < K; ++c) b += dS[r * K + c] * s.kh[j * K + c];
                float dv = a + s.wl[j] * s.sig[j] * b + diag * s.dy[j * V + r];
                if (seq_end && j == L - 1 && P.has_dfv) dv += ld3(P.dfv, ch.seq, h, r);
                st4(P.dv, ch.row, t, h, r, dv);
            }
            if (want_dz) {
                float a = 0.0f, b = 0.0f;
                for (int c = 0; c < K; ++c) a += Sc[r * K + c] * s.qh[j * K + c];
                for (int i = 0; i < j; ++i) b += s.pm[j * C + i] * s.v[i * V + r];
                const float y = s.ec[j] * a + b + diag * s.v[j * V + r];
                const float z = ld4(P.z, ch.row, t, h, r), sg = sigmoidf(z), dO = ld4(P.dout, ch.row, t, h, r);
                st4(P.dz, ch.row, t, h, r, dO * y * sg * (1.0f + z * (1.0f - sg)));
            }
        }
    __syncthreads();
    /* dadt, the dd partial (thread 0, in token order); dσ, dγ per token */
    if (tid == 0) {
        float mu = 0.0f;
        for (int i = 0; i < nt; ++i) mu += s.red[i];
        mu *= expf(cl);
        float ex = 0.0f; /* Σ_{j<i} m_j, kept in red (free now) */
        for (int i = 0; i < L; ++i) {
            s.red[i] = ex;
            ex += s.mm[i];
        }
        float rev = 0.0f, dd = 0.0f;
        for (int i = L - 1; i >= 0; --i) {
            rev += s.rr[i];
            if (P.dadt.present) st3(P.dadt, ch.row, h, ch.t0 + i, rev + s.red[i] + mu);
        }
        for (int i = 0; i < L; ++i) dd += s.dQK[i];
        P.ddp[(long long)w * P.H + h] = dd;
    }
    for (int i = tid; i < L; i += nt) {
        float a = 0.0f;
        for (int c = 0; c < K; ++c) a += s.dks[i * K + c] * s.kh[i * K + c];
        s.dsg[i] = a;
        const long long o = (ch.tok + i) * P.H + h;
        P.dsg[o] = a;
        P.dgm[o] = s.dQK[i] * s.dqk[i] + a;
    }
    __syncthreads();
    /* the chain per (token, pair): dk̂, dθ, dq̃, dk̃ */
    const int K2 = K / 2;
    for (int e = tid; e < L * K2; e += nt) {
        const int       i = e / K2, p = e % K2, c0 = 2 * p;
        const long long t = ch.t0 + i, o = (ch.tok + i) * P.H + h;
        const bool      fk = seq_end && i == L - 1 && P.has_dfk;
        float           g0 = s.sig[i] * s.dks[i * K + c0], g1 = s.sig[i] * s.dks[i * K + c0 + 1];
        if (fk) g0 += ld3(P.dfk, ch.seq, h, c0), g1 += ld3(P.dfk, ch.seq, h, c0 + 1);
        float f0 = s.dqh[i * K + c0], f1 = s.dqh[i * K + c0 + 1];
        if (p < A) {
            const float *x = s.qh + i * K + c0, *y = s.kh + i * K + c0;
            P.dth[o * A + p] = -f0 * x[1] + f1 * x[0] - g0 * y[1] + g1 * y[0];
            float sn, cs;
            sincosf(P.th[o * A + p], &sn, &cs);
            const float a0 = cs * f0 + sn * f1, a1 = -sn * f0 + cs * f1;
            const float b0 = cs * g0 + sn * g1, b1 = -sn * g0 + cs * g1;
            f0 = a0, f1 = a1, g0 = b0, g1 = b1;
        }
        const float cqk = s.dQK[i] * s.gam[i];
        const float qt0 = ld4(P.q, ch.row, t, g, c0) + ld2(P.qb, h, c0);
        const float qt1 = ld4(P.q, ch.row, t, g, c0 + 1) + ld2(P.qb, h, c0 + 1);
        const float kt0 = ld4(P.k, ch.row, t, g, c0) + ld2(P.kb, h, c0);
        const float kt1 = ld4(P.k, ch.row, t, g, c0 + 1) + ld2(P.kb, h, c0 + 1);
        f0 += cqk * kt0, f1 += cqk * kt1;
        g0 += cqk * qt0, g1 += cqk * qt1;
        P.dqt[o * K + c0] = f0, P.dqt[o * K + c0 + 1] = f1;
        P.dkt[o * K + c0] = g0, P.dkt[o * K + c0 + 1] = g1;
        /* each thread owns its pair: the chunk sums below read them back */
        s.dqh[i * K + c0] = f0, s.dqh[i * K + c0 + 1] = f1;
        s.dks[i * K + c0] = g0, s.dks[i * K + c0 + 1] = g1;
    }
    __syncthreads();
    for (int c = tid; c < K; c += nt) {
        float a = 0.0f, b = 0.0f;
        for (int i = 0; i < L; ++i) a += s.dqh[i * K + c], b += s.dks[i * K + c];
        P.qbp[((long long)w * P.H + h) * K + c] = a;
        P.kbp[((long long)w * P.H + h) * K + c] = b;
    }
}

} /* namespace */

ssm_status launch_bwd_chunk(ssm_context * ctx, const char * op, const bw_args & P, bool grads) {
    const size_t bytes = sizeof(float) * (size_t)chunk_smem_floats(P.C, P.K, P.V, grads);
    const dim3   grid((unsigned)P.W, (unsigned)P.H);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    if (grads) {
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, op, "cudaFuncSetAttribute (bwd_chunk_grads_kernel)",
            cudaFuncSetAttribute(bwd_chunk_grads_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)));
        bwd_chunk_grads_kernel<<<grid, kBwdThreads, bytes, s>>>(P);
        return ssmi_cuda_status(ctx, op, "bwd_chunk_grads_kernel launch", cudaGetLastError());
    }
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute (bwd_chunk_sums_kernel)",
        cudaFuncSetAttribute(bwd_chunk_sums_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)));
    bwd_chunk_sums_kernel<<<grid, kBwdThreads, bytes, s>>>(P);
    return ssmi_cuda_status(ctx, op, "bwd_chunk_sums_kernel launch", cudaGetLastError());
}

} /* namespace ssmi_siso_bwd */
