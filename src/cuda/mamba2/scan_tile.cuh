/* scan_tile.cuh — tile copies of the tensor-core kernels: a rows × cols tile of a tensor into
 * shared memory as the compute type T, by cp.async in 16-byte pieces where the tensor is of type T
 * with contiguous 16-byte aligned rows, element by element through the strides otherwise. */
#ifndef SSMI_CUDA_MAMBA2_SCAN_TILE_CUH
#define SSMI_CUDA_MAMBA2_SCAN_TILE_CUH

#include "scan.cuh"

namespace ssmi_m2 {


/* dst[r·ld + c] (T) = element base + r·srow + c·scol for r < rows, c < cols (a multiple of 8);
 * 0 where r ≥ nr or c ≥ nc. vec: the tensor is of type T with contiguous 16-byte aligned rows
 * and nc a multiple of 8 (cp.async; the caller waits). */
template <int MODE>
__device__ void tile_to_smem(typename cfg<MODE>::T * dst, int ld, const ssmi_cu_view & v, int vec, long long base,
                             long long srow, long long scol, int rows, int cols, int nr, int nc) {
    typedef typename cfg<MODE>::T T;
    if (vec) {
        const int c8 = cols >> 3;
        for (int o = threadIdx.x; o < rows * c8; o += blockDim.x) {
            const int r = o / c8, c = (o - r * c8) * 8;
            T *       d = dst + r * ld + c;
            if (r < nr && c < nc)
                cp_async16(d, (const T *)v.p + base + r * srow + c);
            else
                *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
        }
    } else {
        for (int o = threadIdx.x; o < rows * cols; o += blockDim.x) {
            const int r = o / cols, c = o - r * cols;
            to_t(r < nr && c < nc ? ssmi_cu_ld(v.p, v.dtype, base + r * srow + c * scol) : 0.0f, dst + r * ld + c);
        }
    }
}

/* The 16-byte copies of a rows × 8·c8 tile of T: element (r, c) from src + r·srow + c into
 * dst[r·ld + c]; rows ≥ nr or columns ≥ nc are zero-filled. The caller commits and waits. */
template <typename T>
__device__ __forceinline__ void tile_vec(T * dst, int ld, const T * src, long long srow, int rows, int c8, int nr,
                                            int nc) {
    const int total = rows * c8, step_r = kWideThreads / c8, step_c = kWideThreads - step_r * c8;
    int       r = (int)threadIdx.x / c8, c = (int)threadIdx.x - r * c8;
    for (int o = threadIdx.x; o < total; o += kWideThreads) {
        T * d = dst + r * ld + c * 8;
        if (r < nr && c * 8 < nc)
            cp_async16(d, src + r * srow + c * 8);
        else
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
        r += step_r, c += step_c;
        if (c >= c8) c -= c8, ++r;
    }
}

/* The 16-byte copies of a ROWS × 8·C8 tile of T into plain rows dst[r·8·C8 + c]: element (r, c) from
 * src + r·srow + c; rows ≥ nr or columns ≥ nc are zero-filled. Thread t copies chunk t % C8 of rows
 * t / C8 + u·(kWideThreads / C8): one offset computed per call, then constant steps (tile_vec's
 * pieces, without its per-piece walk). The caller commits and waits. */
template <typename T, int C8, int ROWS>
__device__ __forceinline__ void tile_rows(T * dst, const T * src, long long srow, int nr, int nc) {
    constexpr int STEP = kWideThreads / C8, U = ROWS * C8 / kWideThreads;
    static_assert(STEP * C8 == kWideThreads && U * kWideThreads == ROWS * C8, "tile_rows: piece layout");
    const int c = (int)threadIdx.x % C8, r0 = (int)threadIdx.x / C8;
    dst += r0 * 8 * C8 + c * 8;
    src += r0 * srow + c * 8;
    const bool colok = c * 8 < nc;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        T * d = dst + u * STEP * 8 * C8;
        if (colok && r0 + u * STEP < nr)
            cp_async16(d, src + (long long)(u * STEP) * srow);
        else
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* ssmi_wg::copy_rows for the kWideThreads kernels, rows past nr (and columns past nc unless FULLC)
 * zero-filled. */
template <typename T, int C8, int ROWS, bool FULLC>
__device__ __forceinline__ void wg_tile_rows(unsigned char * dst, const T * src, long long srow, int nr, int nc) {
    ssmi_wg::copy_rows<T, C8, ROWS, kWideThreads, FULLC, true>(dst, src, srow, nr, nc);
}

/* tile_to_smem with the vector path of tile_vec. */
template <int MODE>
__device__ __forceinline__ void tile_any(typename cfg<MODE>::T * dst, int ld, const ssmi_cu_view & v, int vec,
                                        long long base, long long srow, long long scol, int rows, int cols, int nr,
                                        int nc) {
    typedef typename cfg<MODE>::T T;
    if (vec)
        tile_vec<T>(dst, ld, (const T *)v.p + base, srow, rows, cols >> 3, nr, nc);
    else
        tile_to_smem<MODE>(dst, ld, v, 0, base, srow, scol, rows, cols, nr, nc);
}

} /* namespace ssmi_m2 */

#endif /* SSMI_CUDA_MAMBA2_SCAN_TILE_CUH */
