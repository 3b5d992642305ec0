// AVX-512 apply_rope: 16 channels per step, same products and sums as the reference.

#include "kernels/cpu/rope_impl.h"
#include "kernels/cpu/simd_avx512.h"

namespace gannet::kernels::avx512 {

GANNET_ROPE_HEADS(rope_heads) {
  const int half = rotary_dim / 2;
  const __m512 sign = _mm512_set1_ps(inverse ? -0.0f : 0.0f);
  if (!interleaved) {
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + int64_t(h) * head_dim + rotary_offset;
      for (int i = 0; i < half; i += 16) {
        const __mmask16 m = mask16(half - i);
        __m512 c = _mm512_maskz_loadu_ps(m, cos + i);
        __m512 s = _mm512_xor_ps(_mm512_maskz_loadu_ps(m, sin + i), sign);
        __m512 a = _mm512_maskz_loadu_ps(m, v + i), b = _mm512_maskz_loadu_ps(m, v + half + i);
        _mm512_mask_storeu_ps(v + i, m, _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s)));
        _mm512_mask_storeu_ps(v + half + i, m, _mm512_add_ps(_mm512_mul_ps(b, c), _mm512_mul_ps(a, s)));
      }
    }
    return;
  }
  // Interleaved: 8 pairs per vector; cos/sin duplicated onto both lanes of a pair, sin
  // negated on the even lane: (a, b) * (c, c) + (b, a) * (-s, s).
  const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512 even_neg = _mm512_castsi512_ps(
      _mm512_setr_epi32(int(0x80000000u), 0, int(0x80000000u), 0, int(0x80000000u), 0, int(0x80000000u), 0,
                        int(0x80000000u), 0, int(0x80000000u), 0, int(0x80000000u), 0, int(0x80000000u), 0));
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim + rotary_offset;
    for (int i = 0; i < half; i += 8) {
      const __mmask16 mp = mask16(half - i), mv = mask16(2 * (half - i));
      __m512 c = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(mp, cos + i));
      __m512 s = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(mp, sin + i));
      s = _mm512_xor_ps(_mm512_xor_ps(s, sign), even_neg);
      __m512 a = _mm512_maskz_loadu_ps(mv, v + 2 * i);
      __m512 sw = _mm512_permute_ps(a, 0xb1);
      _mm512_mask_storeu_ps(v + 2 * i, mv, _mm512_add_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(sw, s)));
    }
  }
}

}  // namespace gannet::kernels::avx512
