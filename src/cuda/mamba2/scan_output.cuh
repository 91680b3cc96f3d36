/* scan_output.cuh — pieces of the 8-warp output kernels (output_mma.cu, output_wgmma.cu): the
 * block's place in the grid, its dt/cumsum/D tables, the causal mask with its decay and dt, and the
 * fast exp and silu of the mask and the gate. */
#ifndef SSMI_CUDA_MAMBA2_SCAN_OUTPUT_CUH
#define SSMI_CUDA_MAMBA2_SCAN_OUTPUT_CUH

#include "scan.cuh"

namespace ssmi_m2 {

const float kLog2e = 1.4426950408889634f;

/* 2^x by the special-function unit alone (ex2.approx.ftz: ~2 ulp, results below 2^-126 flush to 0,
 * which a decay factor can afford); exp2f adds a denormal range fix-up of 4 instructions. */
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
/* z·sigmoid(z) with the fast exp and division (a few ulp; the accurate pair costs ~25
 * instructions per element). For z → −∞, 1 + e^{−z} overflows and the quotient is 0. */
__device__ __forceinline__ float fast_silu(float z) { return __fdividef(z, 1.0f + __expf(-z)); }

/* The mask, decay and dt of a 16 × 64 score tile (fragment layout): sc(i, j) · exp(cum_i − cum_j) ·
 * dt_j, 0 above the diagonal when DIAG. Rows at or beyond the chunk's length are never stored. */
template <bool DIAG>
__device__ __forceinline__ void mask_scores(float (&sc)[8][4], const float * cums, const float * dts, int jb, int ri0,
                                        int ri1, float ci0, float ci1) {
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        const int    j = jb + t * 8;
        const float2 cj = *reinterpret_cast<const float2 *>(cums + j);
        const float2 dj = *reinterpret_cast<const float2 *>(dts + j);
        const float  w00 = fast_exp2((ci0 - cj.x) * kLog2e) * dj.x, w01 = fast_exp2((ci0 - cj.y) * kLog2e) * dj.y;
        const float  w10 = fast_exp2((ci1 - cj.x) * kLog2e) * dj.x, w11 = fast_exp2((ci1 - cj.y) * kLog2e) * dj.y;
        if (DIAG) {
            sc[t][0] = j <= ri0 ? sc[t][0] * w00 : 0.0f;
            sc[t][1] = j + 1 <= ri0 ? sc[t][1] * w01 : 0.0f;
            sc[t][2] = j <= ri1 ? sc[t][2] * w10 : 0.0f;
            sc[t][3] = j + 1 <= ri1 ? sc[t][3] * w11 : 0.0f;
        } else {
            sc[t][0] *= w00, sc[t][1] *= w01, sc[t][2] *= w10, sc[t][3] *= w11;
        }
    }
}

/* The block of the 8-warp output kernels' grid (blockIdx.x = (chunk·H + head)·tiles + tile, tile =
 * row tile·n_ptiles + p tile; 32-bit index arithmetic): chunk w, head h, rows i0.., p columns p0.. */
struct out_block {
    int       w, h, i0, p0;
    long long wh; /* w·H + h */
};
__device__ __forceinline__ out_block out_block_of(const m2_fast_args & A) {
    const unsigned blk = blockIdx.x;
    const unsigned nz = (unsigned)(kWideRowTiles * A.n_ptiles);
    const unsigned whu = blk / nz;
    const int      z = (int)(blk - whu * nz);
    out_block       b;
    b.w = (int)(whu / (unsigned)A.H), b.h = (int)(whu - (unsigned)b.w * (unsigned)A.H);
    b.wh = whu;
    b.i0 = (z / A.n_ptiles) * kWideRows, b.p0 = (z % A.n_ptiles) * kFT;
    return b;
}

/* The 8-warp output blocks' tables: processed dt and its cumsum of the chunk (from the state kernel,
 * 0 past the block's rows: nlen) and D of the block's p columns. */
__device__ __forceinline__ void block_tables(const m2_fast_args & A, long long wh, int h, int p0, int nlen, float * dts,
                                             float * cums, float * ds) {
    const int     tid = threadIdx.x;
    const float * dd = A.dtc + wh * 2 * kScanQ;
    for (int i = tid; i < kScanQ; i += kWideThreads) {
        dts[i] = i < nlen ? dd[i] : 0.0f;
        cums[i] = i < nlen ? dd[kScanQ + i] : 0.0f;
    }
    for (int k = tid; k < kFT; k += kWideThreads) {
        const int p = p0 + k;
        ds[k] = A.has_d && p < A.P ? ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + (A.d_2d ? p * A.d.s[1] : 0)) : 0.0f;
    }
}

/* The epilogue of the 8-warp output kernels where out takes aligned pairs and z (if any) is staged
 * on chip: y (the warp's 16 rows × 64 p of its 64-row tile at iw, mma fragment layout) + D·x, times
 * silu(z), stored in pairs (P is even here); a non-finite value stored marks (chunk, head). x_at(ii, pl): the x pair of row ii (of the 64) and
 * column pl; z_at(r16, pl): the z pair of the warp's row r16. Waits for this thread's copies and
 * syncs the warp first (its lanes copied its z rows). */
template <int MODE, class XAt, class ZAt>
__device__ __forceinline__ void epilogue_pairs(const m2_fast_args & A, const m2_chunk & ch, const float (&y)[8][4],
                                               const float * ds, int iw, int wq, int h, int p0, XAt x_at, ZAt z_at) {
    const int       lane = threadIdx.x & 31;
    const long long tb = ch.t0 + iw;
    cp_async_wait_group<0>();
    __syncwarp(); /* the warp's z rows, copied by its lanes, are visible to all of them */
    const int  osz = A.out_dtype == SSM_DTYPE_F32 ? 4 : 2;
    const bool has_z = A.has_z;
    /* one row at a time: its output row's address once, then 8 pairs */
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r16 = (lane >> 2) + half * 8, ii = wq * 16 + r16;
        if (iw + ii >= ch.len) continue;
        char * orow = (char *)A.out + (ch.b * A.os[0] + (tb + ii) * A.os[1] + h * A.os[2] + p0) * osz;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int pl = t * 8 + 2 * (lane & 3);
            if (p0 + pl >= A.P) break;
            const float2 xv = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(x_at(ii, pl)));
            const float2 dv = *reinterpret_cast<const float2 *>(ds + pl);
            float        v0 = y[t][2 * half] + dv.x * xv.x, v1 = y[t][2 * half + 1] + dv.y * xv.y;
            if (has_z) {
                const float2 zz = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(z_at(r16, pl)));
                v0 *= fast_silu(zz.x);
                v1 *= fast_silu(zz.y);
            }
            if (!isfinite(v0) || !isfinite(v1)) /* out_block_of's grid: the pair's tiles are consecutive */
                mark_nonfinite(A.nonfinite, blockIdx.x / (unsigned)(kWideRowTiles * A.n_ptiles));
            if (osz == 4)
                *reinterpret_cast<float2 *>(orow + pl * 4) = make_float2(v0, v1);
            else
                *reinterpret_cast<uint32_t *>(orow + pl * 2) = t2<MODE>::pack(v0, v1);
        }
    }
}

} /* namespace ssmi_m2 */

#endif /* SSMI_CUDA_MAMBA2_SCAN_OUTPUT_CUH */
