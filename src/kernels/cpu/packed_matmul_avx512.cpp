// AVX-512 product against packed weights (packed_weight.h): each chunk of 16 weight
// elements is decoded to f32 in registers, multiplied by its block's scale (one rounding,
// as dequant_row does) and fed to the same 16-lane FMA accumulators and tree as the f32
// kernels, so every output equals the reference's bits. Scale blocks along k are
// multiples of 16, so a chunk never straddles two scales.
#include <cmath>

#include "kernels/cpu/packed_matmul_impl.h"
#include "kernels/cpu/simd_avx512.h"

namespace gannet::kernels::avx512 {

namespace {

constexpr int kMr = 4;           // x rows per tile
constexpr int64_t kMBlock = 64;  // x rows kept in cache while w rows stream past

// 16 elements of row `r` from column c (c % 16 == 0), masked past k, decoded (not yet
// scaled).
template <WeightFormat F>
inline __m512 decode_w(const PackedWeight& w, int64_t r, int64_t c, __mmask16 mk) {
  __m512 v = _mm512_setzero_ps();
  switch (F) {
    case WeightFormat::kF32:
      return _mm512_maskz_loadu_ps(mk, static_cast<const float*>(w.data) + r * w.k + c);
    case WeightFormat::kBF16: {
      const __m256i h = _mm256_maskz_loadu_epi16(mk, static_cast<const uint16_t*>(w.data) + r * w.k + c);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case WeightFormat::kF16: {
      const __m256i h = _mm256_maskz_loadu_epi16(mk, static_cast<const uint16_t*>(w.data) + r * w.k + c);
      return _mm512_cvtph_ps(h);
    }
    case WeightFormat::kFp8Block: {
      const __m128i b = _mm_maskz_loadu_epi8(mk, static_cast<const uint8_t*>(w.data) + r * w.k + c);
      const __m512i u = _mm512_cvtepu8_epi32(b);
      const __m512i em = _mm512_and_si512(u, _mm512_set1_epi32(0x7f));
      const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x80)), 24);
      // Normal: exponent e and mantissa m move to f32 positions, bias 7 -> 127.
      const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(em, 20), _mm512_set1_epi32(120 << 23));
      // Subnormal (e == 0): m * 2^-9, exact.
      const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(em), _mm512_set1_ps(1.0f / 512.0f));
      const __mmask16 is_sub = _mm512_cmplt_epi32_mask(em, _mm512_set1_epi32(8));
      __m512 mag = _mm512_mask_blend_ps(is_sub, _mm512_castsi512_ps(normal), sub);
      const __mmask16 is_nan = _mm512_cmpeq_epi32_mask(em, _mm512_set1_epi32(0x7f));
      mag = _mm512_mask_blend_ps(is_nan, mag, _mm512_set1_ps(NAN));
      v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(mag), sign));
      break;
    }
    case WeightFormat::kMxfp4: {
      // 16 codes in 8 bytes, element 2i in the low nibble of byte i.
      const __m128i b = _mm_maskz_loadu_epi8(__mmask16((1u << ((__builtin_popcount(mk) + 1) / 2)) - 1),
                                             static_cast<const uint8_t*>(w.data) + r * ((w.k + 1) / 2) + c / 2);
      const __m512i u = _mm512_cvtepu8_epi32(b);  // lanes 0..7 hold bytes
      const __m512i idx = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
      const __m512i bytes = _mm512_permutexvar_epi32(idx, u);
      const __m512i shift = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
      const __m512i code = _mm512_and_si512(_mm512_srlv_epi32(bytes, shift), _mm512_set1_epi32(0xf));
      const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                          -2.0f, -3.0f, -4.0f, -6.0f);
      v = _mm512_maskz_permutexvar_ps(mk, code, table);
      break;
    }
    case WeightFormat::kInt8Row: {
      const __m128i b = _mm_maskz_loadu_epi8(mk, static_cast<const int8_t*>(w.data) + r * w.k + c);
      v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
      break;
    }
  }
  return v;
}

constexpr bool scaled(WeightFormat f) {
  return f == WeightFormat::kFp8Block || f == WeightFormat::kMxfp4 || f == WeightFormat::kInt8Row;
}

// y[i, j] for x rows [0, mr) and w rows [r0, r0 + nr), mr <= MR, nr <= NR: every output
// keeps its own accumulator (the canonical order); several w rows side by side give the
// decode GEMV independent FMA chains to overlap.
template <WeightFormat F, int MR, int NR>
void tile(const float* x, int64_t mr, const PackedWeight& w, int64_t r0, int64_t nr, float* y, int64_t ldy) {
  __m512 acc[MR][NR];
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t k = w.k;
  __m512 scale[NR];
  int64_t block_end = 0;  // the current scales hold up to here (block_k is shared by the rows)
  GANNET_UNROLL for (int j = 0; j < NR; ++j) scale[j] = _mm512_set1_ps(1.0f);
  for (int64_t c = 0; c < k; c += 16) {
    const __mmask16 mk = mask16(k - c);
    if constexpr (scaled(F)) {
      if (c >= block_end) {
        GANNET_UNROLL for (int j = 0; j < NR; ++j) {
          if (j < nr) scale[j] = _mm512_set1_ps(w.scale_at(r0 + j, c));
        }
        block_end = c - c % w.block_k + w.block_k;
      }
    }
    __m512 wv[NR];
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      wv[j] = j < nr ? decode_w<F>(w, r0 + j, c, mk) : _mm512_setzero_ps();
      if constexpr (scaled(F)) wv[j] = _mm512_maskz_mul_ps(mk, wv[j], scale[j]);  // lanes past k stay +0
    }
    GANNET_UNROLL for (int i = 0; i < MR; ++i) {
      if (i < mr) {
        const __m512 xv = _mm512_maskz_loadu_ps(mk, x + i * k + c);
        GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
      }
    }
  }
  for (int i = 0; i < mr && i < MR; ++i)
    for (int j = 0; j < nr && j < NR; ++j) y[i * ldy + j] = tree_reduce(acc[i][j]);
}

constexpr int kGemvNr = 4, kGemmNr = 2;

template <WeightFormat F>
void cols(const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  if (m == 1) {
    for (int64_t j = n0; j < n1; j += kGemvNr) tile<F, 1, kGemvNr>(x, 1, w, j, std::min<int64_t>(kGemvNr, n1 - j), y + j, ldy);
    return;
  }
  for (int64_t mb = 0; mb < m; mb += kMBlock) {
    const int64_t me = std::min(m, mb + kMBlock);
    for (int64_t j = n0; j < n1; j += kGemmNr)
      for (int64_t i = mb; i < me; i += kMr)
        tile<F, kMr, kGemmNr>(x + i * w.k, std::min<int64_t>(kMr, me - i), w, j, std::min<int64_t>(kGemmNr, n1 - j),
                              y + i * ldy + j, ldy);
  }
}

}  // namespace

GANNET_MATMUL_PACKED_COLS(matmul_packed_cols) {
  switch (w.format) {
    case WeightFormat::kF32: return cols<WeightFormat::kF32>(x, m, w, n0, n1, y, ldy);
    case WeightFormat::kBF16: return cols<WeightFormat::kBF16>(x, m, w, n0, n1, y, ldy);
    case WeightFormat::kF16: return cols<WeightFormat::kF16>(x, m, w, n0, n1, y, ldy);
    case WeightFormat::kFp8Block: return cols<WeightFormat::kFp8Block>(x, m, w, n0, n1, y, ldy);
    case WeightFormat::kMxfp4: return cols<WeightFormat::kMxfp4>(x, m, w, n0, n1, y, ldy);
    case WeightFormat::kInt8Row: return cols<WeightFormat::kInt8Row>(x, m, w, n0, n1, y, ldy);
  }
}

}  // namespace gannet::kernels::avx512
