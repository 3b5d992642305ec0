// The sampler's fixed-point token weights (sampling/fixed_point_draw.h states the scheme):
//   w_i = floor(2^40 * exp((double(l_i) - double(m)) * inv_t) + 0.5), with libm's exp,
// and 0 where that exponent is below -30 (or NaN) or below skip_below. The scalar
// reference is the definition; the AVX2 variant evaluates exp four at a time with its own
// polynomial and keeps a result only where it provably rounds to the same integer as the
// reference would (it is within a stated error of exp, and the rounding interval that
// error spans holds one integer); anywhere else it calls libm's exp as the reference
// does. So every variant returns the reference's bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/cpu_features.h"

namespace gannet::kernels {

inline constexpr int kFixedPointWeightBits = 40;  // the most likely token weighs 2^40

// One weight, as defined above (without skip_below).
inline uint64_t fixed_point_weight(float logit, float max_logit, double inv_temperature) {
  const double d = (double(logit) - double(max_logit)) * inv_temperature;
  if (!(d >= -30.0)) return 0;  // exp(-30) * 2^40 ~ 0.10 rounds to 0 anyway; also -inf
  return uint64_t(int64_t(std::exp(d) * 0x1p40 + 0.5));  // < 2^41: the signed conversion is exact and cheaper
}

// w[i] for logits[0, n): the weight above, or 0 where the exponent is below skip_below
// (-inf: no cut). max_logit must be the row's maximum (so every exponent is <= 0).
void fixed_point_weights(const float* logits, int64_t n, float max_logit, double inv_temperature, double skip_below,
                         uint64_t* w);
void fixed_point_weights_isa(Isa isa, const float* logits, int64_t n, float max_logit, double inv_temperature,
                             double skip_below, uint64_t* w);

}  // namespace gannet::kernels
