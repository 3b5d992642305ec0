// AVX-512 activations: 16 elements per step, masked tail.
#pragma GCC optimize("fp-contract=off")  // see simd_avx512.h
// Under that pragma GCC 12 misreports the intrinsics' own _mm*_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/cpu/activations_impl.h"
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

void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

void exp_n(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace gannet::kernels::avx512
