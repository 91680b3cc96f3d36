/*
 * bwd_chunk_planes.cu — the per-(chunk, head) kernels of the CUDA Mamba-3 SISO backward for 16-bit
 * q, k and v (entry chunked_planes): the same math as bwd_chunk.cu's bwd_chunk_sums_kernel and
 * bwd_chunk_grads_kernel (its head comment has the formulas, spec §6.3), with every product on the
 * tensor cores. One block of kPlanesThreads threads per (chunk, head), chunks of kBwdMaxChunk tokens.
 *
 * Every product operand is written once into shared memory as bf16 planes (planes_geom): q̂, k̂
 * (after the biases and the rotation), dy = dout ⊙ silu(z), S_c, dS and the [C][C] tables Pm, E,
 * E·diag(σ) as a rounded plane and a remainder plane (split2), v as one exact plane where it is
 * bf16 (else split too), so a product of two split operands is three bf16 products (lo·lo, ~2^-16
 * relative, dropped). Warps compute 16 × 16 output tiles by ldmatrix + mma.sync m16n8k16 with
 * fp32 accumulators (tile_mma); the epilogues (row scales, the i > j masks, the per-tile row sums
 * of the readout and of m, the stores) run on the accumulators in registers. Every sum has a
 * fixed order (k ascending in steps of 16, fixed shuffle trees, partials summed in column-tile
 * order), so the bytes depend on neither the run nor the grid.
 *
 * bwd_chunk_planes_sums_kernel: load (q̂ scaled by e^c, k̂ by e^{c_last−c}·σ), then per (r, c) tile
 *   st = Vᵀ·K̂w and dst = dYᵀ·Q̂e (the chunk's tokens as the inner dimension), and c_last.
 * bwd_chunk_planes_grads_kernel:
 *   load  scalars, q̂, k̂, v, dy and the dz factor; S_c and dS planes and the μ partials
 *   A1    per (i, j) tile on or below the diagonal: Q̂·K̂ᵀ and dY·Vᵀ → Pm, E, E·diag(σ) planes,
 *         W in fp32, dQK (the diagonal of dY·Vᵀ)
 *   A2    per (i, c) tile: e^{c}·dY·S_c → readout partials, + (E·diag(σ))·K̂ → dq̂;
 *         per (j, c): e^{c_last−c}·V·dS → m partials, + Eᵀ·Q̂ → dK̂s;
 *         per (j, r): e^{c_last−c}·σ·K̂·dSᵀ + Pmᵀ·dY + (D + γd)·dy → dv;
 *         per (j, r) (dz): e^{c}·Q̂·S_cᵀ + Pm·V + (D + γd)·v → y, dz = y·(dz factor)
 *   B     per token r (readout + W rows − W columns), m, dσ, dγ; warp 0: μ and the dadt scan;
 *         the chain per (token, pair) and the chunk sums, as bwd_chunk_grads_kernel.
 */
#include "bwd.cuh"

using namespace ssmi_siso;

namespace ssmi_siso_bwd {

namespace {

static_assert(kBwdMaxChunk <= 32, "the dadt scan runs over one warp's lanes");
static_assert(kBwdMaxChunk % 16 == 0, "the chunk is whole 16-token tiles");

/* The planes and fp32 areas of a block's shared memory. */
struct pl_smem {
    bf16 * qh, *ql, *kh, *kl, *vh, *vl, *dyh, *dyl;
    bf16 * sh, *sl, *dh, *dl, *pmh, *pml, *eh, *el, *esh, *esl;
    float *dq, *dk, *dzf, *ww, *rpart, *mpart, *red, *bq, *bk;
    float *sig, *gam, *cm, *ec, *wl, *dqk, *dQK, *rr, *mm, *dsg; /* planes_geom::kVec rows of cp */
};

__device__ inline pl_smem carve_planes(unsigned char * sm, const planes_geom & g, bool grads) {
    pl_smem s;
    s.qh = (bf16 *)(sm + g.qh), s.ql = (bf16 *)(sm + g.ql), s.kh = (bf16 *)(sm + g.kh), s.kl = (bf16 *)(sm + g.kl);
    s.vh = (bf16 *)(sm + g.vh), s.vl = (bf16 *)(sm + g.vl), s.dyh = (bf16 *)(sm + g.dyh), s.dyl = (bf16 *)(sm + g.dyl);
    s.dq = (float *)(sm + g.dq), s.dk = (float *)(sm + g.dk), s.dzf = (float *)(sm + g.dzf);
    float *  v = (float *)(sm + g.vec);
    float ** rows[planes_geom::kVec] = {&s.sig, &s.gam, &s.cm, &s.ec, &s.wl, &s.dqk, &s.dQK, &s.rr, &s.mm, &s.dsg};
    for (int i = 0; i < planes_geom::kVec; ++i) *rows[i] = v + i * g.cp;
    s.bq = (float *)(sm + g.bias), s.bk = s.bq + g.kp;
    s.red = (float *)(sm + g.red);
    s.sh = s.sl = s.dh = s.dl = s.pmh = s.pml = s.eh = s.el = s.esh = s.esl = nullptr;
    s.ww = s.rpart = s.mpart = nullptr;
    if (grads) {
        s.sh = (bf16 *)(sm + g.sh), s.sl = (bf16 *)(sm + g.sl), s.dh = (bf16 *)(sm + g.dh), s.dl = (bf16 *)(sm + g.dl);
        s.pmh = (bf16 *)(sm + g.pmh), s.pml = (bf16 *)(sm + g.pml), s.eh = (bf16 *)(sm + g.eh);
        s.el = (bf16 *)(sm + g.el), s.esh = (bf16 *)(sm + g.esh), s.esl = (bf16 *)(sm + g.esl);
        s.ww = (float *)(sm + g.ww), s.rpart = (float *)(sm + g.rpart), s.mpart = (float *)(sm + g.mpart);
    }
    return s;
}

/* x into the split planes h, l at element o (one value: bf16 and its rounded remainder). */
__device__ __forceinline__ void split_one(float x, bf16 * h, bf16 * l, int o) {
    const bf16 r = __float2bfloat16_rn(x);
    h[o] = r;
    l[o] = __float2bfloat16_rn(x - __bfloat162float(r));
}

/* The chunk into shared memory: the planes' zeros, the scalars (zeros past L), the biases, q̃ and
 * k̃ (fp32 in dq/dk) and d = q̃·k̃, the q̂ and k̂ planes (SCALED: q̂·e^c and k̂·e^{c_last−c}·σ, as
 * the sums kernel needs them), the v plane(s), the dy planes and (has_z) the dz factor in dzf.
 * Ends with a barrier; returns c_last. */
template <bool VX>
__device__ float load_planes(const bw_args & P, int w, const bw_chunk & ch, int h, const planes_geom & g,
                             unsigned char * sm, const pl_smem & s, bool scaled) {
    const int L = ch.len, K = P.K, V = P.V, A = P.A, grp = h / P.G, tid = threadIdx.x, nt = blockDim.x;
    const int lane = tid & 31, warp = tid >> 5, nw = nt >> 5, lk = g.lk, lv = g.lv, lf = g.lf, lz = g.lz;
    for (size_t e = tid; e < g.zero_end / 16; e += nt) ((uint4 *)sm)[e] = make_uint4(0u, 0u, 0u, 0u);
    const float cl = P.sc[((ch.tok + L - 1) * P.H + h) * kScalWs + 4];
    for (int i = tid; i < g.cp; i += nt) {
        float gam = 0.0f, sig = 0.0f, cm = 0.0f, ec = 0.0f, wl = 0.0f;
        if (i < L) {
            const float * sc = P.sc + ((ch.tok + i) * P.H + h) * kScalWs;
            gam = sc[2], sig = sc[3], cm = sc[4];
            ec = expf(cm), wl = expf(cl - cm);
        }
        s.gam[i] = gam, s.sig[i] = sig, s.cm[i] = cm, s.ec[i] = ec, s.wl[i] = wl;
        s.dqk[i] = 0.0f, s.dQK[i] = 0.0f, s.rr[i] = 0.0f, s.mm[i] = 0.0f, s.dsg[i] = 0.0f;
    }
    for (int c = tid; c < g.kp; c += nt) {
        s.bq[c] = c < K ? ld2(P.qb, h, c) : 0.0f;
        s.bk[c] = c < K ? ld2(P.kb, h, c) : 0.0f;
    }
    __syncthreads(); /* the zeros and the biases */
    float *tq = s.dq, *tk = s.dk, *dzf = s.dzf, *bq = s.bq, *bk = s.bk;
    bf16 * vh = s.vh, *vl = s.vl, *dyh = s.dyh, *dyl = s.dyl;
    load_rows(P.q, ch.row, ch.t0, grp, L, K, [=](int i, int c, float x) { tq[i * lf + c] = x + bq[c]; });
    load_rows(P.k, ch.row, ch.t0, grp, L, K, [=](int i, int c, float x) { tk[i * lf + c] = x + bk[c]; });
    load_rows(P.v, ch.row, ch.t0, h, L, V, [=](int i, int r, float x) {
        if (VX)
            vh[i * lv + r] = __float2bfloat16_rn(x); /* exact: x is a bf16 value */
        else
            split_one(x, vh, vl, i * lv + r);
    });
    if (P.has_z) {
        load_rows(P.dout, ch.row, ch.t0, h, L, V, [=](int i, int r, float x) { dzf[i * lz + r] = x; });
        /* the same thread mapping as dout's: each thread reads back its own dout */
        load_rows(P.z, ch.row, ch.t0, h, L, V, [=](int i, int r, float z) {
            const float dO = dzf[i * lz + r], sg = sigmoidf(z);
            split_one(dO * z * sg, dyh, dyl, i * lv + r);
            dzf[i * lz + r] = dO * sg * (1.0f + z * (1.0f - sg));
        });
    } else {
        load_rows(P.dout, ch.row, ch.t0, h, L, V, [=](int i, int r, float x) { split_one(x, dyh, dyl, i * lv + r); });
    }
    __syncthreads(); /* q̃, k̃ */
    /* d = q̃·k̃, a warp per row; the rotated (and scaled) pairs into the planes */
    for (int i = warp; i < L; i += nw) {
        const float a = warp_sum(K, [=](int c) { return tq[i * lf + c] * tk[i * lf + c]; });
        if (lane == 0) s.dqk[i] = a;
    }
    const int K2 = K / 2;
    for (int e = tid; e < L * K2; e += nt) {
        const int i = e / K2, p = e - i * K2, c = 2 * p;
        float     q0 = tq[i * lf + c], q1 = tq[i * lf + c + 1], k0 = tk[i * lf + c], k1 = tk[i * lf + c + 1];
        if (p < A) {
            float sn, cs;
            sincosf(theta_at(P, w, h, ch.tok + i, p), &sn, &cs);
            const float x0 = q0 * cs - q1 * sn, x1 = q0 * sn + q1 * cs;
            const float y0 = k0 * cs - k1 * sn, y1 = k0 * sn + k1 * cs;
            q0 = x0, q1 = x1, k0 = y0, k1 = y1;
        }
        if (scaled) {
            const float fq = s.ec[i], fk = s.wl[i] * s.sig[i];
            q0 *= fq, q1 *= fq, k0 *= fk, k1 *= fk;
        }
        split_pair(q0, q1, s.qh, s.ql, i * lk + c);
        split_pair(k0, k1, s.kh, s.kl, i * lk + c);
    }
    __syncthreads();
    return cl;
}

/* Two blocks per SM where shared memory allows (K = 128, V = 64: ~98 KB each): 64 registers. */
template <bool VX>
__global__ void __launch_bounds__(kPlanesThreads, 2) bwd_chunk_planes_sums_kernel(const bw_args P) {
    extern __shared__ float4 sm4[];
    unsigned char * const    sm = (unsigned char *)sm4;
    const planes_geom        g = planes_geom_of(P.C, P.K, P.V);
    const pl_smem            s = carve_planes(sm, g, false);
    const int                w = blockIdx.x, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int                nw = blockDim.x >> 5, g4 = lane >> 2, t4 = lane & 3;
    const bw_chunk           ch = P.chunks[w];
    const float              cl = load_planes<VX>(P, w, ch, h, g, sm, s, true);
    const int                K = P.K, V = P.V, Kq = (ch.len + 15) / 16 * 16, nK = g.kp / 16, nV = g.vp / 16;
    const long long          base = ((long long)w * P.H + h) * V * K;
    /* jobs [0, nV·nK): st tiles (r, c) = Σ_i v[i][r]·k̂w[i][c]; [nV·nK, 2·nV·nK): dst = Σ_i dy[i][r]·q̂e[i][c] */
    for (int t = warp; t < 2 * nV * nK; t += nw) {
        const bool st = t < nV * nK;
        const int  tt = st ? t : t - nV * nK, r0 = (tt / nK) * 16, c0 = (tt % nK) * 16;
        float      c[2][4];
        zero_acc(c);
        if (st)
            tile_mma<true, true, !VX, true>(c, s.vh, s.vl, g.lv, s.kh, s.kl, g.lk, r0, c0, 0, Kq);
        else
            tile_mma<true, true, true, true>(c, s.dyh, s.dyl, g.lv, s.qh, s.ql, g.lk, r0, c0, 0, Kq);
        float * out = (st ? P.st : P.dst) + base;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int r = r0 + g4 + 8 * hh;
            if (r >= V) continue;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int col = c0 + 8 * j + 2 * t4; /* even; K is even */
                if (col < K)
                    *reinterpret_cast<float2 *>(out + (long long)r * K + col) =
                        make_float2(c[j][2 * hh], c[j][2 * hh + 1]);
            }
        }
    }
    if (threadIdx.x == 0) P.cl[(long long)w * P.H + h] = cl;
}

/* S_c and dS of the chunk (fp32 [V][K] in the workspace) into their split planes [vp][lk] (zeros
 * past V, K); returns this thread's part of ⟨S_c, dS⟩. */
__device__ __forceinline__ float load_states(const pl_smem & s, const planes_geom & g, const float * Sc,
                                             const float * dS, int V, int K) {
    const int     w2 = g.kp / 2, total = g.vp * w2;
    float         part = 0.0f;
    constexpr int kU = 4;
    for (int e0 = threadIdx.x; e0 < total; e0 += kU * blockDim.x) {
        float2 sv[kU], dv[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int  e = e0 + u * (int)blockDim.x, r = e / w2, c = (e - r * w2) * 2;
            const bool in = e < total && r < V && c < K; /* K even: the pair is whole */
            sv[u] = in ? *reinterpret_cast<const float2 *>(Sc + (long long)r * K + c) : make_float2(0.0f, 0.0f);
            dv[u] = in ? *reinterpret_cast<const float2 *>(dS + (long long)r * K + c) : make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int e = e0 + u * (int)blockDim.x, r = e / w2, c = (e - r * w2) * 2;
            if (e >= total) continue;
            part += sv[u].x * dv[u].x;
            part += sv[u].y * dv[u].y;
            split_pair(sv[u].x, sv[u].y, s.sh, s.sl, r * g.lk + c);
            split_pair(dv[u].x, dv[u].y, s.dh, s.dl, r * g.lk + c);
        }
    }
    return part;
}

template <bool VX>
__global__ void __launch_bounds__(kPlanesThreads, 1) bwd_chunk_planes_grads_kernel(const bw_args P) {
    extern __shared__ float4 sm4[];
    unsigned char * const    sm = (unsigned char *)sm4;
    const planes_geom        g = planes_geom_of(P.C, P.K, P.V);
    const pl_smem            s = carve_planes(sm, g, true);
    const int                w = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const int                lane = tid & 31, warp = tid >> 5, nw = nt >> 5, g4 = lane >> 2, t4 = lane & 3;
    const bw_chunk           ch = P.chunks[w];
    const int                K = P.K, V = P.V, VK = V * K;
    const long long          wh = (long long)w * P.H + h;
    /* S_c, dS: the planes lie outside the zeroed region; load_planes' barriers publish them */
    s.red[tid] = load_states(s, g, P.st + wh * VK, P.dst + wh * VK, V, K);
    const float cl = load_planes<VX>(P, w, ch, h, g, sm, s, false);
    const int   L = ch.len, Kq = (L + 15) / 16 * 16, nT = g.cp / 16, nK = g.kp / 16, nV = g.vp / 16;
    const int   lk = g.lk, lv = g.lv, lc = g.lc, lf = g.lf, lz = g.lz, lw = g.lw;
    const float dskip = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, (long long)h * P.d.s[0]) : 0.0f;
    const bool  seq_end = ch.last != 0;

    /* A1: tile (i, j) of Q̂·K̂ᵀ and dY·Vᵀ → Pm, E, E·diag(σ) (strictly lower; zeros elsewhere), W, dQK */
    for (int t = warp; t < nT * nT; t += nw) {
        const int  m0 = (t / nT) * 16, n0 = (t % nT) * 16;
        const bool live = n0 <= m0 && m0 < L;
        float      qk[2][4], dv[2][4];
        zero_acc(qk), zero_acc(dv);
        if (live) {
            tile_mma<false, false, true, true>(qk, s.qh, s.ql, lk, s.kh, s.kl, lk, m0, n0, 0, g.kp);
            tile_mma<false, false, true, !VX>(dv, s.dyh, s.dyl, lv, s.vh, s.vl, lv, m0, n0, 0, g.vp);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i = m0 + g4 + 8 * hh, j0 = n0 + 8 * j + 2 * t4;
                float     pm[2], e[2], es[2], ww[2];
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const int jj = j0 + u;
                    pm[u] = e[u] = es[u] = ww[u] = 0.0f;
                    if (live && i < L) {
                        const float x = dv[j][2 * hh + u];
                        if (jj < i) {
                            const float dec = expf(s.cm[i] - s.cm[jj]);
                            pm[u] = dec * s.sig[jj] * qk[j][2 * hh + u];
                            e[u] = dec * x;
                            es[u] = e[u] * s.sig[jj];
                            ww[u] = pm[u] * x;
                        } else if (jj == i) {
                            s.dQK[i] = x; /* dy_i·v_i */
                        }
                    }
                }
                const int o = i * lc + j0;
                split_pair(pm[0], pm[1], s.pmh, s.pml, o);
                split_pair(e[0], e[1], s.eh, s.el, o);
                split_pair(es[0], es[1], s.esh, s.esl, o);
                s.ww[i * lw + j0] = ww[0], s.ww[i * lw + j0 + 1] = ww[1];
            }
    }
    __syncthreads();

    /* A2: jobs [0, J) dv tiles (j, r), [J, 2J) y/dz tiles (j, r) (J = nT·nV), then nT·nK dq̂ tiles
     * (i, c), then nT·nK dK̂s tiles (j, c) */
    const bool want_dv = P.dv.present != 0, want_dz = P.dz.present != 0 && P.has_z;
    const int  J = nT * nV, JK = nT * nK;
    for (int t = warp; t < 2 * J + 2 * JK; t += nw) {
        float c[2][4];
        zero_acc(c);
        if (t < 2 * J) {
            const bool dvj = t < J;
            const int  tt = dvj ? t : t - J, m0 = (tt / nV) * 16, r0 = (tt % nV) * 16;
            if (m0 >= L || (dvj ? !want_dv : !want_dz)) continue;
            if (dvj) { /* e^{c_last−c_j}σ_j·K̂·dSᵀ + Pmᵀ·dY */
                tile_mma<false, false, true, true>(c, s.kh, s.kl, lk, s.dh, s.dl, lk, m0, r0, 0, g.kp);
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int   i = m0 + g4 + 8 * hh;
                    const float f = s.wl[i] * s.sig[i];
#pragma unroll
                    for (int jn = 0; jn < 2; ++jn) c[jn][2 * hh] *= f, c[jn][2 * hh + 1] *= f;
                }
                tile_mma<true, true, true, true>(c, s.pmh, s.pml, lc, s.dyh, s.dyl, lv, m0, r0, m0, Kq);
            } else { /* e^{c_j}·Q̂·S_cᵀ + Pm·V */
                tile_mma<false, false, true, true>(c, s.qh, s.ql, lk, s.sh, s.sl, lk, m0, r0, 0, g.kp);
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const float f = s.ec[m0 + g4 + 8 * hh];
#pragma unroll
                    for (int jn = 0; jn < 2; ++jn) c[jn][2 * hh] *= f, c[jn][2 * hh + 1] *= f;
                }
                tile_mma<false, true, true, !VX>(c, s.pmh, s.pml, lc, s.vh, s.vl, lv, m0, r0, 0, min(m0 + 16, Kq));
            }
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i = m0 + g4 + 8 * hh;
                if (i >= L) continue;
                const float dg = dskip + s.gam[i] * s.dqk[i];
#pragma unroll
                for (int jn = 0; jn < 2; ++jn) {
                    const int    r = r0 + 8 * jn + 2 * t4, o = i * lv + r;
                    const float2 x = dvj ? split_at(s.dyh, s.dyl, o) : VX ? exact_at(s.vh, o) : split_at(s.vh, s.vl, o);
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        if (r + u >= V) continue;
                        float y = c[jn][2 * hh + u] + dg * (u ? x.y : x.x);
                        if (dvj) {
                            if (seq_end && i == L - 1 && P.has_dfv) y += ld3(P.dfv, ch.seq, h, r + u);
                            st4(P.dv, ch.row, ch.t0 + i, h, r + u, y);
                        } else {
                            st4(P.dz, ch.row, ch.t0 + i, h, r + u, y * s.dzf[i * lz + r + u]);
                        }
                    }
                }
            }
            continue;
        }
        const bool dqj = t < 2 * J + JK;
        const int  tt = t - 2 * J - (dqj ? 0 : JK), m0 = (tt / nK) * 16, kt = tt % nK, c0 = kt * 16;
        if (m0 >= L) continue;
        if (dqj)
            tile_mma<false, true, true, true>(c, s.dyh, s.dyl, lv, s.sh, s.sl, lk, m0, c0, 0, g.vp);
        else
            tile_mma<false, true, !VX, true>(c, s.vh, s.vl, lv, s.dh, s.dl, lk, m0, c0, 0, g.vp);
        /* the inter-chunk part scaled per row; its row sums with q̂ (readout) or k̂ (m) */
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int   i = m0 + g4 + 8 * hh;
            const float f = dqj ? s.ec[i] : s.wl[i];
#pragma unroll
            for (int jn = 0; jn < 2; ++jn) {
                const int    o = i * lk + c0 + 8 * jn + 2 * t4;
                const float2 x = dqj ? split_at(s.qh, s.ql, o) : split_at(s.kh, s.kl, o);
                c[jn][2 * hh] *= f, c[jn][2 * hh + 1] *= f;
                sum[hh] += x.x * c[jn][2 * hh] + x.y * c[jn][2 * hh + 1];
            }
            sum[hh] = quad_sum(sum[hh]);
        }
        float * part = dqj ? s.rpart : s.mpart;
        if (t4 == 0) part[kt * g.cp + m0 + g4] = sum[0], part[kt * g.cp + m0 + g4 + 8] = sum[1];
        /* the intra-chunk part: dq̂[i] += Σ_{j<i} E[i][j]σ_j·k̂[j]; dK̂s[j] += Σ_{i>j} E[i][j]·q̂[i] */
        if (dqj)
            tile_mma<false, true, true, true>(c, s.esh, s.esl, lc, s.kh, s.kl, lk, m0, c0, 0, min(m0 + 16, Kq));
        else
            tile_mma<true, true, true, true>(c, s.eh, s.el, lc, s.qh, s.ql, lk, m0, c0, m0, Kq);
        float * out = dqj ? s.dq : s.dk;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i = m0 + g4 + 8 * hh;
#pragma unroll
            for (int jn = 0; jn < 2; ++jn)
                *reinterpret_cast<float2 *>(out + i * lf + c0 + 8 * jn + 2 * t4) =
                    make_float2(c[jn][2 * hh], c[jn][2 * hh + 1]);
        }
    }
    __syncthreads();

    /* B: per token (a warp each) r_i = readout + Σ_j W_ij − Σ_u W_ui, m_i, dσ, dγ */
    for (int i = warp; i < L; i += nw) {
        float ro = 0.0f, mk = 0.0f;
        for (int kt = 0; kt < nK; ++kt) ro += s.rpart[kt * g.cp + i], mk += s.mpart[kt * g.cp + i];
        const float rw = warp_sum(i, [=](int j) { return s.ww[i * lw + j]; });
        const float cw = warp_sum(L - 1 - i, [=](int u) { return s.ww[(i + 1 + u) * lw + i]; });
        const float a = warp_sum(K, [=](int c) { return s.dk[i * lf + c] * split1(s.kh, s.kl, i * lk + c); });
        if (lane == 0) {
            s.rr[i] = ro + rw - cw;
            s.mm[i] = s.sig[i] * mk;
            s.dsg[i] = a;
            const long long o = (ch.tok + i) * P.H + h;
            P.dsg[o] = a;
            P.dgm[o] = s.dQK[i] * s.dqk[i] + a;
        }
    }
    __syncthreads();
    /* warp 0: μ, dadt, the dd partial */
    if (warp == 0) dadt_tail(P, ch, h, wh, L, cl, s.red, nw, s.mm, s.rr, s.dQK);

    /* the chain per (token, pair): dk̂, dθ, dq̃, dk̃ (q̂, k̂ from their planes) */
    const int K2 = K / 2;
    for (int e = tid; e < L * K2; e += nt) {
        const int i = e / K2, p = e - i * K2, c0 = 2 * p;
        float2    f = make_float2(s.dq[i * lf + c0], s.dq[i * lf + c0 + 1]);
        float2    gk = make_float2(s.dk[i * lf + c0], s.dk[i * lf + c0 + 1]);
        chain_pair(P, ch, w, h, i, p, seq_end && i == L - 1 && P.has_dfk, s.sig[i], s.dQK[i] * s.gam[i],
                   split_at(s.qh, s.ql, i * lk + c0), split_at(s.kh, s.kl, i * lk + c0), f, gk);
        /* each thread owns its pair: the chunk sums below read them back */
        *reinterpret_cast<float2 *>(s.dq + i * lf + c0) = f;
        *reinterpret_cast<float2 *>(s.dk + i * lf + c0) = gk;
    }
    __syncthreads();
    chain_sums(P, ch, h, wh, L, s.dq, s.dk, lf);
}

} /* namespace */

ssm_status launch_bwd_chunk_planes(ssm_context * ctx, const char * op, const bw_args & P, bool grads) {
    const planes_geom  g = planes_geom_of(P.C, P.K, P.V);
    const size_t       bytes = grads ? g.total : g.sums_total;
    const dim3         grid((unsigned)P.W, (unsigned)P.H);
    const cudaStream_t st = ssmi_cuda_stream(ctx);
    void (*kern)(const bw_args) =
        grads ? (P.v_bf16 ? bwd_chunk_planes_grads_kernel<true> : bwd_chunk_planes_grads_kernel<false>)
              : (P.v_bf16 ? bwd_chunk_planes_sums_kernel<true> : bwd_chunk_planes_sums_kernel<false>);
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op,
                         grads ? "cudaFuncSetAttribute (bwd_chunk_planes_grads_kernel)"
                               : "cudaFuncSetAttribute (bwd_chunk_planes_sums_kernel)",
                         cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)));
    /* the largest carveout: two sums blocks share an SM where their bytes allow */
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (carveout)",
                                          cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                               (int)cudaSharedmemCarveoutMaxShared)));
    kern<<<grid, kPlanesThreads, bytes, st>>>(P);
    return ssmi_cuda_status(ctx, op,
                            grads ? "bwd_chunk_planes_grads_kernel launch" : "bwd_chunk_planes_sums_kernel launch",
                            cudaGetLastError());
}

} /* namespace ssmi_siso_bwd */
