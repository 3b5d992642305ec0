// The cache blocking of the lane-split GEMM (lane_gemm.h), shared by its ISA files: w
// panels packed per n-block, x tiles per m-block, steps of one lane per register-tile
// pass, then the canonical tree over the 16 lane partials. K is the ISA's kernel set:
//   kMr, kNr, kStepBlock, kBlockBytes        tile shape and cache budgets
//   w_lane_stride(S)                         floats between the lanes of a packed panel
//   pack_w_f32 / pack_w_bf16(w, ld, rows, k, S, wb), dequant(w, r0, nr, rows)
//   kPackedPanels: pack_packed(w, r0, nr, S, wb) packs a packed weight's panel itself
//     (else dequant into rows, then pack_w_f32)
//   micro<first>(xp, wp, steps, p, ldp, rows), tree_store(p, tiles, row0, m, ncols, y, ldy)
//     (micro computes at least the tile's first `rows` rows, the ones below m; the tree
//     reads no others)
// Include only from lane_gemm_*.cpp.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/lane_gemm.h"
#include "kernels/cpu/scratch.h"

namespace gannet::kernels {

template <typename K>
void lane_gemm_cols_blocked(LaneOrder order, const float* xp, int64_t m, int64_t k, const LaneWeight& w, int64_t n0,
                            int64_t n1, float* y, int64_t ldy, const LaneBlocking& blocking) {
  if (m == 0 || n0 >= n1) return;
  constexpr int64_t kMr = K::kMr, kNr = K::kNr;
  const int64_t S = lane_steps(order, k);
  const int64_t panel_floats = 16 * K::w_lane_stride(S);  // one kNr-column w panel
  const int64_t tiles = (m + kMr - 1) / kMr;
  const int64_t panels_per_block =
      blocking.panels > 0 ? blocking.panels : std::max<int64_t>(1, K::kBlockBytes / (panel_floats * 4));
  const int64_t tiles_per_block =
      blocking.tiles > 0 ? blocking.tiles : std::max<int64_t>(1, K::kBlockBytes / (16 * S * kMr * 4));
  const int64_t step_block = blocking.steps > 0 ? blocking.steps : K::kStepBlock;
  float* const wbuf = thread_scratch(ScratchSlot::kLaneGemmW, size_t(panels_per_block * panel_floats));
  float* const pbuf = thread_scratch(ScratchSlot::kLaneGemmP, size_t(16 * tiles_per_block * kMr * kNr));
  float* const rows =
      w.packed && !K::kPackedPanels ? thread_scratch(ScratchSlot::kLaneGemmRows, size_t(kNr * k)) : nullptr;
  const bool daz = order == LaneOrder::kBf16;

  for (int64_t nb = n0; nb < n1; nb += panels_per_block * kNr) {
    const int64_t ne = std::min(n1, nb + panels_per_block * kNr);
    const int64_t panels = (ne - nb + kNr - 1) / kNr;
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t j = nb + p * kNr, nr = std::min<int64_t>(kNr, ne - j);
      float* wb = wbuf + p * panel_floats;
      if (w.f32) K::pack_w_f32(w.f32 + j * k, k, nr, k, S, wb);
      else if (w.bf16) K::pack_w_bf16(w.bf16 + j * k, k, nr, k, S, wb);
      else if constexpr (K::kPackedPanels) {
        K::pack_packed(*w.packed, j, nr, S, wb);
      } else {
        K::dequant(*w.packed, j, nr, rows);
        K::pack_w_f32(rows, k, nr, k, S, wb);
      }
    }
    for (int64_t tb = 0; tb < tiles; tb += tiles_per_block) {
      const int64_t te = std::min(tiles, tb + tiles_per_block), nt = te - tb;
      for (int64_t p = 0; p < panels; ++p) {
        const int64_t j = nb + p * kNr, nr = std::min<int64_t>(kNr, ne - j);
        const float* wb = wbuf + p * panel_floats;
        const unsigned saved = _mm_getcsr();
        if (daz) _mm_setcsr(saved | 0x8040u);  // DAZ | FTZ, as vdpbf16ps (denormals.h)
        for (int l = 0; l < 16; ++l) {
          float* pl = pbuf + l * kNr;
          for (int64_t s0 = 0; s0 < S; s0 += step_block) {
            const int64_t steps = std::min(step_block, S - s0);
            const float* wl = wb + l * K::w_lane_stride(S) + s0 * kNr;
            for (int64_t t = tb; t < te; ++t) {
              const float* xl = xp + ((t * 16 + l) * S + s0) * kMr;
              float* pt = pl + (t - tb) * kMr * 16 * kNr;
              const int live = int(std::min<int64_t>(kMr, m - t * kMr));  // the tile's rows below m
              if (s0 == 0) K::template micro<true>(xl, wl, steps, pt, 16 * kNr, live);
              else K::template micro<false>(xl, wl, steps, pt, 16 * kNr, live);
            }
          }
        }
        if (daz) _mm_setcsr(saved);  // the tree adds run with the caller's MXCSR
        K::tree_store(pbuf, nt, tb * kMr, m, nr, y + j, ldy);
      }
    }
  }
}

}  // namespace gannet::kernels
