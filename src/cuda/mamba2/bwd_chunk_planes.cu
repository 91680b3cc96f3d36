/*
 * bwd_chunk_planes.cu — the chunk kernel of the Mamba-2 combined backward for bf16 x, B, C and
 * dout (entry chunked_planes; bwd.cuh lists the steps, bwd_chunk.cu's bwd_chunk_kernel the
 * formulas, which this kernel computes the same way). One block of kPlanesThreads threads per
 * (chunk, head). Every product operand is written once into shared memory as bf16 planes
 * (planes_geom): x, B and C as they are (exact), the fp32 operands (δx, S, G and the [Q][Q]
 * tables) as a rounded plane and a remainder plane, so a product of two split operands is three
 * bf16 products (the lo·lo term, ~2^-16 relative, dropped). Warps compute 16 × 16 output tiles by
 * ldmatrix + mma.sync m16n8k16 with fp32 accumulators; the epilogues (the scale of a row, the
 * per-tile row sums of q, r and ddt_loc, the stores) run on the accumulators in registers.
 * Every sum has a fixed order (k ascending in steps of 16, fixed shuffle trees, partials summed
 * in column-tile order), so the bytes depend on neither the run nor the grid.
 *   load  the [Q] vectors, x/B/C planes, δx planes and the dz factor, S and G planes and
 *         e^{cl}·<G, S>; dD partials
 *   A1    per (i, j) tile below the diagonal: CB = C·Bᵀ and δx·xᵀ → W1, W2, dCB, CB·dCB
 *   A2    per (i, p) tile: C·Sᵀ → q partials, then (dz) e^{cm}·C·Sᵀ + W1·x + D·x → dz;
 *         e^{cl−cm}·B·Gᵀ → r partials, + W2ᵀ·δx = acc → dx, ddt_loc partials
 *   C     per (j, n) tile: e^{cl−cm_j}·dt_j·x·G + dCBᵀ·C → dB;  per (i, n): e^{cm_i}·δx·S + dCB·B → dC;
 *         intra sums from CB·dCB
 *   end   warp 0: the ddA recurrence, ddt, dA and ddt_bias partials.
 */
#include "../../core/ssmi_scalar.h"
#include "../common/mma.cuh"
#include "bwd.cuh"

namespace ssmi_m2bwd {
namespace {

using namespace ssmi_mma;

__device__ __forceinline__ float warp_sum32(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over the block (a power-of-two thread count), a fixed tree; its barriers also
 * publish every shared-memory write made before it. */
__device__ float block_sum_pow2(float v, float * red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = (int)blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float r = red[0];
    __syncthreads();
    return r;
}

/* Rows [0, L) of a bf16 (batch, S, K, n) view (head/group k) into an exact plane [qp][ld] of
 * width w (zeros for rows ≥ L and columns ≥ n): with unit stride, n % 8 = 0 and 16-byte aligned
 * rows as 16-byte copies, else element by element. */
__device__ __forceinline__ void load_exact(bf16 * dst, int ld, int w, int qp, const ssmi_cu_view & v, const bw_chunk & ck,
                                           int k, int n, int L) {
    const bf16 * src = (const bf16 *)v.p;
    const bool   vec = v.s[3] == 1 && n % 8 == 0 && v.s[0] % 8 == 0 && v.s[1] % 8 == 0 && v.s[2] % 8 == 0 &&
                     ((uintptr_t)v.p & 15) == 0;
    if (vec) {
        const int w8 = w / 8, total = qp * w8;
        for (int e0 = threadIdx.x; e0 < total; e0 += 2 * blockDim.x) {
            uint4 val[2];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int e = e0 + u * (int)blockDim.x, i = e / w8, j = (e % w8) * 8;
                val[u] = (e < total && i < L && j < n) ? *(const uint4 *)(src + off4(v.s, ck.row, ck.t0 + i, k, j))
                                                       : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int e = e0 + u * (int)blockDim.x, i = e / w8, j = (e % w8) * 8;
                if (e < total) *(uint4 *)(dst + i * ld + j) = val[u];
            }
        }
        return;
    }
    const int total = qp * w;
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
        const int i = e / w, j = e % w;
        dst[i * ld + j] = (i < L && j < n) ? src[off4(v.s, ck.row, ck.t0 + i, k, j)] : __float2bfloat16_rn(0.0f);
    }
}

/* δx = dout·silu(z) (dout without z) into the split planes dxh/dxl [qp][lp] and the dz factor
 * dout·σ(z)(1 + z(1 − σ(z))) (0 without z) into dzf [qp][lz] (zeros past the data). */
__device__ __forceinline__ void load_dx(bf16 * dxh, bf16 * dxl, float * dzf, const planes_geom & gm, const bw_args & a,
                                        const bw_chunk & ck, int h, int L) {
    const int P = a.P, w2 = gm.pp / 2, total = gm.qp * w2;
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
        const int i = e / w2, p = (e % w2) * 2;
        float     dx[2], f[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            dx[u] = 0.0f, f[u] = 0.0f;
            if (i >= L || p + u >= P) continue;
            const float dout = ssmi_cu_ld(a.dout.p, a.dout.dtype, off4(a.dout.s, ck.row, ck.t0 + i, h, p + u));
            dx[u] = dout;
            if (a.has_z) {
                const float z = ssmi_cu_ld(a.z.p, a.z.dtype, off4(a.z.s, ck.row, ck.t0 + i, h, p + u));
                const float sg = 1.0f / (1.0f + expf(-z));
                f[u] = dout * sg * (1.0f + z * (1.0f - sg));
                dx[u] = dout * z * sg;
            }
        }
        uint32_t hi, lo;
        split2<M_BF16>(dx[0], dx[1], hi, lo);
        *(uint32_t *)(dxh + i * gm.lp + p) = hi;
        *(uint32_t *)(dxl + i * gm.lp + p) = lo;
        dzf[i * gm.lz + p] = f[0], dzf[i * gm.lz + p + 1] = f[1];
    }
}

/* The workspace's S and G of slot w into their split planes [pp][ln] (zeros past P, N);
 * returns this thread's part of <G, S>. */
__device__ __forceinline__ float load_states(bf16 * sh, bf16 * sl, bf16 * gh, bf16 * gl, const planes_geom & gm,
                                             const bw_args & a, long long w) {
    const int       P = a.P, N = a.N, w2 = gm.np / 2, total = gm.pp * w2;
    const long long PN = (long long)P * N;
    const float *   S = a.st + w * PN, *G = a.gs + w * PN;
    float           part = 0.0f;
    constexpr int   kU = 4;
    for (int e0 = threadIdx.x; e0 < total; e0 += kU * blockDim.x) {
        float sv[kU][2], gv[kU][2];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int e = e0 + u * (int)blockDim.x, p = e / w2, n = (e % w2) * 2;
#pragma unroll
            for (int v = 0; v < 2; ++v) {
                const bool in = e < total && p < P && n + v < N;
                sv[u][v] = in ? S[(long long)p * N + n + v] : 0.0f;
                gv[u][v] = in ? G[(long long)p * N + n + v] : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int e = e0 + u * (int)blockDim.x, p = e / w2, n = (e % w2) * 2;
            if (e >= total) continue;
            part += gv[u][0] * sv[u][0];
            part += gv[u][1] * sv[u][1];
            uint32_t hi, lo;
            const int o = p * gm.ln + n;
            split2<M_BF16>(sv[u][0], sv[u][1], hi, lo);
            *(uint32_t *)(sh + o) = hi, *(uint32_t *)(sl + o) = lo;
            split2<M_BF16>(gv[u][0], gv[u][1], hi, lo);
            *(uint32_t *)(gh + o) = hi, *(uint32_t *)(gl + o) = lo;
        }
    }
    return part;
}

__global__ void __launch_bounds__(kPlanesThreads, 1) bwd_chunk_planes_kernel(bw_args a) {
    extern __shared__ float4 sm4[];
    unsigned char * const sm = (unsigned char *)sm4;
    const planes_geom     gm = planes_geom_of(a.Q, a.P, a.N);
    bf16 *xh = (bf16 *)(sm + gm.x), *dxh = (bf16 *)(sm + gm.dxh), *dxl = (bf16 *)(sm + gm.dxl);
    bf16 *bh = (bf16 *)(sm + gm.b), *ch = (bf16 *)(sm + gm.c);
    bf16 *sh = (bf16 *)(sm + gm.sh), *sl = (bf16 *)(sm + gm.sl), *gh = (bf16 *)(sm + gm.gh), *gl = (bf16 *)(sm + gm.gl);
    bf16 *w1h = (bf16 *)(sm + gm.w1h), *w1l = (bf16 *)(sm + gm.w1l), *w2h = (bf16 *)(sm + gm.w2h);
    bf16 *w2l = (bf16 *)(sm + gm.w2l), *dch = (bf16 *)(sm + gm.dch), *dcl = (bf16 *)(sm + gm.dcl);
    float *prod = (float *)(sm + gm.prod), *dzf = (float *)(sm + gm.dzf);
    float *qpart = (float *)(sm + gm.qpart), *rpart = (float *)(sm + gm.rpart), *tpart = (float *)(sm + gm.tpart);
    float *dtv = (float *)(sm + gm.vec), *fac = dtv + gm.qp, *cms = fac + gm.qp, *ecm = cms + gm.qp;
    float *eclm = ecm + gm.qp, *intra = eclm + gm.qp;
    float *dvec = (float *)(sm + gm.dvec), *red = (float *)(sm + gm.red);

    const long long ci = blockIdx.x;
    const int       h = blockIdx.y, Q = a.Q, P = a.P, N = a.N, grp = h / a.R;
    const bw_chunk  ck = a.chunks[ci];
    const int       L = ck.len, Kq = (L + 15) / 16 * 16;
    const long long w = ci * a.H + h;
    const int       lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int       g4 = lane >> 2, t4 = lane & 3;
    const int       nT = gm.qp / 16, nP = gm.pp / 16, nN = gm.np / 16;

    /* load */
    const float * cmg = a.cmv + w * Q;
    const float   cl = cmg[L - 1];
    for (int i = threadIdx.x; i < gm.qp; i += blockDim.x) {
        const float c = i < Q ? cmg[i] : cl;
        dtv[i] = i < Q ? a.dtv[w * Q + i] : 0.0f, fac[i] = i < Q ? a.dfac[w * Q + i] : 0.0f, cms[i] = c;
        ecm[i] = i < L ? expf(c) : 0.0f;
        eclm[i] = i < L ? expf(cl - c) : 0.0f;
    }
    for (int p = threadIdx.x; p < gm.pp; p += blockDim.x) {
        float dv = 0.0f;
        if (a.has_d && p < P)
            dv = a.d2 ? ssmi_cu_ld(a.d.p, a.d.dtype, off2(a.d.s, h, p)) : ssmi_cu_ld(a.d.p, a.d.dtype, (long long)h * a.d.s[0]);
        dvec[p] = dv;
    }
    load_exact(xh, gm.lp, gm.pp, gm.qp, a.x, ck, h, P, L);
    load_exact(bh, gm.ln, gm.np, gm.qp, a.b, ck, grp, N, L);
    load_exact(ch, gm.ln, gm.np, gm.qp, a.c, ck, grp, N, L);
    load_dx(dxh, dxl, dzf, gm, a, ck, h, L);
    const float total = expf(cl) * block_sum_pow2(load_states(sh, sl, gh, gl, gm, a, w), red); /* publishes the planes */

    for (int p = threadIdx.x; p < P; p += blockDim.x) { /* dD partials */
        float s = 0.0f;
        for (int i = 0; i < L; ++i) {
            const float dx = __bfloat162float(dxh[i * gm.lp + p]) + __bfloat162float(dxl[i * gm.lp + p]);
            s += dx * __bfloat162float(xh[i * gm.lp + p]);
        }
        a.ddp[w * P + p] = s;
    }

    /* A1: the [Q][Q] tables, tile (it, jt); tiles above the diagonal or past L are zeros */
    for (int t = warp; t < nT * nT; t += nwarps) {
        const int  m0 = (t / nT) * 16, n0 = (t % nT) * 16;
        const bool live = n0 <= m0 && m0 < L;
        float      cb[2][4], dc[2][4];
        zero_acc(cb), zero_acc(dc);
        if (live) {
            tile_mma<false, false, false, false>(cb, ch, nullptr, gm.ln, bh, nullptr, gm.ln, m0, n0, 0, gm.np);
            tile_mma<false, false, true, false>(dc, dxh, dxl, gm.lp, xh, nullptr, gm.lp, m0, n0, 0, gm.pp);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i = m0 + g4 + 8 * hh, j0 = n0 + 8 * j + 2 * t4;
                float     w1[2], w2[2], d[2], pr[2];
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const int jj = j0 + u;
                    w1[u] = w2[u] = d[u] = pr[u] = 0.0f;
                    if (live && jj <= i && i < L) {
                        const float ex = expf(cms[i] - cms[jj]), cbx = cb[j][2 * hh + u] * ex;
                        w2[u] = cbx;
                        w1[u] = cbx * dtv[jj];
                        d[u] = dc[j][2 * hh + u] * (ex * dtv[jj]);
                        pr[u] = cb[j][2 * hh + u] * d[u];
                    }
                }
                const int o = i * gm.lq + j0;
                uint32_t  hi, lo;
                split2<M_BF16>(w1[0], w1[1], hi, lo);
                *(uint32_t *)(w1h + o) = hi, *(uint32_t *)(w1l + o) = lo;
                split2<M_BF16>(w2[0], w2[1], hi, lo);
                *(uint32_t *)(w2h + o) = hi, *(uint32_t *)(w2l + o) = lo;
                split2<M_BF16>(d[0], d[1], hi, lo);
                *(uint32_t *)(dch + o) = hi, *(uint32_t *)(dcl + o) = lo;
                prod[i * gm.lf + j0] = pr[0], prod[i * gm.lf + j0 + 1] = pr[1];
            }
    }
    __syncthreads();

    /* A2: jobs [0, nT·nP) the C·Sᵀ tiles (q, dz), [nT·nP, 2·nT·nP) the B·Gᵀ tiles (r, acc, dx, ddt_loc) */
    const bool want_dz = a.has_z && a.want_dz;
    for (int t = warp; t < 2 * nT * nP; t += nwarps) {
        const bool ys = t < nT * nP;
        const int  tt = ys ? t : t - nT * nP, pt = tt % nP, m0 = (tt / nP) * 16, p0 = pt * 16;
        if (m0 >= L) continue;
        float c[2][4];
        zero_acc(c);
        if (ys) tile_mma<false, false, false, true>(c, ch, nullptr, gm.ln, sh, sl, gm.ln, m0, p0, 0, gm.np);
        else tile_mma<false, false, false, true>(c, bh, nullptr, gm.ln, gh, gl, gm.ln, m0, p0, 0, gm.np);
        float s[2] = {0.0f, 0.0f}; /* rows m0 + g4 and m0 + g4 + 8 */
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i = m0 + g4 + 8 * hh;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int o = i * gm.lp + p0 + 8 * j + 2 * t4;
                if (ys) { /* q: <δx_i, (C·Sᵀ)_i> */
                    const float2 dx = split_at(dxh, dxl, o);
                    s[hh] += dx.x * c[j][2 * hh] + dx.y * c[j][2 * hh + 1];
                } else { /* r: <x_i, e^{cl−cm_i}·(B·Gᵀ)_i> */
                    const float2 xv = exact_at(xh, o);
                    c[j][2 * hh] *= eclm[i], c[j][2 * hh + 1] *= eclm[i];
                    s[hh] += xv.x * c[j][2 * hh] + xv.y * c[j][2 * hh + 1];
                }
            }
            s[hh] = quad_sum(s[hh]);
        }
        float * part = ys ? qpart : rpart;
        if (t4 == 0) part[pt * gm.qp + m0 + g4] = s[0], part[pt * gm.qp + m0 + g4 + 8] = s[1];
        if (ys) {
            if (!want_dz) continue;
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const float e = ecm[m0 + g4 + 8 * hh];
#pragma unroll
                for (int j = 0; j < 2; ++j) c[j][2 * hh] *= e, c[j][2 * hh + 1] *= e;
            }
            tile_mma<false, true, true, false>(c, w1h, w1l, gm.lq, xh, nullptr, gm.lp, m0, p0, 0, min(m0 + 16, Kq));
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i = m0 + g4 + 8 * hh;
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int    p = p0 + 8 * j + 2 * t4;
                    const float2 xv = exact_at(xh, i * gm.lp + p);
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        if (i >= L || p + u >= P) continue;
                        const float y = c[j][2 * hh + u] + dvec[p + u] * (u ? xv.y : xv.x);
                        ssmi_cu_st(a.dz.p, a.dz.dtype, off4(a.dz.s, ck.row, ck.t0 + i, h, p + u), dzf[i * gm.lz + p + u] * y);
                    }
                }
            }
        } else {
            tile_mma<true, true, true, true>(c, w2h, w2l, gm.lq, dxh, dxl, gm.lp, m0, p0, m0, Kq);
            float d[2] = {0.0f, 0.0f};
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i = m0 + g4 + 8 * hh;
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int    p = p0 + 8 * j + 2 * t4, o = i * gm.lp + p;
                    const float2 xv = exact_at(xh, o), dx = split_at(dxh, dxl, o);
                    d[hh] += c[j][2 * hh] * xv.x + c[j][2 * hh + 1] * xv.y;
#pragma unroll
                    for (int u = 0; u < 2; ++u)
                        if (a.dx.p != NULL && i < L && p + u < P)
                            ssmi_cu_st(a.dx.p, a.dx.dtype, off4(a.dx.s, ck.row, ck.t0 + i, h, p + u),
                                       c[j][2 * hh + u] * dtv[i] + dvec[p + u] * (u ? dx.y : dx.x));
                }
                d[hh] = quad_sum(d[hh]);
            }
            if (t4 == 0) tpart[pt * gm.qp + m0 + g4] = d[0], tpart[pt * gm.qp + m0 + g4 + 8] = d[1];
        }
    }

    /* C: jobs [0, nT·nN) dB tiles (j, n), [nT·nN, 2·nT·nN) dC tiles (i, n); then the intra sums */
    for (int t = warp; t < 2 * nT * nN; t += nwarps) {
        const bool db = t < nT * nN;
        const int  tt = db ? t : t - nT * nN, m0 = (tt / nN) * 16, n0 = (tt % nN) * 16;
        if (m0 >= L || (db ? !a.want_db : !a.want_dc)) continue;
        float c[2][4];
        zero_acc(c);
        if (db) tile_mma<false, true, false, true>(c, xh, nullptr, gm.lp, gh, gl, gm.ln, m0, n0, 0, gm.pp);
        else tile_mma<false, true, true, true>(c, dxh, dxl, gm.lp, sh, sl, gm.ln, m0, n0, 0, gm.pp);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int   i = m0 + g4 + 8 * hh;
            const float sc = db ? eclm[i] * dtv[i] : ecm[i];
#pragma unroll
            for (int j = 0; j < 2; ++j) c[j][2 * hh] *= sc, c[j][2 * hh + 1] *= sc;
        }
        if (db) tile_mma<true, true, true, false>(c, dch, dcl, gm.lq, ch, nullptr, gm.ln, m0, n0, m0, Kq);
        else tile_mma<false, true, true, false>(c, dch, dcl, gm.lq, bh, nullptr, gm.ln, m0, n0, 0, min(m0 + 16, Kq));
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i = m0 + g4 + 8 * hh;
            if (i >= L) continue;
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const int n = n0 + 8 * j + 2 * t4 + u;
                    if (n >= N) continue;
                    const float v = c[j][2 * hh + u];
                    if (a.heads_buf)
                        (db ? a.dbh : a.dch)[((ck.row * a.S + ck.t0 + i) * a.H + h) * (long long)N + n] = v;
                    else if (db)
                        ssmi_cu_st(a.db.p, a.db.dtype, off4(a.db.s, ck.row, ck.t0 + i, grp, n), v);
                    else
                        ssmi_cu_st(a.dc.p, a.dc.dtype, off4(a.dc.s, ck.row, ck.t0 + i, grp, n), v);
                }
        }
    }
    /* intra_i = Σ_{k≥i} Σ_{j<i} CB_kj·dCB_kj: the pairs flattened k-major (t = (k − i)·i + j), lane
     * t ≡ lane (mod 32), stepping (k, j) by 32 = (32 / i)·i + 32 % i */
    for (int i = warp; i < L; i += nwarps) {
        const int np = (L - i) * i;
        float     in = 0.0f;
        if (np > 0) {
            const int q32 = 32 / i, r32 = 32 % i;
            int       k = i + lane / i, j = lane % i;
            for (int t = lane; t < np; t += 32) {
                in += prod[k * gm.lf + j];
                k += q32, j += r32;
                if (j >= i) j -= i, ++k;
            }
        }
        in = warp_sum32(in);
        if (lane == 0) intra[i] = in;
    }
    __syncthreads();

    /* the ddA recurrence on warp 0, tokens k = 2·lane and 2·lane + 1 (L ≤ kMaxQ = 64):
     * ddA_k = suf_k + (pre_k + intra_k), suf_k = e^{cl}<G, S> + Σ_{m≥k} q_m, pre_k = Σ_{m<k} r_m */
    if (warp == 0) {
        const float ah = ssmi_cu_ld(a.a.p, a.a.dtype, (long long)h * a.a.s[0]);
        const int   k0 = 2 * lane;
        float       qv[2] = {0.0f, 0.0f}, rv[2] = {0.0f, 0.0f}, tv[2] = {0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int k = k0 + u;
            if (k >= L) continue;
            float sq = 0.0f, sr = 0.0f, st = 0.0f;
            for (int pt = 0; pt < nP; ++pt)
                sq += qpart[pt * gm.qp + k], sr += rpart[pt * gm.qp + k], st += tpart[pt * gm.qp + k];
            qv[u] = ecm[k] * sq, rv[u] = dtv[k] * sr, tv[u] = st;
        }
        float qs = qv[0] + qv[1], rs = rv[0] + rv[1]; /* inclusive suffix (q) and prefix (r) scans */
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float vq = __shfl_down_sync(0xffffffffu, qs, o), vr = __shfl_up_sync(0xffffffffu, rs, o);
            if (lane + o < 32) qs += vq;
            if (lane >= o) rs += vr;
        }
        const float qx = __shfl_down_sync(0xffffffffu, qs, 1), rx = __shfl_up_sync(0xffffffffu, rs, 1);
        const float qe = lane < 31 ? qx : 0.0f, re = lane > 0 ? rx : 0.0f;
        float       da = 0.0f, dbs = 0.0f;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int k = k0 + u;
            if (k >= L) break;
            const float suf = u == 0 ? ((total + qe) + qv[1]) + qv[0] : (total + qe) + qv[1];
            const float pre = u == 0 ? re : re + rv[0];
            const float dda = suf + (pre + intra[k]);
            const float gv = (dda * ah + tv[u]) * fac[k];
            if (a.ddt.p != NULL) ssmi_cu_st(a.ddt.p, a.ddt.dtype, off3(a.ddt.s, ck.row, ck.t0 + k, h), gv);
            da += dda * dtv[k];
            dbs += gv;
        }
        da = warp_sum32(da), dbs = warp_sum32(dbs);
        if (lane == 0) a.dap[w] = da, a.dbp[w] = dbs;
    }
}

} /* namespace */

ssm_status launch_bwd_chunk_planes(ssm_context * ctx, const char * op, const bw_args & a) {
    if (a.nchunks == 0 || a.H == 0) return SSM_STATUS_OK;
    const size_t bytes = planes_geom_of(a.Q, a.P, a.N).total;
    SSM_FORWARD_IF_ERROR(smem_optin(ctx, op, (const void *)bwd_chunk_planes_kernel, bytes));
    bwd_chunk_planes_kernel<<<dim3((unsigned)a.nchunks, (unsigned)a.H), kPlanesThreads, bytes, ssmi_cuda_stream(ctx)>>>(a);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "bwd_chunk_planes_kernel");
    return SSM_STATUS_OK;
}

} /* namespace ssmi_m2bwd */
