// AVX2 matmul: the canonical 16-lane accumulators of canonical.h held as two ymm (lanes
// 0-7, 8-15). bf16 emulates vdpbf16ps exactly: per 32-bit lane, the odd bf16 element is
// the high half (mask it), the even one the low half (shift it), odd FMA first, under
// MXCSR DAZ/FTZ; the tree reduction then runs with the caller's MXCSR, as on AVX-512.
#pragma GCC optimize("fp-contract=off")  // see simd_avx2.h / simd_avx512.h
// Under that pragma GCC 12 misreports the intrinsics' own _mm*_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace gannet::kernels::avx2 {

namespace {

constexpr int kMr = 2, kNr = 2;   // 8 accumulator registers of 16
constexpr int kGemvNr = 4;
constexpr int64_t kMBlock = 64;
constexpr int64_t kPrefetchBytes = 1024;

template <int MR, int NR>
void tile_f32(const float* x, int64_t k, const float* w, float* y, int64_t ldy) {
  __m256 lo[MR][NR], hi[MR][NR];
  #pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) lo[i][j] = hi[i][j] = _mm256_setzero_ps();
  const int64_t kfull = k / 16 * 16;
  for (int64_t c = 0; c < kfull; c += 16) {
    __m256 wl[NR], wh[NR];
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      if constexpr (MR == 1) _mm_prefetch((const char*)(w + j * k + c) + kPrefetchBytes, _MM_HINT_T0);
      wl[j] = _mm256_loadu_ps(w + j * k + c);
      wh[j] = _mm256_loadu_ps(w + j * k + c + 8);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m256 xl = _mm256_loadu_ps(x + i * k + c), xh = _mm256_loadu_ps(x + i * k + c + 8);
      #pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        lo[i][j] = _mm256_fmadd_ps(xl, wl[j], lo[i][j]);
        hi[i][j] = _mm256_fmadd_ps(xh, wh[j], hi[i][j]);
      }
    }
  }
  if (kfull < k) {  // zero-padded last chunk
    __m256i ml = mask8(k - kfull), mh = mask8(k - kfull - 8);
    __m256 wl[NR], wh[NR];
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      wl[j] = _mm256_maskload_ps(w + j * k + kfull, ml);
      wh[j] = _mm256_maskload_ps(w + j * k + kfull + 8, mh);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m256 xl = _mm256_maskload_ps(x + i * k + kfull, ml);
      __m256 xh = _mm256_maskload_ps(x + i * k + kfull + 8, mh);
      #pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        lo[i][j] = _mm256_fmadd_ps(xl, wl[j], lo[i][j]);
        hi[i][j] = _mm256_fmadd_ps(xh, wh[j], hi[i][j]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = tree_reduce(lo[i][j], hi[i][j]);
}

// One 16-element half of a bf16 chunk: 8 lanes, odd element then even element.
inline __m256 odd_f32(__m256i v) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));
}
inline __m256 even_f32(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }

template <int MR, int NR>
void bf16_chunk(const uint16_t* const* xr, const uint16_t* const* wr, __m256 (&acc)[MR][NR][2]) {
  #pragma GCC unroll 8
  for (int h = 0; h < 2; ++h) {
    __m256 xo[MR], xe[MR];
    #pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m256i v = _mm256_loadu_si256((const __m256i*)(xr[i] + 16 * h));
      xo[i] = odd_f32(v);
      xe[i] = even_f32(v);
    }
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      __m256i v = _mm256_loadu_si256((const __m256i*)(wr[j] + 16 * h));
      __m256 wo = odd_f32(v), we = even_f32(v);
      #pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        acc[i][j][h] = _mm256_fmadd_ps(xo[i], wo, acc[i][j][h]);
        acc[i][j][h] = _mm256_fmadd_ps(xe[i], we, acc[i][j][h]);
      }
    }
  }
}

template <int MR, int NR>
void tile_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t k, float* y,
               int64_t ldy) {
  __m256 acc[MR][NR][2];
  #pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  auto pin_all = [&] {
    #pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
      #pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) pin(acc[i][j][0]), pin(acc[i][j][1]);
  };
  const int64_t kfull = k / 32 * 32;
  {
    DenormalsAreZero daz;
    pin_all();
    const uint16_t* xr[MR];
    const uint16_t* wr[NR];
    for (int64_t c = 0; c < kfull; c += 32) {
      #pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) xr[i] = x + i * ldx + c;
      #pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        wr[j] = w + j * k + c;
        if constexpr (MR == 1) _mm_prefetch((const char*)wr[j] + kPrefetchBytes, _MM_HINT_T0);
      }
      bf16_chunk<MR, NR>(xr, wr, acc);
    }
    if (kfull < k) {  // w tail copied into a zero-padded chunk; x is padded already
      uint16_t tail[NR][32] = {};
      #pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) xr[i] = x + i * ldx + kfull;
      #pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        std::memcpy(tail[j], w + j * k + kfull, (k - kfull) * sizeof(uint16_t));
        wr[j] = tail[j];
      }
      bf16_chunk<MR, NR>(xr, wr, acc);
    }
    pin_all();
  }
  pin_all();
  #pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = tree_reduce(acc[i][j][0], acc[i][j][1]);
}

using TileF32 = void (*)(const float*, int64_t, const float*, float*, int64_t);
using TileBf16 = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t);

TileF32 f32_tile(int64_t mr, int64_t nr) {
  static constexpr TileF32 table[kMr][kGemvNr] = {
      {tile_f32<1, 1>, tile_f32<1, 2>, tile_f32<1, 3>, tile_f32<1, 4>},
      {tile_f32<2, 1>, tile_f32<2, 2>, nullptr, nullptr}};
  return table[mr - 1][nr - 1];
}

TileBf16 bf16_tile(int64_t mr, int64_t nr) {
  static constexpr TileBf16 table[kMr][kGemvNr] = {
      {tile_bf16<1, 1>, tile_bf16<1, 2>, tile_bf16<1, 3>, tile_bf16<1, 4>},
      {tile_bf16<2, 1>, tile_bf16<2, 2>, nullptr, nullptr}};
  return table[mr - 1][nr - 1];
}

}  // namespace

GANNET_MATMUL_F32_COLS(matmul_f32_cols) {
  if (m == 1) {
    for (int64_t j = n0; j < n1; j += kGemvNr)
      f32_tile(1, std::min<int64_t>(kGemvNr, n1 - j))(x, k, w + j * k, y + j, ldy);
    return;
  }
  for (int64_t mb = 0; mb < m; mb += kMBlock) {
    const int64_t me = std::min(m, mb + kMBlock);
    for (int64_t j = n0; j < n1; j += kNr) {
      const int64_t nr = std::min<int64_t>(kNr, n1 - j);
      for (int64_t i = mb; i < me; i += kMr)
        f32_tile(std::min<int64_t>(kMr, me - i), nr)(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
    }
  }
}

GANNET_MATMUL_BF16_COLS(matmul_bf16_cols) {
  if (m == 1) {
    for (int64_t j = n0; j < n1; j += kGemvNr)
      bf16_tile(1, std::min<int64_t>(kGemvNr, n1 - j))(xb, ldx, w + j * k, k, y + j, ldy);
    return;
  }
  for (int64_t mb = 0; mb < m; mb += kMBlock) {
    const int64_t me = std::min(m, mb + kMBlock);
    for (int64_t j = n0; j < n1; j += kNr) {
      const int64_t nr = std::min<int64_t>(kNr, n1 - j);
      for (int64_t i = mb; i < me; i += kMr)
        bf16_tile(std::min<int64_t>(kMr, me - i), nr)(xb + i * ldx, ldx, w + j * k, k,
                                                     y + i * ldy + j, ldy);
    }
  }
}

}  // namespace gannet::kernels::avx2
