// Per-ISA column kernels behind packed_matmul.h: y[0:m, n0:n1] for all rows of x.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/packed_weight.h"

namespace gannet::kernels {

// x: [m, k] f32; y: [m, ldy], columns n0..n1-1 written.
#define GANNET_MATMUL_PACKED_COLS(name) \
  void name(const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy)

namespace ref {
GANNET_MATMUL_PACKED_COLS(matmul_packed_cols);
}
namespace avx2 {
GANNET_MATMUL_PACKED_COLS(matmul_packed_cols);
// Rows [r0, r1) dequantized into out [r1 - r0, k]: the bits of PackedWeight::dequant_row.
void dequant_rows(const PackedWeight& w, int64_t r0, int64_t r1, float* out);
// The AVX2 lane GEMM's w panel (lane_gemm.h, f32 order) of rows [r0, r0 + rows), rows <=
// 16: decoded as dequant_rows does, 16 columns of 8 rows at a time, and transposed
// straight into wb [16 lanes][S steps][16 rows] (lanes lane_stride floats apart; +0 past
// `rows`), with no [rows, k] buffer in between.
void pack_lane_panel(const PackedWeight& w, int64_t r0, int64_t rows, int64_t S, int64_t lane_stride, float* wb);
}
namespace avx512 {
// matmul_packed_cols runs x rows [9, kFewBlockedRows) in slices of at most 12, each w chunk
// decoded in registers once per slice, where few_rows_fit(w) (whole 16-element chunks and
// scale blocks); the dispatch (packed_matmul.cpp) runs other such products on f32 panels.
constexpr int64_t kFewBlockedRows = 48;
inline bool few_rows_fit(const PackedWeight& w) {
  const bool scaled = w.format == WeightFormat::kFp8Block || w.format == WeightFormat::kMxfp4 ||
                      w.format == WeightFormat::kInt8Row;
  return w.k > 0 && w.k % 16 == 0 && (!scaled || w.block_k % 16 == 0);
}
GANNET_MATMUL_PACKED_COLS(matmul_packed_cols);
// Rows [r0, r1) dequantized into out [r1 - r0, k]: the bits of PackedWeight::dequant_row.
void dequant_rows(const PackedWeight& w, int64_t r0, int64_t r1, float* out);
// The AVX-512 lane GEMM's w panel (lane_gemm.h, f32 order) of rows [r0, r0 + rows), rows
// <= 32, decoded 16 x 16 at a time as dequant_rows does and transposed straight into wb
// [16 lanes][S steps][32 rows] (lanes lane_stride floats apart; +0 past `rows` and k).
void pack_lane_panel(const PackedWeight& w, int64_t r0, int64_t rows, int64_t S, int64_t lane_stride, float* wb);
}

}  // namespace gannet::kernels
