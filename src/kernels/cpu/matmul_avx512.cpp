// AVX-512 matmul: register tiles of MR x rows by NR w rows, each output keeping its own
// 16-lane accumulator, so every element follows the canonical order of canonical.h.
// bf16 uses vdpbf16ps, whose arithmetic is what canonical.h specifies.
#pragma GCC optimize("fp-contract=off")  // see simd_avx2.h / simd_avx512.h
// Under that pragma GCC 12 misreports the intrinsics' own _mm*_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/simd_avx512.h"

namespace gannet::kernels::avx512 {

namespace {

constexpr int kMr = 4, kNr = 4;   // prefill tile: 16 accumulators + 4 x + 4 w registers
constexpr int kGemvNr = 8;        // decode: 8 w rows streamed side by side
constexpr int64_t kMBlock = 64;   // x rows kept hot in L2 while a w tile is reused
constexpr int64_t kPrefetchBytes = 1024;

template <int MR, int NR>
void tile_f32(const float* x, int64_t k, const float* w, float* y, int64_t ldy) {
  __m512 acc[MR][NR];
  #pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t kfull = k / 16 * 16;
  for (int64_t c = 0; c < kfull; c += 16) {
    __m512 wv[NR];
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      if constexpr (MR == 1) _mm_prefetch((const char*)(w + j * k + c) + kPrefetchBytes, _MM_HINT_T0);
      wv[j] = _mm512_loadu_ps(w + j * k + c);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512 xv = _mm512_loadu_ps(x + i * k + c);
      #pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (kfull < k) {  // zero-padded last chunk, as the reference pads
    __mmask16 mk = mask16(k - kfull);
    __m512 wv[NR];
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_ps(mk, w + j * k + kfull);
    #pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512 xv = _mm512_maskz_loadu_ps(mk, x + i * k + kfull);
      #pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = tree_reduce(acc[i][j]);
}

template <int MR, int NR>
void tile_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t k, float* y,
               int64_t ldy) {
  __m512 acc[MR][NR];
  #pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t kfull = k / 32 * 32;
  for (int64_t c = 0; c < kfull; c += 32) {
    __m512i wv[NR];
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      if constexpr (MR == 1) _mm_prefetch((const char*)(w + j * k + c) + kPrefetchBytes, _MM_HINT_T0);
      wv[j] = _mm512_loadu_si512(w + j * k + c);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512i xv = _mm512_loadu_si512(x + i * ldx + c);
      #pragma GCC unroll 8
      for (int j = 0; j < NR; ++j)
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
    }
  }
  if (kfull < k) {  // x is already zero-padded to ldx
    __mmask32 mk = mask32(k - kfull);
    __m512i wv[NR];
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_epi16(mk, w + j * k + kfull);
    #pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512i xv = _mm512_loadu_si512(x + i * ldx + kfull);
      #pragma GCC unroll 8
      for (int j = 0; j < NR; ++j)
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = tree_reduce(acc[i][j]);
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

TileF32 f32_tile(int64_t mr, int64_t nr) {
  static constexpr std::array<std::array<TileF32, kGemvNr>, kMr> table = {
      f32_row<1>(std::make_integer_sequence<int, kGemvNr>()),
      f32_row<2>(std::make_integer_sequence<int, kGemvNr>()),
      f32_row<3>(std::make_integer_sequence<int, kGemvNr>()),
      f32_row<4>(std::make_integer_sequence<int, kGemvNr>())};
  return table[mr - 1][nr - 1];
}

TileBf16 bf16_tile(int64_t mr, int64_t nr) {
  static constexpr std::array<std::array<TileBf16, kGemvNr>, kMr> table = {
      bf16_row<1>(std::make_integer_sequence<int, kGemvNr>()),
      bf16_row<2>(std::make_integer_sequence<int, kGemvNr>()),
      bf16_row<3>(std::make_integer_sequence<int, kGemvNr>()),
      bf16_row<4>(std::make_integer_sequence<int, kGemvNr>())};
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

}  // namespace gannet::kernels::avx512
