// AVX-512 product against packed weights (packed_weight.h): each chunk of 16 weight
// elements is decoded to f32 in registers, multiplied by its block's scale (one rounding,
// as dequant_row does) and fed to the same 16-lane FMA accumulators and tree as the f32
// kernels, so every output equals the reference's bits. Scale blocks along k are
// multiples of 16, so a chunk never straddles two scales; the loops run block by block
// with the scales read once per block, full chunks unmasked and only the last one masked.
//
// Decoders, per 16 elements:
//   fp8 (fp8_plain)  sign-extend the bytes to 16 bits and shift left 7: sign, exponent and
//                    mantissa land in f16 position (bias 15 instead of 7), so cvtph2ps
//                    gives value / 256 exactly, subnormals included; the scale is taken
//                    times 256. NaN codes or scales near the f32 limit take the exact path.
//   fp8 (exact)      exponent/mantissa moved to f32 position, subnormals by an exact
//                    multiply, NaN codes blended in.
//   mxfp4            nibbles interleaved in element order, a 16-entry byte table gives each
//                    code's f16 high byte (every E2M1 value has a zero low byte), cvtph2ps.
//                    The GEMV and few-row kernels instead look codes up in the block's
//                    scaled E2M1 table (vpermps), one of 256 made once per E8M0 code.
//   int8             sign-extend to 32 bits, convert (exact).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/packed_matmul_impl.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/simd_avx512.h"

namespace gannet::kernels::avx512 {

namespace {

constexpr int kMr = 4;           // x rows per GEMM tile
constexpr int64_t kMBlock = 64;  // x rows kept in cache while w rows stream past

// How a chunk is decoded: the format, with fp8 split in its fast and exact variants.
// kBF16Lanes and kMxfp4Lanes decode into a permuted lane order (see "Permuted lanes").
enum class Dec { kF32, kBF16, kBF16Lanes, kF16, kFp8Plain, kFp8Exact, kMxfp4, kMxfp4Lanes, kInt8 };

constexpr bool scaled(Dec d) {
  return d == Dec::kFp8Plain || d == Dec::kFp8Exact || d == Dec::kMxfp4 || d == Dec::kMxfp4Lanes || d == Dec::kInt8;
}
constexpr bool is_mxfp4(Dec d) { return d == Dec::kMxfp4 || d == Dec::kMxfp4Lanes; }
constexpr bool permuted(Dec d) { return d == Dec::kBF16Lanes || d == Dec::kMxfp4Lanes; }

// The stored format a decoder reads.
constexpr WeightFormat format_of(Dec d) {
  switch (d) {
    case Dec::kF32: return WeightFormat::kF32;
    case Dec::kBF16:
    case Dec::kBF16Lanes: return WeightFormat::kBF16;
    case Dec::kF16: return WeightFormat::kF16;
    case Dec::kFp8Plain:
    case Dec::kFp8Exact: return WeightFormat::kFp8Block;
    case Dec::kMxfp4:
    case Dec::kMxfp4Lanes: return WeightFormat::kMxfp4;
    case Dec::kInt8: return WeightFormat::kInt8Row;
  }
  return WeightFormat::kF32;
}

// 16 decoded (not yet scaled) elements starting at column c of the row at `p`; lanes past
// the mask are +0 (the masked loads read nothing there).
template <Dec D>
inline __m512 decode(const uint8_t* p, int64_t c, __mmask16 mk) {
  switch (D) {
    case Dec::kF32: return _mm512_maskz_loadu_ps(mk, p + c * 4);
    case Dec::kBF16:
    case Dec::kBF16Lanes: {  // (dequant: canonical order)
      const __m256i h = _mm256_maskz_loadu_epi16(mk, p + c * 2);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case Dec::kF16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, p + c * 2));
    case Dec::kFp8Plain: {
      const __m128i b = _mm_maskz_loadu_epi8(mk, p + c);
      // s = sign-extended byte: bit 15 the sign, bits 14..7 after the shift hold the sign
      // copy (cleared) and the 7 exponent/mantissa bits.
      const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(int16_t(0xbf80)));
      return _mm512_cvtph_ps(h);
    }
    case Dec::kFp8Exact: {
      const __m128i b = _mm_maskz_loadu_epi8(mk, p + c);
      const __m512i u = _mm512_cvtepu8_epi32(b);
      const __m512i em = _mm512_and_si512(u, _mm512_set1_epi32(0x7f));
      const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x80)), 24);
      // Normal: exponent e and mantissa m move to f32 positions, bias 7 -> 127.
      const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(em, 20), _mm512_set1_epi32(120 << 23));
      // Subnormal (e == 0): m * 2^-9, exact.
      const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(em), _mm512_set1_ps(1.0f / 512.0f));
      const __mmask16 is_sub = _mm512_cmplt_epi32_mask(em, _mm512_set1_epi32(8));
      const __m512 mag = _mm512_mask_blend_ps(is_sub, _mm512_castsi512_ps(normal), sub);
      // NaN codes (either sign) give +NaN, as the reference decode does.
      const __mmask16 is_nan = _mm512_cmpeq_epi32_mask(em, _mm512_set1_epi32(0x7f));
      const __m512 v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(mag), sign));
      return _mm512_mask_blend_ps(is_nan, v, _mm512_set1_ps(NAN));
    }
    case Dec::kMxfp4:
    case Dec::kMxfp4Lanes: {  // (dequant: canonical order)
      // 16 codes in 8 bytes, element 2i in the low nibble of byte i (c is even).
      const __mmask16 bytes_mask = __mmask16((1u << ((__builtin_popcount(mk) + 1) / 2)) - 1);
      const __m128i b = _mm_maskz_loadu_epi8(bytes_mask, p + c / 2);
      const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0f));
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
      const __m128i codes = _mm_unpacklo_epi8(lo, hi);  // element order
      // f16 high bytes of 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
      const __m128i table = _mm_setr_epi8(0x00, 0x38, 0x3c, 0x3e, 0x40, 0x42, 0x44, 0x46, int8_t(0x80), int8_t(0xb8),
                                          int8_t(0xbc), int8_t(0xbe), int8_t(0xc0), int8_t(0xc2), int8_t(0xc4),
                                          int8_t(0xc6));
      const __m128i hb = _mm_shuffle_epi8(table, codes);
      const __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(hb), 8);
      return _mm512_maskz_mov_ps(mk, _mm512_cvtph_ps(h));
    }
    case Dec::kInt8: return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, p + c)));
  }
  return _mm512_setzero_ps();
}

// MXFP4 in the products: 16 elements of row p from column c (c % 16 == 0) already times
// their block's scale, by a lookup in `table` = the 16 E2M1 values times the scale (the
// same single rounding of code value x scale as dequant_row). Each byte is duplicated so
// lane l holds byte l / 2, odd lanes shift its high nibble down, and vpermps takes the low
// 4 bits as the index. Lanes past mk are +0.
inline __m512 mxfp4_scaled(const uint8_t* p, int64_t c, __mmask16 mk, __m512 table) {
  const __mmask16 bytes_mask = __mmask16((1u << ((__builtin_popcount(mk) + 1) / 2)) - 1);
  const __m128i b = _mm_maskz_loadu_epi8(bytes_mask, p + c / 2);
  const __m512i d = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
  const __m512i idx = _mm512_srlv_epi32(d, _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0));
  return _mm512_maskz_permutexvar_ps(mk, idx, table);
}

// Permuted lanes. The product only fixes which accumulator chain each element joins
// (canonical lane c % 16) and the order along k, not which register lane holds that chain.
// So a decoder may put chunk element perm[l] in lane l when x is loaded permuted the same
// way (permute_x) and the accumulators are put back in canonical lanes (unpermute) before
// the tree: every output keeps the reference's bits. The two decoders below use this to
// replace cross-lane widening (the shuffle port's bottleneck) by loads that broadcast and
// one in-lane step. Whole 16-element chunks only (k % 16 == 0).
template <Dec D>
inline __m512i lane_perm() {
  if constexpr (D == Dec::kMxfp4Lanes) return _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  else return _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
}
template <Dec D>
inline __m512i lane_unperm() {  // the inverse permutation
  if constexpr (D == Dec::kMxfp4Lanes) return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  else return _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);  // an involution
}
template <Dec D>
inline void permute_x(const float* x, int64_t n, float* out) {
  const __m512i idx = lane_perm<D>();
  for (int64_t c = 0; c < n; c += 16) _mm512_storeu_ps(out + c, _mm512_permutexvar_ps(idx, _mm512_loadu_ps(x + c)));
}
template <Dec D>
inline __m512 unpermute(__m512 a) {
  return _mm512_permutexvar_ps(lane_unperm<D>(), a);
}

// MXFP4, lane 2q = element q, lane 2q + 1 = element q + 8: the chunk's 8 bytes broadcast
// to every qword by the load, qword q shifted right by 4q bits, so its low dword's low
// nibble is code q and its high dword's code q + 8; vpermps reads only those 4 bits of
// the scaled table. One shuffle-port instruction per 16 elements instead of three.
inline __m512 mxfp4_lanes(const uint8_t* p, int64_t c, __m512 table) {
  int64_t q;
  std::memcpy(&q, p + c / 2, 8);
  const __m512i v = _mm512_srlv_epi64(_mm512_set1_epi64(q), _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28));
  return _mm512_permutexvar_ps(v, table);
}

// bf16, 128-bit lane L holds elements 8 (L % 2) + 4 (L / 2) + 0..3: the chunk's 32 bytes
// broadcast to both halves by the load, one in-lane byte shuffle moves each bf16 into the
// high half of its dword (zero below). One shuffle instead of a widening plus a shift.
inline __m512 bf16_lanes(const uint8_t* p, int64_t c) {
  const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c * 2)));
  const __m512i ctl = _mm512_setr_epi32(
      int32_t(0x0100ffff), int32_t(0x0302ffff), int32_t(0x0504ffff), int32_t(0x0706ffff),  // lane 0: elements 0-3
      int32_t(0x0100ffff), int32_t(0x0302ffff), int32_t(0x0504ffff), int32_t(0x0706ffff),  // lane 1: 8-11
      int32_t(0x0908ffff), int32_t(0x0b0affff), int32_t(0x0d0cffff), int32_t(0x0f0effff),  // lane 2: 4-7
      int32_t(0x0908ffff), int32_t(0x0b0affff), int32_t(0x0d0cffff), int32_t(0x0f0effff));  // lane 3: 12-15
  return _mm512_castsi512_ps(_mm512_shuffle_epi8(v, ctl));
}

inline __m512 e2m1_table() {
  return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f,
                        -6.0f);
}

// The scale of scale-row pointer `srow` at block column bc, as dequant_row applies it
// (times 256 for the f16 route of fp8).
template <Dec D>
inline float block_scale(const PackedWeight& w, const uint8_t* srow, int64_t bc) {
  float s;
  if (w.scale_dtype == DType::F8_E8M0) s = kE8m0Values[srow[bc]];
  else std::memcpy(&s, srow + bc * 4, 4);
  return D == Dec::kFp8Plain ? s * 256.0f : s;
}

// The 16 E2M1 values times every E8M0 scale (256 tables, 16 KB, the hot few lines stay in
// L1), made once by the same multiply the kernels did per block: a block's scaled table is
// then one load instead of a scale lookup, a broadcast and a multiply per weight row.
const float* mxfp4_e8m0_tables() {
  alignas(64) static float tables[256][16];
  static const bool made = [] {
    for (int c = 0; c < 256; ++c) _mm512_store_ps(tables[c], _mm512_mul_ps(e2m1_table(), _mm512_set1_ps(kE8m0Values[size_t(c)])));
    return true;
  }();
  (void)made;
  return &tables[0][0];
}

// The scaled E2M1 table of scale-row pointer `srow` at block column bc: from the E8M0 tables
// (`tabs`, non-null where the scales are E8M0) or by the multiply.
inline __m512 mxfp4_block_table(const PackedWeight& w, const float* tabs, const uint8_t* srow, int64_t bc) {
  if (tabs) return _mm512_load_ps(tabs + 16 * int64_t(srow[bc]));
  return _mm512_mul_ps(e2m1_table(), _mm512_set1_ps(block_scale<Dec::kMxfp4>(w, srow, bc)));
}


// One 16-element chunk of tile(): decode, scale, FMA into acc. A function, not a lambda:
// GCC keeps arrays a lambda captures by reference in memory, and the accumulators then
// make a store-to-load round trip every chunk (measured 2-3x slower).
template <Dec D, int MR, int NR>
inline void tile_step(const float* x, int64_t k, int64_t mr, const uint8_t* const* rows, int64_t c, __mmask16 mk,
                      const __m512* sc, __m512 (&acc)[MR][NR]) {
  __m512 wv[NR];
  GANNET_UNROLL for (int j = 0; j < NR; ++j) {
    if constexpr (D == Dec::kMxfp4) {
      wv[j] = mxfp4_scaled(rows[j], c, mk, sc[j]);  // sc: the scaled E2M1 table
    } else if constexpr (D == Dec::kMxfp4Lanes) {
      wv[j] = mxfp4_lanes(rows[j], c, sc[j]);  // whole chunks only: mk is all ones
    } else if constexpr (D == Dec::kBF16Lanes) {
      wv[j] = bf16_lanes(rows[j], c);
    } else {
      wv[j] = decode<D>(rows[j], c, mk);
      if constexpr (scaled(D)) wv[j] = _mm512_mul_ps(wv[j], sc[j]);  // masked lanes: +0 * s = +0 (s finite)
    }
  }
  GANNET_UNROLL for (int i = 0; i < MR; ++i) {
    if (i < mr) {
      const __m512 xv = _mm512_maskz_loadu_ps(mk, x + i * k + c);
      GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
}

// y[i, j] for x rows [0, mr) and w rows [r0, r0 + nr), mr <= MR, nr <= NR: every output
// keeps its own accumulator (the canonical order); several w rows side by side give the
// decode GEMV independent FMA chains to overlap. Missing rows (nr < NR) repeat the last
// one and are not stored.
template <Dec D, int MR, int NR>
void tile(const float* x, int64_t mr, const PackedWeight& w, int64_t r0, int64_t nr, float* y, int64_t ldy) {
  __m512 acc[MR][NR];
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t k = w.k;
  const int64_t rb = w.row_bytes();
  const uint8_t* rows[NR];
  const uint8_t* srows[NR];
  const int64_t sbytes = w.scale_dtype == DType::F8_E8M0 ? 1 : 4;
  GANNET_UNROLL for (int j = 0; j < NR; ++j) {
    const int64_t r = r0 + std::min<int64_t>(j, nr - 1);
    rows[j] = static_cast<const uint8_t*>(w.data) + r * rb;
    srows[j] = scaled(D) ? static_cast<const uint8_t*>(w.scales) + (r / w.block_n) * w.scale_cols() * sbytes : nullptr;
  }
  const int64_t bk = scaled(D) ? w.block_k : k;
  // The same column of the next tile's row: one tile ahead, whatever the row length.
  const int64_t pf_ahead = NR * rb;
  for (int64_t c0 = 0, bc = 0; c0 < k; c0 += bk, ++bc) {
    const int64_t c1 = std::min(k, c0 + bk);
    __m512 sc[NR];
    if constexpr (scaled(D)) {
      GANNET_UNROLL for (int j = 0; j < NR; ++j) {
        sc[j] = _mm512_set1_ps(block_scale<D>(w, srows[j], bc));
        if constexpr (is_mxfp4(D)) sc[j] = _mm512_mul_ps(e2m1_table(), sc[j]);
      }
    }
    int64_t c = c0;
    for (; c + 16 <= c1; c += 16) {
      if constexpr (MR == 1) {
        // Decode streams NR rows: prefetch the same column of the next tile's rows (one
        // tile ahead measured best: 1-byte formats 11-13 -> 15-17 GB/s on 2 threads; the
        // hardware prefetcher alone leaves them latency-bound).
        GANNET_UNROLL for (int j = 0; j < NR; ++j)
          _mm_prefetch(reinterpret_cast<const char*>(rows[j]) + packed_bytes(format_of(D), c) + pf_ahead, _MM_HINT_T0);
      }
      tile_step<D, MR, NR>(x, k, mr, rows, c, __mmask16(0xffff), sc, acc);
    }
    if (c < c1) {
      // The zero-padded last chunk: the reference pads w with +0 after scaling, so the
      // padded lanes are forced to +0 even where a scale is inf or NaN.
      const __mmask16 mk = mask16(c1 - c);
      if constexpr (is_mxfp4(D)) {
        tile_step<Dec::kMxfp4, MR, NR>(x, k, mr, rows, c, mk, sc, acc);  // never for permuted(D) (k % 16 == 0)
      } else if constexpr (scaled(D)) {
        __m512 scm[NR];
        GANNET_UNROLL for (int j = 0; j < NR; ++j) scm[j] = _mm512_maskz_mov_ps(mk, sc[j]);
        tile_step<D, MR, NR>(x, k, mr, rows, c, mk, scm, acc);
      } else {
        tile_step<D, MR, NR>(x, k, mr, rows, c, mk, sc, acc);
      }
    }
  }
  for (int i = 0; i < mr && i < MR; ++i)
    for (int j = 0; j < nr && j < NR; ++j)
      y[i * ldy + j] = tree_reduce(permuted(D) ? unpermute<D>(acc[i][j]) : acc[i][j]);
}

// The decode GEMV of 4 rows of a scaled format with named accumulators: the generic
// tile() keeps its accumulator array in memory across scale blocks (a store and reload
// every block on each FMA chain; V4.1's blocks are 32 elements). Same products in the
// same order, so the same bits as tile<D, 1, 4>. Whole 16-element chunks only.
//
// Prefetch, once per row and 64-byte line: into L1 a few lines ahead in the same row
// (kNearBytes) and into L2 well ahead (kFarBytes, past the row end into the next tiles'
// rows, which are contiguous). The hardware prefetcher of the Xeon VM leaves four
// interleaved 1-byte streams latency-bound; one L1 prefetch a tile ahead (the old scheme,
// and what tile() does) reached 18.5-20 GB/s on 2 threads for int8 and 14 for V4.1's fp8,
// this one 20-22 and 16.5-17 (medians of interleaved runs over 256 MB; MXFP4 is
// compute-bound and unchanged).
constexpr int64_t kNearBytes = 256;
constexpr int64_t kFarBytes = 8192;

// E4M3 straight into f32 bits for the GEMV (fp8_plain weights): the sign-extended byte
// shifted left by 20 puts exponent and mantissa at f32 bits 20-26 and copies of the sign at
// 27-31; clearing 27-30 leaves the E4M3 value times 2^-120 (normal and subnormal codes
// alike, exact), which the block's scale times 2^120 (finite: the scan's condition) turns
// into the same real product as value * scale, so the same rounding.
inline __m512 fp8_f32_route(const uint8_t* p, int64_t c) {
  const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c)));
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(v, 20), _mm512_set1_epi32(int32_t(0x87ffffffu))));
}

// The multiplier of a GEMV scale block: fp8_f32_route's 2^120 for plain FP8, else block_scale's.
template <Dec D>
inline float gemv_scale(const PackedWeight& w, const uint8_t* srow, int64_t bc) {
  if constexpr (D == Dec::kFp8Plain) return block_scale<Dec::kFp8Exact>(w, srow, bc) * 0x1p120f;
  return block_scale<D>(w, srow, bc);
}

// fp8_plain rows marked in fp8_subnormal_rows (kHalf) go through f16 instead: decode's
// kFp8Plain route (value / 2^8, normal f32 for every code) times s * 2^8. The same real
// product, so the same bits, without an f32 subnormal operand (a microcode assist on Intel
// per multiply that meets one). fp8_weight is a chunk times its multiplier fp8_multiplier.
template <bool kHalf>
inline float fp8_multiplier(const PackedWeight& w, const uint8_t* srow, int64_t bc) {
  return kHalf ? block_scale<Dec::kFp8Plain>(w, srow, bc) : gemv_scale<Dec::kFp8Plain>(w, srow, bc);
}

template <bool kHalf>
[[gnu::always_inline]] inline __m512 fp8_weight(const uint8_t* p, int64_t c, __m512 t) {
  if constexpr (kHalf) return _mm512_mul_ps(decode<Dec::kFp8Plain>(p, c, __mmask16(0xffff)), t);
  else return _mm512_mul_ps(fp8_f32_route(p, c), t);
}

// kHalf (kFp8Plain only): bit j set where w row j of the four takes the f16 route above.
template <Dec D, unsigned kHalf = 0>
GANNET_NOINLINE void gemv4_scaled(const float* x, const PackedWeight& w, int64_t r0, int64_t nr, float* y) {
  static_assert(scaled(D) && D != Dec::kMxfp4, "kMxfp4 runs as kMxfp4Lanes");
  static_assert(kHalf == 0 || D == Dec::kFp8Plain, "the f16 route is for fp8_plain rows");
  const int64_t k = w.k, rb = w.row_bytes(), bk = w.block_k, nb = w.scale_cols();
  const int64_t sbytes = w.scale_dtype == DType::F8_E8M0 ? 1 : 4;
  const uint8_t* d = static_cast<const uint8_t*>(w.data);
  const uint8_t* sc = static_cast<const uint8_t*>(w.scales);
  const uint8_t* p[4];
  const uint8_t* s[4];
  for (int j = 0; j < 4; ++j) {
    const int64_t r = r0 + std::min<int64_t>(j, nr - 1);
    p[j] = d + r * rb;
    s[j] = sc + (r / w.block_n) * nb * sbytes;
  }
  const float* const tabs = is_mxfp4(D) && w.scale_dtype == DType::F8_E8M0 ? mxfp4_e8m0_tables() : nullptr;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m512 t0 = a0, t1 = a0, t2 = a0, t3 = a0;
  int64_t blk = -1, next_block = 0;
  // One 16-element chunk at column c of the four rows (a lambda is fine here: it
  // captures scalars and registers, no arrays).
  const auto chunk = [&](int64_t c) GANNET_ALWAYS_INLINE_LAMBDA {
    if (c == next_block) {  // the next scale block: every bk / 16 chunks
      ++blk, next_block += bk;
      if constexpr (D == Dec::kMxfp4Lanes) {  // the scaled E2M1 tables
        t0 = mxfp4_block_table(w, tabs, s[0], blk), t1 = mxfp4_block_table(w, tabs, s[1], blk);
        t2 = mxfp4_block_table(w, tabs, s[2], blk), t3 = mxfp4_block_table(w, tabs, s[3], blk);
      } else if constexpr (D == Dec::kFp8Plain) {
        t0 = _mm512_set1_ps(fp8_multiplier<(kHalf & 1) != 0>(w, s[0], blk));
        t1 = _mm512_set1_ps(fp8_multiplier<(kHalf & 2) != 0>(w, s[1], blk));
        t2 = _mm512_set1_ps(fp8_multiplier<(kHalf & 4) != 0>(w, s[2], blk));
        t3 = _mm512_set1_ps(fp8_multiplier<(kHalf & 8) != 0>(w, s[3], blk));
      } else {
        t0 = _mm512_set1_ps(gemv_scale<D>(w, s[0], blk)), t1 = _mm512_set1_ps(gemv_scale<D>(w, s[1], blk));
        t2 = _mm512_set1_ps(gemv_scale<D>(w, s[2], blk)), t3 = _mm512_set1_ps(gemv_scale<D>(w, s[3], blk));
      }
    }
    const __m512 xv = _mm512_loadu_ps(x + c);
    if constexpr (D == Dec::kMxfp4Lanes) {
      a0 = _mm512_fmadd_ps(xv, mxfp4_lanes(p[0], c, t0), a0);
      a1 = _mm512_fmadd_ps(xv, mxfp4_lanes(p[1], c, t1), a1);
      a2 = _mm512_fmadd_ps(xv, mxfp4_lanes(p[2], c, t2), a2);
      a3 = _mm512_fmadd_ps(xv, mxfp4_lanes(p[3], c, t3), a3);
    } else if constexpr (D == Dec::kFp8Plain) {
      a0 = _mm512_fmadd_ps(xv, fp8_weight<(kHalf & 1) != 0>(p[0], c, t0), a0);
      a1 = _mm512_fmadd_ps(xv, fp8_weight<(kHalf & 2) != 0>(p[1], c, t1), a1);
      a2 = _mm512_fmadd_ps(xv, fp8_weight<(kHalf & 4) != 0>(p[2], c, t2), a2);
      a3 = _mm512_fmadd_ps(xv, fp8_weight<(kHalf & 8) != 0>(p[3], c, t3), a3);
    } else {
      const __mmask16 all = 0xffff;
      a0 = _mm512_fmadd_ps(xv, _mm512_mul_ps(decode<D>(p[0], c, all), t0), a0);
      a1 = _mm512_fmadd_ps(xv, _mm512_mul_ps(decode<D>(p[1], c, all), t1), a1);
      a2 = _mm512_fmadd_ps(xv, _mm512_mul_ps(decode<D>(p[2], c, all), t2), a2);
      a3 = _mm512_fmadd_ps(xv, _mm512_mul_ps(decode<D>(p[3], c, all), t3), a3);
    }
  };
  constexpr int64_t kLineElems = is_mxfp4(D) ? 128 : 64;  // elements in one 64-byte line
  int64_t c0 = 0;
  for (; c0 + kLineElems <= k; c0 += kLineElems) {
    const int64_t at = packed_bytes(format_of(D), c0);
    GANNET_UNROLL for (int j = 0; j < 4; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(p[j] + at + kNearBytes), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p[j] + at + kFarBytes), _MM_HINT_T2);
    }
    GANNET_UNROLL for (int64_t q = 0; q < kLineElems; q += 16) chunk(c0 + q);
  }
  for (int64_t c = c0; c < k; c += 16) chunk(c);  // a row's last part line
  const __m512 acc[4] = {a0, a1, a2, a3};
  for (int j = 0; j < nr && j < 4; ++j) y[j] = tree_reduce(permuted(D) ? unpermute<D>(acc[j]) : acc[j]);
}

// A few x rows (2-8: a speculative verify step) against NR w rows, whole 16-element chunks:
// each w chunk decoded once for all MR rows, named accumulators in registers (MR x NR of
// them, at most 16), scales read once per scale block and prefetch once per 64-byte line
// as gemv4_scaled does. The generic tile() keeps its accumulators in memory across scale
// blocks and streams w without prefetch, which left a 5-row MXFP4 product 5x the time of
// a 1-row one. Same products in the same order, so the same bits as tile().
template <Dec D>
[[gnu::always_inline]] inline __m512 few_decode(const uint8_t* p, int64_t c, __m512 t) {
  if constexpr (D == Dec::kMxfp4Lanes) return mxfp4_lanes(p, c, t);
  else if constexpr (D == Dec::kBF16Lanes) return bf16_lanes(p, c);
  else if constexpr (D == Dec::kFp8Plain) return _mm512_mul_ps(fp8_f32_route(p, c), t);
  else if constexpr (scaled(D)) return _mm512_mul_ps(decode<D>(p, c, __mmask16(0xffff)), t);
  else return decode<D>(p, c, __mmask16(0xffff));
}

// The code and scale-row pointers of w rows r0 .. r0 + NR - 1 (rows past nr repeat the
// last one: computed, never stored).
template <Dec D, int NR>
[[gnu::always_inline]] inline void few_row_pointers(const PackedWeight& w, int64_t r0, int64_t nr,
                                                    const uint8_t* (&p)[NR], const uint8_t* (&s)[NR]) {
  const int64_t rb = w.row_bytes(), nb = scaled(D) ? w.scale_cols() : 0;
  const int64_t sbytes = w.scale_dtype == DType::F8_E8M0 ? 1 : 4;
  GANNET_UNROLL for (int j = 0; j < NR; ++j) {
    const int64_t r = r0 + std::min<int64_t>(j, nr - 1);
    p[j] = static_cast<const uint8_t*>(w.data) + r * rb;
    s[j] = scaled(D) ? static_cast<const uint8_t*>(w.scales) + (r / w.block_n) * nb * sbytes : nullptr;
  }
}

// kHalf (kFp8Plain only): every w row through f16 (fp8_weight), for tiles with a marked row.
template <Dec D, int MR, int NR, bool kHalf = false>
GANNET_NOINLINE void few_rows(const float* x, const PackedWeight& w, int64_t r0, int64_t nr, float* y, int64_t ldy) {
  static_assert(D != Dec::kMxfp4 && D != Dec::kBF16, "the lane orders run instead");
  static_assert(!kHalf || D == Dec::kFp8Plain, "the f16 route is for fp8_plain rows");
  const int64_t k = w.k, bk = scaled(D) ? w.block_k : k;
  const uint8_t* p[NR];
  const uint8_t* s[NR];
  few_row_pointers<D>(w, r0, nr, p, s);
  __m512 acc[MR][NR], t[NR];
  const float* const tabs = is_mxfp4(D) && w.scale_dtype == DType::F8_E8M0 ? mxfp4_e8m0_tables() : nullptr;
  GANNET_UNROLL for (int j = 0; j < NR; ++j) {
    t[j] = _mm512_setzero_ps();
    GANNET_UNROLL for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_setzero_ps();
  }
  int64_t blk = -1, next_block = 0;
  constexpr int64_t kLineElems = 64 * 16 / packed_bytes(format_of(D), 16);  // elements in one 64-byte line
  for (int64_t c0 = 0; c0 < k; c0 += kLineElems) {
    const int64_t at = packed_bytes(format_of(D), c0);
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(p[j] + at + kNearBytes), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p[j] + at + kFarBytes), _MM_HINT_T2);
    }
    const int64_t c1 = std::min(k, c0 + kLineElems);
    for (int64_t c = c0; c < c1; c += 16) {
      if constexpr (scaled(D)) {
        if (c == next_block) {
          ++blk, next_block += bk;
          GANNET_UNROLL for (int j = 0; j < NR; ++j) {
            if constexpr (is_mxfp4(D)) t[j] = mxfp4_block_table(w, tabs, s[j], blk);
            else if constexpr (kHalf) t[j] = _mm512_set1_ps(fp8_multiplier<true>(w, s[j], blk));
            else t[j] = _mm512_set1_ps(gemv_scale<D>(w, s[j], blk));
          }
        }
      }
      __m512 wv[NR];
      GANNET_UNROLL for (int j = 0; j < NR; ++j) {
        if constexpr (kHalf) wv[j] = fp8_weight<true>(p[j], c, t[j]);
        else wv[j] = few_decode<D>(p[j], c, t[j]);
      }
      GANNET_UNROLL for (int i = 0; i < MR; ++i) {
        __m512 xv = _mm512_loadu_ps(x + i * k + c);
        pin(xv);  // one load per x vector (see few_rows_k)
        GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
      }
    }
  }
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    for (int j = 0; j < nr && j < NR; ++j)
      y[i * ldy + j] = tree_reduce(permuted(D) ? unpermute<D>(acc[i][j]) : acc[i][j]);
}

// w rows [n0, n1) for m x rows, 1 <= m <= 8, by few_rows with MR = m; false where its
// conditions (whole chunks, scale blocks of whole chunks) do not hold.
template <Dec D, int MR>
void few_rows_cols(const float* x, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int NR = MR <= 5 ? 4 : 3;  // MR x NR accumulators, NR decoded chunks and NR scales within 32 registers
  for (int64_t j = n0; j < n1; j += NR) {
    const int64_t nr = std::min<int64_t>(NR, n1 - j);
    if constexpr (D == Dec::kFp8Plain) {
      if (w.fp8_subnormal_any(j, j + nr)) {
        few_rows<D, MR, NR, true>(x, w, j, nr, y + j, ldy);
        continue;
      }
    }
    few_rows<D, MR, NR>(x, w, j, nr, y + j, ldy);
  }
}

// The one-row GEMV of four fp8_plain rows, each through f32 bits or (marked rows) f16.
using Gemv4 = void (*)(const float*, const PackedWeight&, int64_t, int64_t, float*);
template <unsigned... kMasks>
constexpr std::array<Gemv4, sizeof...(kMasks)> fp8_gemv4_table(std::integer_sequence<unsigned, kMasks...>) {
  return {&gemv4_scaled<Dec::kFp8Plain, kMasks>...};
}
constexpr auto kFp8Gemv4 = fp8_gemv4_table(std::make_integer_sequence<unsigned, 16>{});

template <Dec D>
bool few_rows_dispatch(const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1, float* y,
                       int64_t ldy) {
  if constexpr (D == Dec::kMxfp4 || D == Dec::kBF16) {
    return false;
  } else {
    if (w.k <= 0 || w.k % 16 || (scaled(D) && w.block_k % 16)) return false;
    switch (m) {
      case 2: few_rows_cols<D, 2>(x, w, n0, n1, y, ldy); return true;
      case 3: few_rows_cols<D, 3>(x, w, n0, n1, y, ldy); return true;
      case 4: few_rows_cols<D, 4>(x, w, n0, n1, y, ldy); return true;
      case 5: few_rows_cols<D, 5>(x, w, n0, n1, y, ldy); return true;
      case 6: few_rows_cols<D, 6>(x, w, n0, n1, y, ldy); return true;
      case 7: few_rows_cols<D, 7>(x, w, n0, n1, y, ldy); return true;
      case 8: few_rows_cols<D, 8>(x, w, n0, n1, y, ldy); return true;
      default: return false;
    }
  }
}

constexpr int64_t kFewSliceRows = 12;
constexpr int64_t kFewKBlock = 512;  // a slice's block of x: 24 KiB, half of L1
// Batched decode, x rows [9, kFewBlockedRows): the dense projections at batch 9-47 and the
// MoE's busier experts. few_rows_k is few_rows over columns [c0, c1) only, its MR x NR
// accumulators carried between calls in `acc` ([MR][NR][16]), x in xp [chunk][MR][16] from
// c0. few_rows_blocked runs x in slices of at most 12 rows and k in blocks, each slice's
// block copied chunk-interleaved (its rows k floats apart would share L1 sets: 4 KiB
// aliasing), over w blocks that stay in L2 for every slice. Each w chunk is decoded in registers once per
// slice: no f32 panel written and read back (the panel path), no transpose (the lane
// GEMM). Every output keeps its own accumulator in k order: the bits of few_rows.
template <Dec D, int MR, int NR, bool kHalf = false>
GANNET_NOINLINE void few_rows_k(const float* xp, const PackedWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t c1,
                                float* acc_mem, bool first, bool last, float* y, int64_t ldy) {
  const int64_t k = w.k, bk = scaled(D) ? w.block_k : k;
  const uint8_t* p[NR];
  const uint8_t* s[NR];
  few_row_pointers<D>(w, r0, nr, p, s);
  __m512 acc[MR][NR], t[NR];
  const float* const tabs = is_mxfp4(D) && w.scale_dtype == DType::F8_E8M0 ? mxfp4_e8m0_tables() : nullptr;
  GANNET_UNROLL for (int j = 0; j < NR; ++j) {
    t[j] = _mm512_setzero_ps();
    GANNET_UNROLL for (int i = 0; i < MR; ++i)
      acc[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_mem + (i * NR + j) * 16);
  }
  // The multipliers (MXFP4: the scaled tables) of the block's scale blocks, per row, found
  // before the loop: there each is one broadcast or load when its scale block starts.
  const int64_t blk0 = c0 / bk;
  float mult[NR][kFewKBlock / 16 + 1];
  const float* table[NR][kFewKBlock / 16 + 1];
  if constexpr (scaled(D)) {
    GANNET_CHECK(c1 - c0 <= kFewKBlock, "k block of ", c1 - c0);
    for (int64_t b = blk0; b * bk < c1; ++b)
      GANNET_UNROLL for (int j = 0; j < NR; ++j) {
        if constexpr (is_mxfp4(D)) {
          if (tabs) table[j][b - blk0] = tabs + 16 * int64_t(s[j][b]);
          else mult[j][b - blk0] = block_scale<D>(w, s[j], b);
        } else if constexpr (kHalf) {
          mult[j][b - blk0] = fp8_multiplier<true>(w, s[j], b);
        } else {
          mult[j][b - blk0] = gemv_scale<D>(w, s[j], b);
        }
      }
  }
  int64_t blk = blk0 - 1, next_block = c0;  // c0's scale block is taken first
  constexpr int64_t kLineElems = 64 * 16 / packed_bytes(format_of(D), 16);  // elements in one 64-byte line
  for (int64_t c = c0; c < c1; c += 16, xp += MR * 16) {
    if ((c - c0) % kLineElems == 0) {  // as few_rows: the first slice reads w from memory
      const int64_t at = packed_bytes(format_of(D), c);
      GANNET_UNROLL for (int j = 0; j < NR; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(p[j] + at + kNearBytes), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p[j] + at + kFarBytes), _MM_HINT_T2);
      }
    }
    if constexpr (scaled(D)) {
      if (c == next_block) {
        ++blk, next_block = (blk + 1) * bk;
        GANNET_UNROLL for (int j = 0; j < NR; ++j) {
          if constexpr (is_mxfp4(D)) {
            t[j] = tabs ? _mm512_load_ps(table[j][blk - blk0])
                        : _mm512_mul_ps(e2m1_table(), _mm512_set1_ps(mult[j][blk - blk0]));
          } else {
            t[j] = _mm512_set1_ps(mult[j][blk - blk0]);
          }
        }
      }
    }
    __m512 wv[NR];
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      if constexpr (kHalf) wv[j] = fp8_weight<true>(p[j], c, t[j]);
      else wv[j] = few_decode<D>(p[j], c, t[j]);
    }
    GANNET_UNROLL for (int i = 0; i < MR; ++i) {
      __m512 xv = _mm512_loadu_ps(xp + i * 16);
      pin(xv);  // one load per x vector: GCC otherwise folds it into each FMA
      GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (last) {  // constant indices only: a runtime one would keep acc in memory in the loop
    GANNET_UNROLL for (int i = 0; i < MR; ++i)
      GANNET_UNROLL for (int j = 0; j < NR; ++j)
        if (j < nr) y[i * ldy + j] = tree_reduce(permuted(D) ? unpermute<D>(acc[i][j]) : acc[i][j]);
  } else {
    GANNET_UNROLL for (int i = 0; i < MR; ++i)
      GANNET_UNROLL for (int j = 0; j < NR; ++j) _mm512_storeu_ps(acc_mem + (i * NR + j) * 16, acc[i][j]);
  }
}

constexpr int64_t kFewWBlockBytes = int64_t(256) << 10;

// One slice of MR x rows (x: [MR, k]) against w rows [n0, n1), k block [c0, c1); xp:
// scratch for the block of x, chunk-interleaved (kPermuteX: and put in D's lane order).
template <Dec D, int MR, bool kPermuteX>
void few_rows_slice(const float* x, const PackedWeight& w, int64_t n0, int64_t n1, int64_t c0, int64_t c1,
                    float* xp, float* acc, float* y, int64_t ldy) {
  constexpr int NR = MR <= 8 ? 3 : 2;  // MR x NR accumulators, NR decoded chunks and NR scales in 32 registers
  const bool first = c0 == 0, last = c1 == w.k;
  for (int64_t c = c0; c < c1; c += 16)
    GANNET_UNROLL for (int i = 0; i < MR; ++i) {
      const __m512 v = _mm512_loadu_ps(x + i * w.k + c);
      _mm512_storeu_ps(xp + ((c - c0) / 16 * MR + i) * 16, kPermuteX ? _mm512_permutexvar_ps(lane_perm<D>(), v) : v);
    }
  x = xp;
  for (int64_t j = n0; j < n1; j += NR, acc += MR * NR * 16) {
    const int64_t nr = std::min<int64_t>(NR, n1 - j);
    if constexpr (D == Dec::kFp8Plain) {
      if (w.fp8_subnormal_any(j, j + nr)) {
        few_rows_k<D, MR, NR, true>(x, w, j, nr, c0, c1, acc, first, last, y + j, ldy);
        continue;
      }
    }
    few_rows_k<D, MR, NR>(x, w, j, nr, c0, c1, acc, first, last, y + j, ldy);
  }
}

// kPermuteX: x in canonical order, put in D's lane order as the slices are copied.
template <Dec D, bool kPermuteX = false>
bool few_rows_blocked(const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1, float* y,
                      int64_t ldy) {
  if constexpr (D == Dec::kMxfp4 || D == Dec::kBF16) {
    return false;  // cols runs them in their lane orders
  } else {
    const int64_t k = w.k;
    if (k <= 0 || k % 16 || (scaled(D) && w.block_k % 16) || m <= 8 || m >= kFewBlockedRows) return false;
    const int64_t slices = (m + kFewSliceRows - 1) / kFewSliceRows;
    const int64_t kb = kFewKBlock;
    const int64_t block = std::max<int64_t>(6, kFewWBlockBytes / std::max<int64_t>(1, w.row_bytes()) / 6 * 6);
    // 64-byte aligned (thread_scratch), as are all the x and accumulator blocks below:
    // each load is one cache line (16-byte aligned ones span two: 1.2x slower here).
    float* const acc = thread_scratch(ScratchSlot::kPackedAvx512Acc,
                                      size_t((block + 6) * kFewSliceRows * 16 + kb * kFewSliceRows));
    float* const xp = acc + (block + 6) * kFewSliceRows * 16;
    for (int64_t nb = n0; nb < n1; nb += block) {
      const int64_t ne = std::min(n1, nb + block);
      for (int64_t sl = 0; sl < slices; ++sl) {  // rows [m sl / slices, m (sl + 1) / slices): 6-12 of them
        const int64_t i0 = m * sl / slices, rows = m * (sl + 1) / slices - i0;
        const float* xs = x + i0 * k;
        float* ys = y + i0 * ldy;
        for (int64_t c0 = 0; c0 < k; c0 += kb) {
          const int64_t c1 = std::min(k, c0 + kb);
          switch (rows) {
            case 12: few_rows_slice<D, 12, kPermuteX>(xs, w, nb, ne, c0, c1, xp, acc, ys, ldy); break;
            case 11: few_rows_slice<D, 11, kPermuteX>(xs, w, nb, ne, c0, c1, xp, acc, ys, ldy); break;
            case 10: few_rows_slice<D, 10, kPermuteX>(xs, w, nb, ne, c0, c1, xp, acc, ys, ldy); break;
            case 9: few_rows_slice<D, 9, kPermuteX>(xs, w, nb, ne, c0, c1, xp, acc, ys, ldy); break;
            case 8: few_rows_slice<D, 8, kPermuteX>(xs, w, nb, ne, c0, c1, xp, acc, ys, ldy); break;
            case 7: few_rows_slice<D, 7, kPermuteX>(xs, w, nb, ne, c0, c1, xp, acc, ys, ldy); break;
            case 6: few_rows_slice<D, 6, kPermuteX>(xs, w, nb, ne, c0, c1, xp, acc, ys, ldy); break;
            default: GANNET_CHECK(false, "few-row slice of ", rows, " rows");
          }
        }
      }
    }
    return true;
  }
}

constexpr int kGemmNr = 2;
constexpr int kFewMr = 8;  // up to this many x rows share one tile (below the panel path's 8)
// Weight rows a decode GEMV streams side by side (independent FMA chains, memory streams).
// 4 for every format: 6 or 8 for the 1-byte ones measured no faster.
constexpr int gemv_rows(Dec) { return 4; }

template <Dec D>
void cols(const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  if constexpr (D == Dec::kMxfp4 || D == Dec::kBF16) {
    if (w.k % 16 == 0) {
      constexpr Dec P = D == Dec::kMxfp4 ? Dec::kMxfp4Lanes : Dec::kBF16Lanes;
      if (few_rows_blocked<P, true>(x, m, w, n0, n1, y, ldy)) return;  // x permuted as its slices are copied
      float* const xp = thread_scratch(ScratchSlot::kPackedAvx512XLanes, size_t(m * w.k));  // x in P's lane order
      permute_x<P>(x, m * w.k, xp);
      return cols<P>(xp, m, w, n0, n1, y, ldy);
    }
  }
  if (m == 1) {
    if constexpr (scaled(D) && D != Dec::kMxfp4) {
      if (w.k > 0 && w.k % 16 == 0 && w.block_k % 16 == 0) {
        for (int64_t j = n0; j < n1; j += 4) {
          const int64_t nr = std::min<int64_t>(4, n1 - j);
          if constexpr (D == Dec::kFp8Plain) kFp8Gemv4[w.fp8_subnormal_mask4(j, nr)](x, w, j, nr, y + j);
          else gemv4_scaled<D>(x, w, j, nr, y + j);
        }
        return;
      }
    }
    if constexpr (!scaled(D) && D != Dec::kBF16) {
      // Unscaled formats in whole chunks: few_rows' one-row form, whose prefetch (near and
      // far, once per line) streams faster than tile()'s (bf16 2048 x 2048 over 256 MB, 3
      // interleaved rounds: 21.5-24.4 -> 24.3-25.8 GB/s on 2 threads).
      if (w.k > 0 && w.k % 16 == 0) {
        few_rows_cols<D, 1>(x, w, n0, n1, y, ldy);
        return;
      }
    }
    constexpr int nr = gemv_rows(D);
    for (int64_t j = n0; j < n1; j += nr) tile<D, 1, nr>(x, 1, w, j, std::min<int64_t>(nr, n1 - j), y + j, ldy);
    return;
  }
  if (m <= kFewMr) {
    // A few rows (a speculative step verifying drafts): every x row in one tile, so each
    // weight chunk is decoded once for all of them (4-row tiles decode it twice from 5
    // rows on). Each output keeps its own accumulator: the same bits as any tiling.
    if (few_rows_dispatch<D>(x, m, w, n0, n1, y, ldy)) return;
    for (int64_t j = n0; j < n1; j += kGemmNr)
      tile<D, kFewMr, kGemmNr>(x, m, w, j, std::min<int64_t>(kGemmNr, n1 - j), y + j, ldy);
    return;
  }
  if (few_rows_blocked<D>(x, m, w, n0, n1, y, ldy)) return;
  for (int64_t mb = 0; mb < m; mb += kMBlock) {
    const int64_t me = std::min(m, mb + kMBlock);
    for (int64_t j = n0; j < n1; j += kGemmNr)
      for (int64_t i = mb; i < me; i += kMr)
        tile<D, kMr, kGemmNr>(x + i * w.k, std::min<int64_t>(kMr, me - i), w, j, std::min<int64_t>(kGemmNr, n1 - j),
                              y + i * ldy + j, ldy);
  }
}

template <Dec D>
void dequant(const PackedWeight& w, int64_t r0, int64_t r1, float* out) {
  const int64_t k = w.k, rb = w.row_bytes(), bk = scaled(D) ? w.block_k : k;
  const int64_t sbytes = w.scale_dtype == DType::F8_E8M0 ? 1 : 4;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * rb;
    const uint8_t* srow = scaled(D) ? static_cast<const uint8_t*>(w.scales) + (r / w.block_n) * w.scale_cols() * sbytes : nullptr;
    float* o = out + (r - r0) * k;
    for (int64_t c0 = 0, bc = 0; c0 < k; c0 += bk, ++bc) {
      const int64_t c1 = std::min(k, c0 + bk);
      const __m512 s = scaled(D) ? _mm512_set1_ps(block_scale<D>(w, srow, bc)) : _mm512_set1_ps(1.0f);
      for (int64_t c = c0; c < c1; c += 16) {
        const __mmask16 mk = c + 16 <= c1 ? __mmask16(0xffff) : mask16(c1 - c);
        __m512 v = decode<D>(row, c, mk);
        if constexpr (scaled(D)) v = _mm512_mul_ps(v, s);
        _mm512_mask_storeu_ps(o + c, mk, v);
      }
    }
  }
}

// The lane GEMM's panel (packed_matmul_impl.h): per group of 16 rows, each 16-column
// chunk of them decoded and scaled as dequant does, transposed in registers and stored
// as one step of every lane.
template <Dec D>
void pack_lane_panel_of(const PackedWeight& w, int64_t r0, int64_t rows, int64_t S, int64_t lane_stride, float* wb) {
  const int64_t k = w.k, rb = w.row_bytes(), bk = scaled(D) ? w.block_k : k;
  const int64_t sbytes = w.scale_dtype == DType::F8_E8M0 ? 1 : 4;
  for (int g = 0; g < 2; ++g) {
    const int live = int(std::clamp<int64_t>(rows - 16 * g, 0, 16));
    const uint8_t* p[16];
    const uint8_t* srow[16];
    __m512 sc[16];
    for (int i = 0; i < live; ++i) {
      const int64_t r = r0 + 16 * g + i;
      p[i] = static_cast<const uint8_t*>(w.data) + r * rb;
      srow[i] = scaled(D) ? static_cast<const uint8_t*>(w.scales) + (r / w.block_n) * w.scale_cols() * sbytes : nullptr;
    }
    for (int64_t c = 0; c < S; ++c) {
      const int64_t col = 16 * c;
      const __mmask16 mk = mask16(k - col);
      if (scaled(D) && col % bk == 0)  // a new scale block (block_k is a multiple of 16)
        for (int i = 0; i < live; ++i) sc[i] = _mm512_set1_ps(block_scale<D>(w, srow[i], col / bk));
      __m512 r[16];
      GANNET_UNROLL for (int i = 0; i < 16; ++i) {
        if (i < live) {
          r[i] = decode<D>(p[i], col, mk);
          // Lanes past k stay +0 whatever the scale, as dequant leaves them unwritten.
          if constexpr (scaled(D)) r[i] = _mm512_maskz_mul_ps(mk, r[i], sc[i]);
        } else {
          r[i] = _mm512_setzero_ps();
        }
      }
      transpose16(r);
      GANNET_UNROLL for (int l = 0; l < 16; ++l) _mm512_storeu_ps(wb + l * lane_stride + c * 32 + 16 * g, r[l]);
    }
  }
}

}  // namespace

void pack_lane_panel(const PackedWeight& w, int64_t r0, int64_t rows, int64_t S, int64_t lane_stride, float* wb) {
  GANNET_CHECK(S == (w.k + 15) / 16 && rows >= 1 && rows <= 32 && r0 + rows <= w.n &&
                   (w.scales == nullptr || w.block_k % 16 == 0 || w.format == WeightFormat::kInt8Row),
               "lane panel of rows [", r0, ", ", r0 + rows, ") of ", w.n, ", ", S, " steps for k = ", w.k);
  switch (w.format) {
    case WeightFormat::kF32: return pack_lane_panel_of<Dec::kF32>(w, r0, rows, S, lane_stride, wb);
    case WeightFormat::kBF16: return pack_lane_panel_of<Dec::kBF16>(w, r0, rows, S, lane_stride, wb);
    case WeightFormat::kF16: return pack_lane_panel_of<Dec::kF16>(w, r0, rows, S, lane_stride, wb);
    case WeightFormat::kFp8Block:
      return w.fp8_plain ? pack_lane_panel_of<Dec::kFp8Plain>(w, r0, rows, S, lane_stride, wb)
                         : pack_lane_panel_of<Dec::kFp8Exact>(w, r0, rows, S, lane_stride, wb);
    case WeightFormat::kMxfp4: return pack_lane_panel_of<Dec::kMxfp4>(w, r0, rows, S, lane_stride, wb);
    case WeightFormat::kInt8Row: return pack_lane_panel_of<Dec::kInt8>(w, r0, rows, S, lane_stride, wb);
  }
}

void dequant_rows(const PackedWeight& w, int64_t r0, int64_t r1, float* out) {
  switch (w.format) {
    case WeightFormat::kF32: return dequant<Dec::kF32>(w, r0, r1, out);
    case WeightFormat::kBF16: return dequant<Dec::kBF16>(w, r0, r1, out);
    case WeightFormat::kF16: return dequant<Dec::kF16>(w, r0, r1, out);
    case WeightFormat::kFp8Block:
      return w.fp8_plain ? dequant<Dec::kFp8Plain>(w, r0, r1, out) : dequant<Dec::kFp8Exact>(w, r0, r1, out);
    case WeightFormat::kMxfp4: return dequant<Dec::kMxfp4>(w, r0, r1, out);
    case WeightFormat::kInt8Row: return dequant<Dec::kInt8>(w, r0, r1, out);
  }
}

GANNET_MATMUL_PACKED_COLS(matmul_packed_cols) {
  switch (w.format) {
    case WeightFormat::kF32: return cols<Dec::kF32>(x, m, w, n0, n1, y, ldy);
    case WeightFormat::kBF16: return cols<Dec::kBF16>(x, m, w, n0, n1, y, ldy);
    case WeightFormat::kF16: return cols<Dec::kF16>(x, m, w, n0, n1, y, ldy);
    case WeightFormat::kFp8Block:
      return w.fp8_plain ? cols<Dec::kFp8Plain>(x, m, w, n0, n1, y, ldy) : cols<Dec::kFp8Exact>(x, m, w, n0, n1, y, ldy);
    case WeightFormat::kMxfp4: return cols<Dec::kMxfp4>(x, m, w, n0, n1, y, ldy);
    case WeightFormat::kInt8Row: return cols<Dec::kInt8>(x, m, w, n0, n1, y, ldy);
  }
}

}  // namespace gannet::kernels::avx512
