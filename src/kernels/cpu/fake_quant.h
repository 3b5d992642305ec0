// Fake quantization (quantize, then dequantize in place) as the DeepSeek-V4 reference applies
// it: model semantics, not an optimization (deepseek-v4-architecture.md §3.3). Each works on
// one row in consecutive blocks of `block` elements (the last one may be shorter), in plain
// f32 arithmetic, so the result is the same bits on every machine:
//   FQ8  amax = max(|x| over the block, 1e-4); s = amax * (1/448); pow2: s = 2^ceil(log2 s)
//        from s's bits (exponent - 127, plus 1 when the mantissa is not 0);
//        x = e4m3(clamp(x / s, -448, 448)) * s.
//   FQ4  amax = max(|x|, 6 * 2^-126); s = 2^ceil(log2(amax / 6)); x = e2m1(clamp(x / s, -6, 6)) * s.
//   FQ4e amax = max(|x|, 6 * 2^-9); s = e4m3(amax / 6); x = e2m1(clamp(x / s, -6, 6)) * s
//        (V4.1's compressed KV, block 16).
// Rounding is to nearest even throughout. A NaN element makes its block NaN.
#pragma once

#include <cstdint>

namespace gannet::kernels {

void fake_quant_fp8(float* x, int64_t n, int64_t block, bool pow2_scale);
void fake_quant_fp4(float* x, int64_t n, int64_t block);
void fake_quant_fp4_e4m3_scale(float* x, int64_t n, int64_t block);

// 2^ceil(log2 s) for a positive normal s, from its bits (the reference's rule).
float pow2_ceil(float s);

// The same quantizations as packed bytes, for caches that store them (DeepSeek-V4.1's
// window ring, compressed KV and index keys): unpack(pack(x)) has exactly the bits of the
// fake-quantized x. n must be a multiple of the block.
//   FQ8 pow2:  codes [n] E4M3, scales [n / block] E8M0 (2^(b - 127))
//   FQ4:       codes [n / 2] E2M1 (element 2i in the low nibble), scales [n / block] E8M0
//   FQ4e:      codes [n / 2] E2M1, scales [n / block] E4M3
void pack_fp8_pow2(const float* x, int64_t n, int64_t block, uint8_t* codes, uint8_t* scales);
void unpack_fp8_pow2(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* out);
void pack_fp4(const float* x, int64_t n, int64_t block, uint8_t* codes, uint8_t* scales);
void unpack_fp4(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* out);
void pack_fp4_e4m3_scale(const float* x, int64_t n, int64_t block, uint8_t* codes, uint8_t* scales);
void unpack_fp4_e4m3_scale(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* out);

}  // namespace gannet::kernels
