#include "kernels/cpu/exp.h"

#include <cmath>

#include "core/dtype.h"

namespace gannet::kernels {

float exp_f32(float x) {
  using namespace exp_const;
  if (std::isnan(x)) return x;
  x = x < kLo ? kLo : x;
  x = x > kHi ? kHi : x;
  float n = std::fma(x, kLog2e, kRoundMagic) - kRoundMagic;  // round(x / ln 2), exact
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = std::fma(kP0, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  float y = std::fma(p, r * r, r) + 1.0f;
  int32_t ni = int32_t(n), n1 = ni >> 1, n2 = ni - n1;
  float s1 = bits_to_f32(uint32_t(n1 + 127) << 23), s2 = bits_to_f32(uint32_t(n2 + 127) << 23);
  return (y * s1) * s2;  // y * s1 is exact; the second product rounds once (also to denormals)
}

}  // namespace gannet::kernels
