// gpu/membench.cu — what an in-place read-modify-write of a decode state pool can reach on
// this GPU, next to a plain device copy (the ceiling `ssmops bench --ceilings` reports).
// Developer tool, not part of the library: built and run by gpu/gpu_profile.sh.
//   nvcc -O3 -arch=sm_90 gpu/membench.cu -o membench && ./membench [MiB]
// Each kernel reads every 16-byte vector of the buffer once and writes it once (bytes moved =
// 2 x size), like mamba2_step on an fp32 pool updated in place.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                      \
    do {                                                                           \
        cudaError_t e_ = (x);                                                      \
        if (e_ != cudaSuccess) {                                                   \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));              \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

// U vectors per thread, all loaded before any is stored; one shot (no grid stride). SYNC: a
// __syncthreads between the loads and the stores, as the step kernels that stage B/C/dt there.
template <int U, bool STREAMING, bool SYNC = false>
__global__ void rmw_oneshot(float4 * p, long long nvec, float a, float b) {
    const long long base = (long long)blockIdx.x * blockDim.x * U + threadIdx.x;
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long i = base + (long long)u * blockDim.x;
        if (i < nvec) v[u] = STREAMING ? __ldcs(p + i) : p[i];
    }
    if (SYNC) __syncthreads();
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long i = base + (long long)u * blockDim.x;
        if (i >= nvec) continue;
        float4 r = v[u];
        r.x = fmaf(r.x, a, b), r.y = fmaf(r.y, a, b), r.z = fmaf(r.z, a, b), r.w = fmaf(r.w, a, b);
        if (STREAMING) __stcs(p + i, r); else p[i] = r;
    }
}

typedef void (*kern)(float4 *, long long, float, float);

// Median of `reps` event-timed runs of f() after 3 warm-up runs, in ms.
template <typename F> static float median_ms(F f, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int r = 0; r < reps + 3; ++r) {
        CK(cudaEventRecord(e0));
        f();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 3) t.push_back(ms);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static float time_it(kern k, int U, int threads, float4 * p, long long nvec, int reps) {
    const long long per_block = (long long)threads * U;
    const unsigned blocks = (unsigned)((nvec + per_block - 1) / per_block);
    return median_ms([&] { k<<<blocks, threads>>>(p, nvec, 1.0f, 0.0f); }, reps);
}

int main(int argc, char ** argv) {
    const long long mib = argc > 1 ? atoll(argv[1]) : 320;
    const long long bytes = mib << 20, nvec = bytes / 16;
    float4 *p = nullptr, *q = nullptr;
    CK(cudaMalloc(&p, bytes));
    CK(cudaMalloc(&q, bytes));
    CK(cudaMemset(p, 0, bytes));
    CK(cudaMemset(q, 0, bytes));
    const int reps = 20;
    {
        const float ms = median_ms([&] { CK(cudaMemcpyAsync(q, p, bytes, cudaMemcpyDeviceToDevice)); }, reps);
        printf("membench %lld MiB: cudaMemcpy D2D %.4f ms = %.0f GB/s (read + written)\n", mib, ms,
               2.0 * bytes / ms / 1e6);
    }
    struct { const char * name; kern k; int U; } ks[] = {
        {"oneshot U1 plain", rmw_oneshot<1, false>, 1}, {"oneshot U1 cs", rmw_oneshot<1, true>, 1},
        {"oneshot U2 cs", rmw_oneshot<2, true>, 2},     {"oneshot U4 cs", rmw_oneshot<4, true>, 4},
        {"oneshot U8 cs", rmw_oneshot<8, true>, 8},     {"oneshot U4 plain", rmw_oneshot<4, false>, 4},
        {"oneshot U8 plain", rmw_oneshot<8, false>, 8}, {"sync U2", rmw_oneshot<2, true, true>, 2},
        {"sync U4", rmw_oneshot<4, true, true>, 4},                    {"sync U8", rmw_oneshot<8, true, true>, 8},
    };
    const int tcounts[] = {128, 256, 512, 1024};
    for (auto & k : ks)
        for (int th : tcounts) {
            const float ms = time_it(k.k, k.U, th, p, nvec, reps);
            printf("membench %-18s threads %4d: %.4f ms = %.0f GB/s\n", k.name, th, ms, 2.0 * bytes / ms / 1e6);
        }
    CK(cudaFree(p));
    CK(cudaFree(q));
    return 0;
}
