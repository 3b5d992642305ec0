// The canonical reduction orders (DESIGN principle 1). These scalar functions are the
// specification: every SIMD variant reproduces them bit for bit, so an output element
// never depends on batch size, thread count or ISA.
//
// f32 dot / sum (length k): 16 lane accumulators start at +0; chunk c of 16 elements
// (the last one zero-padded) does acc[l] = fma(x[16c+l], w[16c+l], acc[l]) (sum: acc[l] +
// x[16c+l]); then the fixed tree acc[l] += acc[l+s] for s = 8, 4, 2, 1; result acc[0].
//
// bf16 dot: what vdpbf16ps computes, measured on AMD Zen 5 (see bf16_fma_ref): chunk c of
// 32 elements (zero-padded) does, per lane l, acc = step(x[32c+2l+1], w[32c+2l+1], acc)
// then acc = step(x[32c+2l], w[32c+2l], acc); then the same tree as above (plain IEEE
// adds).
#pragma once

#include <cstdint>

namespace gannet::kernels {

inline constexpr int kLanes = 16;       // accumulators of every canonical reduction
inline constexpr int kBf16Chunk = 32;   // bf16 elements consumed per chunk (2 per lane)

// acc[l] += acc[l+s] for s = 8, 4, 2, 1; returns acc[0]. Modifies acc.
float tree_reduce16(float* acc);  // acc: [16]

float dot_f32_ref(const float* x, const float* w, int64_t k);  // x, w: [k]
float sum_f32_ref(const float* x, int64_t n);                  // x: [n]

// One vdpbf16ps step: a*b + c rounded to nearest even, with denormal inputs (a, b and
// c) read as signed zero, and a result that is tiny after rounding (with unbounded
// exponent) flushed to signed zero. NaN payloads are not specified.
float bf16_fma_ref(float a, float b, float c);

float dot_bf16_ref(const uint16_t* x, const uint16_t* w, int64_t k);  // x, w: [k] bf16

}  // namespace gannet::kernels
