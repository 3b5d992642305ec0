// AVX-512 softmax / argmax: max, exp + canonical 16-lane sum in one zmm, divide.

#include <cmath>

#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/softmax_impl.h"

namespace gannet::kernels::avx512 {

namespace {
// Max over the non-NaN elements (-inf if none): max_ps returns its second operand when
// the first is NaN, so NaN lanes of x never replace the running maximum.
float max_of(const float* x, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16)
    m = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), mask16(n - i), x + i), m);
  return _mm512_reduce_max_ps(m);  // max is exact in any order
}
}  // namespace

void softmax(float* x, int64_t n) {
  const __m512 m = _mm512_set1_ps(max_of(x, n));
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = mask16(n - i);
    __m512 e = _mm512_maskz_mov_ps(k, exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m)));
    acc = _mm512_add_ps(acc, e);  // padded lanes add +0, as the reference pads
    _mm512_mask_storeu_ps(x + i, k, e);
  }
  const __m512 sum = _mm512_set1_ps(tree_reduce(acc));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = mask16(n - i);
    _mm512_mask_storeu_ps(x + i, k, _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), sum));
  }
}

int64_t argmax(const float* x, int64_t n) {
  const __m512 m = _mm512_set1_ps(max_of(x, n));
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 eq = _mm512_mask_cmp_ps_mask(mask16(n - i), _mm512_maskz_loadu_ps(mask16(n - i), x + i), m, _CMP_EQ_OQ);
    if (eq) return i + __builtin_ctz(eq);
  }
  return 0;
}

}  // namespace gannet::kernels::avx512
