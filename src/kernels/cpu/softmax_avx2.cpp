// AVX2 softmax / argmax: max, exp + canonical 16-lane sum in two ymm, divide.

#include <cmath>

#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/softmax_impl.h"

namespace gannet::kernels::avx2 {

namespace {
// Max over the non-NaN elements (-inf if none); masked-off lanes read as -inf.
float max_of(const float* x, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 m = ninf;
  for (int64_t i = 0; i < n; i += 8) {
    __m256i k = mask8(n - i);
    __m256 v = _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k));
    m = _mm256_max_ps(v, m);  // NaN in v keeps m
  }
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  a = _mm_max_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}
}  // namespace

void softmax(float* x, int64_t n) {
  const __m256 m = _mm256_set1_ps(max_of(x, n));
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // lanes 0-7, 8-15
  for (int64_t i = 0; i < n; i += 16)
    for (int h = 0; h < 2; ++h) {
      const int64_t j = i + 8 * h;
      __m256i k = mask8(n - j);
      __m256 e = exp(_mm256_sub_ps(_mm256_maskload_ps(x + j, k), m));
      e = _mm256_and_ps(e, _mm256_castsi256_ps(k));  // padded lanes add +0
      acc[h] = _mm256_add_ps(acc[h], e);
      store_first(x + j, e, n - j);
    }
  const __m256 sum = _mm256_set1_ps(tree_reduce(acc[0], acc[1]));
  for (int64_t i = 0; i < n; i += 8) {
    __m256i k = mask8(n - i);
    store_first(x + i, _mm256_div_ps(_mm256_maskload_ps(x + i, k), sum), n - i);
  }
}

int64_t argmax(const float* x, int64_t n) {
  const __m256 m = _mm256_set1_ps(max_of(x, n));
  for (int64_t i = 0; i < n; i += 8) {
    __m256i k = mask8(n - i);
    __m256 eq = _mm256_and_ps(_mm256_cmp_ps(_mm256_maskload_ps(x + i, k), m, _CMP_EQ_OQ),
                              _mm256_castsi256_ps(k));
    int bits = _mm256_movemask_ps(eq);
    if (bits) return i + __builtin_ctz(unsigned(bits));
  }
  return 0;
}

}  // namespace gannet::kernels::avx2
