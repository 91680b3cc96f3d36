/* tma_probe.cu — checks, on the GPU, the Hopper TMA pieces a TMA copy path of the scan / SISO
 * kernels would use (no kernel uses TMA yet): the driver entry point cuTensorMapEncodeTiled reached
 * through the runtime (no libcuda link), 2-D and 4-D tensor maps of 16-bit elements with 128-byte
 * swizzle, one cp.async.bulk.tensor copy per 64-column x 64-row box completed on an mbarrier, and
 * the landing layout against ssmi_wg::swz_off (the layout the wgmma descriptors of
 * src/cuda/common/wgmma.cuh expect), plus the zero fill of rows past the tensor's end.
 *
 *   nvcc -O2 -arch=sm_90a -I src/cuda/common gpu/tma_probe.cu -o tma_probe && ./tma_probe
 *
 * Cases (every element a distinct 16-bit pattern, so a layout error shows as a mismatch):
 *   2d        tensor (rows 300, cols 128) row-major; boxes at (row 0, col 0), (row 64, col 64)
 *   2d_tail   the box at row 256: rows 300.. must land as zeros (the out-of-bounds fill)
 *   4d        the scan's C / B layout (B=2, S=300, G=3, N=128; strides G·N, N, 1 elements) read as
 *             dims (N, G, S, B) with box (64, 1, 64, 1) at (n 64, g 1, s 128, b 1)
 * One line per case: "probe <case> PASS|FAIL mismatches=... first=(row, col) got/want".
 * Exit code: 0 when every case passes; 2 without an sm_90 device; 1 otherwise.
 */
#include <cuda.h> /* CUtensorMap and the driver enums only: the function comes from the runtime */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wgmma.cuh"

#include "probe_check.cuh"

typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                              const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

enum { kBox = 64, kBoxBytes = kBox * kBox * 2 };

/* One box of 64 x 64 16-bit elements into a 1024-aligned shared buffer by one thread, completion
 * on an mbarrier, then the whole block copies the bytes out (raw, as they landed) to `out`. */
__global__ void __launch_bounds__(128) tma_kernel(const __grid_constant__ CUtensorMap map, int rank, int c0, int c1,
                                                  int c2, int c3, uint16_t * out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ unsigned char raw[];
    const unsigned  rawaddr = (unsigned)__cvta_generic_to_shared(raw);
    unsigned char * sm = raw + (((rawaddr + 1023u) & ~1023u) - rawaddr);
    __shared__ __align__(8) uint64_t bar;
    const unsigned sdst = (unsigned)__cvta_generic_to_shared(sm), sbar = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(sbar) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(sbar), "r"(kBoxBytes)
                     : "memory");
        if (rank == 2)
            asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                         "%3}], [%4];\n" ::"r"(sdst),
                         "l"(&map), "r"(c0), "r"(c1), "r"(sbar)
                         : "memory");
        else
            asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                         "%3, %4, %5}], [%6];\n" ::"r"(sdst),
                         "l"(&map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(sbar)
                         : "memory");
    }
    /* every thread waits for phase 0 of the barrier */
    unsigned done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(sbar), "r"(0u)
                     : "memory");
    for (int i = threadIdx.x; i < kBoxBytes / 2; i += blockDim.x) out[i] = reinterpret_cast<const uint16_t *>(sm)[i];
#else
    (void)rank, (void)c0, (void)c1, (void)c2, (void)c3, (void)out;
#endif
}

/* The element that should land at (row, col) of the box, or 0 past the tensor's end. */
typedef uint16_t (*want_fn)(int row, int col, const void * ctx);

static int check(const char * name, const uint16_t * got, want_fn want, const void * ctx) {
    int mism = 0, fr = -1, fc = -1;
    uint16_t fg = 0, fw = 0;
    for (int r = 0; r < kBox; ++r)
        for (int c = 0; c < kBox; ++c) {
            const uint16_t g = got[ssmi_wg::swz_off(r, c) / 2], w = want(r, c, ctx);
            if (g != w) {
                if (mism == 0) fr = r, fc = c, fg = g, fw = w;
                ++mism;
            }
        }
    if (mism == 0)
        printf("probe %s PASS\n", name);
    else
        printf("probe %s FAIL mismatches=%d first=(%d, %d) got 0x%04x want 0x%04x\n", name, mism, fr, fc, fg, fw);
    return mism == 0;
}

struct ctx2 {
    int rows, cols, r0, c0;
};
static uint16_t pattern(long long i) { return (uint16_t)(1u + (unsigned)(i * 2654435761u >> 16) % 65000u); }
static uint16_t want2(int r, int c, const void * p) {
    const ctx2 * x = (const ctx2 *)p;
    const int    gr = x->r0 + r, gc = x->c0 + c;
    return gr < x->rows && gc < x->cols ? pattern((long long)gr * x->cols + gc) : 0;
}
struct ctx4 {
    int B, S, G, N, n0, g0, s0, b0;
};
static uint16_t want4(int r, int c, const void * p) {
    const ctx4 * x = (const ctx4 *)p;
    const int    s = x->s0 + r, n = x->n0 + c;
    if (s >= x->S || n >= x->N) return 0;
    return pattern((((long long)x->b0 * x->S + s) * x->G + x->g0) * x->N + n);
}

int main() {
    if (probe_sm90("probe") != 0) return 2;
    void *                          fn = NULL;
    cudaDriverEntryPointQueryResult q;
    /* the ABI of cuTensorMapEncodeTiled as of CUDA 12.0 (the version the typedef above follows) */
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (fn == NULL || q != cudaDriverEntryPointSuccess) {
        printf("probe cuTensorMapEncodeTiled not found (query result %d)\n", (int)q);
        return 1;
    }
    const encode_fn encode = (encode_fn)fn;
    const int       smem = kBoxBytes + 1024;
    CK(cudaFuncSetAttribute(tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    uint16_t *dout, host[kBoxBytes / 2];
    CK(cudaMalloc(&dout, kBoxBytes));
    int ok = 1;

    /* 2-D: rows x cols row-major */
    {
        const int rows = 300, cols = 128;
        uint16_t *h = (uint16_t *)malloc(sizeof(uint16_t) * rows * cols), *d;
        for (long long i = 0; i < (long long)rows * cols; ++i) h[i] = pattern(i);
        CK(cudaMalloc(&d, sizeof(uint16_t) * rows * cols));
        CK(cudaMemcpy(d, h, sizeof(uint16_t) * rows * cols, cudaMemcpyHostToDevice));
        CUtensorMap      map;
        const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)cols * 2};
        const cuuint32_t box[2] = {kBox, kBox}, estr[2] = {1, 1};
        const CUresult   r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, d, dims, strides, box, estr,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) {
            printf("probe 2d encode FAIL (CUresult %d)\n", (int)r);
            ok = 0;
        } else {
            const int  at[3][2] = {{0, 0}, {64, 64}, {256, 0}};
            const char * names[3] = {"2d", "2d_b", "2d_tail"};
            for (int k = 0; k < 3; ++k) {
                CK(cudaMemset(dout, 0xff, kBoxBytes));
                tma_kernel<<<1, 128, smem>>>(map, 2, at[k][1], at[k][0], 0, 0, dout);
                CK(cudaGetLastError());
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(host, dout, kBoxBytes, cudaMemcpyDeviceToHost));
                const ctx2 c = {rows, cols, at[k][0], at[k][1]};
                ok &= check(names[k], host, want2, &c);
            }
        }
        CK(cudaFree(d));
        free(h);
    }
    /* 4-D: (B, S, G, N) as dims (N, G, S, B) */
    {
        const int  B = 2, S = 300, G = 3, N = 128;
        const long long n = (long long)B * S * G * N;
        uint16_t * h = (uint16_t *)malloc(sizeof(uint16_t) * n), *d;
        for (long long i = 0; i < n; ++i) h[i] = pattern(i);
        CK(cudaMalloc(&d, sizeof(uint16_t) * n));
        CK(cudaMemcpy(d, h, sizeof(uint16_t) * n, cudaMemcpyHostToDevice));
        CUtensorMap      map;
        const cuuint64_t dims[4] = {(cuuint64_t)N, (cuuint64_t)G, (cuuint64_t)S, (cuuint64_t)B};
        const cuuint64_t strides[3] = {(cuuint64_t)N * 2, (cuuint64_t)G * N * 2, (cuuint64_t)S * G * N * 2};
        const cuuint32_t box[4] = {kBox, 1, kBox, 1}, estr[4] = {1, 1, 1, 1};
        const CUresult   r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, d, dims, strides, box, estr,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) {
            printf("probe 4d encode FAIL (CUresult %d)\n", (int)r);
            ok = 0;
        } else {
            const ctx4 c = {B, S, G, N, 64, 1, 128, 1};
            CK(cudaMemset(dout, 0xff, kBoxBytes));
            tma_kernel<<<1, 128, smem>>>(map, 4, c.n0, c.g0, c.s0, c.b0, dout);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(host, dout, kBoxBytes, cudaMemcpyDeviceToHost));
            ok &= check("4d", host, want4, &c);
            const ctx4 t = {B, S, G, N, 0, 2, 256, 0}; /* rows 300.. of sequence 0: zero */
            CK(cudaMemset(dout, 0xff, kBoxBytes));
            tma_kernel<<<1, 128, smem>>>(map, 4, t.n0, t.g0, t.s0, t.b0, dout);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(host, dout, kBoxBytes, cudaMemcpyDeviceToHost));
            ok &= check("4d_tail", host, want4, &t);
        }
        CK(cudaFree(d));
        free(h);
    }
    CK(cudaFree(dout));
    printf("probe %s\n", ok ? "ALL PASS" : "SOME FAILED");
    return ok ? 0 : 1;
}
