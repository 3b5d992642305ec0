// AVX-512 rmsnorm: canonical sum of squares in one zmm, then a scaled copy.

#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/simd_avx512.h"

namespace gannet::kernels::avx512 {

void rmsnorm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < dim; i += 16) {
      __m512 v = _mm512_maskz_loadu_ps(mask16(dim - i), xr + i);
      acc = _mm512_fmadd_ps(v, v, acc);
    }
    const __m512 scale = _mm512_set1_ps(rms_scale(tree_reduce(acc), dim, eps));
    for (int64_t i = 0; i < dim; i += 16) {
      const __mmask16 m = mask16(dim - i);
      __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + i), scale);
      if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i));
      _mm512_mask_storeu_ps(yr + i, m, v);
    }
  }
}

}  // namespace gannet::kernels::avx512
