/* k3_products.cu — the SISO backward gradient kernel's A2 products on their own, in the present form
 * (mma.sync m16n8k16 over padded bf16 planes, tile_mma: 16 warps, a warp per 16 x 16 tile of dq̂ and
 * dk̂) and in the form siso-bwd-design §12 plans for K3 (wgmma m64n32k16 over 128-byte swizzled
 * atoms: 4 warpgroups, each owning 32 of the 128 K columns for all 64 tokens). Developer tool, not part
 * of the library; it decides whether the K3 rewrite's products are worth its layout changes.
 *
 *   nvcc -O3 -arch=sm_90a -std=c++17 -I src/cuda/common gpu/k3_products.cu -o k3_products && ./k3_products
 *
 * Per item (one (chunk, head) at C = 64, K = 128, V = 64), as the gradient kernel forms them:
 *   dq̂ = dY·S_c + Es·K̂        dk̂ = V·dS + Esᵀ·Q̂
 * dY, S_c, dS, Es, K̂, Q̂ as split planes (rounded + remainder: three products each, lo·lo dropped), V
 * exact in one plane (two products). Es is strictly lower triangular, as in the kernel; the present
 * form skips its zero k-steps (the kernel's bounds), the wgmma form multiplies all of them.
 * A block loads one item into shared memory and repeats its products `reps` times (the data stays
 * in shared memory: the products alone are timed), 128 blocks x 64 repetitions = the shape of
 * record's 8192 items. Output: both forms checked against a float64 reference of the same split
 * products (item 0), then the time of each kernel (cudaEvent, median of 5) and their ratio.
 * Exit code: 0 when both forms match, 1 otherwise, 2 without an sm_90 device.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "mma.cuh"
#include "wgmma.cuh"

#include "probe_check.cuh"

using ssmi_mma::bf16;

enum { C = 64, K = 128, V = 64, LK = K + 8, LV = V + 8, LC = C + 8, kThreads = 512 };

/* The host's operands (float values of the planes) and the device copies (bf16 bits). */
struct planes {
    float dyh[C * V], dyl[C * V], v[C * V], sh[V * K], sl[V * K], dh[V * K], dl[V * K];
    float esh[C * C], esl[C * C], kh[C * K], kl[C * K], qh[C * K], ql[C * K];
};
enum { kPlanes = 13 };
static float * plane_ptr(planes & p, int i) {
    float * const t[kPlanes] = {p.dyh, p.dyl, p.v, p.sh, p.sl, p.dh, p.dl, p.esh, p.esl, p.kh, p.kl, p.qh, p.ql};
    return t[i];
}
static const int kRows[kPlanes] = {C, C, C, V, V, V, V, C, C, C, C, C, C};
static const int kCols[kPlanes] = {V, V, V, K, K, K, K, C, C, K, K, K, K};

/* ---- the present form: padded planes, tile_mma per 16 x 16 tile (bwd_chunk_planes.cu's A2 jobs) ---- */
struct pad_smem {
    bf16 *dyh, *dyl, *v, *sh, *sl, *dh, *dl, *esh, *esl, *kh, *kl, *qh, *ql;
};
__device__ pad_smem carve_pad(unsigned char * sm) {
    pad_smem s;
    bf16 *   p = (bf16 *)sm;
    s.dyh = p, p += C * LV, s.dyl = p, p += C * LV, s.v = p, p += C * LV;
    s.sh = p, p += V * LK, s.sl = p, p += V * LK, s.dh = p, p += V * LK, s.dl = p, p += V * LK;
    s.esh = p, p += C * LC, s.esl = p, p += C * LC;
    s.kh = p, p += C * LK, s.kl = p, p += C * LK, s.qh = p, p += C * LK, s.ql = p;
    return s;
}
const int kPadBytes = 2 * (3 * C * LV + 4 * V * LK + 2 * C * LC + 4 * C * LK);

__global__ void __launch_bounds__(kThreads, 1)
    mmasync_kernel(const uint16_t * const * in, float * dq, float * dk, int reps) {
    extern __shared__ float4 sm4[];
    const pad_smem s = carve_pad((unsigned char *)sm4);
    bf16 * const   dst[kPlanes] = {s.dyh, s.dyl, s.v, s.sh, s.sl, s.dh, s.dl, s.esh, s.esl, s.kh, s.kl, s.qh, s.ql};
    const int      ld[kPlanes] = {LV, LV, LV, LK, LK, LK, LK, LC, LC, LK, LK, LK, LK};
    const int      rows[kPlanes] = {C, C, C, V, V, V, V, C, C, C, C, C, C};
    const int      cols[kPlanes] = {V, V, V, K, K, K, K, C, C, K, K, K, K};
    for (int p = 0; p < kPlanes; ++p)
        for (int e = threadIdx.x; e < rows[p] * cols[p]; e += blockDim.x) {
            const uint16_t b = in[p][e];
            dst[p][(e / cols[p]) * ld[p] + e % cols[p]] = *reinterpret_cast<const bf16 *>(&b);
        }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g4 = lane >> 2, t4 = lane & 3;
    float     sq[2][2][4], sk[2][2][4]; /* the sums over the repetitions of the warp's two jobs */
    for (int j = 0; j < 2; ++j) ssmi_mma::zero_acc(sq[j]), ssmi_mma::zero_acc(sk[j]);
    for (int r = 0; r < reps; ++r)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int t = warp + 16 * j, m0 = (t / 8) * 16, c0 = (t % 8) * 16;
            float     c[2][4], ck[2][4];
            ssmi_mma::zero_acc(c), ssmi_mma::zero_acc(ck);
            ssmi_mma::tile_mma<false, true, true, true>(c, s.dyh, s.dyl, LV, s.sh, s.sl, LK, m0, c0, 0, V);
            ssmi_mma::tile_mma<false, true, false, true>(ck, s.v, s.v, LV, s.dh, s.dl, LK, m0, c0, 0, V);
            ssmi_mma::tile_mma<false, true, true, true>(c, s.esh, s.esl, LC, s.kh, s.kl, LK, m0, c0, 0, m0 + 16);
            ssmi_mma::tile_mma<true, true, true, true>(ck, s.esh, s.esl, LC, s.qh, s.ql, LK, m0, c0, m0, C);
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
                for (int e = 0; e < 4; ++e) sq[j][a][e] += c[a][e], sk[j][a][e] += ck[a][e];
        }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int t = warp + 16 * j, m0 = (t / 8) * 16, c0 = (t % 8) * 16;
        if (blockIdx.x != 0) break;
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = m0 + g4 + 8 * (e >> 1), n = c0 + 8 * a + 2 * t4 + (e & 1);
                dq[i * K + n] = sq[j][a][e] / (float)reps, dk[i * K + n] = sk[j][a][e] / (float)reps;
            }
    }
}

/* ---- the K3 form: 128-byte swizzled atoms (wgmma.cuh), m64n32k16 per warpgroup slice ---- */
/* Atom offsets (bytes from the 1024-aligned base): dY hi/lo, V, then S_c, dS, K̂, Q̂ hi/lo (two atoms each:
 * columns 0-63, 64-127), Es hi/lo. */
enum { kADyh = 0, kADyl = 1, kAV = 2, kASh = 3, kASl = 5, kADh = 7, kADl = 9, kAKh = 11, kAKl = 13, kAQh = 15,
       kAQl = 17, kAEsh = 19, kAEsl = 20, kAtoms = 21 };
const int kSwzBytes = kAtoms * ssmi_wg::kAtomBytes + 1024;

__global__ void __launch_bounds__(kThreads, 1)
    wgmma_kernel(const uint16_t * const * in, float * dq, float * dk, int reps) {
    extern __shared__ unsigned char raw[];
    const unsigned  rawaddr = (unsigned)__cvta_generic_to_shared(raw);
    unsigned char * sm = raw + (((rawaddr + 1023u) & ~1023u) - rawaddr);
    const unsigned  base = (unsigned)__cvta_generic_to_shared(sm);
    const int       atom[kPlanes] = {kADyh, kADyl, kAV, kASh, kASl, kADh, kADl, kAEsh, kAEsl, kAKh, kAKl, kAQh, kAQl};
    const int       rows[kPlanes] = {C, C, C, V, V, V, V, C, C, C, C, C, C};
    const int       cols[kPlanes] = {V, V, V, K, K, K, K, C, C, K, K, K, K};
    for (int p = 0; p < kPlanes; ++p)
        for (int e = threadIdx.x; e < rows[p] * cols[p]; e += blockDim.x)
            *(uint16_t *)(sm + atom[p] * ssmi_wg::kAtomBytes + ssmi_wg::swz_off(e / cols[p], e % cols[p])) = in[p][e];
    ssmi_wg::fence_proxy_async();
    __syncthreads();
    const int      wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const unsigned slice = (unsigned)((wg >> 1) * ssmi_wg::kAtomBytes + (wg & 1) * 64); /* columns 32·wg.. */
    const auto     at = [&](int a) { return base + (unsigned)a * ssmi_wg::kAtomBytes; };
    float          q[4][4], kk[4][4];
#pragma unroll
    for (int t = 0; t < 4; ++t) q[t][0] = q[t][1] = q[t][2] = q[t][3] = kk[t][0] = kk[t][1] = kk[t][2] = kk[t][3] = 0.0f;
    for (int r = 0; r < reps; ++r) {
        ssmi_wg::fence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const unsigned kK = (unsigned)ks * 32, kMN = (unsigned)ks * 2048; /* K-major, MN-major k-steps */
            using namespace ssmi_wg;
            mma_ss_n32<true, 0, 1>(q, desc_k(at(kADyh) + kK), desc_mn(at(kASh) + slice + kMN));
            mma_ss_n32<true, 0, 1>(q, desc_k(at(kADyh) + kK), desc_mn(at(kASl) + slice + kMN));
            mma_ss_n32<true, 0, 1>(q, desc_k(at(kADyl) + kK), desc_mn(at(kASh) + slice + kMN));
            mma_ss_n32<true, 0, 1>(q, desc_k(at(kAEsh) + kK), desc_mn(at(kAKh) + slice + kMN));
            mma_ss_n32<true, 0, 1>(q, desc_k(at(kAEsh) + kK), desc_mn(at(kAKl) + slice + kMN));
            mma_ss_n32<true, 0, 1>(q, desc_k(at(kAEsl) + kK), desc_mn(at(kAKh) + slice + kMN));
            mma_ss_n32<true, 0, 1>(kk, desc_k(at(kAV) + kK), desc_mn(at(kADh) + slice + kMN));
            mma_ss_n32<true, 0, 1>(kk, desc_k(at(kAV) + kK), desc_mn(at(kADl) + slice + kMN));
            mma_ss_n32<true, 1, 1>(kk, desc_mn(at(kAEsh) + kMN), desc_mn(at(kAQh) + slice + kMN));
            mma_ss_n32<true, 1, 1>(kk, desc_mn(at(kAEsh) + kMN), desc_mn(at(kAQl) + slice + kMN));
            mma_ss_n32<true, 1, 1>(kk, desc_mn(at(kAEsl) + kMN), desc_mn(at(kAQh) + slice + kMN));
        }
        ssmi_wg::commit();
        ssmi_wg::wait<0>();
        ssmi_wg::keep(q), ssmi_wg::keep(kk);
    }
    if (blockIdx.x != 0) return;
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = warp * 16 + g + 8 * (e >> 1), n = 32 * wg + 8 * t + 2 * c + (e & 1);
            dq[i * K + n] = q[t][e] / (float)reps, dk[i * K + n] = kk[t][e] / (float)reps;
        }
}

/* ---- host ---- */
static float pick(unsigned * s) { /* uniform in [-1, 1) */
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}
static uint16_t bf16_bits(float v) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &v, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf16_val(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float          v;
    memcpy(&v, &u, 4);
    return v;
}
/* x into a rounded and a remainder plane (split2's values) */
static void split(float x, float * h, float * l) {
    *h = bf16_val(bf16_bits(x));
    *l = bf16_val(bf16_bits(x - *h));
}

int main() {
    if (probe_sm90("k3_products") != 0) return 2;
    static planes P;
    unsigned      seed = 2026u;
    for (int i = 0; i < C * V; ++i) split(pick(&seed), &P.dyh[i], &P.dyl[i]), P.v[i] = bf16_val(bf16_bits(pick(&seed)));
    for (int i = 0; i < V * K; ++i) split(pick(&seed), &P.sh[i], &P.sl[i]), split(pick(&seed), &P.dh[i], &P.dl[i]);
    for (int i = 0; i < C * K; ++i) split(pick(&seed), &P.kh[i], &P.kl[i]), split(pick(&seed), &P.qh[i], &P.ql[i]);
    for (int i = 0; i < C; ++i) /* Es strictly lower triangular */
        for (int j = 0; j < C; ++j) {
            const float x = j < i ? pick(&seed) : 0.0f;
            split(x, &P.esh[i * C + j], &P.esl[i * C + j]);
        }
    /* the float64 reference of the same split products (lo·lo dropped) */
    static double rq[C * K], rk[C * K];
    for (int i = 0; i < C; ++i)
        for (int n = 0; n < K; ++n) {
            double a = 0.0, b = 0.0;
            for (int r = 0; r < V; ++r) {
                a += (double)P.dyh[i * V + r] * (P.sh[r * K + n] + (double)P.sl[r * K + n]) +
                     (double)P.dyl[i * V + r] * P.sh[r * K + n];
                b += (double)P.v[i * V + r] * (P.dh[r * K + n] + (double)P.dl[r * K + n]);
            }
            for (int j = 0; j < C; ++j) {
                a += (double)P.esh[i * C + j] * (P.kh[j * K + n] + (double)P.kl[j * K + n]) +
                     (double)P.esl[i * C + j] * P.kh[j * K + n];
                b += (double)P.esh[j * C + i] * (P.qh[j * K + n] + (double)P.ql[j * K + n]) +
                     (double)P.esl[j * C + i] * P.qh[j * K + n];
            }
            rq[i * K + n] = a, rk[i * K + n] = b;
        }
    uint16_t * dev[kPlanes];
    for (int p = 0; p < kPlanes; ++p) {
        const int n = kRows[p] * kCols[p];
        uint16_t *h = (uint16_t *)malloc(sizeof(uint16_t) * n), *d = NULL;
        for (int e = 0; e < n; ++e) h[e] = bf16_bits(plane_ptr(P, p)[e]);
        CK(cudaMalloc(&d, sizeof(uint16_t) * n));
        CK(cudaMemcpy(d, h, sizeof(uint16_t) * n, cudaMemcpyHostToDevice));
        free(h);
        dev[p] = d;
    }
    uint16_t ** din = NULL;
    float *     dq = NULL, *dk = NULL;
    CK(cudaMalloc(&din, sizeof dev));
    CK(cudaMemcpy(din, dev, sizeof dev, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dq, sizeof(float) * C * K));
    CK(cudaMalloc(&dk, sizeof(float) * C * K));
    CK(cudaFuncSetAttribute(mmasync_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kPadBytes));
    CK(cudaFuncSetAttribute(wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSwzBytes));
    const int    blocks = 128, reps = 64;
    const char * names[2] = {"mma.sync (present A2 tiles)", "wgmma m64n32k16 (K3 slices)"};
    float        ms[2] = {0.0f, 0.0f};
    int          fails = 0;
    static float hq[C * K], hk[C * K];
    for (int f = 0; f < 2; ++f) {
        const auto launch = [&](int nb, int nr) {
            if (f == 0)
                mmasync_kernel<<<nb, kThreads, kPadBytes>>>(din, dq, dk, nr);
            else
                wgmma_kernel<<<nb, kThreads, kSwzBytes>>>(din, dq, dk, nr);
        };
        CK(cudaMemset(dq, 0xFF, sizeof(float) * C * K));
        CK(cudaMemset(dk, 0xFF, sizeof(float) * C * K));
        launch(1, 1);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hq, dq, sizeof hq, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hk, dk, sizeof hk, cudaMemcpyDeviceToHost));
        double err = 0.0, scale = 0.0;
        for (int e = 0; e < C * K; ++e) {
            scale = std::max(scale, std::max(fabs(rq[e]), fabs(rk[e])));
            const double d1 = fabs(hq[e] - rq[e]), d2 = fabs(hk[e] - rk[e]);
            err = d1 > err || d1 != d1 ? d1 : err;
            err = d2 > err || d2 != d2 ? d2 : err;
        }
        const bool ok = err <= 1e-5 * scale;
        fails += !ok;
        printf("k3_products %s: %s max_abs_err=%.3g (scale %.3g)\n", names[f], ok ? "PASS" : "FAIL", err, scale);
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        float t[5];
        launch(blocks, reps); /* warm-up */
        for (int k = 0; k < 5; ++k) {
            CK(cudaEventRecord(e0));
            launch(blocks, reps);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&t[k], e0, e1));
        }
        std::sort(t, t + 5);
        ms[f] = t[2];
        printf("k3_products %s: %.1f us for %d items (median of 5; %.0f ns per item)\n", names[f], 1e3 * ms[f],
               blocks * reps, 1e6 * ms[f] / (blocks * reps));
    }
    printf("k3_products ratio mma.sync / wgmma = %.2f; %s\n", ms[0] / ms[1], fails ? "FAILED" : "both match");
    for (int p = 0; p < kPlanes; ++p) cudaFree(dev[p]);
    cudaFree(din), cudaFree(dq), cudaFree(dk);
    return fails ? 1 : 0;
}
