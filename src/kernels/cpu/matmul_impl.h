// Per-ISA column kernels behind matmul.h. Each computes y[0:m, n0:n1] for all rows of x;
// matmul.cpp converts x and splits [0, n) across threads.
#pragma once

#include <cstdint>

namespace gannet::kernels {

// x: [m, k] f32; w: [n, k]; y: [m, ldy], columns n0..n1-1 written.
#define GANNET_MATMUL_F32_COLS(name)                                                     \
  void name(const float* x, int64_t m, int64_t k, const float* w, int64_t n0, int64_t n1, \
            float* y, int64_t ldy)
// xb: [m, ldx] bf16, zero-padded from k to ldx (a multiple of 32); w: [n, k] bf16.
#define GANNET_MATMUL_BF16_COLS(name)                                                    \
  void name(const uint16_t* xb, int64_t ldx, int64_t m, int64_t k, const uint16_t* w,    \
            int64_t n0, int64_t n1, float* y, int64_t ldy)

// xs: [m, ldx] f32: x rounded to bf16, then each 32-element chunk stored as its 16 odd
// elements followed by its 16 even ones (the high and low halves of vdpbf16ps's lane
// pairs), zero-padded from k to ldx; w: [n, k] bf16. For kernels that emulate vdpbf16ps
// with two FMAs per lane (to_bf16_split in matmul.cpp makes xs).
#define GANNET_MATMUL_BF16_SPLIT_COLS(name)                                              \
  void name(const float* xs, int64_t ldx, int64_t m, int64_t k, const uint16_t* w,       \
            int64_t n0, int64_t n1, float* y, int64_t ldy)

// Walks the output block y[0:m, n0:n1] in register tiles, calling run(i, j, mr, nr) for
// the tile of rows i..i+mr-1 and columns j..j+nr-1. One row (decode) streams gemv_nr
// columns per tile; more rows go in m-blocks of `mblock` rows (kept in cache while the w
// tiles stream past) and tiles of up to mr x nr. The walk only decides which tile computes
// an element, never how, so it cannot change any result's bits.
template <typename Run>
inline void walk_tiles(int64_t m, int64_t n0, int64_t n1, int64_t gemv_nr, int64_t mblock, int64_t mr, int64_t nr,
                       const Run& run) {
  if (m == 1) {
    for (int64_t j = n0; j < n1; j += gemv_nr) run(int64_t(0), j, int64_t(1), gemv_nr < n1 - j ? gemv_nr : n1 - j);
    return;
  }
  for (int64_t mb = 0; mb < m; mb += mblock) {
    const int64_t me = mb + mblock < m ? mb + mblock : m;
    for (int64_t j = n0; j < n1; j += nr)
      for (int64_t i = mb; i < me; i += mr) run(i, j, mr < me - i ? mr : me - i, nr < n1 - j ? nr : n1 - j);
  }
}

namespace ref {
GANNET_MATMUL_F32_COLS(matmul_f32_cols);
GANNET_MATMUL_BF16_COLS(matmul_bf16_cols);
}  // namespace ref
namespace avx2 {
GANNET_MATMUL_F32_COLS(matmul_f32_cols);
GANNET_MATMUL_BF16_COLS(matmul_bf16_cols);
}  // namespace avx2
namespace avx512 {
GANNET_MATMUL_F32_COLS(matmul_f32_cols);
GANNET_MATMUL_BF16_COLS(matmul_bf16_cols);
// The same bits as matmul_bf16_cols from FMAs under DAZ/FTZ (m > 1 only): faster where
// the FMA units outrun vdpbf16ps (measured at start-up, matmul.cpp).
GANNET_MATMUL_BF16_SPLIT_COLS(matmul_bf16_fma_cols);
}  // namespace avx512

}  // namespace gannet::kernels
