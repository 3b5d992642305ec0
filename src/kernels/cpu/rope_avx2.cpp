// AVX2 apply_rope: 8 channels per step, same products and sums as the reference; the
// remainder runs the reference's scalar formula (no FMA contraction in this file).

#include "kernels/cpu/rope_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace gannet::kernels::avx2 {

GANNET_ROPE_HEADS(rope_heads) {
  const int half = rotary_dim / 2;
  const __m256 sign = _mm256_set1_ps(inverse ? -0.0f : 0.0f);
  const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  const __m256 even_neg = _mm256_castsi256_ps(
      _mm256_setr_epi32(int(0x80000000u), 0, int(0x80000000u), 0, int(0x80000000u), 0, int(0x80000000u), 0));
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim + rotary_offset;
    int i = 0;
    if (!interleaved) {
      for (; i + 8 <= half; i += 8) {
        __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_xor_ps(_mm256_loadu_ps(sin + i), sign);
        __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + half + i);
        _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(v + half + i, _mm256_add_ps(_mm256_mul_ps(b, c), _mm256_mul_ps(a, s)));
      }
    } else {
      for (; i + 4 <= half; i += 4) {
        __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cos + i)), dup);
        __m256 s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sin + i)), dup);
        s = _mm256_xor_ps(_mm256_xor_ps(s, sign), even_neg);
        __m256 a = _mm256_loadu_ps(v + 2 * i);
        __m256 sw = _mm256_permute_ps(a, 0xb1);
        _mm256_storeu_ps(v + 2 * i, _mm256_add_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(sw, s)));
      }
    }
    for (; i < half; ++i) {
      const int ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
      const float c = cos[i], s = inverse ? -sin[i] : sin[i];
      const float a = v[ia], b = v[ib];
      v[ia] = a * c - b * s;
      v[ib] = b * c + a * s;
    }
  }
}

}  // namespace gannet::kernels::avx2
