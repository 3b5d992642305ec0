#include "kernels/cpu/fake_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"

namespace gannet::kernels {

float pow2_ceil(float s) {
  uint32_t b;
  std::memcpy(&b, &s, 4);
  const int e = int((b >> 23) & 0xff) - 127 + ((b & 0x7fffff) != 0 ? 1 : 0);
  return std::ldexp(1.0f, e);
}

namespace {

// Block maximum of |x|; NaN if any element is NaN (torch's amax propagates it).
float block_amax(const float* x, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return std::numeric_limits<float>::quiet_NaN();
    m = std::max(m, std::fabs(x[i]));
  }
  return m;
}

template <typename Scale, typename Round>
void per_block(float* x, int64_t n, int64_t block, Scale scale, float lim, Round round) {
  GANNET_CHECK(block > 0 && n >= 0, "block ", block, " n ", n);
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t len = std::min(block, n - b0);
    float* v = x + b0;
    const float amax = block_amax(v, len);
    if (std::isnan(amax)) {
      std::fill(v, v + len, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const float s = scale(amax);
    for (int64_t i = 0; i < len; ++i) v[i] = round(std::clamp(v[i] / s, -lim, lim)) * s;
  }
}

}  // namespace

void fake_quant_fp8(float* x, int64_t n, int64_t block, bool pow2_scale) {
  per_block(
      x, n, block,
      [pow2_scale](float amax) {
        const float s = std::max(amax, 1e-4f) * (1.0f / 448.0f);
        return pow2_scale ? pow2_ceil(s) : s;
      },
      448.0f, [](float q) { return fp8_e4m3_to_f32(f32_to_fp8_e4m3(q)); });
}

void fake_quant_fp4(float* x, int64_t n, int64_t block) {
  per_block(
      x, n, block, [](float amax) { return pow2_ceil(std::max(amax, 6.0f * 0x1p-126f) / 6.0f); }, 6.0f,
      [](float q) { return fp4_e2m1_to_f32(f32_to_fp4_e2m1(q)); });
}

void fake_quant_fp4_e4m3_scale(float* x, int64_t n, int64_t block) {
  per_block(
      x, n, block,
      [](float amax) { return fp8_e4m3_to_f32(f32_to_fp8_e4m3(std::max(amax, 6.0f * 0x1p-9f) / 6.0f)); }, 6.0f,
      [](float q) { return fp4_e2m1_to_f32(f32_to_fp4_e2m1(q)); });
}

}  // namespace gannet::kernels
