/* device_math.cuh — scalar device math shared by the CUDA kernels: the logistic sigmoid, silu
 * and the angle wrap into [0, 2π) with the CPU's two-constant reduction (cpu/kernels/rotary), in
 * accurate forms (expf, IEEE division); and the fast sigmoid (__expf, __fdividef) that more than
 * one operator's 16-bit backward uses. Other fast forms stay next to the one kernel that uses
 * them. Inline device code. */
#ifndef SSMI_CUDA_DEVICE_MATH_CUH
#define SSMI_CUDA_DEVICE_MATH_CUH

namespace ssmi_math {

constexpr float kPi = 3.14159265358979323846f;
constexpr float kTwoPiHi = 6.28318548202514648438f;   /* 2π rounded to float                  */
constexpr float kTwoPiLo = -1.74845553146951715e-07f; /* 2π − kTwoPiHi                         */
constexpr float kInvTwoPi = 0.159154943091895335769f;

/* 1 / (1 + e^{−x}) */
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* σ(x) by the fast exponential and division (relative error ~1e-6; x → −∞ gives 0, x → +∞ gives
 * 1, NaN stays NaN): for results that go into split bf16 planes (2^-16) */
__device__ __forceinline__ float sigmoid_fast(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }

/* z·sigmoid(z), as z / (1 + e^{−z}) */
__device__ __forceinline__ float silu(float z) { return z / (1.0f + expf(-z)); }

/* x − 2π·floor(x/2π), reduced with the two constants above (a negative remainder gets 2π added). */
__device__ __forceinline__ float wrap_2pi(float x) {
    const float turns = floorf(x * kInvTwoPi);
    float       r = fmaf(-turns, kTwoPiHi, x);
    r = fmaf(-turns, kTwoPiLo, r);
    return r < 0.0f ? r + kTwoPiHi : r;
}

} // namespace ssmi_math

#endif /* SSMI_CUDA_DEVICE_MATH_CUH */
