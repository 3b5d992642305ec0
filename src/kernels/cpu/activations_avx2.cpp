// AVX2 activations: 8 elements per step; the remainder runs the reference formula.

#include "kernels/cpu/activations_impl.h"
#include "kernels/cpu/exp.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/simd_avx2.h"

namespace gannet::kernels::avx2 {

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i);
    __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, exp(_mm256_xor_ps(g, neg))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = (g / (1.0f + exp_f32(-g))) * up[i];
  }
}

// gelu_erf_f32 (gelu.h) on 8 lanes, the same operations in the same order.
void gelu_erf_mul(const float* gate, const float* up, float* out, int64_t n) {
  using namespace gelu_const;
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f), neg = _mm256_set1_ps(-0.0f),
               zero = _mm256_setzero_ps(), inv_sqrt2 = _mm256_set1_ps(kInvSqrt2);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(neg, x), inv_sqrt2);
    const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(half, z, one));
    __m256 p = _mm256_set1_ps(kE[9]);
    for (int k = 8; k >= 0; --k) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(kE[k]));
    const __m256 e = exp(_mm256_fmadd_ps(_mm256_xor_ps(z, neg), z, p));
    const __m256 hc = _mm256_mul_ps(half, _mm256_mul_ps(t, e));
    const __m256 ge = _mm256_cmp_ps(x, zero, _CMP_GE_OQ);
    const __m256 phi = _mm256_blendv_ps(hc, _mm256_sub_ps(one, hc), ge);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(x, phi), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gelu_erf_f32(gate[i]) * up[i];
}

// gelu_tanh_f32 (gelu.h) on 8 lanes.
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  using namespace gelu_const;
  const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f), k = _mm256_set1_ps(kTwoSqrt2OverPi),
               c = _mm256_set1_ps(kCubic);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 u = _mm256_mul_ps(k, _mm256_add_ps(x, _mm256_mul_ps(c, x3)));
    const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, exp(_mm256_xor_ps(u, neg))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gelu_tanh_f32(gate[i]) * up[i];
}

void add(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

// 32 columns at a time held in 4 registers across all rows, then the rest one by one;
// mul then add per element.
void add_weighted_rows(const float* w, const float* base, const int32_t* idx, int64_t rows, int64_t ld, float* y,
                       int64_t d) {
  int64_t c = 0;
  for (; c + 32 <= d; c += 32) {
    __m256 a[4];
    GANNET_UNROLL for (int v = 0; v < 4; ++v) a[v] = _mm256_loadu_ps(y + c + 8 * v);
    for (int64_t j = 0; j < rows; ++j) {
      const float* r = base + (idx ? int64_t(idx[j]) : j) * ld + c;
      const __m256 wj = _mm256_set1_ps(w[j]);
      GANNET_UNROLL for (int v = 0; v < 4; ++v) a[v] = _mm256_add_ps(a[v], _mm256_mul_ps(wj, _mm256_loadu_ps(r + 8 * v)));
    }
    GANNET_UNROLL for (int v = 0; v < 4; ++v) _mm256_storeu_ps(y + c + 8 * v, a[v]);
  }
  for (; c < d; ++c) {
    float a = y[c];
    for (int64_t j = 0; j < rows; ++j) a += w[j] * base[(idx ? int64_t(idx[j]) : j) * ld + c];
    y[c] = a;
  }
}

void exp_n(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = exp_f32(x[i]);
}

}  // namespace gannet::kernels::avx2
