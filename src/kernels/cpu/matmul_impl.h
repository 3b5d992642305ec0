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
}  // namespace avx512

}  // namespace gannet::kernels
