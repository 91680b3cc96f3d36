/* mma.cuh — the warp-level tensor-core pieces shared by the CUDA chunk kernels (mamba2/,
 * mamba3_siso/): the input modes, pairs of 16-bit values packed in a 32-bit register, the
 * hi/lo split of fp32 values into a rounded part and a rounded remainder (fp32-accurate
 * products from 16-bit operands), mma.sync m16n8k16 with fp32 accumulators, ldmatrix, cp.async,
 * the per-lane fragment offsets of ldmatrix loads and the 16 × 16 tile products of the bf16-plane
 * chunk kernels. Inline device code only. */
#ifndef SSMI_CUDA_MMA_CUH
#define SSMI_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace ssmi_mma {

/* The compute mode of a kernel instance: the dtype of its 16-bit operands (or fp32). */
enum { M_F32 = 0, M_F16 = 1, M_BF16 = 2 };

template <int MODE>
struct t2;
template <>
struct t2<M_F16> {
    static __device__ __forceinline__ uint32_t pack(float a, float b) {
        __half2 v = __floats2half2_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t u) {
        __half2 v = *reinterpret_cast<__half2 *>(&u);
        return __half22float2(v);
    }
};
template <>
struct t2<M_BF16> {
    static __device__ __forceinline__ uint32_t pack(float a, float b) {
        __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t u) {
        __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162 *>(&u);
        return __bfloat1622float2(v);
    }
};

/* (a, b) rounded to a pair of T (hi) and the rounded remainders (lo). */
template <int MODE>
__device__ __forceinline__ void split2(float a, float b, uint32_t & hi, uint32_t & lo) {
    hi = t2<MODE>::pack(a, b);
    const float2 r = t2<MODE>::unpack(hi);
    lo = t2<MODE>::pack(a - r.x, b - r.y);
}

template <int MODE>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (MODE == M_BF16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* A warp's row of eight n8 tiles: acc[2·np + j] += a·(n8 tile j of b[np]) for np = 0..3, b[np] one
 * ldmatrix x4 of two n8 tiles (registers 0, 1: tile 0; 2, 3: tile 1). */
template <int MODE>
__device__ __forceinline__ void mma_row4(float (&acc)[8][4], const uint32_t (&a)[4], const uint32_t (&b)[4][4]) {
#pragma unroll
    for (int np = 0; np < 4; ++np) {
        mma16816<MODE>(acc[2 * np], a, b[np][0], b[np][1]);
        mma16816<MODE>(acc[2 * np + 1], a, b[np][2], b[np][3]);
    }
}

__device__ __forceinline__ unsigned smem_addr(const void * p) { return (unsigned)__cvta_generic_to_shared(p); }

/* Four 8x8 b16 matrices; lane l gives the row address of matrix l/8. */
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void * p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm4_t(uint32_t (&r)[4], const void * p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void cp_async16(void * dst, const void * src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
/* A 4-byte asynchronous copy global → shared (the .cg form takes 16 bytes only). */
__device__ __forceinline__ void cp_async4(void * dst, const void * src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* Waits until at most N of this thread's committed groups are pending (the newest ones). */
template <int N> __device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* The 128-byte swizzled layout of 16-bit operand tiles (the wgmma atoms, wgmma.cuh): byte offset of
 * element (row, col) of a 64-row tile stored as atoms of 64 columns (col/64 = atom, each 8 KB), row
 * < 64; the 16-byte units of a row are permuted by row mod 8, so eight rows at one unit fall on
 * distinct banks. */
constexpr int kAtomBytes = 8192; /* 64 rows x 128 bytes */
__host__ __device__ __forceinline__ int swz_off(int row, int col) {
    return (col >> 6) * kAtomBytes + row * 128 + ((((col >> 3) & 7) ^ (row & 7)) << 4) + ((col & 7) << 1);
}

/* Fragment addresses of lane l. A row-major (m, k) at (m0, k0): */
__device__ __forceinline__ int a_row_off(int lane, int ld) { return (lane & 15) * ld + (lane >> 4) * 8; }
/* A stored (k, m), transposed load: */
__device__ __forceinline__ int a_trans_off(int lane, int ld) {
    return ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8;
}
/* Two n8 tiles of B stored (n, k), plain load: r0,r1 = tile 0, r2,r3 = tile 1. */
__device__ __forceinline__ int b_nk_off(int lane, int ld) {
    return ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8;
}
/* Two n8 tiles of B stored (k, n), transposed load. */
__device__ __forceinline__ int b_kn_off(int lane, int ld) {
    return ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
}

/* The tile products of the bf16-plane chunk kernels (mamba2/bwd_chunk_planes.cu,
 * mamba3_siso/bwd_chunk_planes.cu): operands are bf16 planes in shared memory, a value that bf16
 * holds exactly in one plane, an fp32 value in two (the rounded value and the rounded remainder,
 * split2), rows of a stride that is a multiple of 8 elements. */
using bf16 = __nv_bfloat16;

/* c[j] (j = 0, 1: columns n0 + 8j..) += A·B over k in [k0, k1) (multiples of 16) for the 16 × 16
 * tile at (m0, n0). A row-major [m][k] (kAT: stored [k][m], read transposed), B stored [n][k]
 * (kBKN: [k][n], read transposed); kAS/kBS: the operand has a remainder plane (al/bl), so a
 * product of two split operands is three bf16 products (lo·lo, ~2^-16 relative, dropped). The
 * sum runs in k order, each step's products in a fixed order. kK > 0: k1 = k0 + kK, known at compile
 * time, the loop unrolled whole (the same products in the same order). kBSwz (with kBKN): B in the
 * swizzled atoms (swz_off, k1 ≤ 64; ldb unused). */
template <bool kAT, bool kBKN, bool kAS, bool kBS, int kK = 0, bool kBSwz = false>
__device__ __forceinline__ void tile_mma(float (&c)[2][4], const bf16 * ah, const bf16 * al, int lda, const bf16 * bh,
                                         const bf16 * bl, int ldb, int m0, int n0, int k0, int k1) {
    const int lane = threadIdx.x & 31;
    const int ao = kAT ? a_trans_off(lane, lda) : a_row_off(lane, lda);
    static_assert(!kBSwz || kBKN, "tile_mma: swizzled B is stored [k][n]");
    /* swizzled: lane l's row (l mod 8) + 8·((l / 8) mod 2) of the k step, whose row mod 8 is l mod 8
     * at every step (k a multiple of 16), so its offset is the first step's plus 64·k */
    const int bo = kBSwz  ? swz_off((lane & 7) + ((lane >> 3) & 1) * 8, n0 + (lane >> 4) * 8) / 2
                   : kBKN ? b_kn_off(lane, ldb)
                          : b_nk_off(lane, ldb);
    auto      step = [&](int k) {
        const int aoff = (kAT ? k * lda + m0 : m0 * lda + k) + ao;
        const int boff = kBSwz ? 64 * k + bo : (kBKN ? k * ldb + n0 : n0 * ldb + k) + bo;
        uint32_t  A[4], B[4], Al[4], Bl[4];
        if (kAT) ldsm4_t(A, ah + aoff);
        else ldsm4(A, ah + aoff);
        if (kBKN) ldsm4_t(B, bh + boff);
        else ldsm4(B, bh + boff);
        if constexpr (kAS) {
            if (kAT) ldsm4_t(Al, al + aoff);
            else ldsm4(Al, al + aoff);
        }
        if constexpr (kBS) {
            if (kBKN) ldsm4_t(Bl, bl + boff);
            else ldsm4(Bl, bl + boff);
        }
        mma16816<M_BF16>(c[0], A, B[0], B[1]);
        mma16816<M_BF16>(c[1], A, B[2], B[3]);
        if constexpr (kBS) {
            mma16816<M_BF16>(c[0], A, Bl[0], Bl[1]);
            mma16816<M_BF16>(c[1], A, Bl[2], Bl[3]);
        }
        if constexpr (kAS) {
            mma16816<M_BF16>(c[0], Al, B[0], B[1]);
            mma16816<M_BF16>(c[1], Al, B[2], B[3]);
        }
    };
    if constexpr (kK > 0) {
#pragma unroll
        for (int k = 0; k < kK; k += 16) step(k0 + k);
    } else {
#pragma unroll 2
        for (int k = k0; k < k1; k += 16) step(k);
    }
}

/* A tile_mma accumulator set to zero. Lane l holds c[j][2h + u] at row m0 + l/4 + 8h, column
 * n0 + 8j + 2(l % 4) + u. */
__device__ __forceinline__ void zero_acc(float (&c)[2][4]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
}

/* Sum over the 4 lanes of a quad (the lanes holding one accumulator row), a fixed xor tree. */
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* The values of planes at element offset o (even) and o + 1: one exact plane, or a split pair
 * (rounded value + remainder). */
__device__ __forceinline__ float2 exact_at(const bf16 * h, int o) {
    return t2<M_BF16>::unpack(*(const uint32_t *)(h + o));
}
__device__ __forceinline__ float2 split_at(const bf16 * h, const bf16 * l, int o) {
    const float2 a = exact_at(h, o), b = exact_at(l, o);
    return make_float2(a.x + b.x, a.y + b.y);
}
/* (a, b) into the split planes h, l at the even element o. */
__device__ __forceinline__ void split_pair(float a, float b, bf16 * h, bf16 * l, int o) {
    uint32_t hi, lo;
    split2<M_BF16>(a, b, hi, lo);
    *(uint32_t *)(h + o) = hi, *(uint32_t *)(l + o) = lo;
}

} // namespace ssmi_mma

#endif /* SSMI_CUDA_MMA_CUH */
