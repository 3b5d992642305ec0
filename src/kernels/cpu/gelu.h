// GELU on one float, as a fixed sequence of rounded operations (explicit fma, exp_f32), so
// the AVX2 and AVX-512 variants of gelu_*_mul can repeat it lane by lane and match bits.
//   erf form ("gelu"):                    x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2
//   tanh form ("gelu_pytorch_tanh", "gelu_new"): x / 2 * (1 + tanh(u)),
//                                         u = sqrt(2/pi) * (x + 0.044715 x^3)
// The tanh form is written as x / (1 + exp(-2u)), which equals it exactly in real
// arithmetic and has no cancellation. erfc uses the Chebyshev fit of Numerical Recipes'
// erfcc (relative error < 1.2e-7 for z >= 0), so the negative tail keeps relative accuracy.
#pragma once

#include <cmath>

#include "kernels/cpu/exp.h"

namespace gannet::kernels {

namespace gelu_const {
inline constexpr float kInvSqrt2 = 0.707106781186547524f;
inline constexpr float kTwoSqrt2OverPi = 1.59576912160573071f;  // 2 * sqrt(2 / pi)
inline constexpr float kCubic = 0.044715f;
// erfc(z) ~ t * exp(-z^2 + P(t)), t = 1 / (1 + z / 2), P = sum kE[i] t^i.
inline constexpr float kE[10] = {-1.26551223f, 1.00002368f, 0.37409196f, 0.09678418f, -0.18628806f,
                                 0.27886807f,  -1.13520398f, 1.48851587f, -0.82215223f, 0.17087277f};
}  // namespace gelu_const

inline float gelu_erf_f32(float x) {
  using namespace gelu_const;
  const float z = std::fabs(x) * kInvSqrt2;
  const float t = 1.0f / std::fma(0.5f, z, 1.0f);
  float p = kE[9];
  for (int i = 8; i >= 0; --i) p = std::fma(p, t, kE[i]);
  const float half_erfc = 0.5f * (t * exp_f32(std::fma(-z, z, p)));  // Phi(-|x|)
  return x * (x >= 0.0f ? 1.0f - half_erfc : half_erfc);
}

inline float gelu_tanh_f32(float x) {
  using namespace gelu_const;
  const float u = kTwoSqrt2OverPi * (x + kCubic * ((x * x) * x));
  return x / (1.0f + exp_f32(-u));
}

}  // namespace gannet::kernels
