/* mma.cuh — the warp-level tensor-core pieces shared by the CUDA chunk kernels (mamba2/,
 * mamba3_siso/): the input modes, pairs of 16-bit values packed in a 32-bit register, the
 * hi/lo split of fp32 values into a rounded part and a rounded remainder (fp32-accurate
 * products from 16-bit operands), mma.sync m16n8k16 with fp32 accumulators, ldmatrix, cp.async
 * and the per-lane fragment offsets of ldmatrix loads. Inline device code only. */
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
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* Waits until at most N of this thread's committed groups are pending (the newest ones). */
template <int N> __device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
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

} // namespace ssmi_mma

#endif /* SSMI_CUDA_MMA_CUH */
