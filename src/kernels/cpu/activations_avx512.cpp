// AVX-512 activations: 16 elements per step, masked tail.

#include "kernels/cpu/activations_impl.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/simd_avx512.h"

namespace gannet::kernels::avx512 {

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), neg = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, exp(_mm512_xor_ps(g, neg))));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

// gelu_erf_f32 (gelu.h) on 16 lanes, the same operations in the same order.
void gelu_erf_mul(const float* gate, const float* up, float* out, int64_t n) {
  using namespace gelu_const;
  const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f), neg = _mm512_set1_ps(-0.0f),
               zero = _mm512_setzero_ps(), inv_sqrt2 = _mm512_set1_ps(kInvSqrt2);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 z = _mm512_mul_ps(_mm512_andnot_ps(neg, x), inv_sqrt2);
    const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(half, z, one));
    __m512 p = _mm512_set1_ps(kE[9]);
    for (int k = 8; k >= 0; --k) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kE[k]));
    const __m512 e = exp(_mm512_fmadd_ps(_mm512_xor_ps(z, neg), z, p));
    const __m512 hc = _mm512_mul_ps(half, _mm512_mul_ps(t, e));
    const __mmask16 ge = _mm512_cmp_ps_mask(x, zero, _CMP_GE_OQ);
    const __m512 phi = _mm512_mask_blend_ps(ge, hc, _mm512_sub_ps(one, hc));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_mul_ps(x, phi), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

// gelu_tanh_f32 (gelu.h) on 16 lanes.
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  using namespace gelu_const;
  const __m512 one = _mm512_set1_ps(1.0f), neg = _mm512_set1_ps(-0.0f), k = _mm512_set1_ps(kTwoSqrt2OverPi),
               c = _mm512_set1_ps(kCubic);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 u = _mm512_mul_ps(k, _mm512_add_ps(x, _mm512_mul_ps(c, x3)));
    const __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, exp(_mm512_xor_ps(u, neg))));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

// 64 columns at a time held in 4 registers across all rows; mul then add per element.
void add_weighted_rows(const float* w, const float* base, const int32_t* idx, int64_t rows, int64_t ld, float* y,
                       int64_t d) {
  for (int64_t c = 0; c < d; c += 64) {
    __mmask16 m[4];
    __m512 a[4];
    GANNET_UNROLL for (int v = 0; v < 4; ++v) {
      m[v] = d - c - 16 * v > 0 ? mask16(d - c - 16 * v) : __mmask16(0);
      a[v] = _mm512_maskz_loadu_ps(m[v], y + c + 16 * v);
    }
    for (int64_t j = 0; j < rows; ++j) {
      const float* r = base + (idx ? int64_t(idx[j]) : j) * ld + c;
      const __m512 wj = _mm512_set1_ps(w[j]);
      GANNET_UNROLL for (int v = 0; v < 4; ++v)
        a[v] = _mm512_add_ps(a[v], _mm512_mul_ps(wj, _mm512_maskz_loadu_ps(m[v], r + 16 * v)));
    }
    GANNET_UNROLL for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(y + c + 16 * v, m[v], a[v]);
  }
}

void exp_n(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace gannet::kernels::avx512
