/*
 * output_mma.cu — the outputs of the SISO forward by mma.sync (fp16/bf16 v, K ≤ 128): per (chunk,
 * head, 64-wide V tile) q̂, k̂ and d_i = q̃_i·k̃_i, the scores Q̂·K̂ᵀ masked and decayed in registers,
 * Y = P·V + diag(e^c)·Q̂·S_enterᵀ (the entering state term skipped where it is zero: the first
 * chunk of a sequence without initial states), out = (Y + (D + γ_i·d_i)·v_i)·silu(z); the last chunk
 * of a sequence writes k̂ and v of its last token as the final k / v states. Operands by ldmatrix
 * (or, for the masked scores, straight from the accumulators), results in registers.
 *
 * Two kernels:
 *   output_mma_kernel      8 warps in ≤ 128 registers (2 blocks, 16 warps per SM). Warps w and
 *                          w + 4 (w < 4) share row block w (chunk rows 16w..16w+15) and split every
 *                          product of those rows: of the causally needed column blocks 0..w of the
 *                          scores and of P·V (16 tokens each; only those with tokens < L) the lower
 *                          warp takes the first ⌈n/2⌉, the upper warp the rest (at most 2 each); of
 *                          Q̂·S_enterᵀ's k-steps the lower warp [0, KS/2), the upper [KS/2, KS). The
 *                          two partial 16 × 64 y tiles are summed through shared memory (each warp
 *                          hands its partner the 4 column tiles that the partner finishes: the lower
 *                          warp columns 0..31, the upper 32..63), and both run the shared-memory
 *                          epilogue on their half. Every cooperative loop (the v tile, q/k/z rows, θ,
 *                          sin/cos, q/k prep, the state split, the staged store) runs on all 256
 *                          threads. Applies where that epilogue does (out_mma_applies): 16-bit
 *                          outputs of v's dtype in 16-byte rows and z of that kind or none.
 *   output_mma_any_kernel  4 warps (warp k owns tokens 16k..16k+15, whole score tiles: the mask
 *                          zeroes j ≥ i) and an epilogue for any output layout: f32 outputs, z or
 *                          out of another dtype or strided (element-wise or paired stores), the
 *                          shared-memory epilogue where the layout allows it.
 * The two differ within fp32 rounding (y's partial sums associate differently); each is bitwise
 * deterministic.
 */
#include "tiles.cuh"

namespace ssmi_siso {
namespace {

/* ---- the 4-warp kernel ---------------------------------------------------------------------------- */

/* This thread's pieces of the entering state tile of (chunk w, head h, V tile p0), kTV rows ×
 * Kp/4 float4 columns: piece o = threadIdx.x + u·kFastThreads (u < 16 covers kTV·Kp/4 ≤ 2048 for
 * Kp ≤ 128); zeros outside the V × K state. K % 4 != 0: element loads (the state rows are then not
 * 16-byte aligned). */
__device__ __forceinline__ void load_state_regs16_odd(const m3_fwd_args & P, int w, int h, int p0, float4 (&f)[16]) {
    const float * st = P.states + ((long long)w * P.H + h) * P.V * P.K;
    state_piece   sp(P.Kp / 4);
#pragma unroll
    for (int u = 0; u < 16; ++u) {
        const int r = sp.r, c = 4 * sp.c, p = p0 + r;
        sp.next();
        f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < kTV && p < P.V && c < P.K) {
            const float * src = st + (long long)p * P.K + c;
            if ((P.K & 3) == 0)
                f[u] = __ldg(reinterpret_cast<const float4 *>(src));
            else /* K is even: c + 1 < K whenever c < K */
                f[u] = make_float4(src[0], src[1], c + 2 < P.K ? src[2] : 0.0f, c + 3 < P.K ? src[3] : 0.0f);
        }
    }
}

/* The same pieces; K % 4 == 0: 16-byte loads (the state rows start 16-byte aligned: the workspace
 * is 128-byte aligned and V·K, p·K, c are multiples of 4), with the K % 4 test taken once and a
 * 32-bit offset from the tile's first row. */
__device__ __forceinline__ void load_state_regs16(const m3_fwd_args & P, int w, int h, int p0, float4 (&f)[16]) {
    if ((P.K & 3) != 0) { /* block-uniform */
        load_state_regs16_odd(P, w, h, p0, f);
        return;
    }
    const float * st = P.states + ((long long)w * P.H + h) * P.V * P.K + (long long)p0 * P.K;
    const int     nr = min(kTV, P.V - p0);
    state_piece   sp(P.Kp / 4);
#pragma unroll
    for (int u = 0; u < 16; ++u) {
        const int r = sp.r, c = 4 * sp.c;
        sp.next();
        f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < nr && c < P.K) f[u] = __ldg(reinterpret_cast<const float4 *>(st + (r * P.K + c)));
    }
}

template <int MODE>
__global__ void __launch_bounds__(kFastThreads, 2) output_mma_any_kernel(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    extern __shared__ __align__(128) unsigned char smem[];
    const fast_smem<MODE>                          Ly(P.Kp, P.A, true, false, P.sct);
    const m3_scal                                  sc = carve_scal((float *)(smem + Ly.scal));
    float *                                        ecm = sc.sig + (kC + 1);
    float *                                        dd = ecm + (kC + 1);
    float *                                        th = (float *)(smem + Ly.th);
    T *                                            qh = (T *)(smem + Ly.t0h);
    T *                                            ql = (T *)(smem + Ly.t0l);
    T *                                            bh = (T *)(smem + Ly.t1h); /* K̂, then the entering state */
    T *                                            bl = (T *)(smem + Ly.t1l);
    T *                                            vs = (T *)(smem + Ly.vs);
    T *                                            zs = (T *)(smem + Ly.zs); /* z, then the output */
    const int                                      LK = P.Kp + 8, KS = P.Kp / 16;
    const int                                      lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    const int      L = ch.len;
    /* S_enter = 0 in a sequence's first chunk without initial states (block-uniform) */
    const bool with_state = !ch.first || P.has_states;
    /* the entering state tile goes to registers first; its loads are in flight during the
     * scalars, θ, the q/k prep, the scores and P·V, and it is split into shared memory after */
    float4 pre[16];
    if (with_state) load_state_regs16(P, w, h, p0, pre);
    fast_load_v<MODE>(P, ch, h, p0, vs);
    /* every other global input of the block is requested now: the raw q and k rows by cp.async
     * into the lo tiles (fast_prep_qk overwrites them in place), the z tile, the raw angles into
     * registers, D; all of it lands during the scalars and θ */
    uint4 araw[kAngPieces];
    if (P.vq) cp_rows<MODE>(ql, LK, P.q, ch, h / P.G, 0, P.Kp, P.K);
    if (P.vk) cp_rows<MODE>(bl, LK, P.k, ch, h / P.G, 0, P.Kp, P.K);
    if (P.vz16) cp_rows<MODE>(zs, kFLd, P.z, ch, h, p0, kTV, P.V);
    load_angle_rows<MODE>(P, ch, h, araw);
    const float dh = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    chunk_scalars(P, ch, h, sc);
    for (int i = threadIdx.x; i < kC; i += blockDim.x) ecm[i] = i < L ? expf(sc.cm[i]) : 0.0f;
    chunk_theta_rows<MODE>(P, ch, w, h, sc.dtv, th, (float *)(smem + Ly.part), araw);
    cp_async_wait_all(); /* q, k, z (and v) rows, before the barrier that publishes them */
    __syncthreads();     /* θ */
    /* sin/cos of every (token, angle) once, all threads busy (fast_prep_qk would run them only on
     * the lanes whose features are rotated, once per token pass); the same calls, so the same
     * values */
    float * snt = nullptr;
    if (P.sct) { /* block-uniform */
        snt = (float *)(smem + Ly.sn);
        sincos_table(P.fused, th, snt, L * P.A);
        __syncthreads();
    }
    fast_prep_qk<MODE>(P, ch, h, th, qh, ql, bh, bl, LK, nullptr, dd, ch.last && blockIdx.z == 0 && P.fin_k.present,
                       P.vq ? ql : nullptr, P.vk ? bl : nullptr, snt);
    cp_async_wait_all();
    __syncthreads();

    /* this thread's rows (chunk index) and their cumsums */
    const int   ri0 = warp * 16 + (lane >> 2), ri1 = ri0 + 8;
    const float ci0 = ri0 < L ? sc.cm[ri0] : 0.0f, ci1 = ri1 < L ? sc.cm[ri1] : 0.0f;
    const T *   qrh = qh + warp * 16 * LK + a_row_off(lane, LK);
    const T *   qrl = ql + warp * 16 * LK + a_row_off(lane, LK);

    /* scores (16 rows × 64 tokens) = Q̂ · K̂ᵀ */
    float s[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
    {
        /* whole tiles (the mask zeroes j ≥ i) instead of a per-warp skip that the compiler
         * guards with a warp synchronisation before every mma; two k-steps per iteration so
         * that step k+1's fragment loads overlap step k's products */
#pragma unroll 2
        for (int ks = 0; ks < KS; ++ks) {
            uint32_t ah[4], al[4];
            ldsm4(ah, qrh + ks * 16);
            ldsm4(al, qrl + ks * 16);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                uint32_t kb[4], kbl[4];
                ldsm4(kb, &bh[np * 16 * LK + ks * 16 + b_nk_off(lane, LK)]);
                ldsm4(kbl, &bl[np * 16 * LK + ks * 16 + b_nk_off(lane, LK)]);
                mma16816<MODE>(s[2 * np], ah, kb[0], kb[1]);
                mma16816<MODE>(s[2 * np + 1], ah, kb[2], kb[3]);
                mma16816<MODE>(s[2 * np], al, kb[0], kb[1]);
                mma16816<MODE>(s[2 * np + 1], al, kb[2], kb[3]);
                mma16816<MODE>(s[2 * np], ah, kbl[0], kbl[1]);
                mma16816<MODE>(s[2 * np + 1], ah, kbl[2], kbl[3]);
            }
        }
    }
    /* P_ij = score · e^{c_i − c_j} · σ_j for j < i < L (strictly lower: the diagonal is D + γ_i·d_i) */
#pragma unroll
    for (int t = 0; t < 8; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int   i = (e >> 1) ? ri1 : ri0;
            const float ci = (e >> 1) ? ci1 : ci0;
            const int   j = t * 8 + 2 * (lane & 3) + (e & 1);
            /* e^{c_i − c_j} as ex2.approx of the scaled difference */
            s[t][e] = (i < L && j < i) ? s[t][e] * ex2_approx((ci - sc.cm[j]) * kLog2e) * sc.sig[j] : 0.0f;
        }
    }
    /* Y (16 rows × 64 v columns) = P · V */
    float y[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) y[t][0] = y[t][1] = y[t][2] = y[t][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        uint32_t ah[4], al[4];
        split2<MODE>(s[2 * ks][0], s[2 * ks][1], ah[0], al[0]);
        split2<MODE>(s[2 * ks][2], s[2 * ks][3], ah[1], al[1]);
        split2<MODE>(s[2 * ks + 1][0], s[2 * ks + 1][1], ah[2], al[2]);
        split2<MODE>(s[2 * ks + 1][2], s[2 * ks + 1][3], ah[3], al[3]);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
            uint32_t b[4];
            ldsm4_t(b, &vs[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
            mma16816<MODE>(y[2 * np], ah, b[0], b[1]);
            mma16816<MODE>(y[2 * np + 1], ah, b[2], b[3]);
            mma16816<MODE>(y[2 * np], al, b[0], b[1]);
            mma16816<MODE>(y[2 * np + 1], al, b[2], b[3]);
        }
    }

    /* Y += diag(e^c)·Q̂·S_enterᵀ; S_enter = 0 in a sequence's first chunk without initial states */
    if (with_state) {
        __syncthreads(); /* every warp is done with K̂ */
        const int c4 = P.Kp / 4;
        {
            /* the prefetched tile (load_state_regs16's pieces), split into the B tiles */
            state_piece sp(c4); /* (row, column) of piece u without a division per piece */
#pragma unroll
            for (int u = 0; u < 16; ++u) {
                const int r = sp.r, c = 4 * sp.c;
                if (r >= kTV) break;
                sp.next();
                uint32_t hi[2], lo[2];
                split2<MODE>(pre[u].x, pre[u].y, hi[0], lo[0]);
                split2<MODE>(pre[u].z, pre[u].w, hi[1], lo[1]);
                *reinterpret_cast<uint2 *>(&bh[r * LK + c]) = make_uint2(hi[0], hi[1]);
                *reinterpret_cast<uint2 *>(&bl[r * LK + c]) = make_uint2(lo[0], lo[1]);
            }
        }
        __syncthreads();
        float u[8][4];
#pragma unroll
        for (int t = 0; t < 8; ++t) u[t][0] = u[t][1] = u[t][2] = u[t][3] = 0.0f;
        /* one k-step of Q̂·S_enterᵀ, two per iteration */
        auto qs_step = [&](int ks) {
            uint32_t ah[4], al[4];
            ldsm4(ah, qrh + ks * 16);
            ldsm4(al, qrl + ks * 16);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                uint32_t sb[4], sbl[4];
                ldsm4(sb, &bh[np * 16 * LK + ks * 16 + b_nk_off(lane, LK)]);
                ldsm4(sbl, &bl[np * 16 * LK + ks * 16 + b_nk_off(lane, LK)]);
                mma16816<MODE>(u[2 * np], ah, sb[0], sb[1]);
                mma16816<MODE>(u[2 * np + 1], ah, sb[2], sb[3]);
                mma16816<MODE>(u[2 * np], al, sb[0], sb[1]);
                mma16816<MODE>(u[2 * np + 1], al, sb[2], sb[3]);
                mma16816<MODE>(u[2 * np], ah, sbl[0], sbl[1]);
                mma16816<MODE>(u[2 * np + 1], ah, sbl[2], sbl[3]);
            }
        };
        {
#pragma unroll 2
            for (int ks = 0; ks < KS; ++ks) qs_step(ks);
        }
        const float e0 = ecm[ri0], e1 = ecm[ri1];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            y[t][0] = fmaf(e0, u[t][0], y[t][0]), y[t][1] = fmaf(e0, u[t][1], y[t][1]);
            y[t][2] = fmaf(e1, u[t][2], y[t][2]), y[t][3] = fmaf(e1, u[t][3], y[t][3]);
        }
    }

    /* epilogue: + (D + γ_i·d_i)·v_i, gate, store pairs; the final v state from the last token */
    /* z from the z tile (P.vz16), the output staged in place over it (P.vo16: each thread reads
     * and writes only its own pairs) and stored in 16-byte row pieces after a barrier */
    const bool zsm = P.vz16, stage = P.vo16;
    if (stage && (zsm || !P.has_z)) { /* block-uniform */
        /* v and z from shared memory, the output staged over z, nothing generic per element; the
         * final v state after (a loop of its own) */
        staged_epilogue<MODE, false, 8>(P, ch, h, p0, L, y, reinterpret_cast<const unsigned char *>(vs), zs, dh, sc, dd,
                                        ri0, ri1, 0);
    } else {
        float2 zv[8][2];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int p = p0 + t * 8 + 2 * (lane & 3), i = half ? ri1 : ri0;
                zv[t][half] = make_float2(0.0f, 0.0f);
                if (!P.has_z || zsm || p >= P.V || i >= L) continue;
                const long long zo = ch.row * P.z.s[0] + (ch.t0 + i) * P.z.s[1] + h * P.z.s[2] + p * P.z.s[3];
                if (P.vz && p + 1 < P.V)
                    zv[t][half] =
                        t2<MODE>::unpack(__ldg(reinterpret_cast<const unsigned int *>((const T *)P.z.p + zo)));
                else
                    zv[t][half] = make_float2(ssmi_cu_ld(P.z.p, P.z.dtype, zo),
                                              p + 1 < P.V ? ssmi_cu_ld(P.z.p, P.z.dtype, zo + P.z.s[3]) : 0.0f);
            }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int i = half ? ri1 : ri0;
            if (i >= L) continue;
            const float     diag = dh + sc.gam[i] * dd[i];
            const long long t_ = ch.t0 + i;
#pragma unroll
            for (int t = 0; t < 8; ++t) {
                const int pl = t * 8 + 2 * (lane & 3), p = p0 + pl;
                if (p >= P.V) continue;
                const bool   two = p + 1 < P.V;
                const float2 xv = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(&vs[i * kFLd + pl]));
                float        v0 = fmaf(diag, xv.x, y[t][2 * half]), v1 = fmaf(diag, xv.y, y[t][2 * half + 1]);
                store_ypre(P, ch.row, t_, h, p, v0, v1, two);
                if (P.has_z) {
                    const float2 zz =
                        zsm ? t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(&zs[i * kFLd + pl])) : zv[t][half];
                    const float z0 = zz.x, z1 = zz.y;
                    v0 *= z0 * ssmi_math::sigmoid(z0);
                    v1 *= z1 * ssmi_math::sigmoid(z1);
                }
                if (!isfinite(v0) || (two && !isfinite(v1))) mark_nonfinite(P);
                const long long oo = ch.row * P.out.s[0] + t_ * P.out.s[1] + h * P.out.s[2] + p * P.out.s[3];
                if (stage) /* V % 8 == 0: both of the pair are inside */
                    *reinterpret_cast<uint32_t *>(&zs[i * kFLd + pl]) = t2<MODE>::pack(v0, v1);
                else if (P.vout && two) {
                    if (P.out.dtype == SSM_DTYPE_F32)
                        *reinterpret_cast<float2 *>((float *)P.out.p + oo) = make_float2(v0, v1);
                    else
                        *reinterpret_cast<uint32_t *>((T *)P.out.p + oo) = t2<MODE>::pack(v0, v1);
                } else {
                    ssmi_cu_st(P.out.p, P.out.dtype, oo, v0);
                    if (two) ssmi_cu_st(P.out.p, P.out.dtype, oo + P.out.s[3], v1);
                }
                if (ch.last && i == L - 1 && P.fin_v.present) {
                    st3(P.fin_v, ch.seq, h, p, xv.x);
                    if (two) st3(P.fin_v, ch.seq, h, p + 1, xv.y);
                }
            }
        }
    }
    if (stage) { /* block-uniform */
        __syncthreads();
        const int       nc = min(kTV, P.V - p0);
        const long long ob = ch.row * P.out.s[0] + ch.t0 * P.out.s[1] + h * P.out.s[2] + p0;
#pragma unroll 1
        for (int o = threadIdx.x; o < L * (kTV / 8); o += blockDim.x) {
            const int r = o / (kTV / 8), c = (o - r * (kTV / 8)) * 8;
            if (c < nc)
                *reinterpret_cast<uint4 *>((T *)P.out.p + ob + r * P.out.s[1] + c) =
                    *reinterpret_cast<const uint4 *>(&zs[r * kFLd + c]);
        }
    }
}

/* ---- the 8-warp kernel ---------------------------------------------------------------------------- */

/* acc (16 rows × NB·16 columns) += A·Bᵀ over k-steps [ks0, ks1) of split operands: three products per
 * k-step (hi·hi, lo·hi, hi·lo; lo·lo is dropped), two k-steps per iteration so that step k+1's fragment
 * loads overlap step k's products. arh/arl: this lane's A fragment rows of the hi and lo planes; bh/bl:
 * the first column block's B rows at this lane's ldmatrix offset (pitch LK), block np at np·16 rows. NB
 * is a template argument so that a caller's warp-uniform choice is one branch outside the loop (no
 * per-mma convergence guard). */
template <int MODE, int NB, int NACC>
__device__ __forceinline__ void split_product(float (&acc)[NACC][4], const typename cfg<MODE>::T * arh,
                                              const typename cfg<MODE>::T * arl, const typename cfg<MODE>::T * bh,
                                              const typename cfg<MODE>::T * bl, int ks0, int ks1, int LK) {
    static_assert(2 * NB <= NACC, "two accumulator tiles per column block");
#pragma unroll 2
    for (int ks = ks0; ks < ks1; ++ks) {
        uint32_t ah[4], al[4];
        ldsm4(ah, arh + ks * 16);
        ldsm4(al, arl + ks * 16);
#pragma unroll
        for (int np = 0; np < NB; ++np) {
            uint32_t b[4], bq[4];
            ldsm4(b, bh + np * 16 * LK + ks * 16);
            ldsm4(bq, bl + np * 16 * LK + ks * 16);
            mma16816<MODE>(acc[2 * np], ah, b[0], b[1]);
            mma16816<MODE>(acc[2 * np + 1], ah, b[2], b[3]);
            mma16816<MODE>(acc[2 * np], al, b[0], b[1]);
            mma16816<MODE>(acc[2 * np + 1], al, b[2], b[3]);
            mma16816<MODE>(acc[2 * np], ah, bq[0], bq[1]);
            mma16816<MODE>(acc[2 * np + 1], ah, bq[2], bq[3]);
        }
    }
}

/* y (16 rows × 64 v columns) += P·V over NB column blocks of 16 tokens: P split into ph/pl (A
 * fragments, one per block), vb: the first block's v rows at this lane's offset. */
template <int MODE, int NB>
__device__ __forceinline__ void pv_pair(float (&y)[8][4], const uint32_t (&ph)[2][4], const uint32_t (&pl)[2][4],
                                        const typename cfg<MODE>::T * vb) {
#pragma unroll
    for (int np = 0; np < NB; ++np) {
#pragma unroll
        for (int n = 0; n < 4; ++n) {
            uint32_t b[4];
            ldsm4_t(b, vb + np * 16 * kFLd + n * 16);
            mma16816<MODE>(y[2 * n], ph[np], b[0], b[1]);
            mma16816<MODE>(y[2 * n + 1], ph[np], b[2], b[3]);
            mma16816<MODE>(y[2 * n], pl[np], b[0], b[1]);
            mma16816<MODE>(y[2 * n + 1], pl[np], b[2], b[3]);
        }
    }
}

template <int MODE>
__global__ void __launch_bounds__(kOutMmaThreads, 2) output_mma_kernel(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    extern __shared__ __align__(128) unsigned char smem[];
    const fast_smem<MODE>                          Ly(P.Kp, P.A, true, true, P.sct);
    const m3_scal                                  sc = carve_scal((float *)(smem + Ly.scal));
    float *                                        ecm = sc.sig + (kC + 1);
    float *                                        dd = ecm + (kC + 1);
    float *                                        th = (float *)(smem + Ly.th); /* θ, then the y exchange */
    T *                                            qh = (T *)(smem + Ly.t0h);
    T *                                            ql = (T *)(smem + Ly.t0l);
    T *                                            bh = (T *)(smem + Ly.t1h); /* K̂, then the entering state */
    T *                                            bl = (T *)(smem + Ly.t1l);
    T *                                            vs = (T *)(smem + Ly.vs);
    T *                                            zs = (T *)(smem + Ly.zs); /* z, then the output */
    const int                                      LK = P.Kp + 8, KS = P.Kp / 16;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rb = warp & 3, upper = warp >> 2;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    const int      L = ch.len;
    /* S_enter = 0 in a sequence's first chunk without initial states (block-uniform) */
    const bool with_state = !ch.first || P.has_states;
    /* every global input requested at the start (the 4-warp kernel's order): the state tile into
     * registers (8 float4 per thread), the v tile, q/k rows into the lo tiles, the z tile, angles */
    float4 pre[8];
    if (with_state) load_state_regs8(P, w, h, p0, pre);
    fast_load_v<MODE>(P, ch, h, p0, vs);
    uint4 araw[kAngPieces * kFastThreads / kOutMmaThreads];
    if (P.vq) cp_rows<MODE, kOutMmaThreads>(ql, LK, P.q, ch, h / P.G, 0, P.Kp, P.K);
    if (P.vk) cp_rows<MODE, kOutMmaThreads>(bl, LK, P.k, ch, h / P.G, 0, P.Kp, P.K);
    if (P.vz16) cp_rows<MODE, kOutMmaThreads>(zs, kFLd, P.z, ch, h, p0, kTV, P.V);
    load_angle_rows<MODE, kAngPieces * kFastThreads / kOutMmaThreads, kOutMmaThreads>(P, ch, h, araw);
    const float dh = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    chunk_scalars(P, ch, h, sc);
    for (int i = threadIdx.x; i < kC; i += blockDim.x) ecm[i] = i < L ? expf(sc.cm[i]) : 0.0f;
    /* θ: theta_walk's group count is capped by kPartMax (not by the 256 threads), so θ is the
     * state kernel's bit for bit */
    chunk_theta_rows<MODE, kAngPieces * kFastThreads / kOutMmaThreads, kOutMmaThreads>(P, ch, w, h, sc.dtv, th,
                                                                                       (float *)(smem + Ly.part), araw);
    cp_async_wait_all(); /* q, k, z (and v) rows, before the barrier that publishes them */
    __syncthreads();     /* θ */
    float * snt = nullptr;
    if (P.sct) { /* block-uniform: sin/cos once per (token, angle) */
        snt = (float *)(smem + Ly.sn);
        sincos_table(P.fused, th, snt, L * P.A);
        __syncthreads();
    }
    fast_prep_qk<MODE, kOutMmaThreads>(P, ch, h, th, qh, ql, bh, bl, LK, nullptr, dd,
                                       ch.last && blockIdx.z == 0 && P.fin_k.present, P.vq ? ql : nullptr,
                                       P.vk ? bl : nullptr, snt);
    cp_async_wait_all();
    __syncthreads(); /* Q̂, K̂, d; from here θ and the sin/cos table are dead (the y exchange) */

    /* this warp's share (all warp-uniform): column blocks [cb0, cb0 + nb) of its row block */
    const int   nL = (L + 15) >> 4;    /* column blocks holding tokens < L */
    const bool  live = rb * 16 < L;    /* the row block holds a token */
    const int   ncb = min(rb + 1, nL); /* causal: blocks 0..rb */
    const int   nlo = (ncb + 1) >> 1;  /* the lower warp's count, ≤ 2 */
    const int   cb0 = upper ? nlo : 0, nb = !live ? 0 : upper ? ncb - nlo : nlo;
    const int   ri0 = rb * 16 + (lane >> 2), ri1 = ri0 + 8;
    const float ci0 = ri0 < L ? sc.cm[ri0] : 0.0f, ci1 = ri1 < L ? sc.cm[ri1] : 0.0f;
    const T *   qrh = qh + rb * 16 * LK + a_row_off(lane, LK);
    const T *   qrl = ql + rb * 16 * LK + a_row_off(lane, LK);

    /* scores (16 rows × the warp's ≤ 32 tokens) = Q̂·K̂ᵀ */
    float s[4][4];
#pragma unroll
    for (int t = 0; t < 4; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
    {
        const T * kbh = bh + cb0 * 16 * LK + b_nk_off(lane, LK);
        const T * kbl = bl + cb0 * 16 * LK + b_nk_off(lane, LK);
        if (nb == 2)
            split_product<MODE, 2>(s, qrh, qrl, kbh, kbl, 0, KS, LK);
        else if (nb == 1)
            split_product<MODE, 1>(s, qrh, qrl, kbh, kbl, 0, KS, LK);
    }
    /* P_ij = score · e^{c_i − c_j} · σ_j for j < i < L (ex2.approx decay); j < 64 since cb0 ≤ 2 */
    mask_scores<4>(s, cb0 * 16 + 2 * (lane & 3), ri0, ri1, ci0, ci1, L, sc);
    uint32_t ph[2][4], pl[2][4]; /* P as split A fragments, one per column block */
#pragma unroll
    for (int c = 0; c < 2; ++c) {
        split2<MODE>(s[2 * c][0], s[2 * c][1], ph[c][0], pl[c][0]);
        split2<MODE>(s[2 * c][2], s[2 * c][3], ph[c][1], pl[c][1]);
        split2<MODE>(s[2 * c + 1][0], s[2 * c + 1][1], ph[c][2], pl[c][2]);
        split2<MODE>(s[2 * c + 1][2], s[2 * c + 1][3], ph[c][3], pl[c][3]);
    }

    /* the entering state, split over K̂ before P·V (the 4-warp kernel splits it after), so that its
     * 32 prefetch registers are free before y's 32 accumulators are live */
    if (with_state) {    /* block-uniform */
        __syncthreads(); /* every warp is done with K̂ */
        state_piece sp(P.Kp / 4, kOutMmaThreads);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int r = sp.r, c = 4 * sp.c;
            if (r >= kTV) break;
            sp.next();
            uint32_t hi[2], lo[2];
            split2<MODE>(pre[u].x, pre[u].y, hi[0], lo[0]);
            split2<MODE>(pre[u].z, pre[u].w, hi[1], lo[1]);
            *reinterpret_cast<uint2 *>(&bh[r * LK + c]) = make_uint2(hi[0], hi[1]);
            *reinterpret_cast<uint2 *>(&bl[r * LK + c]) = make_uint2(lo[0], lo[1]);
        }
        __syncthreads(); /* the split state */
    }

    /* Y (16 rows × 64 v columns, this warp's part) = P·V */
    float y[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) y[t][0] = y[t][1] = y[t][2] = y[t][3] = 0.0f;
    {
        const T * vb = vs + cb0 * 16 * kFLd + b_kn_off(lane, kFLd);
        if (nb == 2)
            pv_pair<MODE, 2>(y, ph, pl, vb);
        else if (nb == 1)
            pv_pair<MODE, 1>(y, ph, pl, vb);
    }
    /* Y += diag(e^c)·Q̂·S_enterᵀ over this warp's half of the k-steps */
    if (with_state && live) {
        float u[8][4];
#pragma unroll
        for (int t = 0; t < 8; ++t) u[t][0] = u[t][1] = u[t][2] = u[t][3] = 0.0f;
        const int half = KS / 2;
        split_product<MODE, 4>(u, qrh, qrl, bh + b_nk_off(lane, LK), bl + b_nk_off(lane, LK), upper ? half : 0,
                      upper ? KS : half, LK);
        const float e0 = ecm[ri0], e1 = ecm[ri1];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            y[t][0] = fmaf(e0, u[t][0], y[t][0]), y[t][1] = fmaf(e0, u[t][1], y[t][1]);
            y[t][2] = fmaf(e1, u[t][2], y[t][2]), y[t][3] = fmaf(e1, u[t][3], y[t][3]);
        }
    }

    out_exchange_epilogue<MODE, false>(P, ch, h, p0, L, y, reinterpret_cast<float4 *>(smem + Ly.th),
                                       reinterpret_cast<const unsigned char *>(vs), zs, dh, sc, dd, ri0, ri1);
}

/* The 8-warp kernel (exchange: its y exchange region) or the 4-warp one. */
template <int MODE, bool EIGHT>
ssm_status launch_mode(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W) {
    const dim3            grid((unsigned)W, (unsigned)P.H, (unsigned)((P.V + kTV - 1) / kTV));
    const fast_smem<MODE> L(P.Kp, P.A, true, EIGHT, P.sct);
    void (*kernel)(const m3_fwd_args) = EIGHT ? output_mma_kernel<MODE> : output_mma_any_kernel<MODE>;
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                         cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.total)));
    kernel<<<grid, EIGHT ? kOutMmaThreads : kFastThreads, L.total, ssmi_cuda_stream(ctx)>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, EIGHT ? "output_mma_kernel launch" : "output_mma_any_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace */

/* 8 warps; the caller checked out_mma_applies. */
ssm_status launch_output_mma(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    return mode == M_F16 ? launch_mode<M_F16, true>(ctx, op, P, W) : launch_mode<M_BF16, true>(ctx, op, P, W);
}

/* 4 warps, any output layout. */
ssm_status launch_output_mma_any(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    return mode == M_F16 ? launch_mode<M_F16, false>(ctx, op, P, W) : launch_mode<M_BF16, false>(ctx, op, P, W);
}

} /* namespace ssmi_siso */
