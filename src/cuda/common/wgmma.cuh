/* wgmma.cuh — Hopper (sm_90a) warpgroup matrix-multiply pieces: the 128-byte swizzled shared-memory
 * layout of the operands, the shared-memory matrix descriptor, wgmma.mma_async m64n64k16 with f32
 * accumulators (A from shared memory or from registers; B from shared memory, K-major or MN-major),
 * m64n32k16 (A and B from shared memory, either major) and the fences around them. Used by the wgmma kernels of the Mamba-2 and SISO families and by
 * the wgmma probe (wgmma_probe.cu), which checks the layout and descriptor conventions below on
 * the GPU.
 * Inline device code only; everything that emits wgmma is compiled only where the target has it
 * (SSMI_WG_HAVE: an sm_90a device pass), elsewhere the functions are empty (never selected).
 *
 * Written from the PTX ISA (9.x), chapter "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
 * Instructions": its sections "Register Fragments" (the m64nNk16 A and D fragments), "Shared Memory
 * Matrix Layout" (canonical layouts, swizzling modes), "Matrix Descriptor Format", the
 * wgmma.mma_async syntax, wgmma.fence / commit_group / wait_group, and, in "membar/fence", the
 * proxy fence fence.proxy.async (wgmma reads shared memory through the async proxy). The LBO/SBO
 * reading below is our interpretation of those sections, and exactly what the wgmma probe checks.
 *
 * ---- the layout (128-byte swizzle) -------------------------------------------------------------
 * An operand of 16-bit elements is stored in "atoms" of 64 rows x 64 elements (8 KB): row r of the
 * atom is 128 bytes at r·128, and its 16-byte chunk c (elements 8c..8c+7) is stored at chunk
 * c ^ (r & 7). The hardware applies the same XOR to address bits [4,7) from bits [7,10), so every
 * atom must start on a 1024-byte boundary (the pattern repeats every 8 rows = 1024 bytes).
 *   K-major operand (rows = M or N, elements along K contiguous): a K of 128 is two atoms, the
 *     second 8 KB after the first (for a 64-row tile). The k-step of 16 elements inside an atom is
 *     +32 bytes on the start address (the hardware XORs the row bits into the chunk bits of the
 *     computed address, so a start that is not 128-byte aligned inside the atom row works; the
 *     probe's K = 128 case checks k-steps 0-7 over both atoms).
 *   MN-major operand (rows = K, elements along N contiguous): one atom holds 64 N x 64 K; the
 *     k-step of 16 rows is +2048 bytes (two 8-row groups of 1024 bytes).
 *
 * ---- the descriptor (64 bits) -------------------------------------------------------------------
 *   bits  0-13  start address >> 4 (shared-window address)
 *   bits 16-29  leading dimension byte offset (LBO) >> 4
 *   bits 32-45  stride dimension byte offset (SBO) >> 4
 *   bits 49-51  base offset (0: atoms are 1024-byte aligned)
 *   bits 62-63  swizzle mode (1 = 128-byte swizzle)
 * What LBO and SBO mean for the swizzled layouts (the ISA's canonical-layout table, in units of
 * 16-byte chunks "T"; our reading, checked by the wgmma probe):
 *   K-major, 128B swizzle: ((8, m), (T, 2k)) : ((8T, SBO), (1, T)). The rows of one 8-row group
 *     are 128 bytes apart (implicit), the 8-row groups SBO apart: SBO = 1024. LBO would be the
 *     distance between two atoms along K, but one k16 step (32 bytes) never leaves an atom, so LBO
 *     is not used for swizzled K-major layouts (the ISA table: "not used", encoded 1 by convention):
 *     we pass 16 (encoded 1).
 *   MN-major, 128B swizzle: ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO)). Along N: 64 elements
 *     inside one atom row, then the next atom LBO apart (only for N > 64; m64n64 never uses it;
 *     we pass the atom size 8192). Along K: rows 128 bytes apart (implicit), 8-row groups SBO apart:
 *     SBO = 1024.
 * The constants are macros (SSMI_WG_K_LBO, ...) that a build may override with -D if the probe
 * finds another convention; the probe tries the alternatives and prints the one that passes.
 *
 * ---- register fragments (ISA 9.7.15.5.1, "Matrix fragments for wgmma.m64nNk16") ---------------
 * Warp w (0..3) of the warpgroup owns rows 16w..16w+15 of A (register form) and of D.
 *   A (.f16/.bf16, 4 x .b32 per thread): a0 = (row g, k 2c..2c+1), a1 = (row g+8, k 2c..2c+1),
 *     a2 = (row g, k 2c+8..2c+9), a3 = (row g+8, k 2c+8..2c+9), g = lane/4, c = lane%4, row
 *     relative to 16w: the mma.sync m16n8k16 A fragment of the warp's 16 rows.
 *   D (f32, N/2 registers per thread): d[4t + e] holds (row g + 8·(e/2), column 8t + 2c + e%2):
 *     the mma.sync m16n8 C fragment of the warp's rows repeated over the N/8 column blocks t, i.e.
 *     float d[N/8][4] indexed [t][e] as the mma.sync kernels store it.
 */
#ifndef SSMI_CUDA_WGMMA_CUH
#define SSMI_CUDA_WGMMA_CUH

#include <stdint.h>

#include "mma.cuh" /* cp_async16 */

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SSMI_WG_HAVE 1
#else
#define SSMI_WG_HAVE 0
#endif

/* Descriptor constants (bytes). K-major: C rows, B tiles, state planes. MN-major: x tiles. */
#ifndef SSMI_WG_K_LBO
#define SSMI_WG_K_LBO 16
#endif
#ifndef SSMI_WG_K_SBO
#define SSMI_WG_K_SBO 1024
#endif
#ifndef SSMI_WG_MN_LBO
#define SSMI_WG_MN_LBO 8192
#endif
#ifndef SSMI_WG_MN_SBO
#define SSMI_WG_MN_SBO 1024
#endif

namespace ssmi_wg {

using ssmi_mma::kAtomBytes; /* the swizzled atoms: 64 rows x 128 bytes (mma.cuh) */
using ssmi_mma::swz_off;
/* The same for a tile of any number of rows: 64-row blocks of `katoms` atoms each. */
__host__ __device__ __forceinline__ int swz_off_rows(int row, int col, int katoms) {
    return (row >> 6) * katoms * kAtomBytes + swz_off(row & 63, col);
}

/* The 16-byte cp.async copies of a ROWS × 8·C8 tile of 16-bit T into the swizzled layout (C8/8
 * atoms per 64-row block): element (r, c) from src + r·srow + c; rows ≥ nr (or, unless FULLC,
 * columns ≥ nc) are zero-filled where ZERO, else left unwritten. Thread t of NT copies chunk t % C8
 * of rows t / C8 + u·STEP (STEP = NT / C8, a multiple of 8 that divides 64), so the swizzle phase and
 * the chunk are the same for all its pieces and the destination of piece u is the first one's plus
 * a constant: one offset per call, no per-piece walk. The caller commits and waits. */
template <typename T, int C8, int ROWS, int NT, bool FULLC, bool ZERO>
__device__ __forceinline__ void copy_rows(unsigned char * dst, const T * src, long long srow, int nr, int nc) {
    constexpr int STEP = NT / C8, U = ROWS * C8 / NT, KAT = C8 / 8;
    static_assert(STEP * C8 == NT && STEP % 8 == 0 && 64 % STEP == 0 && U * NT == ROWS * C8, "copy_rows: piece layout");
    const int c = (int)threadIdx.x % C8, r0 = (int)threadIdx.x / C8;
    dst += swz_off(r0, c * 8);
    src += r0 * srow + c * 8;
    const bool colok = FULLC || c * 8 < nc;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        unsigned char * d = dst + ((u * STEP) >> 6) * KAT * kAtomBytes + ((u * STEP) & 63) * 128;
        if (colok && r0 + u * STEP < nr)
            ssmi_mma::cp_async16(d, src + (long long)(u * STEP) * srow);
        else if (ZERO)
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* The descriptor of an operand starting at shared-window byte address saddr. */
__device__ __forceinline__ uint64_t desc(unsigned saddr, unsigned lbo, unsigned sbo) {
    return (uint64_t)((saddr >> 4) & 0x3FFFu) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}
__device__ __forceinline__ uint64_t desc_k(unsigned saddr) { return desc(saddr, SSMI_WG_K_LBO, SSMI_WG_K_SBO); }
__device__ __forceinline__ uint64_t desc_mn(unsigned saddr) { return desc(saddr, SSMI_WG_MN_LBO, SSMI_WG_MN_SBO); }

/* wgmma.fence: before the first wgmma of a batch whose accumulator or A registers were written by
 * other instructions (and before the first wgmma at all). */
__device__ __forceinline__ void fence() {
#if SSMI_WG_HAVE
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void commit() {
#if SSMI_WG_HAVE
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/* Waits until at most N committed wgmma groups of the warpgroup are pending. */
template <int N> __device__ __forceinline__ void wait() {
#if SSMI_WG_HAVE
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* Generic-proxy writes of shared memory (st.shared, cp.async) made visible to the async proxy
 * that wgmma reads through; each writing thread fences after its writes, then a barrier. */
__device__ __forceinline__ void fence_proxy_async() {
#if SSMI_WG_HAVE
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/* Pins registers across the asynchronous window: the compiler may neither read the accumulators
 * before the wait nor reuse the A registers while a wgmma may still read them. */
__device__ __forceinline__ void keep(float (&d)[8][4]) {
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[t][e])::"memory");
}
__device__ __forceinline__ void keep(uint32_t (&a)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[e])::"memory");
}

#define SSMI_WG_D32                                                                                             \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define SSMI_WG_D32_OPS(d)                                                                                         \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),   \
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])

/* d(64 x 64, f32) += A(64 x 16) · B(16 x 64), A and B from shared memory through descriptors; A
 * K-major (imm-trans-a 0), B K-major (TB = 0) or MN-major (TB = 1). BF16: bf16 inputs, else f16.
 * Operand order (ISA): d, a-desc, b-desc, scale-d (predicate; 1 = accumulate), imm-scale-a,
 * imm-scale-b, imm-trans-a, imm-trans-b. */
template <bool BF16, int TB> __device__ __forceinline__ void mma_ss(float (&d)[8][4], uint64_t da, uint64_t db) {
#if SSMI_WG_HAVE
    if constexpr (BF16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SSMI_WG_D32
                     ", %32, %33, p, 1, 1, 0, %35;\n}\n"
                     : SSMI_WG_D32_OPS(d)
                     : "l"(da), "l"(db), "r"(1), "n"(TB));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " SSMI_WG_D32
                     ", %32, %33, p, 1, 1, 0, %35;\n}\n"
                     : SSMI_WG_D32_OPS(d)
                     : "l"(da), "l"(db), "r"(1), "n"(TB));
#else
    (void)d, (void)da, (void)db;
#endif
}

/* The first product of a chain, d = A(64 x 16) · B(16 x 64) (scale-d 0), A and B K-major. Its
 * accumulator operands are outputs only ("=f"), so that the compiler does not keep d's old values
 * alive up to the chain (in the Mamba-2 scan's wgmma output kernel: the previous tile's scores,
 * dead after their split). */
#define SSMI_WG_D32_OUT(d)                                                                                         \
    "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]),   \
        "=f"(d[1][3]), "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), \
        "=f"(d[3][2]), "=f"(d[3][3]), "=f"(d[4][0]), "=f"(d[4][1]), "=f"(d[4][2]), "=f"(d[4][3]), "=f"(d[5][0]), \
        "=f"(d[5][1]), "=f"(d[5][2]), "=f"(d[5][3]), "=f"(d[6][0]), "=f"(d[6][1]), "=f"(d[6][2]), "=f"(d[6][3]), \
        "=f"(d[7][0]), "=f"(d[7][1]), "=f"(d[7][2]), "=f"(d[7][3])
template <bool BF16> __device__ __forceinline__ void mma_ss_first(float (&d)[8][4], uint64_t da, uint64_t db) {
#if SSMI_WG_HAVE
    if constexpr (BF16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SSMI_WG_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : SSMI_WG_D32_OUT(d)
                     : "l"(da), "l"(db), "r"(0));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " SSMI_WG_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : SSMI_WG_D32_OUT(d)
                     : "l"(da), "l"(db), "r"(0));
#else
    (void)d, (void)da, (void)db;
#endif
}

/* d (+)= A · Bᵀ over K = 64·KA: A the 64 K-major rows at shared address a, B the 64 K-major rows at
 * b (both in 64-column atoms). ACC0: the chain adds to d; else its first product starts d
 * (mma_ss_first). A k-step of 16 is +32 bytes inside an atom, +8 KB to the next atom; the
 * descriptor's address field is addr >> 4, so a step adds a constant to it (addresses < 256 KB:
 * no carry out of the 14-bit field). One chain, not committed (the caller fences before and
 * commits after). */
template <bool BF16, int KA, bool ACC0 = true>
__device__ __forceinline__ void chain_k(float (&d)[8][4], unsigned a, unsigned b) {
    const uint64_t da = desc_k(a), db = desc_k(b);
#pragma unroll
    for (int ks = 0; ks < 4 * KA; ++ks) {
        const uint64_t o = (uint64_t)(((ks >> 2) * kAtomBytes + (ks & 3) * 32) >> 4);
        if (ks == 0 && !ACC0)
            mma_ss_first<BF16>(d, da, db);
        else
            mma_ss<BF16, 0>(d, da + o, db + o);
    }
}

/* The same with A from registers (a: this thread's A fragment of the warp's 16 rows, see above).
 * Operand order (ISA): d, a, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b. */
template <bool BF16, int TB>
__device__ __forceinline__ void mma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
#if SSMI_WG_HAVE
    if constexpr (BF16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SSMI_WG_D32
                     ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                     : SSMI_WG_D32_OPS(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " SSMI_WG_D32
                     ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                     : SSMI_WG_D32_OPS(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB));
#else
    (void)d, (void)a, (void)db;
#endif
}

/* ---- m64n32k16 (a 32-column slice of an operand: the SISO backward's per-warpgroup K slices) ---- */

__device__ __forceinline__ void keep(float (&d)[4][4]) {
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[t][e])::"memory");
}

#define SSMI_WG_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define SSMI_WG_D16_OPS(d)                                                                                         \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),   \
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
        "+f"(d[3][2]), "+f"(d[3][3])

/* d(64 x 32, f32) += A(64 x 16) · B(16 x 32), both from shared memory: A K-major (TA = 0) or MN-major
 * (TA = 1: A read transposed, which the 16-bit types allow), B K-major (TB = 0) or MN-major (TB = 1).
 * The D fragment is mma_ss's for N = 32: d[t][e], t < 4. An MN-major B slice of 32 columns at
 * column 32 of an atom starts 64 bytes into the atom's rows (gpu/wgmma_probe.cu's ss_mn32 and
 * ss_tmn32 cases check that start). */
template <bool BF16, int TA, int TB>
__device__ __forceinline__ void mma_ss_n32(float (&d)[4][4], uint64_t da, uint64_t db) {
#if SSMI_WG_HAVE
    if constexpr (BF16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " SSMI_WG_D16
                     ", %16, %17, p, 1, 1, %19, %20;\n}\n"
                     : SSMI_WG_D16_OPS(d)
                     : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 " SSMI_WG_D16
                     ", %16, %17, p, 1, 1, %19, %20;\n}\n"
                     : SSMI_WG_D16_OPS(d)
                     : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
#else
    (void)d, (void)da, (void)db;
#endif
}

} // namespace ssmi_wg

#endif /* SSMI_CUDA_WGMMA_CUH */
