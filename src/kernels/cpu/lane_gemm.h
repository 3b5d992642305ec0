// Lane-split GEMM (AVX-512 and AVX2 prefill): the canonical dot of canonical.h computed as 16
// outer-product GEMMs, one per accumulator lane, then the canonical tree across them.
//
// Lane l of a canonical f32 dot only ever sees the elements k = 16s + l, s = 0, 1, ...,
// in that order (zero past k); the bf16 dot's lane l sees 32c + 2l + 1 then 32c + 2l for
// c = 0, 1, ... . So the 16 lane accumulators of every output y[i, j] are 16 independent
// sums over "steps" s, each the plain sequence acc = fma(x_s, w_s, acc) from +0. A GEMM
// tile can therefore keep MR x rows x NR w rows of ONE lane in registers (AVX-512: 12 x 32
// in 24 zmm; AVX2: 6 x 16 in 12 ymm; one broadcast x value per row and step) instead of
// 16 lanes of a few outputs: no horizontal reduction per tile and 2 loads per 2 MR FMAs
// from the weights. The 16 lane partials of a tile are stored, then added by the
// canonical tree (s = 8, 4, 2, 1) across them, one output per SIMD lane. Every output's
// bits are those of dot_f32_ref / dot_bf16_ref of its row pair, whatever the ISA, m, the
// tile or the thread.
//
// Layouts (S = steps per lane: ceil(k / 16) for f32, 2 * ceil(k / 32) for bf16):
//   xp  [tile][lane][S][MR]   x rows, MR per tile (rows past m are +0), per lane in step
//                             order; bf16: x rounded to bf16 first.
//   w   packed per block of NR output columns as [lane][S][NR] inside lane_gemm_cols.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace gannet::kernels {
struct PackedWeight;

enum class LaneOrder { kF32, kBf16 };

// Steps per lane: ceil(k / 16) for f32, 2 * ceil(k / 32) for bf16 (the same on every ISA).
int64_t lane_steps(LaneOrder order, int64_t k);

// The weight a lane GEMM reads: exactly one of f32 rows [n, k], bf16 rows [n, k] (order
// kBf16) or a packed weight (order kF32: the canonical f32 dot with its dequantized rows).
struct LaneWeight {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  const PackedWeight* packed = nullptr;
};

// Cache blocking: w panels packed per n-block, x tiles per m-block, steps of one lane per
// register-tile pass. 0 takes the built-in size; tests force small blocks to walk every
// edge, which only decides where an output's partial sums wait between passes, never
// their values.
struct LaneBlocking {
  int64_t panels = 0;
  int64_t tiles = 0;
  int64_t steps = 0;
};

}  // namespace gannet::kernels

// Each ISA: the register tile (kLaneMr x rows kLaneNr columns of one lane), x packing and
// the column kernel. AVX-512: 12 x 32 (24 zmm accumulators); AVX2: 6 x 16 (12 ymm).
#define GANNET_LANE_GEMM_API(MR, NR)                                                                               \
  using kernels::LaneBlocking;                                                                                     \
  using kernels::LaneOrder;                                                                                        \
  using kernels::LaneWeight;                                                                                       \
  using kernels::lane_steps;                                                                                       \
  inline constexpr int64_t kLaneMr = MR; /* x rows per register tile */                                          \
  inline constexpr int64_t kLaneNr = NR; /* output columns per register tile */                                  \
  inline int64_t lane_tiles(int64_t m) { return (m + kLaneMr - 1) / kLaneMr; }                                   \
  /* Floats of xp for m rows: lane_tiles(m) * 16 * lane_steps * kLaneMr. */                                      \
  inline int64_t lane_x_floats(LaneOrder order, int64_t m, int64_t k) {                                          \
    return lane_tiles(m) * 16 * lane_steps(order, k) * kLaneMr;                                                  \
  }                                                                                                              \
  /* Packs tiles [t0, t1) of x: [m, k] f32 into xp (the whole buffer's base). */                                 \
  void lane_pack_x(LaneOrder order, const float* x, int64_t m, int64_t k, int64_t t0, int64_t t1, float* xp);   \
  /* y[0:m, n0:n1] (row stride ldy) from xp (lane_pack_x of all of x) and w. */                                  \
  void lane_gemm_cols(LaneOrder order, const float* xp, int64_t m, int64_t k, const LaneWeight& w, int64_t n0,   \
                      int64_t n1, float* y, int64_t ldy, const LaneBlocking& blocking = {});

namespace gannet::kernels::avx512 {
GANNET_LANE_GEMM_API(12, 32)
}  // namespace gannet::kernels::avx512

namespace gannet::kernels::avx2 {
GANNET_LANE_GEMM_API(6, 16)
}  // namespace gannet::kernels::avx2

namespace gannet {
class ThreadPool;
}

namespace gannet::kernels {

// The ISAs with a lane GEMM, and its parts on the one asked for (callers that pack x once
// and split columns themselves, such as the MoE's per-expert work items).
inline bool lane_gemm_isa(Isa isa) { return isa == Isa::kAvx512 || isa == Isa::kAvx2; }
int64_t lane_x_floats_isa(Isa isa, LaneOrder order, int64_t m, int64_t k);
void lane_pack_x_isa(Isa isa, LaneOrder order, const float* x, int64_t m, int64_t k, float* xp);  // all tiles
void lane_gemm_cols_isa(Isa isa, LaneOrder order, const float* xp, int64_t m, int64_t k, const LaneWeight& w,
                        int64_t n0, int64_t n1, float* y, int64_t ldy);

// y [m, n] = the lane-split product of x [m, k] with w [n, k] on isa (kAvx512 or kAvx2):
// x packed across the pool, then output columns split across it in register-tile blocks.
void lane_matmul(Isa isa, LaneOrder order, const float* x, int64_t m, int64_t k, const LaneWeight& w, int64_t n,
                 float* y, ThreadPool* pool);

}  // namespace gannet::kernels
