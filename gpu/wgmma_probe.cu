/* wgmma_probe.cu — checks the wgmma pieces of src/cuda/common/wgmma.cuh on the GPU before any
 * kernel uses them: the 128-byte swizzled layout (swz_off), the descriptor constants (SSMI_WG_K_* for K-major
 * operands, SSMI_WG_MN_* for MN-major ones), the m64n64k16 wrappers in both forms and the register
 * fragments of A and D.
 *
 *   nvcc -O2 -arch=sm_90a -I src/cuda/common gpu/wgmma_probe.cu -o wgmma_probe && ./wgmma_probe
 *
 * Cases (one warpgroup, exact small-integer data, so every result must match to the last bit):
 *   ss_<t>  D(64x64) = A(64x128) · B(64x128)ᵀ, A and B K-major in shared memory (two atoms along K,
 *           k-steps 0-7), wgmma SS form, imm-trans-b 0                      (the kernel's C·Sᵀ, C·Bᵀ)
 *   rs_<t>  D(64x64) = R(64x64) · X(64x64), R from registers in the A fragment layout, X MN-major
 *           (token rows of 64 p), wgmma RS form, imm-trans-b 1               (the kernel's scores·x)
 *   ss_mn_<t> D(64x64) = R(64x64) · X(64x64), R K-major in shared memory (one atom, k-steps 0-3, the
 *           primary SSMI_WG_K constants), X MN-major as above, wgmma SS form, imm-trans-b 1
 *           (the scan's wgmma state kernel: (w∘x)ᵀ K-major times the B tile MN-major; its
 *           alternatives vary the MN-major pair)
 *   ss_mn32_<t> ss_mn's product as two m64n32k16 halves, X's columns 0-31 and 32-63 (the second B
 *           slice starts 64 bytes into the atom's rows)              (the SISO backward's K slices)
 *   ss_tmn32_<t> D(64x64) = Xᵀ · X in two m64n32k16 halves, A = X MN-major read transposed
 *           (imm-trans-a 1), B = X's 32-column slices             (Esᵀ·Q̂ of the SISO backward)
 * for t = bf16 and f16. One line per case: "probe <case> PASS|FAIL max_abs_err=... lbo=... sbo=...".
 * When a case fails with the primary constants, the alternatives of its operand kind are tried and
 * each prints a line "probe <case> alt lbo=.. sbo=.. PASS|FAIL ..."; then rebuild with
 * -DSSMI_WG_K_LBO=.. (etc.) set to the passing pair. A few mismatching elements are printed too, and
 * whether D equals the transposed product (a trans-b / layout mix-up).
 * Exit code: 0 only when all primary cases pass; 2 when no sm_90 device; 1 otherwise.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wgmma.cuh"

#include "probe_check.cuh"

enum { M = 64, NN = 64, KA = 128, KR = 64 };
const int kSmemA = 0, kSmemB = 2 * ssmi_wg::kAtomBytes, kSmemX = 4 * ssmi_wg::kAtomBytes;
const int kSmemR = 5 * ssmi_wg::kAtomBytes;            /* R K-major (ss_mn)                  */
const int kSmemBytes = 6 * ssmi_wg::kAtomBytes + 1024; /* + room to align the base to 1024 */

/* which: 0 = SS (A·Bᵀ), 1 = RS (R·X), 2 = SS (R·X, R K-major, X MN-major), 3 = 2 by m64n32 halves, 4 = Xᵀ·X by
 * m64n32 halves (A MN-major). a: A (M x KA) row-major, b: B (NN x KA) row-major,
 * r: R (M x KR) row-major, x: X (KR x NN) row-major (p contiguous), all 16-bit bit patterns. */
template <bool BF16>
__global__ void __launch_bounds__(128) probe_kernel(const uint16_t * a, const uint16_t * b, const uint16_t * r,
                                                    const uint16_t * x, float * d, int which, unsigned lbo,
                                                    unsigned sbo) {
    extern __shared__ unsigned char raw[];
    const unsigned rawaddr = (unsigned)__cvta_generic_to_shared(raw);
    unsigned char * sm = raw + (((rawaddr + 1023u) & ~1023u) - rawaddr);
    const unsigned  sbase = (unsigned)__cvta_generic_to_shared(sm);
    const int       tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* fill the swizzled tiles with plain stores */
    for (int i = tid; i < M * KA; i += 128) {
        const int row = i / KA, col = i % KA;
        *(uint16_t *)(sm + kSmemA + ssmi_wg::swz_off(row, col)) = a[i];
        *(uint16_t *)(sm + kSmemB + ssmi_wg::swz_off(row, col)) = b[i];
    }
    for (int i = tid; i < KR * NN; i += 128) {
        const int row = i / NN, col = i % NN; /* row = k (token), col = n (p) */
        *(uint16_t *)(sm + kSmemX + ssmi_wg::swz_off(row, col)) = x[i];
    }
    for (int i = tid; i < M * KR; i += 128) {
        const int row = i / KR, col = i % KR; /* row = m (p), col = k (token) */
        *(uint16_t *)(sm + kSmemR + ssmi_wg::swz_off(row, col)) = r[i];
    }
    ssmi_wg::fence_proxy_async();
    __syncthreads();

    float acc[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    const int g = lane >> 2, c = lane & 3, row0 = warp * 16 + g;
    if (which == 0) {
        ssmi_wg::fence();
#pragma unroll
        for (int ks = 0; ks < KA / 16; ++ks) {
            const unsigned koff = (unsigned)((ks >> 2) * ssmi_wg::kAtomBytes + (ks & 3) * 32);
            ssmi_wg::mma_ss<BF16, 0>(acc, ssmi_wg::desc(sbase + kSmemA + koff, lbo, sbo),
                                     ssmi_wg::desc(sbase + kSmemB + koff, lbo, sbo));
        }
        ssmi_wg::commit();
        ssmi_wg::wait<0>();
        ssmi_wg::keep(acc);
    } else if (which == 2) {
        ssmi_wg::fence();
#pragma unroll
        for (int ks = 0; ks < KR / 16; ++ks)
            ssmi_wg::mma_ss<BF16, 1>(acc, ssmi_wg::desc(sbase + kSmemR + ks * 32, SSMI_WG_K_LBO, SSMI_WG_K_SBO),
                                     ssmi_wg::desc(sbase + kSmemX + ks * 2048, lbo, sbo));
        ssmi_wg::commit();
        ssmi_wg::wait<0>();
        ssmi_wg::keep(acc);
    } else if (which >= 3) { /* two halves of 32 columns: acc[4h + t] holds half h's d[t] */
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float half[4][4];
#pragma unroll
            for (int t = 0; t < 4; ++t) half[t][0] = half[t][1] = half[t][2] = half[t][3] = 0.0f;
            ssmi_wg::fence();
#pragma unroll
            for (int ks = 0; ks < KR / 16; ++ks) {
                const uint64_t db = ssmi_wg::desc(sbase + kSmemX + 64 * h + ks * 2048, lbo, sbo);
                if (which == 3)
                    ssmi_wg::mma_ss_n32<BF16, 0, 1>(
                        half, ssmi_wg::desc(sbase + kSmemR + ks * 32, SSMI_WG_K_LBO, SSMI_WG_K_SBO), db);
                else
                    ssmi_wg::mma_ss_n32<BF16, 1, 1>(half, ssmi_wg::desc(sbase + kSmemX + ks * 2048, lbo, sbo), db);
            }
            ssmi_wg::commit();
            ssmi_wg::wait<0>();
            ssmi_wg::keep(half);
#pragma unroll
            for (int t = 0; t < 4; ++t)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[4 * h + t][e] = half[t][e];
        }
    } else {
        uint32_t af[KR / 16][4];
#pragma unroll
        for (int ks = 0; ks < KR / 16; ++ks) {
            const int k0 = ks * 16 + 2 * c;
            const uint16_t * r0 = r + row0 * KR, *r1 = r + (row0 + 8) * KR;
            af[ks][0] = (uint32_t)r0[k0] | ((uint32_t)r0[k0 + 1] << 16);
            af[ks][1] = (uint32_t)r1[k0] | ((uint32_t)r1[k0 + 1] << 16);
            af[ks][2] = (uint32_t)r0[k0 + 8] | ((uint32_t)r0[k0 + 9] << 16);
            af[ks][3] = (uint32_t)r1[k0 + 8] | ((uint32_t)r1[k0 + 9] << 16);
        }
        ssmi_wg::fence();
#pragma unroll
        for (int ks = 0; ks < KR / 16; ++ks)
            ssmi_wg::mma_rs<BF16, 1>(acc, af[ks], ssmi_wg::desc(sbase + kSmemX + ks * 2048, lbo, sbo));
        ssmi_wg::commit();
        ssmi_wg::wait<0>();
        ssmi_wg::keep(acc);
#pragma unroll
        for (int ks = 0; ks < KR / 16; ++ks) ssmi_wg::keep(af[ks]);
    }
    /* D fragment: d[t][e] = (row 16·warp + g + 8·(e/2), column 8t + 2c + e%2) */
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[(row0 + 8 * (e >> 1)) * NN + 8 * t + 2 * c + (e & 1)] = acc[t][e];
}

/* Small integers / 4 in [-2, 2]: exact in bf16 and f16, sums exact in f32. */
static float pick(unsigned * s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((int)((*s >> 16) % 17u) - 8) * 0.25f;
}
static uint16_t bits_of(float v, bool bf16) {
    if (bf16) {
        uint32_t u;
        memcpy(&u, &v, 4);
        return (uint16_t)(u >> 16); /* exact for these values */
    }
    __half_raw h = __half(v);
    return h.x;
}

struct pair_t {
    unsigned lbo, sbo;
};
static const pair_t kAltK[] = {{16, 1024}, {0, 1024}, {8192, 1024}, {1024, 16}, {1024, 1024}, {1024, 8192}, {16, 128}};
static const pair_t kAltMN[] = {{8192, 1024}, {1024, 8192}, {16, 1024}, {1024, 16}, {1024, 1024}, {0, 1024},
                                {2048, 1024}, {1024, 2048}, {128, 1024}};

struct data_t {
    float    a[M * KA], b[NN * KA], r[M * KR], x[KR * NN];
    double   ref_ss[M * NN], ref_rs[M * NN], ref_xx[M * NN];
    uint16_t ha[M * KA], hb[NN * KA], hr[M * KR], hx[KR * NN];
};

template <bool BF16>
static double run_case(data_t & D, int which, pair_t pr, float * got, uint16_t * da, uint16_t * db, uint16_t * dr,
                       uint16_t * dx, float * dd, const double * ref, double * tr_err) {
    CK(cudaMemset(dd, 0xFF, sizeof(float) * M * NN)); /* NaN: unwritten results show */
    probe_kernel<BF16><<<1, 128, kSmemBytes>>>(da, db, dr, dx, dd, which, pr.lbo, pr.sbo);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got, dd, sizeof(float) * M * NN, cudaMemcpyDeviceToHost));
    double err = 0.0, terr = 0.0;
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < NN; ++n) {
            const double e = fabs((double)got[m * NN + n] - ref[m * NN + n]);
            const double t = fabs((double)got[m * NN + n] - ref[n * NN + m]);
            err = e > err || e != e ? e : err; /* NaN sticks */
            terr = t > terr || t != t ? t : terr;
        }
    *tr_err = terr;
    return err;
}

template <bool BF16>
static int run_dtype(data_t & D, uint16_t * da, uint16_t * db, uint16_t * dr, uint16_t * dx, float * dd) {
    const char * tn = BF16 ? "bf16" : "f16";
    for (int i = 0; i < M * KA; ++i) D.ha[i] = bits_of(D.a[i], BF16), D.hb[i] = bits_of(D.b[i], BF16);
    for (int i = 0; i < M * KR; ++i) D.hr[i] = bits_of(D.r[i], BF16), D.hx[i] = bits_of(D.x[i], BF16);
    CK(cudaMemcpy(da, D.ha, sizeof D.ha, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, D.hb, sizeof D.hb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dr, D.hr, sizeof D.hr, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, D.hx, sizeof D.hx, cudaMemcpyHostToDevice));
    static float got[M * NN];
    int          fails = 0;
    static const char * const names[] = {"ss", "rs", "ss_mn", "ss_mn32", "ss_tmn32"};
    static const char * const kinds[] = {"K-major (SSMI_WG_K_LBO/SBO)", "MN-major (SSMI_WG_MN_LBO/SBO)",
                                         "K-major A, MN-major B (SSMI_WG_MN_LBO/SBO; SS form)",
                                         "ss_mn by m64n32k16 halves, the second B slice 64 bytes into the atom rows",
                                         "m64n32k16, A MN-major read transposed, B MN-major 32-column slices"};
    for (int which = 0; which < 5; ++which) {
        const char *   nm = names[which];
        const double * ref = which == 0 ? D.ref_ss : which == 4 ? D.ref_xx : D.ref_rs;
        const pair_t   prim = which == 0 ? pair_t{SSMI_WG_K_LBO, SSMI_WG_K_SBO} : pair_t{SSMI_WG_MN_LBO, SSMI_WG_MN_SBO};
        const char *   kind = kinds[which];
        double         terr = 0.0;
        const double   err = run_case<BF16>(D, which, prim, got, da, db, dr, dx, dd, ref, &terr);
        const bool     ok = err <= 1e-3;
        printf("probe %s_%s %s max_abs_err=%.3g lbo=%u sbo=%u (%s)\n", nm, tn,
               ok ? "PASS" : "FAIL", err, prim.lbo, prim.sbo, kind);
        if (ok) continue;
        ++fails;
        printf("probe %s_%s   transposed-product max_abs_err=%.3g%s\n", nm, tn, terr,
               terr <= 1e-3 ? " (D = the transpose: trans-b or the operand roles are swapped)" : "");
        int shown = 0;
        for (int i = 0; i < M * NN && shown < 6; ++i)
            if (!(fabs((double)got[i] - ref[i]) <= 1e-3)) {
                printf("probe %s_%s   mismatch m=%d n=%d got=%g want=%g\n", nm, tn, i / NN,
                       i % NN, got[i], ref[i]);
                ++shown;
            }
        const pair_t * alts = which == 0 ? kAltK : kAltMN;
        const int      nalt = which == 0 ? (int)(sizeof kAltK / sizeof kAltK[0]) : (int)(sizeof kAltMN / sizeof kAltMN[0]);
        int            found = 0;
        for (int k = 0; k < nalt; ++k) {
            if (alts[k].lbo == prim.lbo && alts[k].sbo == prim.sbo) continue;
            const double e = run_case<BF16>(D, which, alts[k], got, da, db, dr, dx, dd, ref, &terr);
            printf("probe %s_%s alt lbo=%u sbo=%u %s max_abs_err=%.3g\n", nm, tn, alts[k].lbo,
                   alts[k].sbo, e <= 1e-3 ? "PASS" : "FAIL", e);
            if (e <= 1e-3 && !found) {
                found = 1;
                printf("probe %s_%s => rebuild with -D%s_LBO=%u -D%s_SBO=%u\n", nm, tn,
                       which == 0 ? "SSMI_WG_K" : "SSMI_WG_MN", alts[k].lbo, which == 0 ? "SSMI_WG_K" : "SSMI_WG_MN",
                       alts[k].sbo);
            }
        }
        if (!found)
            printf("probe %s_%s => no descriptor pair passes: the swizzled layout, the k-step offsets or the "
                   "fragment layout is wrong (see the mismatches)\n",
                   nm, tn);
    }
    return fails;
}

int main() {
    if (probe_sm90("probe") != 0) return 2;
    printf("probe device sm_90; constants K lbo=%d sbo=%d, MN lbo=%d sbo=%d\n", SSMI_WG_K_LBO, SSMI_WG_K_SBO,
           SSMI_WG_MN_LBO, SSMI_WG_MN_SBO);
    CK(cudaFuncSetAttribute(probe_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    CK(cudaFuncSetAttribute(probe_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    static data_t D;
    unsigned      s = 12345u;
    for (int i = 0; i < M * KA; ++i) D.a[i] = pick(&s);
    for (int i = 0; i < NN * KA; ++i) D.b[i] = pick(&s);
    for (int i = 0; i < M * KR; ++i) D.r[i] = pick(&s);
    for (int i = 0; i < KR * NN; ++i) D.x[i] = pick(&s);
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < NN; ++n) {
            double s1 = 0.0, s2 = 0.0, s3 = 0.0;
            for (int k = 0; k < KA; ++k) s1 += (double)D.a[m * KA + k] * D.b[n * KA + k];
            for (int k = 0; k < KR; ++k) s2 += (double)D.r[m * KR + k] * D.x[k * NN + n];
            for (int k = 0; k < KR; ++k) s3 += (double)D.x[k * NN + m] * D.x[k * NN + n];
            D.ref_ss[m * NN + n] = s1, D.ref_rs[m * NN + n] = s2, D.ref_xx[m * NN + n] = s3;
        }
    uint16_t *da, *db, *dr, *dx;
    float *   dd;
    CK(cudaMalloc(&da, sizeof D.ha));
    CK(cudaMalloc(&db, sizeof D.hb));
    CK(cudaMalloc(&dr, sizeof D.hr));
    CK(cudaMalloc(&dx, sizeof D.hx));
    CK(cudaMalloc(&dd, sizeof(float) * M * NN));
    int fails = run_dtype<true>(D, da, db, dr, dx, dd);
    fails += run_dtype<false>(D, da, db, dr, dx, dd);
    printf("probe %s (%d primary case(s) failed)\n", fails ? "FAILED" : "ALL PASS", fails);
    cudaFree(da), cudaFree(db), cudaFree(dr), cudaFree(dx), cudaFree(dd);
    return fails ? 1 : 0;
}
