#include "core/dtype.h"

#include <cmath>
#include <limits>

namespace gannet {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::F8_E4M3: case DType::F8_E8M0: case DType::I8: case DType::U8: return 1;
    case DType::I64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E8M0: return "F8_E8M0";
    case DType::I8: return "I8";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view n) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E8M0, DType::I8,
                  DType::I32, DType::I64, DType::U8})
    if (dtype_name(t) == n) return t;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) {
    // zero or subnormal: man * 2^-24, exact in f32
    float v = std::ldexp(float(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_to_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;  // rounds to >= 65520: inf
  if (a < 0x38800000u) {
    // subnormal half (or zero): value / 2^-24 rounded to nearest even
    float v = bits_to_f32(a) * 16777216.0f;  // exact scaling by 2^24
    return sign | uint16_t(std::nearbyint(v));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round mantissa to 10 bits, ties to even
  return sign | uint16_t((r - 0x38000000u) >> 13);
}

float fp8_e4m3_to_f32(uint8_t v) {
  bool neg = v & 0x80;
  uint32_t exp = (v >> 3) & 0xf, man = v & 0x7;
  float r;
  if (exp == 15 && man == 7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) r = std::ldexp(float(man), -9);  // subnormal: man/8 * 2^-6
  else r = std::ldexp(1.0f + float(man) / 8.0f, int(exp) - 7);
  return neg ? -r : r;
}

float fp4_e2m1_to_f32(uint8_t v) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMag[v & 7];
  return (v & 8) ? -m : m;
}

uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t u = f32_to_bits(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return sign | 0x7f;  // NaN and infinities
  const float mag = bits_to_f32(a);
  if (mag < 0.015625f) {
    // Below the smallest normal (2^-6): multiples of 2^-9, the scaling is exact and
    // nearbyint rounds ties to even. 8 * 2^-9 is the smallest normal, code 0x08.
    return sign | uint8_t(std::nearbyint(mag * 512.0f));
  }
  const int e = int(a >> 23) - 127;  // >= -6 here
  if (e > 8) return sign | 0x7f;
  uint32_t code = (uint32_t(e + 7) << 3) | ((a >> 20) & 7);
  const uint32_t rest = a & 0xfffffu, half = 0x80000u;
  if (rest > half || (rest == half && (code & 1))) ++code;  // may carry into the exponent
  if (code > 0x7e) return sign | 0x7f;                        // past 448
  return sign | uint8_t(code);
}

uint8_t f32_to_fp4_e2m1(float f) {
  const uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0;
  const uint8_t sign = uint8_t((u >> 28) & 8);
  const float mag = std::fabs(f);
  // Nearest of the eight magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6, a tie going to the even
  // code: one comparison per midpoint, > where the lower code is even (it keeps the tie),
  // >= where it is odd; 6 and above (infinities too) saturate to 7. Checked against the
  // distance search it replaces over all 2^32 inputs.
  const int code = (mag > 0.25f) + (mag >= 0.75f) + (mag > 1.25f) + (mag >= 1.75f) + (mag > 2.5f) + (mag >= 3.5f) +
                   (mag > 5.0f);
  return sign | uint8_t(code);
}

}  // namespace gannet
