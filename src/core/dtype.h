// Element types of checkpoints and caches, and scalar conversions between them.
// bf16 and f16 are stored as uint16_t (g++ 12 has no std::bfloat16_t).
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace gannet {

enum class DType : uint8_t { F32, F16, BF16, F8_E4M3, F8_E8M0, I8, I32, I64, U8 };

// Bytes per element.
size_t dtype_size(DType t);
// Safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }

// Round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf

// OCP FP8 E4M3 ("fn": no infinities, 0x7f/0xff are NaN, max 448).
float fp8_e4m3_to_f32(uint8_t v);
// OCP E8M0 scale: 2^(v-127); 0xff is NaN.
// 2^(v - 127) from its bits (v = 0 is the subnormal 2^-127), 0xff NaN. Inline: kernels
// read one per scale block.
constexpr uint32_t e8m0_bits(uint8_t v) { return v == 0xff ? 0x7fc00000u : v == 0 ? 0x00400000u : uint32_t(v) << 23; }
inline float e8m0_to_f32(uint8_t v) { return bits_to_f32(e8m0_bits(v)); }
// Every E8M0 code's value, for hot loops: one load instead of e8m0_to_f32's branches.
inline constexpr std::array<float, 256> kE8m0Values = [] {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[size_t(i)] = std::bit_cast<float>(e8m0_bits(uint8_t(i)));
  return t;
}();
// OCP FP4 E2M1 ("fn"): the low 4 bits of v; values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
float fp4_e2m1_to_f32(uint8_t v);

// Rounding to the small formats, as ml_dtypes casts (tests/golden/dtype-tables.json):
// round to nearest, ties to even. E4M3 has no infinity: infinities, NaN and anything that
// rounds past 448 become NaN (0x7f, sign kept). E2M1 saturates at ±6 and has no NaN
// (NaN gives +0; quantizers never feed it one).
uint8_t f32_to_fp8_e4m3(float f);
uint8_t f32_to_fp4_e2m1(float f);  // code in the low 4 bits

}  // namespace gannet
