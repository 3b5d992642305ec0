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

}  // namespace gannet::kernels
