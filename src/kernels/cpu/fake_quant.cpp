#include "kernels/cpu/fake_quant.h"

#include <algorithm>
#include <array>
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

namespace {

// E8M0 byte of a power of two (NaN: 0xff); 2^-127 and below cannot occur for these scales.
uint8_t e8m0_of(float s) {
  if (std::isnan(s)) return 0xff;
  uint32_t b;
  std::memcpy(&b, &s, 4);
  return uint8_t((b >> 23) & 0xff);
}

template <typename Scale, typename Code, typename ScaleByte>
void pack_blocks(const float* x, int64_t n, int64_t block, Scale scale, float lim, Code code, ScaleByte sbyte,
                 uint8_t* codes, uint8_t* scales, bool four_bit) {
  GANNET_CHECK(block > 0 && n % block == 0 && (!four_bit || block % 2 == 0), "block ", block, " n ", n);
  if (four_bit) std::memset(codes, 0, size_t(n / 2));
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const float amax = block_amax(x + b0, block);
    const float s = std::isnan(amax) ? std::numeric_limits<float>::quiet_NaN() : scale(amax);
    scales[b0 / block] = sbyte(s);
    for (int64_t i = 0; i < block; ++i) {
      const uint8_t c = std::isnan(s) ? 0 : code(std::clamp(x[b0 + i] / s, -lim, lim));
      if (four_bit) codes[(b0 + i) / 2] |= uint8_t(c << (((b0 + i) & 1) * 4));
      else codes[b0 + i] = c;
    }
  }
}

float fp8_pow2_scale(float amax) { return pow2_ceil(std::max(amax, 1e-4f) * (1.0f / 448.0f)); }
float fp4_scale(float amax) { return pow2_ceil(std::max(amax, 6.0f * 0x1p-126f) / 6.0f); }
float fp4e_scale(float amax) { return fp8_e4m3_to_f32(f32_to_fp8_e4m3(std::max(amax, 6.0f * 0x1p-9f) / 6.0f)); }

}  // namespace

void pack_fp8_pow2(const float* x, int64_t n, int64_t block, uint8_t* codes, uint8_t* scales) {
  pack_blocks(x, n, block, fp8_pow2_scale, 448.0f, [](float q) { return f32_to_fp8_e4m3(q); }, e8m0_of, codes, scales,
              false);
}

namespace {
// Every code's value under `decode`, built once, for the unpacking loops.
template <int N, float (*Decode)(uint8_t)>
const float* code_table() {
  static const auto table = [] {
    std::array<float, N> t{};
    for (int c = 0; c < N; ++c) t[size_t(c)] = Decode(uint8_t(c));
    return t;
  }();
  return table.data();
}
const float* e4m3_table() { return code_table<256, fp8_e4m3_to_f32>(); }
}  // namespace

void unpack_fp8_pow2(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* out) {
  const float* t = e4m3_table();
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const float s = e8m0_to_f32(scales[b0 / block]);
    const int64_t e = std::min(n, b0 + block);
    for (int64_t i = b0; i < e; ++i) out[i] = t[codes[i]] * s;
  }
}

void pack_fp4(const float* x, int64_t n, int64_t block, uint8_t* codes, uint8_t* scales) {
  pack_blocks(x, n, block, fp4_scale, 6.0f, [](float q) { return f32_to_fp4_e2m1(q); }, e8m0_of, codes, scales, true);
}

namespace {
// n E2M1 codes (two per byte, low nibble first) times their block's scale: the same
// products as code by code, without a call per code.
template <class Scale>
void unpack_fp4_blocks(const uint8_t* codes, int64_t n, int64_t block, Scale scale_of, float* out) {
  const float* t = code_table<16, fp4_e2m1_to_f32>();
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const float s = scale_of(b0 / block);
    const int64_t e = std::min(n, b0 + block);
    for (int64_t i = b0; i < e; ++i) out[i] = t[(codes[i / 2] >> ((i & 1) * 4)) & 0xf] * s;
  }
}
}  // namespace

void unpack_fp4(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* out) {
  unpack_fp4_blocks(codes, n, block, [&](int64_t b) { return e8m0_to_f32(scales[b]); }, out);
}

void pack_fp4_e4m3_scale(const float* x, int64_t n, int64_t block, uint8_t* codes, uint8_t* scales) {
  pack_blocks(x, n, block, fp4e_scale, 6.0f, [](float q) { return f32_to_fp4_e2m1(q); },
              [](float s) { return std::isnan(s) ? uint8_t(0x7f) : f32_to_fp8_e4m3(s); }, codes, scales, true);
}

void unpack_fp4_e4m3_scale(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* out) {
  const float* t = e4m3_table();
  unpack_fp4_blocks(codes, n, block, [&](int64_t b) { return t[scales[b]]; }, out);
}

}  // namespace gannet::kernels
