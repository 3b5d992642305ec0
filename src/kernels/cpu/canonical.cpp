#include "kernels/cpu/canonical.h"

#include <cfloat>
#include <cmath>

#include "core/dtype.h"

namespace gannet::kernels {

float tree_reduce16(float* acc) {
  for (int s = kLanes / 2; s >= 1; s /= 2)
    for (int l = 0; l < s; ++l) acc[l] = acc[l] + acc[l + s];
  return acc[0];
}

float dot_f32_ref(const float* x, const float* w, int64_t k) {
  float acc[kLanes] = {};
  for (int64_t c = 0; c < k; c += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      // The padded tail still does fma(0, 0, acc): it turns an acc of -0 into +0.
      bool in = c + l < k;
      acc[l] = std::fma(in ? x[c + l] : 0.0f, in ? w[c + l] : 0.0f, acc[l]);
    }
  return tree_reduce16(acc);
}

float sum_f32_ref(const float* x, int64_t n) {
  float acc[kLanes] = {};
  for (int64_t c = 0; c < n; c += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] + (c + l < n ? x[c + l] : 0.0f);
  return tree_reduce16(acc);
}

namespace {
float flush_denormal(float v) { return std::fabs(v) < FLT_MIN ? std::copysign(0.0f, v) : v; }
}  // namespace

float bf16_fma_ref(float a, float b, float c) {
  a = flush_denormal(a);
  b = flush_denormal(b);
  c = flush_denormal(c);
  float r = std::fma(a, b, c);  // gradual underflow: agrees with the hardware above FLT_MIN
  float ar = std::fabs(r);
  if (ar < FLT_MIN) return std::copysign(0.0f, r);
  if (ar == FLT_MIN) {
    // Rounded with denormal spacing the result is FLT_MIN, but the hardware rounds with
    // unbounded exponent (spacing 2^-150 below FLT_MIN) and flushes if that is tiny:
    // exactly when |a*b + c| < FLT_MIN - 2^-151. a*b is exact in double (two 8-bit
    // significands); TwoSum gives the exact a*b + c as s + err.
    double p = double(a) * double(b), cc = c;
    double s = p + cc, bb = s - p;
    double err = (p - (s - bb)) + (cc - bb);
    if (r < 0) s = -s, err = -err;
    const double t = double(FLT_MIN) - 0x1p-151;
    if (s < t || (s == t && err < 0)) return std::copysign(0.0f, r);
  }
  return r;
}

float dot_bf16_ref(const uint16_t* x, const uint16_t* w, int64_t k) {
  float acc[kLanes] = {};
  for (int64_t c = 0; c < k; c += kBf16Chunk)
    for (int l = 0; l < kLanes; ++l) {
      int64_t e = c + 2 * l, o = e + 1;
      float xo = o < k ? bf16_to_f32(x[o]) : 0.0f, wo = o < k ? bf16_to_f32(w[o]) : 0.0f;
      float xe = e < k ? bf16_to_f32(x[e]) : 0.0f, we = e < k ? bf16_to_f32(w[e]) : 0.0f;
      acc[l] = bf16_fma_ref(xo, wo, acc[l]);  // odd element first, as the hardware does
      acc[l] = bf16_fma_ref(xe, we, acc[l]);
    }
  return tree_reduce16(acc);
}

}  // namespace gannet::kernels
