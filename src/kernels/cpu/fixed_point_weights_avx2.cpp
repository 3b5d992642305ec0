// AVX2 fixed-point weights: exp by a degree-12 polynomial in double lanes, kept only where
// the reference's rounding is certain; other lanes call libm's exp as the reference does.
//
// exp(d) = 2^k * exp(r), k = round(d / ln 2), r = d - k ln 2 (Cody-Waite: k * kLn2Hi is
// exact for |k| <= 2^11), |r| <= 0.347, exp(r) by its Taylor series to r^12 (truncation
// below 2^-52 relative) in FMA Horner steps: E' is within about 2^-51 of exp(d) relative,
// and libm's exp within half an ulp (2^-53). The reference's weight is trunc(fl(E 2^40 +
// 0.5)); ours is taken from y = E' 2^40 + 0.5 when floor(y - m) == floor(y + m) for the
// margin m = E' 2^40 2^-46 + 2^-10: 2^-46 relative is 16 times the two exps' combined
// error (the kernel's test compares bits over the range and at rounding boundaries), and 2^-10 covers the
// rounding of the sums (an ulp of y is at most 2^-12 here). Then every value either exp
// could give rounds to the same integer. Lanes near a rounding boundary (about 3 % of
// the tokens close to the top one, fewer further down) fall back.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/fixed_point_weights.h"

namespace gannet::kernels::avx2 {

namespace {

// The reference's weight (fixed_point_weights.h), defined here so that this object's copy
// (compiled with AVX2 flags) is local to it.
uint64_t fpw_one(float logit, float max_logit, double inv_t, double skip_below) {
  const double d = (double(logit) - double(max_logit)) * inv_t;
  if (d < skip_below || !(d >= -30.0)) return 0;
  return uint64_t(int64_t(std::exp(d) * 0x1p40 + 0.5));
}

constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2Hi = 0x1.62e42fefa3800p-1;  // ln 2 with its low 11 bits clear
constexpr double kLn2Lo = 0x1.ef35793c76730p-45;  // ln 2 - kLn2Hi

}  // namespace

void fixed_point_weights(const float* logits, int64_t n, float max_logit, double inv_t, double skip_below,
                         uint64_t* w) {
  const __m256d vm = _mm256_set1_pd(double(max_logit)), vinv = _mm256_set1_pd(inv_t);
  const __m256d lo = _mm256_set1_pd(-30.0), vskip = _mm256_set1_pd(skip_below);
  const __m256d one = _mm256_set1_pd(1.0), half = _mm256_set1_pd(0.5), two40 = _mm256_set1_pd(0x1p40);
  const __m256d rel = _mm256_set1_pd(0x1p-46), abs_margin = _mm256_set1_pd(0x1p-10);
  const __m256d magic = _mm256_set1_pd(0x1p52);
  // 1/k! for k = 12 .. 2 (Horner from the top).
  static constexpr double kC[11] = {1.0 / 479001600, 1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320,
                                    1.0 / 5040,      1.0 / 720,      1.0 / 120,     1.0 / 24,     1.0 / 6,
                                    0.5};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(logits + i));
    const __m256d d = _mm256_mul_pd(_mm256_sub_pd(x, vm), vinv);  // the reference's d, bit for bit
    // Kept: d >= -30 and d >= skip_below (ordered: NaN is not kept).
    const __m256d keep = _mm256_and_pd(_mm256_cmp_pd(d, lo, _CMP_GE_OQ), _mm256_cmp_pd(d, vskip, _CMP_GE_OQ));
    const int keep_bits = _mm256_movemask_pd(keep);
    if (keep_bits == 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + i), _mm256_setzero_si256());
      continue;
    }
    const __m256d dc = _mm256_min_pd(_mm256_max_pd(d, lo), _mm256_setzero_pd());  // NaN -> -30
    const __m256d k = _mm256_round_pd(_mm256_mul_pd(dc, _mm256_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Hi), dc);
    r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Lo), r);
    __m256d p = _mm256_set1_pd(kC[0]);
    for (int c = 1; c < 11; ++c) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kC[c]));
    p = _mm256_fmadd_pd(p, r, one);
    p = _mm256_fmadd_pd(p, r, one);
    // 2^k for k in [-44, 0]: the exponent field.
    const __m256i ki = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k));
    const __m256d scale = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(ki, _mm256_set1_epi64x(1023)), 52));
    const __m256d e2 = _mm256_mul_pd(_mm256_mul_pd(p, scale), two40);
    const __m256d y = _mm256_add_pd(e2, half);
    const __m256d m = _mm256_fmadd_pd(e2, rel, abs_margin);
    const __m256d f = _mm256_floor_pd(y);
    const __m256d sure = _mm256_cmp_pd(_mm256_floor_pd(_mm256_sub_pd(y, m)), _mm256_floor_pd(_mm256_add_pd(y, m)), _CMP_EQ_OQ);
    // floor(y) < 2^41 as an integer: add 2^52 and take the mantissa bits.
    const __m256i wi = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(f, magic)), _mm256_castpd_si256(magic));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + i), _mm256_and_si256(wi, _mm256_castpd_si256(keep)));
    const int unsure = keep_bits & ~_mm256_movemask_pd(sure);
    if (unsure)
      for (int j = 0; j < 4; ++j)
        if (unsure >> j & 1) w[i + j] = fpw_one(logits[i + j], max_logit, inv_t, skip_below);
  }
  for (; i < n; ++i) w[i] = fpw_one(logits[i], max_logit, inv_t, skip_below);
}

}  // namespace gannet::kernels::avx2
