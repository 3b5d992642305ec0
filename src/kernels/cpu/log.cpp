#include "kernels/cpu/log.h"

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/exp.h"

namespace gannet::kernels {

namespace {
constexpr float kSqrt2 = 1.41421356237309505f;
// ln 2 split so that e * kLn2Hi is exact for |e| < 2^15 (kLn2Hi has 9 significant bits).
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
// ln(1 + f) ~ f - f^2 / 2 + f^3 * P(f) on sqrt(1/2) - 1 <= f <= sqrt(2) - 1: the minimax
// coefficients of Cephes' logf (the same source as exp_f32's), highest degree first.
constexpr float kP[9] = {7.0376836292e-2f,  -1.1514610310e-1f, 1.1676998740e-1f,
                         -1.2420140846e-1f, 1.4249322787e-1f,  -1.6668057665e-1f,
                         2.0000714765e-1f,  -2.4999993993e-1f, 3.3333331174e-1f};
}  // namespace

float log_f32(float x) {
  if (std::isnan(x)) return x;
  if (x < 0.0f) return NAN;
  if (x == 0.0f) return -INFINITY;
  if (x == INFINITY) return x;
  int32_t e = 0;
  uint32_t b = f32_to_bits(x);
  if (b < 0x00800000u) {  // subnormal: scale into the normal range (exact)
    b = f32_to_bits(x * 0x1p23f);
    e = -23;
  }
  e += int32_t(b >> 23) - 127;
  float m = bits_to_f32((b & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  if (m > kSqrt2) {
    m *= 0.5f;  // (sqrt(1/2), 1]: f stays small on both sides of 1
    e += 1;
  }
  const float f = m - 1.0f;  // exact (Sterbenz)
  const float z = f * f;
  float p = kP[0];
  for (int i = 1; i < 9; ++i) p = std::fma(p, f, kP[i]);
  const float fe = float(e);
  float y = (p * f) * z;
  y = std::fma(fe, kLn2Lo, y);
  y = std::fma(-0.5f, z, y);
  return (f + y) + fe * kLn2Hi;
}

float log1p_f32(float a) {
  const float u = 1.0f + a;
  if (u == 1.0f) return a;  // |a| <= 2^-24: ln(1 + a) rounds to a
  if (!(u > 0.0f) || u == INFINITY) return log_f32(u);  // NaN, -1 and below, +inf
  // The rounding error of u = 1 + a, exact (Fast2Sum with the larger operand first), enters
  // to first order: ln(1 + a) = ln(u) + err / u.
  const float err = a <= 1.0f ? a - (u - 1.0f) : 1.0f - (u - a);
  return log_f32(u) + err / u;
}

float softplus_f32(float z) { return z > 20.0f ? z : log1p_f32(exp_f32(z)); }

}  // namespace gannet::kernels
