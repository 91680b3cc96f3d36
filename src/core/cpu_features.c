/*
 * cpu_features.c — which SIMD features this CPU has AND the OS lets us use.
 *
 * CPUID says what the silicon implements; XGETBV(0) says which register state the OS
 * saves on a context switch. AVX/AVX2/FMA/F16C need the XMM and YMM state (XCR0 bits 1,2),
 * AVX-512 additionally the opmask and ZMM state (bits 5,6,7). Without the OS check an
 * AVX2 kernel could fault or corrupt registers on a kernel that does not save YMM.
 * The result is computed once (pthread_once) and is the library's only global.
 */
#include <pthread.h>

#include "ssmi.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#define SSMI_X86 1
#else
#define SSMI_X86 0
#endif

#if SSMI_X86
/* CPUID leaf 1, ECX */
#define SSMI_CPUID1_FMA     (1u << 12)
#define SSMI_CPUID1_OSXSAVE (1u << 27)
#define SSMI_CPUID1_AVX     (1u << 28)
#define SSMI_CPUID1_F16C    (1u << 29)
/* CPUID leaf 7 subleaf 0, EBX */
#define SSMI_CPUID7_AVX2    (1u << 5)
#define SSMI_CPUID7_AVX512F  (1u << 16)
#define SSMI_CPUID7_AVX512DQ (1u << 17)
#define SSMI_CPUID7_AVX512BW (1u << 30)
#define SSMI_CPUID7_AVX512VL (1u << 31)
/* XCR0 */
#define SSMI_XCR0_YMM       0x06u /* SSE + AVX state          */
#define SSMI_XCR0_ZMM       0xe6u /* + opmask, ZMM_Hi256, Hi16_ZMM */

static uint64_t ssmi_xgetbv0(void) {
    uint32_t eax, edx;
    /* The xgetbv opcode, spelled out so no -mxsave flag is needed. */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

static uint32_t ssmi_detect_features(void) {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    const unsigned ecx1 = ecx;
    if (!(ecx1 & SSMI_CPUID1_OSXSAVE) || !(ecx1 & SSMI_CPUID1_AVX)) return 0;
    const uint64_t xcr0 = ssmi_xgetbv0();
    if ((xcr0 & SSMI_XCR0_YMM) != SSMI_XCR0_YMM) return 0;

    uint32_t features = 0;
    if (ecx1 & SSMI_CPUID1_FMA) features |= SSM_CPU_FMA;
    if (ecx1 & SSMI_CPUID1_F16C) features |= SSM_CPU_F16C;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, eax, ebx, ecx, edx);
        if (ebx & SSMI_CPUID7_AVX2) features |= SSM_CPU_AVX2;
        if ((xcr0 & SSMI_XCR0_ZMM) == SSMI_XCR0_ZMM) { /* AVX-512 only with the ZMM state saved */
            if (ebx & SSMI_CPUID7_AVX512F) features |= SSM_CPU_AVX512F;
            if (ebx & SSMI_CPUID7_AVX512BW) features |= SSM_CPU_AVX512BW;
            if (ebx & SSMI_CPUID7_AVX512DQ) features |= SSM_CPU_AVX512DQ;
            if (ebx & SSMI_CPUID7_AVX512VL) features |= SSM_CPU_AVX512VL;
        }
    }
    return features;
}
#else
static uint32_t ssmi_detect_features(void) { return 0; }
#endif

static uint32_t       ssmi_features_value = 0;
static pthread_once_t ssmi_features_once = PTHREAD_ONCE_INIT;
static void           ssmi_features_init(void) { ssmi_features_value = ssmi_detect_features(); }

uint32_t ssmi_cpu_features(void) {
    pthread_once(&ssmi_features_once, ssmi_features_init);
    return ssmi_features_value;
}

SSM_API uint32_t ssm_cpu_features(void) { return ssmi_cpu_features(); }

ssm_isa ssmi_best_isa(uint32_t features) {
    /* The AVX2 kernels use FMA for every product-sum and F16C for half loads; the AVX-512
     * ISA runs the AVX2 kernels where it has no kernel of its own, so it needs their set
     * too, and its kernels use BW/DQ/VL (16-bit lanes, masks on 256-bit registers). */
    const uint32_t avx2   = SSM_CPU_AVX2 | SSM_CPU_FMA | SSM_CPU_F16C;
    const uint32_t avx512 = avx2 | SSM_CPU_AVX512F | SSM_CPU_AVX512BW | SSM_CPU_AVX512DQ | SSM_CPU_AVX512VL;
    if ((features & avx512) == avx512) return SSM_ISA_AVX512;
    return (features & avx2) == avx2 ? SSM_ISA_AVX2 : SSM_ISA_SCALAR;
}
