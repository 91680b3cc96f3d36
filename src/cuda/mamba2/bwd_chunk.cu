/*
 * bwd_chunk.cu — the per-(chunk, head) kernels of the Mamba-2 combined backward (bwd.cuh lists
 * the steps): the dt recompute, the chunk-local states, the state gradients through the outputs,
 * and the chunk's gradients (spec §2.7 steps 0 and 3–6, per head). One block of kThreads threads
 * per (chunk, head): blockIdx.x the chunk of the plan, blockIdx.y the head. Row operands of the
 * chunk live in shared memory as fp32; the chunk's state and state gradient (P×N) are read from
 * the workspace. Every sum runs in a fixed order.
 */
#include "../../core/ssmi_scalar.h"
#include "bwd.cuh"

namespace ssmi_m2bwd {
namespace {

/* Processed dt of one token and the dt chain factor of §2.1 backward: softplus below the
 * threshold, then the clamp; the factor is σ(pre) under softplus (1 otherwise) and 0 where the
 * clamp is active, tested before clamping. */
__device__ __forceinline__ float process_dt(const bw_args & a, float pre, float * fac) {
    const bool  sp = a.softplus && pre <= (float)SSMI_SOFTPLUS_THRESHOLD;
    const float u = sp ? log1pf(expf(pre)) : pre;
    float       v = u;
    if (v < a.lo) v = a.lo;
    if (v > a.hi) v = a.hi;
    float f = sp ? 1.0f / (1.0f + expf(-pre)) : 1.0f;
    if (u < a.lo || u > a.hi) f = 0.0f;
    *fac = f;
    return v;
}

/* One thread per (chunk, head): dt, its inclusive fp32 cumsum times A, and the chain factor. */
__global__ void bwd_dt_kernel(bw_args a) {
    const long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= a.nchunks * a.H) return;
    const long long ci = w / a.H;
    const int       h = (int)(w % a.H);
    const bw_chunk  ck = a.chunks[ci];
    const float     ah = ssmi_cu_ld(a.a.p, a.a.dtype, (long long)h * a.a.s[0]);
    const float     bias = a.has_bias ? ssmi_cu_ld(a.bias.p, a.bias.dtype, (long long)h * a.bias.s[0]) : 0.0f;
    float           run = 0.0f;
    float *         dtv = a.dtv + w * a.Q, *cmv = a.cmv + w * a.Q, *dfac = a.dfac + w * a.Q;
    for (int i = 0; i < a.Q; ++i) {
        if (i >= ck.len) {
            dtv[i] = 0.0f, cmv[i] = run, dfac[i] = 0.0f;
            continue;
        }
        const float pre = ssmi_cu_ld(a.dt.p, a.dt.dtype, off3(a.dt.s, ck.row, ck.t0 + i, h)) + bias;
        float       f;
        const float v = process_dt(a, pre, &f);
        run += v * ah;
        dtv[i] = v, cmv[i] = run, dfac[i] = f;
    }
}

/* Rows [0, len) of head/group k of a (batch, S, K, n) view into dst[Q][n] as fp32 (times
 * scale[i] when given), zeros for rows ≥ len. */
__device__ void load_rows(float * dst, const ssmi_cu_view & v, const bw_chunk & ck, int k, int n, int Q,
                          const float * scale) {
    for (int e = threadIdx.x; e < Q * n; e += blockDim.x) {
        const int i = e / n, j = e % n;
        float     val = 0.0f;
        if (i < ck.len) {
            val = ssmi_cu_ld(v.p, v.dtype, off4(v.s, ck.row, ck.t0 + i, k, j));
            if (scale != NULL) val *= scale[i];
        }
        dst[e] = val;
    }
}

/* δx of one element: dout·z·σ(z) with z, else dout. */
__device__ __forceinline__ float gate_dy(const bw_args & a, const bw_chunk & ck, int i, int h, int p, float dout) {
    if (!a.has_z) return dout;
    const float z = ssmi_cu_ld(a.z.p, a.z.dtype, off4(a.z.s, ck.row, ck.t0 + i, h, p));
    const float sg = 1.0f / (1.0f + expf(-z));
    return dout * z * sg; /* as bwd_chunk_kernel computes it */
}

/* s_c[p][n] = Σ_j (e^{cl−cm_j}·dt_j·x_j[p])·B_j[n] into the state slot of (chunk, head). */
__global__ void bwd_states_kernel(bw_args a) {
    extern __shared__ float sm[];
    const long long ci = blockIdx.x;
    const int       h = blockIdx.y, Q = a.Q, P = a.P, N = a.N;
    const bw_chunk  ck = a.chunks[ci];
    const long long w = ci * a.H + h;
    float *         wv = sm;          /* [Q] */
    float *         xs = wv + Q;      /* [Q][P] */
    float *         bs = xs + Q * P;  /* [Q][N] */
    const float *   cm = a.cmv + w * Q;
    const float     cl = cm[ck.len - 1];
    for (int i = threadIdx.x; i < Q; i += blockDim.x) wv[i] = i < ck.len ? expf(cl - cm[i]) * a.dtv[w * Q + i] : 0.0f;
    __syncthreads();
    load_rows(xs, a.x, ck, h, P, Q, wv);
    load_rows(bs, a.b, ck, h / a.R, N, Q, NULL);
    __syncthreads();
    float * out = a.st + w * (long long)P * N;
    for (int e = threadIdx.x; e < P * N; e += blockDim.x) {
        const int p = e / N, n = e % N;
        float     acc = 0.0f;
        for (int j = 0; j < ck.len; ++j) acc += xs[j * P + p] * bs[j * N + n];
        out[e] = acc;
    }
}

/* dS_c[p][n] = Σ_i (e^{cm_i}·δx_i[p])·C_i[n] into the state-gradient slot of (chunk, head). */
__global__ void bwd_dstates_kernel(bw_args a) {
    extern __shared__ float sm[];
    const long long ci = blockIdx.x;
    const int       h = blockIdx.y, Q = a.Q, P = a.P, N = a.N;
    const bw_chunk  ck = a.chunks[ci];
    const long long w = ci * a.H + h;
    float *         ev = sm;          /* [Q] */
    float *         dys = ev + Q;     /* [Q][P] */
    float *         cs = dys + Q * P; /* [Q][N] */
    const float *   cm = a.cmv + w * Q;
    for (int i = threadIdx.x; i < Q; i += blockDim.x) ev[i] = i < ck.len ? expf(cm[i]) : 0.0f;
    __syncthreads();
    for (int e = threadIdx.x; e < Q * P; e += blockDim.x) {
        const int i = e / P, p = e % P;
        float     v = 0.0f;
        if (i < ck.len) {
            const float dout = ssmi_cu_ld(a.dout.p, a.dout.dtype, off4(a.dout.s, ck.row, ck.t0 + i, h, p));
            v = gate_dy(a, ck, i, h, p, dout) * ev[i];
        }
        dys[e] = v;
    }
    load_rows(cs, a.c, ck, h / a.R, N, Q, NULL);
    __syncthreads();
    float * out = a.gs + w * (long long)P * N;
    for (int e = threadIdx.x; e < P * N; e += blockDim.x) {
        const int p = e / N, n = e % N;
        float     acc = 0.0f;
        for (int i = 0; i < ck.len; ++i) acc += dys[i * P + p] * cs[i * N + n];
        out[e] = acc;
    }
}

/* Sum of v over the block (kThreads threads), a fixed tree: the same bytes every run. */
__device__ float block_sum(float v, float * red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float r = red[0];
    __syncthreads();
    return r;
}

/* The chunk's gradients for one head (spec §2.7, per head; see bwd.cuh). With S = the entering
 * state and G = ∂L/∂S_{c+1} (both [P][N] in the workspace):
 *   y     = e^{cm_i}·C_i·S + Σ_{j≤i} CB_ij·e^{cm_i−cm_j}·dt_j·x_j + D·x_i   (only for dz)
 *   δx    = dout·silu(z) or dout;   dz = dout·y·σ(z)(1 + z(1 − σ(z)))
 *   acc_i = e^{cl−cm_i}·G·B_i + Σ_{k≥i} CB_ki·e^{cm_k−cm_i}·δx_k;  dx = acc·dt + D·δx
 *   ddt_loc_i = <acc_i, x_i>;  r_j = dt_j·<x_j, state part of acc_j>;  q_i = e^{cm_i}·<δx_i, S·C_i>
 *   dCB_ij = e^{cm_i−cm_j}·dt_j·<δx_i, x_j> (j ≤ i);  intra_k = Σ_{i≥k} Σ_{j<k} CB_ij·dCB_ij
 *   ddA_k = Σ_{i≥k} q_i + e^{cl}·<G, S> + Σ_{j<k} r_j + intra_k;  ddt = (ddA·A + ddt_loc)·fac
 *   dB_j  = e^{cl−cm_j}·dt_j·Gᵀx_j + Σ_{i≥j} dCB_ij·C_i;  dC_i = e^{cm_i}·Sᵀδx_i + Σ_{j≤i} dCB_ij·B_j */
__global__ void bwd_chunk_kernel(bw_args a) {
    extern __shared__ float sm[];
    const long long ci = blockIdx.x;
    const int       h = blockIdx.y, Q = a.Q, P = a.P, N = a.N, g = h / a.R;
    const bw_chunk  ck = a.chunks[ci];
    const int       L = ck.len;
    const long long w = ci * a.H + h;
    float *dtv = sm, *cm = dtv + Q, *fac = cm + Q, *ecm = fac + Q, *eclm = ecm + Q;
    float *q = eclm + Q, *r = q + Q, *dtl = r + Q, *dda = dtl + Q, *intra = dda + Q;
    float *xs = intra + 2 * Q; /* [Q][P] */
    float *dys = xs + Q * P;   /* [Q][P] */
    float *tmp = dys + Q * P;  /* [Q][P] */
    float *bs = tmp + Q * P;   /* [Q][N] */
    float *cs = bs + Q * N;    /* [Q][N] */
    float *cb = cs + Q * N;    /* [Q][Q] */
    float *dcb = cb + Q * Q;   /* [Q][Q] */
    float *dvec = dcb + Q * Q; /* [P]    */
    float *red = dvec + P;     /* [kThreads] */
    const float * S = a.st + w * (long long)P * N;
    const float * Gm = a.gs + w * (long long)P * N;

    for (int i = threadIdx.x; i < Q; i += blockDim.x) {
        dtv[i] = a.dtv[w * Q + i], cm[i] = a.cmv[w * Q + i], fac[i] = a.dfac[w * Q + i];
    }
    __syncthreads();
    const float cl = cm[L - 1];
    for (int i = threadIdx.x; i < Q; i += blockDim.x) {
        ecm[i] = i < L ? expf(cm[i]) : 0.0f;
        eclm[i] = i < L ? expf(cl - cm[i]) : 0.0f;
    }
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        float dv = 0.0f;
        if (a.has_d)
            dv = a.d2 ? ssmi_cu_ld(a.d.p, a.d.dtype, off2(a.d.s, h, p))
                      : ssmi_cu_ld(a.d.p, a.d.dtype, (long long)h * a.d.s[0]);
        dvec[p] = dv;
    }
    load_rows(xs, a.x, ck, h, P, Q, NULL);
    load_rows(dys, a.dout, ck, h, P, Q, NULL); /* dout for now */
    load_rows(bs, a.b, ck, g, N, Q, NULL);
    load_rows(cs, a.c, ck, g, N, Q, NULL);
    __syncthreads();
    /* CB (causal) */
    for (int e = threadIdx.x; e < Q * Q; e += blockDim.x) {
        const int i = e / Q, j = e % Q;
        float     v = 0.0f;
        if (i < L && j <= i)
            for (int n = 0; n < N; ++n) v += cs[i * N + n] * bs[j * N + n];
        cb[e] = v;
    }
    __syncthreads();
    /* δx, dz, and the terms of q */
    for (int e = threadIdx.x; e < L * P; e += blockDim.x) {
        const int i = e / P, p = e % P;
        float     yst = 0.0f;
        for (int n = 0; n < N; ++n) yst += cs[i * N + n] * S[(long long)p * N + n];
        const float dout = dys[e];
        float       dy = dout;
        if (a.has_z) {
            const float z = ssmi_cu_ld(a.z.p, a.z.dtype, off4(a.z.s, ck.row, ck.t0 + i, h, p));
            const float sg = 1.0f / (1.0f + expf(-z));
            if (a.want_dz) {
                float y = ecm[i] * yst + dvec[p] * xs[e];
                for (int j = 0; j <= i; ++j) y += cb[i * Q + j] * expf(cm[i] - cm[j]) * dtv[j] * xs[j * P + p];
                ssmi_cu_st(a.dz.p, a.dz.dtype, off4(a.dz.s, ck.row, ck.t0 + i, h, p),
                           dout * y * sg * (1.0f + z * (1.0f - sg)));
            }
            dy = dout * z * sg;
        }
        dys[e] = dy;
        tmp[e] = ecm[i] * dy * yst;
    }
    __syncthreads();
    /* q, the dD partials, then the state part of acc */
    for (int i = threadIdx.x; i < Q; i += blockDim.x) {
        float s = 0.0f;
        if (i < L)
            for (int p = 0; p < P; ++p) s += tmp[i * P + p];
        q[i] = s;
    }
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        float s = 0.0f;
        for (int i = 0; i < L; ++i) s += dys[i * P + p] * xs[i * P + p];
        a.ddp[w * P + p] = s;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < L * P; e += blockDim.x) {
        const int i = e / P, p = e % P;
        float     s = 0.0f;
        for (int n = 0; n < N; ++n) s += bs[i * N + n] * Gm[(long long)p * N + n];
        tmp[e] = eclm[i] * s;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < Q; i += blockDim.x) {
        float s = 0.0f;
        if (i < L)
            for (int p = 0; p < P; ++p) s += xs[i * P + p] * tmp[i * P + p];
        r[i] = dtv[i] * s;
    }
    __syncthreads();
    /* intra part of acc, dx */
    for (int e = threadIdx.x; e < L * P; e += blockDim.x) {
        const int i = e / P, p = e % P;
        float     s = tmp[e];
        for (int k = i; k < L; ++k) s += cb[k * Q + i] * expf(cm[k] - cm[i]) * dys[k * P + p];
        tmp[e] = s;
        if (a.dx.p != NULL)
            ssmi_cu_st(a.dx.p, a.dx.dtype, off4(a.dx.s, ck.row, ck.t0 + i, h, p), s * dtv[i] + dvec[p] * dys[e]);
    }
    /* dCB of this head */
    for (int e = threadIdx.x; e < Q * Q; e += blockDim.x) {
        const int i = e / Q, j = e % Q;
        float     v = 0.0f;
        if (i < L && j <= i) {
            for (int p = 0; p < P; ++p) v += dys[i * P + p] * xs[j * P + p];
            v *= expf(cm[i] - cm[j]) * dtv[j];
        }
        dcb[e] = v;
    }
    /* e^{cl}·<G, S> */
    float part = 0.0f;
    for (long long e = threadIdx.x; e < (long long)P * N; e += blockDim.x) part += Gm[e] * S[e];
    const float total = expf(cl) * block_sum(part, red); /* its barriers also order tmp and dcb */
    for (int i = threadIdx.x; i < Q; i += blockDim.x) {
        float s = 0.0f;
        if (i < L)
            for (int p = 0; p < P; ++p) s += tmp[i * P + p] * xs[i * P + p];
        dtl[i] = s;
        float in = 0.0f;
        if (i < L)
            for (int ii = i; ii < L; ++ii)
                for (int j = 0; j < i; ++j) in += cb[ii * Q + j] * dcb[ii * Q + j];
        intra[i] = in;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const float ah = ssmi_cu_ld(a.a.p, a.a.dtype, (long long)h * a.a.s[0]);
        float       suf = total;
        for (int k = L - 1; k >= 0; --k) {
            suf += q[k];
            dda[k] = suf;
        }
        float pre = 0.0f, da = 0.0f, db = 0.0f;
        for (int k = 0; k < L; ++k) {
            dda[k] += pre + intra[k];
            pre += r[k];
            const float gv = (dda[k] * ah + dtl[k]) * fac[k];
            if (a.ddt.p != NULL) ssmi_cu_st(a.ddt.p, a.ddt.dtype, off3(a.ddt.s, ck.row, ck.t0 + k, h), gv);
            da += dda[k] * dtv[k];
            db += gv;
        }
        a.dap[w] = da;
        a.dbp[w] = db;
    }
    /* dB and dC of this head: the output (one head per group) or the head buffer */
    if (a.want_db) {
        for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
            const int j = e / N, n = e % N;
            float     s = 0.0f;
            for (int p = 0; p < P; ++p) s += xs[j * P + p] * Gm[(long long)p * N + n];
            s *= eclm[j] * dtv[j];
            for (int i = j; i < L; ++i) s += dcb[i * Q + j] * cs[i * N + n];
            if (a.heads_buf)
                a.dbh[((ck.row * a.S + ck.t0 + j) * a.H + h) * (long long)N + n] = s;
            else
                ssmi_cu_st(a.db.p, a.db.dtype, off4(a.db.s, ck.row, ck.t0 + j, g, n), s);
        }
    }
    if (a.want_dc) {
        for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
            const int i = e / N, n = e % N;
            float     s = 0.0f;
            for (int p = 0; p < P; ++p) s += dys[i * P + p] * S[(long long)p * N + n];
            s *= ecm[i];
            for (int j = 0; j <= i; ++j) s += dcb[i * Q + j] * bs[j * N + n];
            if (a.heads_buf)
                a.dch[((ck.row * a.S + ck.t0 + i) * a.H + h) * (long long)N + n] = s;
            else
                ssmi_cu_st(a.dc.p, a.dc.dtype, off4(a.dc.s, ck.row, ck.t0 + i, g, n), s);
        }
    }
}

/* Opts a kernel into `bytes` of dynamic shared memory where that exceeds the default 48 KB. */
ssm_status smem_optin(ssm_context * ctx, const char * op, const void * fn, size_t bytes) {
    if (bytes <= 48 * 1024) return SSM_STATUS_OK;
    return ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (shared memory)",
                            cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

/* A (chunk, head) grid launch of fn with `floats` of dynamic shared memory. */
ssm_status launch_chunk_grid(ssm_context * ctx, const char * op, const char * name, void (*fn)(bw_args),
                             const bw_args & a, size_t floats) {
    if (a.nchunks == 0 || a.H == 0) return SSM_STATUS_OK;
    const size_t bytes = floats * sizeof(float);
    SSM_FORWARD_IF_ERROR(smem_optin(ctx, op, (const void *)fn, bytes));
    fn<<<dim3((unsigned)a.nchunks, (unsigned)a.H), kThreads, bytes, ssmi_cuda_stream(ctx)>>>(a);
    SSMI_CU_CHECK_LAUNCH(ctx, op, name);
    return SSM_STATUS_OK;
}

} /* namespace */

ssm_status launch_bwd_dt(ssm_context * ctx, const char * op, const bw_args & a) {
    const long long n = a.nchunks * a.H;
    if (n == 0) return SSM_STATUS_OK;
    bwd_dt_kernel<<<(unsigned)((n + kThreads - 1) / kThreads), kThreads, 0, ssmi_cuda_stream(ctx)>>>(a);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "bwd_dt_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_bwd_states(ssm_context * ctx, const char * op, const bw_args & a) {
    return launch_chunk_grid(ctx, op, "bwd_states_kernel", bwd_states_kernel, a,
                             (size_t)a.Q * (1 + (size_t)a.P + (size_t)a.N));
}

ssm_status launch_bwd_dstates(ssm_context * ctx, const char * op, const bw_args & a) {
    return launch_chunk_grid(ctx, op, "bwd_dstates_kernel", bwd_dstates_kernel, a,
                             (size_t)a.Q * (1 + (size_t)a.P + (size_t)a.N));
}

ssm_status launch_bwd_chunk(ssm_context * ctx, const char * op, const bw_args & a) {
    return launch_chunk_grid(ctx, op, "bwd_chunk_kernel", bwd_chunk_kernel, a, chunk_smem_floats(a.Q, a.P, a.N));
}

} /* namespace ssmi_m2bwd */
