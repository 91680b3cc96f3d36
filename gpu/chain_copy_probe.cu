// gpu/chain_copy_probe.cu — the L2 sectors that the Mamba-2 state chain's 16-byte cp.async row copies cost in
// its lane patterns, each alone (bwd_state_chain.cu; mamba2-bwd-design §20: the chain reads ~1.4x the L2 sectors of
// the bytes it copies). Developer tool, not part of the library; read the counters with Nsight Compute:
//   nvcc -O3 -arch=sm_90 -lineinfo -I src/cuda/common gpu/chain_copy_probe.cu -o chain_copy_probe
//   ncu -k regex:probe --metrics lts__t_sectors_srcunit_tex_op_read.sum --section SourceCounters ./chain_copy_probe
// Each launch: 60 blocks (30 heads x 2 p tiles) walk 128 chunks of 64 rows, as one 30-head chain launch does.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "mma.cuh"
using namespace ssmi_mma; /* cp_async16 and its groups: the copies the chain issues */

// mode 0: B pattern (16 lanes per 256-byte row, 2 rows per warp, 4 pieces at +16 rows), 256 copying threads
// mode 1: x pattern (8 lanes of a quarter warp take 8 rows at one 16-byte column; 64-byte rows at a 10240-byte pitch)
// mode 2: x rows with row-major lanes (4 lanes per 64-byte row)
// mode 3: B pattern with all 512 threads copying, 2 pieces each
// Shared rows at the chain's pitches (136 bf16 for B, 40 for x: kColLd, kRowLd).
template <int MODE>
__global__ void __launch_bounds__(512) probe(const __nv_bfloat16 * src, long long pitch, int chunks, float * sink) {
    extern __shared__ __align__(16) unsigned char sm[];
    __nv_bfloat16 *                               s = (__nv_bfloat16 *)sm;
    const int                                     tid = threadIdx.x;
    const int                                     nthr = MODE == 3 ? 512 : 256;
    const int             u = MODE == 3 ? tid : tid - 256; /* < 0: an mma warp of the chain, idle here */
    const __nv_bfloat16 * base =
        src + (long long)blockIdx.x * 32;  // x: the block's 32 columns (30 heads x 2 tiles); B: ignored below
    for (int c = 0; u >= 0 && c < chunks; ++c) {
        const long long t0 = (long long)c * 64;
        if (MODE == 0 || MODE == 3) {
            const int bi = u / 16, bj = (u % 16) * 8, per = 64 * 16 / nthr, rs = nthr / 16;
            for (int r = 0; r < per; ++r) {
                int i = bi + rs * r;
                cp_async16(&s[i * 136 + bj], src + (t0 + i) * 128 + bj);
            }
        } else if (MODE == 1) {
            const int xi = (u & 7) + 8 * (u >> 5), xj = ((u >> 3) & 3) * 8;
            cp_async16(&s[xi * 40 + xj], base + (t0 + xi) * pitch + xj);
        } else {
            const int xi = u / 4, xj = (u % 4) * 8;
            cp_async16(&s[xi * 40 + xj], base + (t0 + xi) * pitch + xj);
        }
        cp_async_commit();
        cp_async_wait_group<0>();
    }
    __syncthreads();
    if (tid == 300) sink[blockIdx.x] = __bfloat162float(s[5]);
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
    probe<0><<<60, 512, smem>>>(b, 0, chunks, sink);
    probe<1><<<60, 512, smem>>>(x, pitch, chunks, sink);
    probe<2><<<60, 512, smem>>>(x, pitch, chunks, sink);
    probe<3><<<60, 512, smem>>>(b, 0, chunks, sink);
    cudaError_t e = cudaDeviceSynchronize();
    printf("done %s\n", cudaGetErrorString(e));
    printf("ideal sectors per launch: B modes %lld, x modes %lld\n", 60LL * chunks * 64 * 256 / 32,
           60LL * chunks * 64 * 64 / 32);
    cudaFree(x), cudaFree(b), cudaFree(sink);
    return e == cudaSuccess ? 0 : 1;
}
