// exp_f32: an exp built only from fma, +, *, rounding and bit operations, so the AVX2 and
// AVX-512 versions (simd_avx2.h, simd_avx512.h) are bit-identical to this scalar one.
// Softmax, SiLU and attention use it instead of std::exp, whose result is libm's choice.
#pragma once

#include <cstdint>

namespace gannet::kernels {

// About 1 ulp; exp(x) = 0 for x < -104, +inf for x > 88.73, NaN returns x unchanged.
float exp_f32(float x);

namespace exp_const {
// Inputs are clamped to [kLo, kHi] so that n = round(x / ln 2) lies in [-150, 128] and
// 2^n splits into two normal factors 2^(n>>1) * 2^(n - (n>>1)).
inline constexpr float kLo = -104.0f, kHi = 89.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: v + magic rounds v to an integer
// Cody-Waite split of ln 2: n * kLn2Hi is exact for |n| <= 2^9.
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
// exp(r) ~ 1 + r + r^2 * P(r) on |r| <= ln2/2 (Cephes expf).
inline constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                       kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
}  // namespace exp_const

}  // namespace gannet::kernels
