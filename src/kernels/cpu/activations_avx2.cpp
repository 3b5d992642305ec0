// AVX2 activations: 8 elements per step; the remainder runs the reference formula.
#pragma GCC optimize("fp-contract=off")  // see simd_avx2.h
// Under that pragma GCC 12 misreports the intrinsics' own _mm*_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/cpu/activations_impl.h"
#include "kernels/cpu/exp.h"
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

void add(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

void exp_n(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = exp_f32(x[i]);
}

}  // namespace gannet::kernels::avx2
