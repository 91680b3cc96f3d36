// gpu/chain_copy_probe.cu — the L2 sectors that the Mamba-2 state chain's 16-byte cp.async row copies cost in
// its lane patterns, each alone, into several shared layouts, against the same rows copied otherwise
// (bwd_state_chain.cu; mamba2-bwd-design §20–21; the counts of record in docs/PERF.md §5, S42-R1 to R3).
// Developer tool, not part of the library; read the counters with Nsight Compute:
//   nvcc -O3 -arch=sm_90 -lineinfo -I src/cuda/common gpu/chain_copy_probe.cu -o chain_copy_probe
//   ncu -k regex:probe --metrics lts__t_sectors_srcunit_tex_op_read.sum --section SourceCounters ./chain_copy_probe
// Each launch: 60 blocks (30 heads x 2 p tiles) walk 128 chunks of 64 rows, as one 30-head chain launch does.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "mma.cuh"
using namespace ssmi_mma; /* cp_async16 and its groups: the copies the chain issues; swz_off */

// mode 0: B pattern (16 lanes per 256-byte row, 2 rows per warp, 4 pieces at +16 rows), 256 copying threads
// mode 1: x pattern (8 lanes of a quarter warp take 8 rows at one 16-byte column; 64-byte rows at a 10240-byte pitch)
// mode 2: x rows with row-major lanes (4 lanes per 64-byte row)
// mode 3: B pattern with all 512 threads copying, 2 pieces each
// mode 4: B pattern into unpadded shared rows (LD 128): each warp's 512 bytes land contiguous
// mode 5: x rows with row-major lanes into unpadded shared rows (LD 32)
// mode 6: B pattern through registers (16-byte global loads, no cp.async), the control for the L2 count
// mode 7: B rows as bulk copies (cp.async.bulk, one 256-byte row per thread, an mbarrier per chunk), padded pitch
// mode 8: x rows as bulk copies (64 bytes each), padded pitch
// mode 9: B pattern, shared rows in the forward's swizzled atoms (64 columns of 128-byte rows, 16-byte units xor row)
// mode 10: B as the forward copies its tiles: 8 lanes per 128-byte half row, 4 rows per warp, swizzled atoms
// mode 11: x rows with row-major lanes into the swizzled atoms
// mode 6 counts fewer sectors than the bytes: its blocks share SMs and hit in L1, so it is no control after all.
// LD: the shared row pitch in bf16 (136 for B, 40 for x: the padded rows the chain had before its swizzled ring).
// The chain's ring now: B as mode 9, x and z in 64-byte rows with permuted units (bwd_state_chain.cu x_off).
__device__ __forceinline__ void bulk_row(void * dst, const void * src, unsigned bytes, unsigned long long * bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned long long * bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
}

template <int MODE, int LD>
__global__ void __launch_bounds__(512) probe(const __nv_bfloat16 * src, long long pitch, int chunks, float * sink) {
    extern __shared__ __align__(16) unsigned char sm[];
    __nv_bfloat16 *                               s = (__nv_bfloat16 *)sm;
    const int                                     tid = threadIdx.x;
    const int                                     nthr = MODE == 3 ? 512 : 256;
    const int             u = MODE == 3 ? tid : tid - 256; /* < 0: an mma warp of the chain, idle here */
    const __nv_bfloat16 * base =
        src + (long long)blockIdx.x * 32;  // x: the block's 32 columns (30 heads x 2 tiles); B: ignored below
    unsigned                                      acc = 0; /* mode 6's loads, kept alive through sink */
    __shared__ unsigned long long                 bar;     /* modes 7, 8: one phase per chunk */
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&bar)));
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    for (int c = 0; u >= 0 && c < chunks; ++c) {
        const long long t0 = (long long)c * 64;
        if (MODE == 6) {
            const int bi = u / 16, bj = (u % 16) * 8;
            for (int r = 0; r < 4; ++r) {
                const uint4 v = *(const uint4 *)(src + (t0 + bi + 16 * r) * 128 + bj);
                acc ^= v.x ^ v.y ^ v.z ^ v.w;
            }
            continue;
        }
        if (MODE == 7 || MODE == 8) {
            const unsigned row = MODE == 7 ? 256 : 64;
            if (u == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(&bar)),
                                     "r"(64 * row)
                                     : "memory");
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
            if (u < 64) {
                if (MODE == 7) bulk_row(&s[u * LD], src + (t0 + u) * 128, row, &bar);
                else bulk_row(&s[u * LD], base + (t0 + u) * pitch, row, &bar);
            }
            bar_wait(&bar, (unsigned)c & 1u);
            continue;
        }
        if (MODE == 9 || MODE == 10) {
            for (int r = 0; r < 4; ++r) {
                const int i = MODE == 9 ? u / 16 + 16 * r : u / 8 % 32 + 32 * (r & 1);
                const int j = MODE == 9 ? (u % 16) * 8 : (u % 8) * 8 + 64 * (r >> 1);
                cp_async16(sm + swz_off(i, j), src + (t0 + i) * 128 + j);
            }
        } else if (MODE == 11) {
            const int xi = u / 4, xj = (u % 4) * 8;
            cp_async16(sm + swz_off(xi, xj), base + (t0 + xi) * pitch + xj);
        } else if (MODE == 0 || MODE == 3 || MODE == 4) {
            const int bi = u / 16, bj = (u % 16) * 8, per = 64 * 16 / nthr, rs = nthr / 16;
            for (int r = 0; r < per; ++r) {
                int i = bi + rs * r;
                cp_async16(&s[i * LD + bj], src + (t0 + i) * 128 + bj);
            }
        } else if (MODE == 1) {
            const int xi = (u & 7) + 8 * (u >> 5), xj = ((u >> 3) & 3) * 8;
            cp_async16(&s[xi * LD + xj], base + (t0 + xi) * pitch + xj);
        } else {
            const int xi = u / 4, xj = (u % 4) * 8;
            cp_async16(&s[xi * LD + xj], base + (t0 + xi) * pitch + xj);
        }
        cp_async_commit();
        cp_async_wait_group<0>();
    }
    __syncthreads();
    if (MODE == 6 && acc == 0x9e3779b9u) sink[blockIdx.x] = 1.0f;
    if (MODE != 6 && tid == 300) sink[blockIdx.x] = __bfloat162float(s[5]);
}
int main() {
    const int       S = 8192, chunks = S / 64, H = 80, P = 64;
    const long long pitch = (long long)H * P;
    __nv_bfloat16 * x, *b;
    float *         sink;
    cudaMalloc(&x, (size_t)S * pitch * 2);
    cudaMalloc(&b, (size_t)S * 128 * 2);
    cudaMalloc(&sink, 4096);
    cudaMemset(x, 0, (size_t)S * pitch * 2);
    cudaMemset(b, 0, (size_t)S * 128 * 2);
    const int smem = 64 * 136 * 2;
    probe<0, 136><<<60, 512, smem>>>(b, 0, chunks, sink);
    probe<1, 40><<<60, 512, smem>>>(x, pitch, chunks, sink);
    probe<2, 40><<<60, 512, smem>>>(x, pitch, chunks, sink);
    probe<3, 136><<<60, 512, smem>>>(b, 0, chunks, sink);
    probe<4, 128><<<60, 512, smem>>>(b, 0, chunks, sink);
    probe<5, 32><<<60, 512, smem>>>(x, pitch, chunks, sink);
    probe<6, 136><<<60, 512, smem>>>(b, 0, chunks, sink);
    probe<7, 136><<<60, 512, smem>>>(b, 0, chunks, sink);
    probe<8, 40><<<60, 512, smem>>>(x, pitch, chunks, sink);
    probe<9, 0><<<60, 512, smem>>>(b, 0, chunks, sink);
    probe<10, 0><<<60, 512, smem>>>(b, 0, chunks, sink);
    probe<11, 0><<<60, 512, smem>>>(x, pitch, chunks, sink);
    cudaError_t e = cudaDeviceSynchronize();
    printf("done %s\n", cudaGetErrorString(e));
    printf("ideal sectors per launch: B modes %lld, x modes %lld\n", 60LL * chunks * 64 * 256 / 32,
           60LL * chunks * 64 * 64 / 32);
    cudaFree(x), cudaFree(b), cudaFree(sink);
    return e == cudaSuccess ? 0 : 1;
}
