/* probe_check.cuh — the CUDA error check and device query of the developer probes (gpu/wgmma_probe.cu,
 * gpu/tma_probe.cu): print the failing call and exit 1. Not part of the library. */
#ifndef SSMOPS_GPU_PROBE_CHECK_CUH
#define SSMOPS_GPU_PROBE_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            printf("probe cuda error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* The current device's compute capability; 0, or 2 (printed) where there is no CUDA device. */
static inline int probe_device(int * major, int * minor) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        printf("probe no CUDA device\n");
        return 2;
    }
    CK(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, dev));
    CK(cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, dev));
    return 0;
}

/* 0 where the current device is sm_90 (wgmma and TMA are sm_90a only); else 2, with a line saying why
 * (who: the tool's name in that line). */
static inline int probe_sm90(const char * who) {
    int major = 0, minor = 0;
    if (probe_device(&major, &minor) != 0) return 2;
    if (major != 9 || minor != 0) {
        printf("%s needs an sm_90 device (this one is sm_%d%d)\n", who, major, minor);
        return 2;
    }
    return 0;
}

#endif
