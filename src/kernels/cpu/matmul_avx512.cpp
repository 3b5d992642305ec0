// AVX-512 matmul: register tiles of MR x rows by NR w rows, each output keeping its own
// 16-lane accumulator, so every element follows the canonical order of canonical.h.
// bf16 uses vdpbf16ps, whose arithmetic is what canonical.h specifies, or (prefill, where
// the CPU's FMA units outrun it) two FMAs per lane under MXCSR DAZ/FTZ on x split into its
// odd and even halves beforehand: the odd product then the even one, as the instruction.

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/simd_avx512.h"

namespace gannet::kernels::avx512 {

namespace {

constexpr int kMr = 4, kNr = 4;   // f32 prefill tile: 16 accumulators + 4 x + 4 w registers
constexpr int64_t kMBlock = 64;   // x rows kept in L2 while w tiles stream past
// bf16 prefill tile: 24 accumulators + 6 w + 1 x registers. x rows stream from L2 and the
// NR w rows stay in L1, so a wider tile means fewer L2 lines per vdpbf16ps; on Zen 5 this
// measured ~15-25% faster than 4x4 (6x4, 5x5, 8x3, 3x8 and 2x12 were slower).
// 128 x rows (512 KiB at k = 2048) still fit L2 and halve the w passes of a 64-row block.
constexpr int kBf16Mr = 4, kBf16Nr = 6;
constexpr int64_t kBf16MBlock = 128;
// Decode streams one w row at a time and prefetches linearly kPrefetchAhead bytes ahead
// (through the next row): on Zen 5 this measured faster than 2-8 rows side by side or
// per-row prefetch, as the hardware prefetcher then sees a single sequential stream.
constexpr int kGemvNr = 1;
constexpr int64_t kPrefetchAhead = 4096;

// x: [MR, k] (f32) or [MR, ldx] (bf16, zero-padded); w: [NR, k]; y: [MR, ldy].
template <int MR, int NR>
void tile_f32(const float* x, int64_t k, const float* w, float* y, int64_t ldy) {
  __m512 acc[MR][NR];
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  auto step = [&](int64_t c, __mmask16 mk) {
    __m512 wv[NR];
    GANNET_UNROLL for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_ps(mk, w + j * k + c);
    GANNET_UNROLL for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mk, x + i * k + c);
      GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  };
  const int64_t kfull = k / 16 * 16;
  const char* pf = reinterpret_cast<const char*>(w) + kPrefetchAhead;
  for (int64_t c = 0; c < kfull; c += 16, pf += 64 * NR) {
    if constexpr (MR == 1)
      GANNET_UNROLL for (int j = 0; j < NR; ++j) _mm_prefetch(pf + 64 * j, _MM_HINT_T0);
    step(c, 0xffff);
  }
  if (kfull < k) step(kfull, mask16(k - kfull));  // zero-padded last chunk, as the reference
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) y[i * ldy + j] = tree_reduce(acc[i][j]);
}

template <int MR, int NR>
void tile_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t k, float* y,
               int64_t ldy) {
  __m512 acc[MR][NR];
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  auto step = [&](int64_t c, __mmask32 mk) {  // x needs no mask: it is padded with +0
    __m512i wv[NR];
    GANNET_UNROLL for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_epi16(mk, w + j * k + c);
    GANNET_UNROLL for (int i = 0; i < MR; ++i) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + i * ldx + c);
      GANNET_UNROLL for (int j = 0; j < NR; ++j)
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, (__m512bh)wv[j]);
    }
  };
  const int64_t kfull = k / 32 * 32;
  const char* pf = reinterpret_cast<const char*>(w) + kPrefetchAhead;
  for (int64_t c = 0; c < kfull; c += 32, pf += 64 * NR) {
    if constexpr (MR <= 4)  // w streams past once per tile row: prefetch it
      GANNET_UNROLL for (int j = 0; j < NR; ++j) _mm_prefetch(pf + 64 * j, _MM_HINT_T0);
    step(c, ~__mmask32(0));
  }
  if (kfull < k) step(kfull, mask32(k - kfull));
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) y[i * ldy + j] = tree_reduce(acc[i][j]);
}

// FMA emulation of tile_bf16. xs: [MR, ldx] split (matmul_impl.h), 32 floats per chunk;
// w: [NR, k] bf16. 16 accumulators + 8 decoded w registers (wider tiles spill or, with
// 8 x rows, overflow L1); each x vector is an FMA's memory operand, so x costs no register
// and no conversion here. On the 2-core Xeon VM this measured level with vdpbf16ps, not
// the 2x its FMA peak suggests; bf16_gemm_choice() keeps whichever is faster.
constexpr int kFmaMr = 4, kFmaNr = 4;
constexpr int64_t kFmaMBlock = 64;  // 64 split rows at k = 2048: 512 KiB of L2

// One 32-element chunk of tile_bf16_fma into acc (no lambdas: the accumulators must stay
// in registers, and GCC keeps arrays captured by reference in memory).
template <int MR, int NR>
inline void bf16_fma_chunk(const float* xs, int64_t ldx, const uint16_t* w, int64_t k, int64_t c, __mmask32 mk,
                           __m512 (&acc)[MR][NR]) {
  __m512 wo[NR], we[NR];
  GANNET_UNROLL for (int j = 0; j < NR; ++j) {
    const __m512i v = _mm512_maskz_loadu_epi16(mk, w + j * k + c);
    wo[j] = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))));
    we[j] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
  GANNET_UNROLL for (int i = 0; i < MR; ++i) {
    const float* xr = xs + i * ldx + c;
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      acc[i][j] = _mm512_fmadd_ps(_mm512_loadu_ps(xr), wo[j], acc[i][j]);
      acc[i][j] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 16), we[j], acc[i][j]);
    }
  }
}

template <int MR, int NR>
void tile_bf16_fma(const float* xs, int64_t ldx, const uint16_t* w, int64_t k, float* y, int64_t ldy) {
  __m512 acc[MR][NR];
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t kfull = k / 32 * 32;
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // DAZ | FTZ (denormals.h)
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) pin(acc[i][j]);
  for (int64_t c = 0; c < kfull; c += 32) bf16_fma_chunk<MR, NR>(xs, ldx, w, k, c, ~__mmask32(0), acc);
  if (kfull < k) bf16_fma_chunk<MR, NR>(xs, ldx, w, k, kfull, mask32(k - kfull), acc);  // x is padded with +0
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) pin(acc[i][j]);
  _mm_setcsr(saved);
  // The tree adds run with the caller's MXCSR, as after vdpbf16ps.
  GANNET_UNROLL for (int i = 0; i < MR; ++i)
    GANNET_UNROLL for (int j = 0; j < NR; ++j) {
      pin(acc[i][j]);
      y[i * ldy + j] = tree_reduce(acc[i][j]);
    }
}

// f32_tile(mr, nr) / bf16_tile(mr, nr): the instantiation for an mr x nr (edge) tile.
using TileF32 = void (*)(const float*, int64_t, const float*, float*, int64_t);
using TileBf16 = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t);

template <int MR, int... NR>
constexpr std::array<TileF32, sizeof...(NR)> f32_row(std::integer_sequence<int, NR...>) {
  return {tile_f32<MR, NR + 1>...};
}
template <int MR, int... NR>
constexpr std::array<TileBf16, sizeof...(NR)> bf16_row(std::integer_sequence<int, NR...>) {
  return {tile_bf16<MR, NR + 1>...};
}
template <int... MR>
constexpr std::array<std::array<TileBf16, kBf16Nr>, sizeof...(MR)> bf16_table(
    std::integer_sequence<int, MR...>) {
  return {bf16_row<MR + 1>(std::make_integer_sequence<int, kBf16Nr>())...};
}

TileF32 f32_tile(int64_t mr, int64_t nr) {
  constexpr auto cols = std::make_integer_sequence<int, kNr>();
  static constexpr std::array<std::array<TileF32, kNr>, kMr> table = {
      f32_row<1>(cols), f32_row<2>(cols), f32_row<3>(cols), f32_row<4>(cols)};
  return table[mr - 1][nr - 1];
}

using TileBf16Fma = void (*)(const float*, int64_t, const uint16_t*, int64_t, float*, int64_t);
template <int MR, int... NR>
constexpr std::array<TileBf16Fma, sizeof...(NR)> bf16_fma_row(std::integer_sequence<int, NR...>) {
  return {tile_bf16_fma<MR, NR + 1>...};
}
template <int... MR>
constexpr std::array<std::array<TileBf16Fma, kFmaNr>, sizeof...(MR)> bf16_fma_table(std::integer_sequence<int, MR...>) {
  return {bf16_fma_row<MR + 1>(std::make_integer_sequence<int, kFmaNr>())...};
}
TileBf16Fma bf16_fma_tile(int64_t mr, int64_t nr) {
  static constexpr auto table = bf16_fma_table(std::make_integer_sequence<int, kFmaMr>());
  return table[mr - 1][nr - 1];
}

TileBf16 bf16_tile(int64_t mr, int64_t nr) {
  static constexpr auto table = bf16_table(std::make_integer_sequence<int, kBf16Mr>());
  return table[mr - 1][nr - 1];
}

static_assert(kGemvNr <= kNr && kGemvNr <= kBf16Nr && kMr == 4);

}  // namespace

GANNET_MATMUL_F32_COLS(matmul_f32_cols) {
  walk_tiles(m, n0, n1, kGemvNr, kMBlock, kMr, kNr, [&](int64_t i, int64_t j, int64_t mr, int64_t nr) {
    f32_tile(mr, nr)(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
  });
}

GANNET_MATMUL_BF16_COLS(matmul_bf16_cols) {
  walk_tiles(m, n0, n1, kGemvNr, kBf16MBlock, kBf16Mr, kBf16Nr, [&](int64_t i, int64_t j, int64_t mr, int64_t nr) {
    bf16_tile(mr, nr)(xb + i * ldx, ldx, w + j * k, k, y + i * ldy + j, ldy);
  });
}

GANNET_MATMUL_BF16_SPLIT_COLS(matmul_bf16_fma_cols) {
  // x tiles (split f32, twice the bytes of bf16) stay in L1 while a block of w rows sized
  // for L2 streams past: half the L2 traffic per multiply-add of the opposite order.
  const int64_t nblock = std::max<int64_t>(kFmaNr, (int64_t(768) << 10) / std::max<int64_t>(1, 2 * k) / kFmaNr * kFmaNr);
  for (int64_t mb = 0; mb < m; mb += kFmaMBlock) {
    const int64_t me = std::min(m, mb + kFmaMBlock);
    for (int64_t nb = n0; nb < n1; nb += nblock) {
      const int64_t ne = std::min(n1, nb + nblock);
      for (int64_t i = mb; i < me; i += kFmaMr) {
        const int64_t mr = std::min<int64_t>(kFmaMr, me - i);
        for (int64_t j = nb; j < ne; j += kFmaNr)
          bf16_fma_tile(mr, std::min<int64_t>(kFmaNr, ne - j))(xs + i * ldx, ldx, w + j * k, k, y + i * ldy + j, ldy);
      }
    }
  }
}

}  // namespace gannet::kernels::avx512
