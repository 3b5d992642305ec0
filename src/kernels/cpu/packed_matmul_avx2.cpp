// AVX2 product against packed weights (packed_weight.h), bit-identical to the scalar
// reference: each chunk of 16 weight elements is decoded to f32 in two ymm (lanes 0-7,
// 8-15), multiplied by its block's scale (one rounding, as dequant_row does) and fed to
// the canonical 16-lane FMA accumulators and tree (simd_avx2.h). Scale blocks along k are
// multiples of 16, so a chunk never straddles two scales.
//
// Decode (m == 1) streams several w rows side by side, decoding in registers; prefill
// dequantizes four w rows into a small buffer once per block of x rows and runs an f32
// tile over it, so the decode cost is shared by up to kMBlock rows of x.
//
// FP8 E4M3 goes through F16C: the code's bits moved into an f16 (same sign, exponent
// field and mantissa) read exactly value / 2^8, subnormals included, so it is multiplied
// by scale * 2^8 instead of scale. Both are one rounding of the same real product, so
// the bits agree, unless scale * 2^8 overflows; such blocks, and chunks holding a NaN
// code (0x7f / 0xff, which the f16 reads as 480 / 2^8), take the exact path instead.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/packed_matmul_impl.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/simd_avx2.h"

namespace gannet::kernels::avx2 {

namespace {

// w rows side by side in the decode GEMV, each with its own accumulator pair: 8 chains
// for the plain formats; 6 for the quantized ones, whose decode temporaries and scales
// need the other registers (4 rows spill accumulators, measured slower).
template <WeightFormat F>
constexpr int gemv_nr() {
  return F == WeightFormat::kF32 || F == WeightFormat::kBF16 || F == WeightFormat::kF16 ? 4 : 3;
}
// Prefill: kNr w rows dequantized into a buffer that stays in L1, then one x row at a
// time against all of them (8 accumulators; each x load feeds 4 FMAs). Measured 2.5x
// faster than 2 x 2 tiles, which reload x from L2 for every pair of w rows.
constexpr int kNr = 4;
constexpr int64_t kMBlock = 64;  // x rows kept in cache while w rows stream past

constexpr bool scaled(WeightFormat f) {
  return f == WeightFormat::kFp8Block || f == WeightFormat::kMxfp4 || f == WeightFormat::kInt8Row;
}

// 16 elements of a plain, MXFP4 or int8 row at p, decoded but not scaled.
template <WeightFormat F>
inline void decode(const uint8_t* p, __m256& lo, __m256& hi) {
  if constexpr (F == WeightFormat::kF32) {
    lo = _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    hi = _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8);
  } else if constexpr (F == WeightFormat::kBF16) {
    const __m256i l = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(l, 16));
    hi = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  } else if constexpr (F == WeightFormat::kF16) {
    lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  } else if constexpr (F == WeightFormat::kMxfp4) {
    // 16 codes in 8 bytes, element 2i in the low nibble of byte i. Every E2M1 value is
    // an f16 with a zero low byte, so one byte shuffle looks up the high bytes.
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m128i code = _mm_unpacklo_epi8(_mm_and_si128(b, nib), _mm_and_si128(_mm_srli_epi16(b, 4), nib));
    const __m128i table = _mm_setr_epi8(0x00, 0x38, 0x3c, 0x3e, 0x40, 0x42, 0x44, 0x46, char(0x80), char(0xb8),
                                        char(0xbc), char(0xbe), char(0xc0), char(0xc2), char(0xc4), char(0xc6));
    const __m128i high = _mm_shuffle_epi8(table, code);
    lo = _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(), high));
    hi = _mm256_cvtph_ps(_mm_unpackhi_epi8(_mm_setzero_si128(), high));
  } else if constexpr (F == WeightFormat::kInt8Row) {
    lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))));
  }
}

// 16 E4M3 codes as f16 (see the top of the file): exactly value / 2^8; NaN codes read
// as 480 / 2^8.
inline void fp8_div256(__m128i b, __m256& lo, __m256& hi) {
  // Sign-extended to 16 bits and shifted by 7, the code is the f16 except for bit 14,
  // which holds a copy of the sign.
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(0xbfff));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// As dequant_row: NaN codes give the reference's NaN, then one rounding of value * s
// (the * 2^8 undoing the f16 bias is exact). Out of line: the hot loop keeps its
// registers for the accumulators.
[[gnu::noinline]] void fp8_exact(const uint8_t* p, float s, float* lo, float* hi) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m256 l, h;
  fp8_div256(b, l, h);
  const __m128i nan = _mm_cmpeq_epi8(_mm_and_si128(b, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
  const __m256 qnan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
  l = _mm256_blendv_ps(l, qnan, _mm256_castsi256_ps(_mm256_cvtepi8_epi32(nan)));
  h = _mm256_blendv_ps(h, qnan, _mm256_castsi256_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(nan, 8))));
  const __m256 k256 = _mm256_set1_ps(256.0f), sv = _mm256_set1_ps(s);
  _mm256_storeu_ps(lo, _mm256_mul_ps(_mm256_mul_ps(l, k256), sv));
  _mm256_storeu_ps(hi, _mm256_mul_ps(_mm256_mul_ps(h, k256), sv));
}

// The current scale block of NR rows (block_k is shared by the rows). The scales are
// read through row pointers rather than scale_at, whose divisions and libm call cost
// more than decoding a 32-element MXFP4 block.
template <int NR>
struct Scales {
  __m256 mul[NR];            // a decoded chunk's multiplier: the scale (fp8: scale * 2^8)
  float s[NR];               // the scales, for the fp8 exact path
  bool exact = false;        // fp8: some scale * 2^8 overflows
  int64_t end = 0;           // the scales hold up to this column
  const uint8_t* row[NR]{};  // the rows' scale rows; nullptr: no scales, all 1
};

template <WeightFormat F, int NR>
inline void init_scales(const PackedWeight& w, int64_t r0, Scales<NR>& sc) {
  if constexpr (scaled(F)) {
    if (!w.scales) return;
    const int64_t row_bytes = w.scale_cols() * int64_t(dtype_size(w.scale_dtype));
    GANNET_UNROLL for (int j = 0; j < NR; ++j)
      sc.row[j] = static_cast<const uint8_t*>(w.scales) + (r0 + j) / w.block_n * row_bytes;
  }
}

// Called at every chunk c (in order); loads the next block's scales when c reaches it.
template <WeightFormat F, int NR>
inline void update_scales(const PackedWeight& w, int64_t c, Scales<NR>& sc) {
  if constexpr (scaled(F)) {
    if (c < sc.end) return;
    // int8-row: the row's one scale is column 0's (as dequant_row), whatever block_k says.
    const bool one_block = F == WeightFormat::kInt8Row || !sc.row[0];
    const int64_t b = one_block ? 0 : c / w.block_k;
    sc.exact = false;
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      float s = 1.0f;
      if (sc.row[j] && w.scale_dtype == DType::F8_E8M0) s = e8m0_to_f32(sc.row[j][b]);
      else if (sc.row[j]) std::memcpy(&s, sc.row[j] + b * 4, 4);  // a mapped tensor need not be aligned
      sc.s[j] = s;
      if constexpr (F == WeightFormat::kFp8Block) {
        const float s256 = s * 256.0f;
        sc.exact |= std::isinf(s256) && !std::isinf(s);
        sc.mul[j] = _mm256_set1_ps(s256);
      } else {
        sc.mul[j] = _mm256_set1_ps(s);
      }
    }
    sc.end = one_block ? w.k : (b + 1) * w.block_k;
  }
}

// Chunk at p of NR rows (row j at p + j * stride), decoded and scaled.
template <WeightFormat F, int NR>
inline void decode_rows(const uint8_t* p, int64_t stride, const Scales<NR>& sc, __m256 (&lo)[NR],
                        __m256 (&hi)[NR]) {
  if constexpr (F == WeightFormat::kFp8Block) {
    // A NaN code has all 7 low bits set: the byte-wise max of the rows' low bits finds one.
    __m128i b[NR], low = _mm_setzero_si128();
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      b[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j * stride));
      low = _mm_max_epu8(low, _mm_and_si128(b[j], _mm_set1_epi8(0x7f)));
    }
    const __m128i nan = _mm_cmpeq_epi8(low, _mm_set1_epi8(0x7f));
    if (__builtin_expect(sc.exact || !_mm_testz_si128(nan, nan), 0)) {
      alignas(32) float v[NR][16];
      GANNET_UNROLL for (int j = 0; j < NR; ++j) {
        fp8_exact(p + j * stride, sc.s[j], v[j], v[j] + 8);
        lo[j] = _mm256_load_ps(v[j]);
        hi[j] = _mm256_load_ps(v[j] + 8);
      }
      return;
    }
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      fp8_div256(b[j], lo[j], hi[j]);
      lo[j] = _mm256_mul_ps(lo[j], sc.mul[j]);
      hi[j] = _mm256_mul_ps(hi[j], sc.mul[j]);
    }
  } else {
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      decode<F>(p + j * stride, lo[j], hi[j]);
      if constexpr (scaled(F)) {
        lo[j] = _mm256_mul_ps(lo[j], sc.mul[j]);
        hi[j] = _mm256_mul_ps(hi[j], sc.mul[j]);
      }
    }
  }
}

// Calls f(c, lo, hi, tail) for every 16-element chunk of w rows [r0, r0 + NR), decoded
// and scaled. The last, partial chunk is decoded from zero-padded copies (a mapped tensor
// may end right after its last row) and its lanes past k are +0, as in the reference's
// padded fma(0, 0, acc) even when a scale is infinite or NaN.
// Prefetch: the same columns of the next NR rows are fetched while these are decoded.
// Quantized rows are short (2 KiB of int8 at k = 2048), too short for the hardware
// prefetcher to ramp up on; this measured fp8 3.4 -> 5.5 GB/s, int8 4.2 -> 6.4 (DRAM).
// A prefetch is a hint: past the tensor's end it reads nothing and cannot fault.
template <WeightFormat F, int NR, bool Prefetch, class Fn>
[[gnu::always_inline]] inline void for_each_chunk(const PackedWeight& w, int64_t r0, Fn&& f) {
  const int64_t k = w.k, stride = packed_bytes(F, k), kfull = k / 16 * 16;
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + r0 * stride;
  Scales<NR> sc;
  init_scales<F>(w, r0, sc);
  __m256 lo[NR], hi[NR];
  const char* next = reinterpret_cast<const char*>(base + NR * stride);  // the next tile's rows
  for (int64_t c = 0; c < kfull; c += 16) {
    update_scales<F>(w, c, sc);
    if constexpr (Prefetch) {
      if ((packed_bytes(F, c) & 63) == 0)  // once per cache line of progress
        GANNET_UNROLL for (int j = 0; j < NR; ++j) _mm_prefetch(next + j * stride + packed_bytes(F, c), _MM_HINT_T0);
    }
    decode_rows<F>(base + packed_bytes(F, c), stride, sc, lo, hi);
    f(c, lo, hi, false);
  }
  if (kfull < k) {
    constexpr int64_t kChunkBytes = packed_bytes(F, 16);
    alignas(32) uint8_t tail[NR][kChunkBytes] = {};
    const int64_t off = packed_bytes(F, kfull);
    GANNET_UNROLL for (int j = 0; j < NR; ++j) std::memcpy(tail[j], base + j * stride + off, size_t(stride - off));
    update_scales<F>(w, kfull, sc);
    decode_rows<F>(tail[0], kChunkBytes, sc, lo, hi);
    const __m256 ml = _mm256_castsi256_ps(mask8(k - kfull)), mh = _mm256_castsi256_ps(mask8(k - kfull - 8));
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      lo[j] = _mm256_and_ps(lo[j], ml);
      hi[j] = _mm256_and_ps(hi[j], mh);
    }
    f(kfull, lo, hi, true);
  }
}

// y[0, j] for w rows [r0, r0 + NR): one accumulator pair per row, NR independent chains.
template <WeightFormat F, int NR>
void gemv(const float* x, const PackedWeight& w, int64_t r0, float* y) {
  __m256 acc[NR][2];
  GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  const int64_t k = w.k;
  for_each_chunk<F, NR, true>(w, r0, [&](int64_t c, const __m256(&lo)[NR], const __m256(&hi)[NR], bool tail) {
    __m256 xl, xh;
    if (tail) {
      xl = _mm256_maskload_ps(x + c, mask8(k - c));
      xh = _mm256_maskload_ps(x + c + 8, mask8(k - c - 8));
    } else {
      xl = _mm256_loadu_ps(x + c);
      xh = _mm256_loadu_ps(x + c + 8);
    }
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      acc[j][0] = _mm256_fmadd_ps(xl, lo[j], acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(xh, hi[j], acc[j][1]);
    }
  });
  GANNET_UNROLL for (int j = 0; j < NR; ++j) y[j] = tree_reduce(acc[j][0], acc[j][1]);
}

// w rows [r0, r0 + NR) dequantized into buf rows of ld (k rounded up to 16, +0 past k).
template <WeightFormat F, int NR>
void dequant(const PackedWeight& w, int64_t r0, float* buf, int64_t ld) {
  for_each_chunk<F, NR, false>(w, r0, [&](int64_t c, const __m256(&lo)[NR], const __m256(&hi)[NR], bool) {
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      _mm256_storeu_ps(buf + j * ld + c, lo[j]);
      _mm256_storeu_ps(buf + j * ld + c + 8, hi[j]);
    }
  });
}

// y[0, 0:NR] for one x row against NR dequantized rows; wb: [NR, ld], +0 past k.
template <int NR>
void tile(const float* x, int64_t k, const float* wb, int64_t ld, float* y) {
  __m256 acc[NR][2];
  GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  auto step = [&](int64_t c, __m256 xl, __m256 xh) {
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      acc[j][0] = _mm256_fmadd_ps(xl, _mm256_loadu_ps(wb + j * ld + c), acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(xh, _mm256_loadu_ps(wb + j * ld + c + 8), acc[j][1]);
    }
  };
  const int64_t kfull = k / 16 * 16;
  for (int64_t c = 0; c < kfull; c += 16) step(c, _mm256_loadu_ps(x + c), _mm256_loadu_ps(x + c + 8));
  if (kfull < k) {  // x is read masked: its row may end the buffer
    const int64_t t = k - kfull;
    step(kfull, _mm256_maskload_ps(x + kfull, mask8(t)), _mm256_maskload_ps(x + kfull + 8, mask8(t - 8)));
  }
  GANNET_UNROLL for (int j = 0; j < NR; ++j) y[j] = tree_reduce(acc[j][0], acc[j][1]);
}

// ---- The decode GEMV of the scaled formats on whole chunks ----
//
// NR rows side by side with named-in-registers accumulators, the scales read once per
// scale block, and software prefetch once per 64-byte line: into L1 a few lines ahead in
// the same row and into L2 well ahead (past the row end into the next tiles' rows, which
// are contiguous). Same products in the same order as gemv(), so the same bits; k and the
// scale blocks along k must be whole 16-element chunks.
//
// Decoders, per 16 elements of a row:
//   fp8 (fp8_plain: no NaN code, finite scales below 2^8; the load-time scan)  the f16 route
//        of fp8_div256 times scale * 2^8, with no per-chunk NaN test;
//   fp8 folded (2-5 rows, power-of-two scales already in x; fp8_folded_few_rows)  the
//        E4M3 bits shifted straight into f32, no multiply (rows with subnormal codes
//        run unfolded, by the f16 route);
//   int8  sign-extend, convert (exact), times the row's scale;
//   bf16 (few rows only)  widened and shifted into f32, no scale;
//   mxfp4 (a whole 32-element scale block at a time, see mxfp4_block).

// kBF16: few-row products only; kFp8Folded: few-row FP8 against x with the scale folded
// in (fp8_folded_few_rows: no scale in the decode).
enum class Fast { kFp8Plain, kInt8, kMxfp4Lanes, kBF16, kFp8Folded };

template <Fast D>
constexpr WeightFormat fast_format() {
  return D == Fast::kFp8Plain || D == Fast::kFp8Folded ? WeightFormat::kFp8Block
         : D == Fast::kInt8     ? WeightFormat::kInt8Row
         : D == Fast::kBF16     ? WeightFormat::kBF16
                                : WeightFormat::kMxfp4;
}

constexpr int64_t kNearBytes = 256;
constexpr int64_t kFarBytes = 8192;

// The multiplier of scale block b of a row's scales at `srow`: the scale, times 2^8 for
// fp8's f16 route.
template <Fast D>
[[gnu::always_inline]] inline __m256 fast_scale(bool e8m0, const uint8_t* srow, int64_t b) {
  float s;
  if (e8m0) s = kE8m0Values[srow[b]];
  else std::memcpy(&s, srow + b * 4, 4);
  if constexpr (D == Fast::kFp8Plain) return _mm256_set1_ps(s * 256.0f);
  return _mm256_set1_ps(s);
}

// 16 elements of the row at p from column c, decoded and scaled (t: fast_scale's value).
template <Fast D>
[[gnu::always_inline]] inline void fast_decode(const uint8_t* p, int64_t c, __m256 t, __m256& lo, __m256& hi) {
  if constexpr (D == Fast::kFp8Plain) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c));
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(int16_t(0xbfff)));
    lo = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), t);
    hi = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), t);
  } else if constexpr (D == Fast::kFp8Folded) {  // unscaled (the scale is in x): t unused
    // E4M3 straight into f32 bits, v / 2^120 exactly (see fp8_scale_x)
    (void)t;
    const __m256i keep = _mm256_set1_epi32(int32_t(0x87ffffffu));
    const __m256i l = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + c)));
    const __m256i h = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + c + 8)));
    lo = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(l, 20), keep));
    hi = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(h, 20), keep));
  } else if constexpr (D == Fast::kBF16) {  // unscaled: t unused
    (void)t;
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c * 2));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16));
    hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16));
  } else if constexpr (D == Fast::kInt8) {
    lo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + c)))), t);
    hi = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + c + 8)))), t);
  }
}

// ---- MXFP4 by byte lookups ----
//
// Every E2M1 value times every E8M0 scale, rounded once to f32 as dequant_row does, has
// zero low 16 bits (at most one mantissa bit above the normal range's 2^-126 and 2^-128 at
// the bottom of the subnormals; overflow is an infinity, a NaN scale 0x7fc00000), so a
// scaled element is two bytes. mxfp4_tables holds, for each E8M0 code, the low and the
// high of those two bytes for the 16 codes, made once by the reference's multiply and
// checked. A 32-element block (16 bytes, element 2i in the low nibble of byte i) is then:
// the bytes broadcast to both halves, the high half shifted by 4 and both masked (lane 0
// holds the even elements' codes, lane 1 the odd); two vpshufb fetch the two bytes; a
// byte interleave makes their words, and the f32 values are the even words shifted up and
// the odd words masked, with no multiply. The elements come out in the lanes
// [0 4 8 12 1 5 9 13] (f0), [2 6 10 14 3 7 11 15] (f1) and the same plus 16 (f2, f3); x is
// loaded in that order (mxfp4_permute_x) and the accumulators go back to canonical lanes
// before the tree: every element still joins its canonical chain (lane c % 16) in k
// order, so the bits are the reference's. After the loads, 10 vector-integer operations
// (4 of them shuffles) and 4 FMAs per 32 weights, where decoding 16 at a time through vpermps and a
// sign took 22: one thread's 2048 x 2048 GEMV on Zen 3 went from 3.8 to 6-7 GB/s, and to
// 10 % fewer cycles again when the words were widened by shift and mask instead of two
// more interleaves with zero.
struct alignas(32) Mxfp4Table {
  uint8_t lo[16];
  uint8_t hi[16];
};

const Mxfp4Table* mxfp4_tables() {
  static const Mxfp4Table* const tables = [] {
    static Mxfp4Table t[256];
    for (int e = 0; e < 256; ++e)
      for (int c = 0; c < 16; ++c) {
        const float v = fp4_e2m1_to_f32(uint8_t(c)) * kE8m0Values[size_t(e)];  // as dequant_row
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        GANNET_CHECK((bits & 0xffffu) == 0 || std::isnan(v), "MXFP4 table: value with low bits");
        if (std::isnan(v)) bits = 0x7fc00000u;  // NaN compares as NaN; any payload will do
        t[e].lo[c] = uint8_t(bits >> 16);
        t[e].hi[c] = uint8_t(bits >> 24);
      }
    return t;
  }();
  return tables;
}

// x (n a multiple of 16) in the MXFP4 lanes: per 16 elements [0 4 8 12 1 5 9 13] then
// [2 6 10 14 3 7 11 15].
inline void mxfp4_permute_x(const float* x, int64_t n, float* out) {
  // a, b: x[c..c+7], x[c+8..c+15] as pairs (a0 a4) (a2 a6) (a1 a5) (a3 a7); the low pairs
  // of a and b interleaved are [a0 a4 b0 b4 a1 a5 b1 b5], the high pairs the rest
  const __m256i pairs = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
  for (int64_t c = 0; c < n; c += 16) {
    const __m256d a = _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_loadu_ps(x + c), pairs));
    const __m256d b = _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_loadu_ps(x + c + 8), pairs));
    _mm256_storeu_ps(out + c, _mm256_castpd_ps(_mm256_unpacklo_pd(a, b)));
    _mm256_storeu_ps(out + c + 8, _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
  }
}

// Accumulators of the MXFP4 lanes (a: [0 4 8 12 1 5 9 13], b: [2 6 10 14 3 7 11 15])
// back in canonical lanes.
inline void mxfp4_unpermute(__m256 a, __m256 b, __m256& lo, __m256& hi) {
  const __m256i inv = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  lo = _mm256_permutevar8x32_ps(_mm256_unpacklo_ps(a, b), inv);
  hi = _mm256_permutevar8x32_ps(_mm256_unpackhi_ps(a, b), inv);
}

// The 32-element scale block at column c (a multiple of 32) of NR rows against MR x rows
// (in the MXFP4 lanes, x row i at x + i * ldx); s: the rows' E8M0 scale rows.
template <int MR, int NR>
[[gnu::always_inline]] inline void mxfp4_block(const float* x, int64_t ldx, const uint8_t* const (&p)[NR],
                                               const uint8_t* const (&s)[NR], const Mxfp4Table* tables, int64_t c,
                                               __m256 (&al)[MR][NR], __m256 (&ah)[MR][NR]) {
  const __m256i shift = _mm256_setr_epi64x(0, 0, 4, 4), nib = _mm256_set1_epi8(0x0f);
  const __m256i high = _mm256_set1_epi32(int32_t(0xffff0000u));
  GANNET_UNROLL for (int j = 0; j < NR; ++j) {
    const Mxfp4Table& t = tables[s[j][c / 32]];
    const __m256i tlo = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.lo)));
    const __m256i thi = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.hi)));
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p[j] + c / 2)));
    const __m256i code = _mm256_and_si256(_mm256_srlv_epi64(v, shift), nib);
    const __m256i bl = _mm256_shuffle_epi8(tlo, code), bh = _mm256_shuffle_epi8(thi, code);
    const __m256i w0 = _mm256_unpacklo_epi8(bl, bh), w1 = _mm256_unpackhi_epi8(bl, bh);
    // even words by a shift, odd words by a mask: two shuffles fewer than unpacking with zero
    const __m256 f0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
    const __m256 f1 = _mm256_castsi256_ps(_mm256_and_si256(w0, high));
    const __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
    const __m256 f3 = _mm256_castsi256_ps(_mm256_and_si256(w1, high));
    GANNET_UNROLL for (int i = 0; i < MR; ++i) {
      const float* xi = x + i * ldx + c;
      al[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xi), f0, al[i][j]);
      ah[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 8), f1, ah[i][j]);
      al[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 16), f2, al[i][j]);
      ah[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 24), f3, ah[i][j]);
    }
  }
}

// One chunk of NR w rows at column c against MR x rows (x row i at x + i * ldx) into the
// accumulators.
template <Fast D, int MR, int NR>
[[gnu::always_inline]] inline void fast_chunk(const float* x, int64_t ldx, const uint8_t* const (&p)[NR], int64_t c,
                                              const __m256 (&t)[NR], __m256 (&al)[MR][NR], __m256 (&ah)[MR][NR]) {
  GANNET_UNROLL for (int j = 0; j < NR; ++j) {
    __m256 lo, hi;
    fast_decode<D>(p[j], c, t[j], lo, hi);
    GANNET_UNROLL for (int i = 0; i < MR; ++i) {
      al[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + c), lo, al[i][j]);
      ah[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + c + 8), hi, ah[i][j]);
    }
  }
}

// y[i * ldy + j] for MR x rows and w rows [r0, r0 + nr), nr <= NR (missing rows repeat
// the last and are not stored). x: in D's lanes, rows k apart. MR > 1: a few rows (a
// speculative verify step), each w chunk decoded once for all of them.
//
// Columns [kbeg, kend) only, where a k-block (kbeg a multiple of 256): the accumulators
// start from `part` when kbeg > 0 and go back to it when kend < k, exactly as they were,
// so every lane's chain still runs in k order (see few_rows_k_block).
template <Fast D, int MR, int NR>
[[gnu::noinline]] void gemv_fast(const float* x, const PackedWeight& w, int64_t r0, int64_t nr, float* y, int64_t ldy,
                                 int64_t kbeg = 0, int64_t kend = -1, __m256* part = nullptr) {
  constexpr WeightFormat F = fast_format<D>();
  constexpr bool kUnscaled = D == Fast::kBF16 || D == Fast::kFp8Folded;
  const int64_t k = w.k, rb = w.row_bytes(), nb = kUnscaled ? 0 : w.scale_cols();
  // int8: the row's one scale (column 0's); bf16 and folded FP8: none (one "block", t unused)
  const int64_t bk = D == Fast::kInt8 || kUnscaled ? k : w.block_k;
  const bool e8m0 = w.scale_dtype == DType::F8_E8M0;
  const int64_t sbytes = e8m0 ? 1 : 4;
  const uint8_t* p[NR];
  const uint8_t* s[NR];
  __m256 al[MR][NR], ah[MR][NR], t[NR];
  GANNET_UNROLL for (int j = 0; j < NR; ++j) {
    const int64_t r = r0 + std::min<int64_t>(j, nr - 1);
    p[j] = static_cast<const uint8_t*>(w.data) + r * rb;
    s[j] = kUnscaled ? nullptr : static_cast<const uint8_t*>(w.scales) + (r / w.block_n) * nb * sbytes;
    t[j] = _mm256_setzero_ps();
    GANNET_UNROLL for (int i = 0; i < MR; ++i) {
      al[i][j] = kbeg > 0 ? part[2 * (i * NR + j)] : _mm256_setzero_ps();
      ah[i][j] = kbeg > 0 ? part[2 * (i * NR + j) + 1] : _mm256_setzero_ps();
    }
  }
  if (kend < 0) kend = k;
  int64_t blk = kbeg / bk, next_block = (blk + 1) * bk;  // the scale block of column kbeg
  if constexpr (!kUnscaled && D != Fast::kMxfp4Lanes)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) t[j] = fast_scale<D>(e8m0, s[j], blk);
  const Mxfp4Table* const tables = D == Fast::kMxfp4Lanes ? mxfp4_tables() : nullptr;
  constexpr int64_t kLineElems = 64 * 16 / packed_bytes(F, 16);  // elements in one 64-byte line
  for (int64_t c0 = kbeg; c0 < kend; c0 += kLineElems) {
    const int64_t at = packed_bytes(F, c0);
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(p[j] + at + kNearBytes), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p[j] + at + kFarBytes), _MM_HINT_T2);
    }
    const int64_t c1 = std::min(kend, c0 + kLineElems);
    if constexpr (D == Fast::kMxfp4Lanes) {
      for (int64_t c = c0; c < c1; c += 32) mxfp4_block<MR, NR>(x, k, p, s, tables, c, al, ah);
      continue;
    }
    for (int64_t c = c0; c < c1; c += 16) {
      if constexpr (!kUnscaled && D != Fast::kMxfp4Lanes) {
        if (c == next_block) {  // the next scale block
          ++blk, next_block += bk;
          GANNET_UNROLL for (int j = 0; j < NR; ++j) t[j] = fast_scale<D>(e8m0, s[j], blk);
        }
      }
      fast_chunk<D, MR, NR>(x, k, p, c, t, al, ah);
    }
  }
  if (kend < k) {
    GANNET_UNROLL for (int i = 0; i < MR; ++i)
      GANNET_UNROLL for (int j = 0; j < NR; ++j) {
        part[2 * (i * NR + j)] = al[i][j];
        part[2 * (i * NR + j) + 1] = ah[i][j];
      }
    return;
  }
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    for (int j = 0; j < nr && j < NR; ++j) {
      __m256 lo = al[i][j], hi = ah[i][j];
      if constexpr (D == Fast::kMxfp4Lanes) mxfp4_unpermute(al[i][j], ah[i][j], lo, hi);
      y[i * ldy + j] = tree_reduce(lo, hi);
    }
}

// The fast GEMV's decoder for w, or false where its conditions do not hold. bf16 only with
// `few` (2-8 x rows; one row has its own GEMV).
inline bool fast_gemv_for(const PackedWeight& w, Fast* d, bool few = false) {
  if (w.k <= 0 || w.k % 16) return false;
  if (w.format == WeightFormat::kBF16) {
    *d = Fast::kBF16;
    return few;
  }
  if (!w.scales) return false;
  switch (w.format) {
    case WeightFormat::kFp8Block: *d = Fast::kFp8Plain; return w.fp8_plain && w.block_k % 16 == 0;
    case WeightFormat::kInt8Row: *d = Fast::kInt8; return true;
    case WeightFormat::kMxfp4:  // whole 32-element blocks (mxfp4_block)
      *d = Fast::kMxfp4Lanes;
      return w.k % 32 == 0 && w.block_k == 32 && w.block_n == 1 && w.scale_dtype == DType::F8_E8M0;
    default: return false;
  }
}

// w rows side by side in the one-row fast GEMV (8 accumulators; MXFP4 too, now that its
// block decode needs no per-row scale or sign registers).
constexpr int kFastNr = 4;

// ---- FP8 with power-of-two scales (E8M0, or f32 powers of two): the scale folded into x ----
//
// With s = 2^e, the reference's element is round(v * s) for the E4M3 value v, and E4M3
// straight into f32 bits reads v / 2^120 exactly (the sign-extended byte shifted left by
// 20 puts exponent and mantissa at bits 20-26; clearing bits 27-30 leaves the sign; the
// subnormal codes become f32 subnormals, still exact, but slow on Intel: rows holding one
// take the f16 route, see gemv_fp8_folded). When v * s is exact in f32 (no
// code's product leaves the normal range: an E8M0 code of 10 or more suffices, as |v| is
// at least 2^-9) and x * s * 2^120 does not overflow (fp8_plain keeps s below 2^8, so the
// factor is 2^3 to 2^127 and scaling up loses no bit), x * (v * s) and
// (x * s * 2^120) * (v / 2^120) are the same real product, so every FMA rounds the same.
// x is scaled once per scale block row (32 or 128 w rows share it) and the GEMV has no
// per-weight multiply. On Zen 3 this runs 20-25 % fewer cycles per weight than the f16
// route with its multiply. A block row whose blocks miss a condition runs gemv_fast.

// xs[c] = x[c] * 2^(e(c / bk) + 120) for w's scale row `srow`, or false where some block
// misses the conditions above (or x holds an infinity or NaN). f32 scales fold where they
// are powers of two (a positive f32 with no mantissa bits is 2^(E - 127) for its exponent
// field E, the E8M0 code of the same value): `--quantize fp8` makes such scales, as do
// checkpoints whose FP8 scale format is ue8m0.
inline bool fp8_scale_x(const float* x, int64_t k, int64_t bk, bool e8m0, const uint8_t* srow, float* xs) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 bad = _mm256_setzero_ps();
  for (int64_t c0 = 0, b = 0; c0 < k; c0 += bk, ++b) {
    int code = srow[b];
    if (!e8m0) {
      uint32_t u;
      std::memcpy(&u, srow + b * 4, 4);
      if (u & 0x807fffffu) return false;  // negative, or not a power of two
      code = int(u >> 23);
    }
    if (code < 10 || code > 134) return false;
    const __m256 mul = _mm256_set1_ps(kE8m0Values[size_t(code)] * 0x1p120f);  // 2^(e + 120), exact
    for (int64_t c = c0; c < std::min(k, c0 + bk); c += 8) {
      const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(x + c), mul);
      // not (|r| < inf): overflow, an infinity or NaN (the compare is ordered)
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(r, abs_mask), inf, _CMP_NLT_UQ));
      _mm256_storeu_ps(xs + c, r);
    }
  }
  return _mm256_testz_ps(bad, bad);
}

// y[j] for w rows [r0, r0 + nr), nr <= NR (missing rows repeat the last), all in one
// scale block row; xs from fp8_scale_x for that block row. Rows with a bit in kHalf
// (marked in fp8_subnormal_rows) take the f16 route against x instead (fast_decode's
// kFp8Plain times its scale): the same bits, with no f32 subnormal operand, which costs a
// microcode assist per FMA that meets one on Intel.
template <int NR, unsigned kHalf>
[[gnu::noinline]] void gemv_fp8_folded(const float* x, const float* xs, const PackedWeight& w, int64_t r0,
                                       int64_t nr, float* y) {
  const int64_t k = w.k, rb = w.row_bytes(), bk = w.block_k;
  const bool e8m0 = w.scale_dtype == DType::F8_E8M0;
  const int64_t srow_bytes = w.scale_cols() * (e8m0 ? 1 : 4);
  const uint8_t* p[NR];
  const uint8_t* s[NR];
  __m256 al[NR], ah[NR], t[NR];
  GANNET_UNROLL for (int j = 0; j < NR; ++j) {
    const int64_t r = r0 + std::min<int64_t>(j, nr - 1);
    p[j] = static_cast<const uint8_t*>(w.data) + r * rb;
    s[j] = static_cast<const uint8_t*>(w.scales) + (r / w.block_n) * srow_bytes;
    al[j] = ah[j] = t[j] = _mm256_setzero_ps();
  }
  int64_t blk = -1, next_block = 0;
  const __m256i keep = _mm256_set1_epi32(int32_t(0x87ffffffu));  // sign, exponent and mantissa bits
  for (int64_t c0 = 0; c0 < k; c0 += 64) {  // one 64-byte line of each row
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(p[j] + c0 + kNearBytes), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p[j] + c0 + kFarBytes), _MM_HINT_T2);
    }
    const int64_t c1 = std::min(k, c0 + 64);
    for (int64_t c = c0; c < c1; c += 16) {
      if constexpr (kHalf != 0) {
        if (c == next_block) {  // the next scale block (block_k is a multiple of 16)
          ++blk, next_block += bk;
          GANNET_UNROLL for (int j = 0; j < NR; ++j)
            if (kHalf >> j & 1) t[j] = fast_scale<Fast::kFp8Plain>(e8m0, s[j], blk);
        }
      }
      const __m256 xl = _mm256_loadu_ps(xs + c), xh = _mm256_loadu_ps(xs + c + 8);
      GANNET_UNROLL for (int j = 0; j < NR; ++j) {
        if (kHalf >> j & 1) {
          __m256 lo, hi;
          fast_decode<Fast::kFp8Plain>(p[j], c, t[j], lo, hi);
          al[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), lo, al[j]);
          ah[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 8), hi, ah[j]);
          continue;
        }
        const __m256i l = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p[j] + c)));
        const __m256i h = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p[j] + c + 8)));
        al[j] = _mm256_fmadd_ps(xl, _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(l, 20), keep)), al[j]);
        ah[j] = _mm256_fmadd_ps(xh, _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(h, 20), keep)), ah[j]);
      }
    }
  }
  for (int j = 0; j < nr && j < NR; ++j) y[j] = tree_reduce(al[j], ah[j]);
}

// gemv_fp8_folded<4, mask> for each of the 16 masks of a tile's marked rows.
using Fp8FoldedGemv = void (*)(const float*, const float*, const PackedWeight&, int64_t, int64_t, float*);
template <unsigned... kMasks>
constexpr std::array<Fp8FoldedGemv, sizeof...(kMasks)> fp8_folded_table(std::integer_sequence<unsigned, kMasks...>) {
  return {&gemv_fp8_folded<4, kMasks>...};
}
constexpr auto kFp8Folded4 = fp8_folded_table(std::make_integer_sequence<unsigned, 16>{});

template <Fast D, int MR>
void gemv_fast_rows(const float* x, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy);

// w rows [n0, n1) at one x row, FP8 with E8M0 or power-of-two f32 scales (k and block_k
// multiples of 16), one scale block row at a time.
inline void fp8_folded_rows(const float* x, const PackedWeight& w, int64_t n0, int64_t n1, float* y) {
  float* const xs = thread_scratch(ScratchSlot::kPackedAvx2XLanes, size_t(w.k));
  const auto* scales = static_cast<const uint8_t*>(w.scales);
  const bool e8m0 = w.scale_dtype == DType::F8_E8M0;
  const int64_t srow_bytes = w.scale_cols() * (e8m0 ? 1 : 4);
  for (int64_t b0 = n0; b0 < n1;) {
    const int64_t br = b0 / w.block_n, b1 = std::min(n1, (br + 1) * w.block_n);
    if (fp8_scale_x(x, w.k, w.block_k, e8m0, scales + br * srow_bytes, xs)) {
      for (int64_t j = b0; j < b1; j += 4) {
        const int64_t nr = std::min<int64_t>(4, b1 - j);
        kFp8Folded4[w.fp8_subnormal_mask4(j, nr)](x, xs, w, j, nr, y + j);
      }
    } else {
      gemv_fast_rows<Fast::kFp8Plain, 1>(x, w, b0, b1, y, 1);
    }
    b0 = b1;
  }
}

// The same for MR (2-5) x rows (a speculative verify step): each x row scaled per scale
// block row, then gemv_fast's few-row product with a decode that has no multiply. The two
// multiplies per 16 weights it saves share the FMA pipes with the 2 * MR FMAs. A block
// row where some x row misses fp8_scale_x's conditions runs the unfolded product.
template <int MR>
void fp8_folded_few_rows(const float* x, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t k = w.k;
  float* const xs = thread_scratch(ScratchSlot::kPackedAvx2XLanes, size_t(MR * k));
  const auto* scales = static_cast<const uint8_t*>(w.scales);
  const bool e8m0 = w.scale_dtype == DType::F8_E8M0;
  const int64_t srow_bytes = w.scale_cols() * (e8m0 ? 1 : 4);
  for (int64_t b0 = n0; b0 < n1;) {
    const int64_t br = b0 / w.block_n, b1 = std::min(n1, (br + 1) * w.block_n);
    bool folded = true;
    for (int i = 0; i < MR && folded; ++i)
      folded = fp8_scale_x(x + i * k, k, w.block_k, e8m0, scales + br * srow_bytes, xs + i * k);
    if (!folded) {
      gemv_fast_rows<Fast::kFp8Plain, MR>(x, w, b0, b1, y, ldy);
    } else {
      // runs of rows alike: those marked in fp8_subnormal_rows unfolded, through f16
      for (int64_t r = b0; r < b1;) {
        const bool half = w.fp8_subnormal_row(r);
        int64_t e = r + 1;
        while (e < b1 && w.fp8_subnormal_row(e) == half) ++e;
        if (half) gemv_fast_rows<Fast::kFp8Plain, MR>(x, w, r, e, y, ldy);
        else gemv_fast_rows<Fast::kFp8Folded, MR>(xs, w, r, e, y, ldy);
        r = e;
      }
    }
    b0 = b1;
  }
}

template <Fast D, int MR>
void fast_rows(const float* x, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  if constexpr (D == Fast::kFp8Plain) {
    if (w.scale_dtype == DType::F8_E8M0 || w.scale_dtype == DType::F32) {
      if constexpr (MR == 1) return fp8_folded_rows(x, w, n0, n1, y);
      else return fp8_folded_few_rows<MR>(x, w, n0, n1, y, ldy);
    }
  }
  gemv_fast_rows<D, MR>(x, w, n0, n1, y, ldy);
}

// Columns of one k-block of an MR-row product whose x rows pass 24 KiB: as many as keep
// them within 16 KiB, half of a Zen 3 L1, in whole 256-column steps; 0 where the product
// needs no blocking. Without it the x rows of a wide product (5 rows of 2048: 40 KiB)
// stream from L2 once per w row. One thread, 5 rows of 2048 x 2048, best of 8, blocked
// against not (two runs each): bf16 1.2x, MXFP4 1.15x, int8 1.3x, FP8 1.02x faster;
// 3 rows (24 KiB, in L1) were 0-10 % slower blocked, so they are not.
template <Fast D, int MR>
int64_t few_rows_k_block(const PackedWeight& w) {
  if constexpr (MR == 1) return 0;
  if (MR * w.k * 4 <= (int64_t(24) << 10)) return 0;
  const int64_t kb = std::max<int64_t>(256, (int64_t(16) << 10) / (4 * MR) / 256 * 256);
  if (w.k <= kb) return 0;
  if constexpr (D == Fast::kFp8Plain) {
    if (w.block_k <= 0 || kb % w.block_k) return 0;  // k-blocks of whole scale blocks
  }
  return kb;
}

// w rows per pass of a blocked few-row product: their partial sums wait in a small
// buffer between k-blocks, and their lines fetched ahead past a k-block's end (128 KiB
// for 32 rows of 4096 FP8) are still in L2 for the next k-block.
constexpr int64_t kFewRowsBlockRows = 32;

// fast_rows by gemv_fast alone.
template <Fast D, int MR>
void gemv_fast_rows(const float* x, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  // 16 ymm registers: one row, kFastNr's tiles; a few rows, 2 * MR * NR accumulators <= 10.
  constexpr int nr = MR == 1 ? kFastNr : MR == 2 ? 2 : 1;
  const int64_t kb = few_rows_k_block<D, MR>(w);
  if (kb == 0) {
    for (int64_t j = n0; j < n1; j += nr) gemv_fast<D, MR, nr>(x, w, j, std::min<int64_t>(nr, n1 - j), y + j, ldy);
    return;
  }
  static_assert(kFewRowsBlockRows % nr == 0);
  alignas(32) __m256 part[kFewRowsBlockRows / nr][2 * MR * nr];
  for (int64_t jb = n0; jb < n1; jb += kFewRowsBlockRows) {
    const int64_t je = std::min(n1, jb + kFewRowsBlockRows);
    for (int64_t c = 0; c < w.k; c += kb)
      for (int64_t j = jb; j < je; j += nr)
        gemv_fast<D, MR, nr>(x, w, j, std::min<int64_t>(nr, je - j), y + j, ldy, c, std::min(w.k, c + kb),
                             part[(j - jb) / nr]);
  }
}

// y = x w^T for m (1-8) x rows: groups of at most 5 rows (m 6-8 as two groups).
template <Fast D>
void fast_cols(const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  if constexpr (D == Fast::kMxfp4Lanes) {
    float* const xp = thread_scratch(ScratchSlot::kPackedAvx2XLanes, size_t(m * w.k));
    mxfp4_permute_x(x, m * w.k, xp);
    x = xp;
  }
  for (int64_t i = 0; i < m;) {
    const int64_t g = m - i <= 5 ? m - i : (m - i + 1) / 2;
    const float* xi = x + i * w.k;
    float* yi = y + i * ldy;
    switch (g) {
      case 1: fast_rows<D, 1>(xi, w, n0, n1, yi, ldy); break;
      case 2: fast_rows<D, 2>(xi, w, n0, n1, yi, ldy); break;
      case 3: fast_rows<D, 3>(xi, w, n0, n1, yi, ldy); break;
      case 4: fast_rows<D, 4>(xi, w, n0, n1, yi, ldy); break;
      default: fast_rows<D, 5>(xi, w, n0, n1, yi, ldy); break;
    }
    i += g;
  }
}

// Up to this many x rows take the fast GEMVs (the dequantized-panel path from there).
constexpr int64_t kFewRows = 8;

template <WeightFormat F>
void cols(const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  if (m <= kFewRows) {
    if constexpr (scaled(F) || F == WeightFormat::kBF16) {
      Fast d;
      if (fast_gemv_for(w, &d, m > 1)) {
        switch (d) {
          case Fast::kFp8Plain: return fast_cols<Fast::kFp8Plain>(x, m, w, n0, n1, y, ldy);
          case Fast::kInt8: return fast_cols<Fast::kInt8>(x, m, w, n0, n1, y, ldy);
          case Fast::kMxfp4Lanes: return fast_cols<Fast::kMxfp4Lanes>(x, m, w, n0, n1, y, ldy);
          case Fast::kBF16: return fast_cols<Fast::kBF16>(x, m, w, n0, n1, y, ldy);
          case Fast::kFp8Folded: break;  // chosen inside fast_rows, never by fast_gemv_for
        }
      }
    }
  }
  if (m == 1) {
    constexpr int nr = gemv_nr<F>();
    int64_t j = n0;
    for (; j + nr <= n1; j += nr) gemv<F, nr>(x, w, j, y + j);
    switch (n1 - j) {
      case 3: if constexpr (nr > 3) gemv<F, 3>(x, w, j, y + j); break;
      case 2: if constexpr (nr > 2) gemv<F, 2>(x, w, j, y + j); break;
      case 1: gemv<F, 1>(x, w, j, y + j); break;
      default: break;
    }
    return;
  }
  const int64_t k = w.k, ld = (k + 15) / 16 * 16;
  float* const buf = thread_scratch(ScratchSlot::kPackedAvx2Dequant, size_t(kNr * ld));  // [kNr, ld]
  auto rows = [&]<int NR>(int64_t mb, int64_t me, int64_t j) {
    dequant<F, NR>(w, j, buf, ld);
    for (int64_t i = mb; i < me; ++i) tile<NR>(x + i * k, k, buf, ld, y + i * ldy + j);
  };
  static_assert(kNr == 4);
  for (int64_t mb = 0; mb < m; mb += kMBlock) {
    const int64_t me = std::min(m, mb + kMBlock);
    for (int64_t j = n0; j < n1; j += kNr) {
      switch (std::min<int64_t>(kNr, n1 - j)) {
        case 4: rows.template operator()<4>(mb, me, j); break;
        case 3: rows.template operator()<3>(mb, me, j); break;
        case 2: rows.template operator()<2>(mb, me, j); break;
        default: rows.template operator()<1>(mb, me, j); break;
      }
    }
  }
}

// Rows [r0, r1) into out [r1 - r0, k], four at a time through dequant(): straight into
// out where k is whole chunks, else through a padded buffer (dequant writes +0 up to the
// chunk end, which would run into the next row or past out).
template <WeightFormat F>
void dequant_rows_of(const PackedWeight& w, int64_t r0, int64_t r1, float* out) {
  const int64_t k = w.k, ld = (k + 15) / 16 * 16;
  const bool direct = ld == k;
  float* const buf = direct ? nullptr : thread_scratch(ScratchSlot::kPackedAvx2Dequant, size_t(kNr * ld));
  for (int64_t r = r0; r < r1; r += kNr) {
    const int64_t nr = std::min<int64_t>(kNr, r1 - r);
    float* const dst = direct ? out + (r - r0) * k : buf;
    switch (nr) {
      case 4: dequant<F, 4>(w, r, dst, ld); break;
      case 3: dequant<F, 3>(w, r, dst, ld); break;
      case 2: dequant<F, 2>(w, r, dst, ld); break;
      default: dequant<F, 1>(w, r, dst, ld); break;
    }
    if (!direct)
      for (int64_t i = 0; i < nr; ++i) std::memcpy(out + (r - r0 + i) * k, buf + i * ld, size_t(k) * sizeof(float));
  }
}

}  // namespace

void dequant_rows(const PackedWeight& w, int64_t r0, int64_t r1, float* out) {
  switch (w.format) {
    case WeightFormat::kF32: return dequant_rows_of<WeightFormat::kF32>(w, r0, r1, out);
    case WeightFormat::kBF16: return dequant_rows_of<WeightFormat::kBF16>(w, r0, r1, out);
    case WeightFormat::kF16: return dequant_rows_of<WeightFormat::kF16>(w, r0, r1, out);
    case WeightFormat::kFp8Block: return dequant_rows_of<WeightFormat::kFp8Block>(w, r0, r1, out);
    case WeightFormat::kMxfp4: return dequant_rows_of<WeightFormat::kMxfp4>(w, r0, r1, out);
    case WeightFormat::kInt8Row: return dequant_rows_of<WeightFormat::kInt8Row>(w, r0, r1, out);
  }
}

namespace {

// Rows 8g .. 8g + NR - 1 of the panel (NR <= 8, the rest +0): each 16-column chunk of
// them decoded as dequant does (for_each_chunk), staged in 512 bytes of L1, transposed
// and stored per lane: chunk c is step c / 16 of every lane, lanes 0-7 from its low
// halves, 8-15 from its high ones.
template <WeightFormat F, int NR>
void pack_lane_rows(const PackedWeight& w, int64_t r0, int g, int64_t lane_stride, float* wb) {
  alignas(32) float stage[8][16] = {};
  for_each_chunk<F, NR, true>(w, r0 + 8 * g, [&](int64_t c, const __m256(&lo)[NR], const __m256(&hi)[NR], bool) {
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      _mm256_store_ps(stage[j], lo[j]);
      _mm256_store_ps(stage[j] + 8, hi[j]);
    }
    const int64_t s = c / 16;
    GANNET_UNROLL for (int h = 0; h < 2; ++h) {
      __m256 r[8];
      GANNET_UNROLL for (int i = 0; i < 8; ++i) r[i] = _mm256_load_ps(stage[i] + 8 * h);
      transpose8(r);
      GANNET_UNROLL for (int q = 0; q < 8; ++q) _mm256_storeu_ps(wb + (8 * h + q) * lane_stride + s * 16 + 8 * g, r[q]);
    }
  });
}
template <WeightFormat F>
void pack_lane_panel_of(const PackedWeight& w, int64_t r0, int64_t rows, int64_t S, int64_t lane_stride, float* wb) {
  for (int g = 0; g < 2; ++g) {
    const int64_t nr = std::clamp<int64_t>(rows - 8 * g, 0, 8);
    switch (nr) {
      case 8: pack_lane_rows<F, 8>(w, r0, g, lane_stride, wb); break;
      case 7: pack_lane_rows<F, 7>(w, r0, g, lane_stride, wb); break;
      case 6: pack_lane_rows<F, 6>(w, r0, g, lane_stride, wb); break;
      case 5: pack_lane_rows<F, 5>(w, r0, g, lane_stride, wb); break;
      case 4: pack_lane_rows<F, 4>(w, r0, g, lane_stride, wb); break;
      case 3: pack_lane_rows<F, 3>(w, r0, g, lane_stride, wb); break;
      case 2: pack_lane_rows<F, 2>(w, r0, g, lane_stride, wb); break;
      case 1: pack_lane_rows<F, 1>(w, r0, g, lane_stride, wb); break;
      default:  // no rows in this half: every lane's 8 values of it are +0
        for (int l = 0; l < 16; ++l)
          for (int64_t s = 0; s < S; ++s) _mm256_storeu_ps(wb + l * lane_stride + s * 16 + 8 * g, _mm256_setzero_ps());
        break;
    }
  }
}
}  // namespace

void pack_lane_panel(const PackedWeight& w, int64_t r0, int64_t rows, int64_t S, int64_t lane_stride, float* wb) {
  GANNET_CHECK(S == (w.k + 15) / 16 && rows >= 1 && rows <= 16 && r0 + rows <= w.n, "lane panel of rows [", r0,
               ", ", r0 + rows, ") of ", w.n, ", ", S, " steps for k = ", w.k);
  switch (w.format) {
    case WeightFormat::kF32: return pack_lane_panel_of<WeightFormat::kF32>(w, r0, rows, S, lane_stride, wb);
    case WeightFormat::kBF16: return pack_lane_panel_of<WeightFormat::kBF16>(w, r0, rows, S, lane_stride, wb);
    case WeightFormat::kF16: return pack_lane_panel_of<WeightFormat::kF16>(w, r0, rows, S, lane_stride, wb);
    case WeightFormat::kFp8Block: return pack_lane_panel_of<WeightFormat::kFp8Block>(w, r0, rows, S, lane_stride, wb);
    case WeightFormat::kMxfp4: return pack_lane_panel_of<WeightFormat::kMxfp4>(w, r0, rows, S, lane_stride, wb);
    case WeightFormat::kInt8Row: return pack_lane_panel_of<WeightFormat::kInt8Row>(w, r0, rows, S, lane_stride, wb);
  }
}

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

}  // namespace gannet::kernels::avx2
