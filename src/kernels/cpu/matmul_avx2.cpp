// AVX2 matmul: the canonical 16-lane accumulators of canonical.h held as two ymm (lanes
// 0-7, 8-15). bf16 emulates vdpbf16ps exactly: per 32-bit lane, the odd bf16 element is
// the high half (mask it), the even one the low half (shift it), odd FMA first, under
// MXCSR DAZ/FTZ; the tree reduction then runs with the caller's MXCSR, as on AVX-512.

#include <algorithm>
#include <cstring>

#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace gannet::kernels::avx2 {

namespace {

constexpr int kMr = 2, kNr = 2;   // 8 accumulator registers of 16
constexpr int64_t kMBlock = 64;
// Decode: one w row at a time with a linear prefetch (see matmul_avx512.cpp).
constexpr int kGemvNr = 1;
constexpr int64_t kPrefetchAhead = 4096;

// x: [MR, k]; w: [NR, k]; y: [MR, ldy].
template <int MR, int NR>
void tile_f32(const float* x, int64_t k, const float* w, float* y, int64_t ldy) {
  __m256 acc[MR][NR][2];
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  auto step = [&](int64_t c, __m256i ml, __m256i mh) {
    __m256 wl[NR], wh[NR];
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      wl[j] = _mm256_maskload_ps(w + j * k + c, ml);
      wh[j] = _mm256_maskload_ps(w + j * k + c + 8, mh);
    }
    GANNET_UNROLL for (int i = 0; i < MR; ++i) {
      const __m256 xl = _mm256_maskload_ps(x + i * k + c, ml);
      const __m256 xh = _mm256_maskload_ps(x + i * k + c + 8, mh);
      GANNET_UNROLL for (int j = 0; j < NR; ++j) {
        acc[i][j][0] = _mm256_fmadd_ps(xl, wl[j], acc[i][j][0]);
        acc[i][j][1] = _mm256_fmadd_ps(xh, wh[j], acc[i][j][1]);
      }
    }
  };
  const int64_t kfull = k / 16 * 16;
  const __m256i all = _mm256_set1_epi32(-1);
  const char* pf = reinterpret_cast<const char*>(w) + kPrefetchAhead;
  for (int64_t c = 0; c < kfull; c += 16, pf += 64 * NR) {
    if constexpr (MR == 1)
      GANNET_UNROLL for (int j = 0; j < NR; ++j) _mm_prefetch(pf + 64 * j, _MM_HINT_T0);
    step(c, all, all);
  }
  if (kfull < k) step(kfull, mask8(k - kfull), mask8(k - kfull - 8));  // zero-padded chunk
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) y[i * ldy + j] = tree_reduce(acc[i][j][0], acc[i][j][1]);
}

// bf16 pairs in 32-bit lanes: the odd element is the high half, the even one the low half.
inline __m256 odd_f32(__m256i v) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));
}
inline __m256 even_f32(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }

// One 32-element chunk: lanes 0-7 from elements 0-15, lanes 8-15 from elements 16-31.
template <int MR, int NR>
inline void bf16_chunk(const uint16_t* const* xr, const uint16_t* const* wr, __m256 (&acc)[MR][NR][2]) {
  GANNET_UNROLL for (int h = 0; h < 2; ++h) {
    __m256 xo[MR], xe[MR];
    GANNET_UNROLL for (int i = 0; i < MR; ++i) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[i] + 16 * h));
      xo[i] = odd_f32(v);
      xe[i] = even_f32(v);
    }
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[j] + 16 * h));
      const __m256 wo = odd_f32(v), we = even_f32(v);
      GANNET_UNROLL for (int i = 0; i < MR; ++i) {
        acc[i][j][h] = _mm256_fmadd_ps(xo[i], wo, acc[i][j][h]);
        acc[i][j][h] = _mm256_fmadd_ps(xe[i], we, acc[i][j][h]);
      }
    }
  }
}

// x: [MR, ldx] zero-padded; w: [NR, k]; y: [MR, ldy].
template <int MR, int NR>
void tile_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t k, float* y,
               int64_t ldy) {
  __m256 acc[MR][NR][2];
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  // The pins keep the FMAs inside the DAZ/FTZ region and the tree adds outside it.
  auto pin_all = [&] {
    GANNET_UNROLL for (int i = 0; i < MR; ++i)
      GANNET_UNROLL for (int j = 0; j < NR; ++j) pin(acc[i][j][0]), pin(acc[i][j][1]);
  };
  const int64_t kfull = k / 32 * 32;
  {
    DenormalsAreZero daz;
    pin_all();
    const uint16_t* xr[MR];
    const uint16_t* wr[NR];
    const char* pf = reinterpret_cast<const char*>(w) + kPrefetchAhead;
    for (int64_t c = 0; c < kfull; c += 32, pf += 64 * NR) {
      GANNET_UNROLL for (int i = 0; i < MR; ++i) xr[i] = x + i * ldx + c;
      GANNET_UNROLL for (int j = 0; j < NR; ++j) {
        wr[j] = w + j * k + c;
        if constexpr (MR == 1) _mm_prefetch(pf + 64 * j, _MM_HINT_T0);
      }
      bf16_chunk<MR, NR>(xr, wr, acc);
    }
    if (kfull < k) {  // w tail copied into a zero-padded chunk; x is padded already
      uint16_t tail[NR][32] = {};
      GANNET_UNROLL for (int i = 0; i < MR; ++i) xr[i] = x + i * ldx + kfull;
      GANNET_UNROLL for (int j = 0; j < NR; ++j) {
        std::memcpy(tail[j], w + j * k + kfull, (k - kfull) * sizeof(uint16_t));
        wr[j] = tail[j];
      }
      bf16_chunk<MR, NR>(xr, wr, acc);
    }
    pin_all();
  }
  pin_all();
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) y[i * ldy + j] = tree_reduce(acc[i][j][0], acc[i][j][1]);
}

using TileF32 = void (*)(const float*, int64_t, const float*, float*, int64_t);
using TileBf16 = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t);
static_assert(kGemvNr <= kNr && kMr == 2 && kNr == 2);

TileF32 f32_tile(int64_t mr, int64_t nr) {
  static constexpr TileF32 table[kMr][kNr] = {{tile_f32<1, 1>, tile_f32<1, 2>},
                                               {tile_f32<2, 1>, tile_f32<2, 2>}};
  return table[mr - 1][nr - 1];
}

TileBf16 bf16_tile(int64_t mr, int64_t nr) {
  static constexpr TileBf16 table[kMr][kNr] = {{tile_bf16<1, 1>, tile_bf16<1, 2>},
                                                {tile_bf16<2, 1>, tile_bf16<2, 2>}};
  return table[mr - 1][nr - 1];
}

}  // namespace

GANNET_MATMUL_F32_COLS(matmul_f32_cols) {
  walk_tiles(m, n0, n1, kGemvNr, kMBlock, kMr, kNr, [&](int64_t i, int64_t j, int64_t mr, int64_t nr) {
    f32_tile(mr, nr)(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
  });
}

GANNET_MATMUL_BF16_COLS(matmul_bf16_cols) {
  walk_tiles(m, n0, n1, kGemvNr, kMBlock, kMr, kNr, [&](int64_t i, int64_t j, int64_t mr, int64_t nr) {
    bf16_tile(mr, nr)(xb + i * ldx, ldx, w + j * k, k, y + i * ldy + j, ldy);
  });
}

}  // namespace gannet::kernels::avx2
