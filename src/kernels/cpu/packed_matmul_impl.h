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
}
namespace avx512 {
GANNET_MATMUL_PACKED_COLS(matmul_packed_cols);
// Rows [r0, r1) dequantized into out [r1 - r0, k]: the bits of PackedWeight::dequant_row.
void dequant_rows(const PackedWeight& w, int64_t r0, int64_t r1, float* out);
}

}  // namespace gannet::kernels
