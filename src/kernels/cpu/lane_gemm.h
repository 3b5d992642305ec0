// Lane-split GEMM (AVX-512 prefill): the canonical dot of canonical.h computed as 16
// outer-product GEMMs, one per accumulator lane, then the canonical tree across them.
//
// Lane l of a canonical f32 dot only ever sees the elements k = 16s + l, s = 0, 1, ...,
// in that order (zero past k); the bf16 dot's lane l sees 32c + 2l + 1 then 32c + 2l for
// c = 0, 1, ... . So the 16 lane accumulators of every output y[i, j] are 16 independent
// sums over "steps" s, each the plain sequence acc = fma(x_s, w_s, acc) from +0. A GEMM
// tile can therefore keep 12 x rows x 32 w rows of ONE lane in registers (24 zmm, 16
// outputs each, one broadcast x value per row and step) instead of 16 lanes of a few
// outputs: no horizontal reduction per tile and 2 loads per 24 FMAs from the weights. The
// 16 lane partials of a tile are stored, then added by the canonical tree (s = 8, 4, 2, 1)
// across them, one output per SIMD lane. Every output's bits are those of
// dot_f32_ref / dot_bf16_ref of its row pair, whatever m, the tile or the thread.
//
// Layouts (S = steps per lane: ceil(k / 16) for f32, 2 * ceil(k / 32) for bf16):
//   xp  [tile][lane][S][12]   x rows, 12 per tile (rows past m are +0), per lane in step
//                             order; bf16: x rounded to bf16 first.
//   w   packed per block of 32 output columns as [lane][S][32] inside lane_gemm_cols.
#pragma once

#include <cstdint>

namespace gannet::kernels {
struct PackedWeight;
}

namespace gannet::kernels::avx512 {

enum class LaneOrder { kF32, kBf16 };

inline constexpr int64_t kLaneMr = 12;  // x rows per register tile
inline constexpr int64_t kLaneNr = 32;  // output columns per register tile (2 zmm)

int64_t lane_steps(LaneOrder order, int64_t k);
int64_t lane_tiles(int64_t m);  // ceil(m / kLaneMr)
// Floats of xp for m rows: lane_tiles(m) * 16 * lane_steps * kLaneMr.
int64_t lane_x_floats(LaneOrder order, int64_t m, int64_t k);

// Packs tiles [t0, t1) of x: [m, k] f32 into xp (the whole buffer's base).
void lane_pack_x(LaneOrder order, const float* x, int64_t m, int64_t k, int64_t t0, int64_t t1, float* xp);

// The weight a lane GEMM reads: exactly one of f32 rows [n, k], bf16 rows [n, k] (order
// kBf16) or a packed weight (order kF32: the canonical f32 dot with its dequantized rows).
struct LaneWeight {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  const PackedWeight* packed = nullptr;
};

// Cache blocking: 32-column panels packed per n-block, x tiles per m-block, steps of one
// lane per register-tile pass. 0 takes the built-in size; tests force small blocks to
// walk every edge, which only decides where an output's partial sums wait between
// passes, never their values.
struct LaneBlocking {
  int64_t panels = 0;
  int64_t tiles = 0;
  int64_t steps = 0;
};

// y[0:m, n0:n1] (row stride ldy) from xp (lane_pack_x of all of x) and w.
void lane_gemm_cols(LaneOrder order, const float* xp, int64_t m, int64_t k, const LaneWeight& w, int64_t n0,
                    int64_t n1, float* y, int64_t ldy, const LaneBlocking& blocking = {});

}  // namespace gannet::kernels::avx512

namespace gannet {
class ThreadPool;
}

namespace gannet::kernels {

// y [m, n] = the lane-split product of x [m, k] with w [n, k] on AVX-512: x packed across
// the pool, then output columns split across it in blocks of 32.
void lane_matmul(avx512::LaneOrder order, const float* x, int64_t m, int64_t k, const avx512::LaneWeight& w,
                 int64_t n, float* y, ThreadPool* pool);

}  // namespace gannet::kernels
