// AVX-512 building blocks for the canonical orders of canonical.h and exp.h.
// Include only from *_avx512.cpp files. The build passes -ffp-contract=off to every
// target (CMakeLists.txt): otherwise compilers fuse _mm512_mul_ps + _mm512_add_ps into an FMA
// and the bits change.
#pragma once

// g++ 12 reports the intrinsics' own _mm*_undefined_* helpers as uninitialized values
// once they are inlined into a kernel; the rest of each kernel file keeps the warnings.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/exp.h"

// Fully unrolls a loop over a register tile's rows or columns, so its accumulators stay
// in registers (GCC otherwise keeps acc[MR][NR] arrays in memory).
#define GANNET_UNROLL _Pragma("GCC unroll 16")
// A kernel compiled as its own function (its registers allocated for its loop alone, not
// for the dispatcher it would be inlined into) and a lambda inlined into its loop.
#define GANNET_NOINLINE __attribute__((noinline))
#define GANNET_ALWAYS_INLINE_LAMBDA __attribute__((always_inline))

namespace gannet::kernels::avx512 {

// Keeps the compiler from moving arithmetic on v across this point (fences the MXCSR
// changes of denormals.h, which GCC does not treat as ordering floating-point math).
inline void pin(__m512& v) { asm volatile("" : "+v"(v)); }

// Canonical tree over the 16 lanes: l += l+8, l+4, l+2, l+1.
inline float tree_reduce(__m512 v) {
  __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  __m128 d = _mm_add_ss(c, _mm_movehdup_ps(c));
  return _mm_cvtss_f32(d);
}

// The canonical tree of 16 accumulators at once: returns r with r[i] = tree_reduce(a[i]).
// Every add still pairs lane l with lane l+s of the same accumulator, so the bits equal
// 16 separate tree_reduce calls; only the shuffles are shared.
inline __m512 tree_reduce16x(const __m512* a) {  // a: [16]
  // After step s=8 a vector holds two accumulators' 8-lane partials, after s=4 four
  // accumulators' 4-lane partials (in order); the last two steps leave lane 4q+i holding
  // input 4i+q, so inputs are read in that transposed order.
  __m512 b[8], c[4], d[2];
  GANNET_UNROLL
  for (int i = 0; i < 8; ++i) {
    __m512 x = a[((2 * i) % 4) * 4 + (2 * i) / 4], y = a[((2 * i + 1) % 4) * 4 + (2 * i + 1) / 4];
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xee));
  }
  GANNET_UNROLL
  for (int i = 0; i < 4; ++i) {
    __m512 x = b[2 * i], y = b[2 * i + 1];
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xdd));
  }
  GANNET_UNROLL
  for (int i = 0; i < 2; ++i) {
    __m512 x = c[2 * i], y = c[2 * i + 1];
    d[i] = _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xee));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xdd));
}

// exp_f32 on 16 lanes, bit-identical to the scalar one.
inline __m512 exp(__m512 x) {
  using namespace exp_const;
  __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kLo)), _mm512_set1_ps(kHi));
  const __m512 magic = _mm512_set1_ps(kRoundMagic);
  __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(kLog2e), magic), magic);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), xc);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), r);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kP0), r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  __m512i ni = _mm512_cvtps_epi32(n), n1 = _mm512_srai_epi32(ni, 1);
  __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  __m512 e = _mm512_mul_ps(_mm512_mul_ps(y, s1), s2);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), e, x);
}

// Lanes [0, n) set, n in [0, 16].
inline __mmask16 mask16(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }
// Lanes [0, n) set, n in [0, 32].
inline __mmask32 mask32(int64_t n) { return n >= 32 ? ~__mmask32(0) : __mmask32((1u << n) - 1); }

// 16 x 16 transpose: afterwards r[c] holds column c of the rows that came in.
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16];
  GANNET_UNROLL for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // Per 128-bit lane q, r[4i + j] below holds column 4q + j of rows 4i..4i+3.
  GANNET_UNROLL for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  __m512 o[16];
  GANNET_UNROLL for (int j = 0; j < 4; ++j) {
    const __m512 a = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), b = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    const __m512 c = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88),
                 d = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    o[j] = _mm512_shuffle_f32x4(a, c, 0x88);
    o[8 + j] = _mm512_shuffle_f32x4(a, c, 0xdd);
    o[4 + j] = _mm512_shuffle_f32x4(b, d, 0x88);
    o[12 + j] = _mm512_shuffle_f32x4(b, d, 0xdd);
  }
  GANNET_UNROLL for (int i = 0; i < 16; ++i) r[i] = o[i];
}

}  // namespace gannet::kernels::avx512
