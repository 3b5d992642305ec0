// AVX2 rmsnorm: canonical sum of squares in two ymm (lanes 0-7, 8-15), then a scaled copy.

#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/simd_avx2.h"

namespace gannet::kernels::avx2 {

void rmsnorm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int64_t i = 0; i < dim; i += 16) {
      __m256 a = _mm256_maskload_ps(xr + i, mask8(dim - i));
      __m256 b = _mm256_maskload_ps(xr + i + 8, mask8(dim - i - 8));
      lo = _mm256_fmadd_ps(a, a, lo);
      hi = _mm256_fmadd_ps(b, b, hi);
    }
    const float s = rms_scale(tree_reduce(lo, hi), dim, eps);
    const __m256 scale = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + i), scale);
      if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
      _mm256_storeu_ps(yr + i, v);
    }
    for (; i < dim; ++i) yr[i] = w ? (xr[i] * s) * w[i] : xr[i] * s;
  }
}

}  // namespace gannet::kernels::avx2
