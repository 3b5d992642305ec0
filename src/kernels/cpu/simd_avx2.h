// AVX2 building blocks for the canonical orders of canonical.h and exp.h. The 16 lanes
// of an accumulator live in two ymm registers: lo = lanes 0-7, hi = lanes 8-15.
// Include only from *_avx2.cpp files. The build passes -ffp-contract=off to every
// target (CMakeLists.txt): otherwise compilers fuse _mm256_mul_ps + _mm256_add_ps into an FMA
// and the bits change.
#pragma once

// g++ 12 reports the intrinsics' own _mm*_undefined_* helpers as uninitialized values
// once they are inlined into a kernel; the rest of each kernel file keeps the warnings.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include "kernels/cpu/denormals.h"

#include <cstdint>

#include "kernels/cpu/exp.h"

// Fully unrolls a loop over a register tile's rows or columns, so its accumulators stay
// in registers (GCC otherwise keeps acc[MR][NR] arrays in memory).
#define GANNET_UNROLL _Pragma("GCC unroll 16")

namespace gannet::kernels::avx2 {

// Canonical tree over 16 lanes held as (lo, hi): l += l+8, l+4, l+2, l+1.
inline float tree_reduce(__m256 lo, __m256 hi) {
  __m256 a = _mm256_add_ps(lo, hi);
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  __m128 d = _mm_add_ss(c, _mm_movehdup_ps(c));
  return _mm_cvtss_f32(d);
}

// exp_f32 on 8 lanes, bit-identical to the scalar one.
inline __m256 exp(__m256 x) {
  using namespace exp_const;
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kLo)), _mm256_set1_ps(kHi));
  const __m256 magic = _mm256_set1_ps(kRoundMagic);
  __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(kLog2e), magic), magic);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), xc);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kP0), r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1);
  __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  __m256 e = _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
  return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// Lanes [0, n) all ones, n in [0, 8]: a mask for _mm256_maskload_ps (stores: store_first).
inline __m256i mask8(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n < 0 ? 0 : n > 8 ? 8 : n)), idx);
}

// Stores lanes [0, n) of v at p, n clamped to [0, 8]; memory past them is not touched.
// AMD Zen's vmaskmovps store is microcoded (about 12 cycles here, against under one for a
// plain store), so a whole vector takes a plain store and a partial one goes out in
// pieces of 4, 2 and 1 floats. Use this, not _mm256_maskstore_ps, in loops.
inline void store_first(float* p, __m256 v, int64_t n) {
  if (n >= 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  if (n <= 0) return;
  __m128 part = _mm256_castps256_ps128(v);
  if (n & 4) {
    _mm_storeu_ps(p, part);
    part = _mm256_extractf128_ps(v, 1);
    p += 4;
  }
  if (n & 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(p), part);
    part = _mm_movehl_ps(part, part);
    p += 2;
  }
  if (n & 1) _mm_store_ss(p, part);
}

// Keeps the compiler from moving arithmetic on v across this point (used to fence the
// MXCSR changes below, which GCC does not treat as ordering floating-point math).
inline void pin(__m256& v) { asm volatile("" : "+x"(v)); }

using kernels::DenormalsAreZero;  // denormals.h

// 8 x 8 transpose: afterwards r[c] holds column c of the rows that came in.
inline void transpose8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

}  // namespace gannet::kernels::avx2
