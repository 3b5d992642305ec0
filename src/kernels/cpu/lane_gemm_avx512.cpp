// Lane-split GEMM (lane_gemm.h): packing, the 12 x 32 single-lane register tile, and the
// tree across the 16 lane partials.
#include "kernels/cpu/lane_gemm.h"
#include "kernels/cpu/lane_gemm_impl.h"

#include <algorithm>

#include "core/dtype.h"
#include "kernels/cpu/canonical.h"
#include "kernels/cpu/packed_matmul_impl.h"
#include "kernels/cpu/simd_avx512.h"

namespace gannet::kernels::avx512 {

namespace {

constexpr int kMr = int(kLaneMr), kNr = int(kLaneNr);
// Steps of one lane per register-tile pass: the w slice of a pass ([steps][32] f32,
// 16 KiB) stays in L1 while every x tile of the m-block streams past it.
constexpr int64_t kStepBlock = 128;
// Cache budgets (2 MiB L2 per core on the machines measured): the packed w of an n-block
// and the packed x of an m-block each take about this much.
constexpr int64_t kBlockBytes = int64_t(768) << 10;

// Floats between the lanes of a packed w panel: S steps of 32, plus one cache line so
// that the 16 stores of a transposed block do not all land in the same L1 set.
inline int64_t w_lane_stride(int64_t S) { return S * kNr + 16; }

// Packs `rows` (<= 32) f32 rows [rows, ld] of length k into wb [16][S][32] (lane stride
// w_lane_stride) in f32 order; rows past `rows` and elements past k are +0.
void pack_w_f32(const float* w, int64_t ld, int64_t rows, int64_t k, int64_t S, float* wb) {
  const int64_t ls = w_lane_stride(S);
  for (int g = 0; g < 2; ++g) {
    for (int64_t c = 0; c < S; ++c) {
      const __mmask16 mk = mask16(k - 16 * c);
      __m512 r[16];
      GANNET_UNROLL for (int i = 0; i < 16; ++i) {
        const int64_t row = 16 * g + i;
        r[i] = row < rows ? _mm512_maskz_loadu_ps(mk, w + row * ld + 16 * c) : _mm512_setzero_ps();
      }
      transpose16(r);
      GANNET_UNROLL for (int l = 0; l < 16; ++l) _mm512_storeu_ps(wb + l * ls + c * kNr + 16 * g, r[l]);
    }
  }
}

// The same from bf16 rows in bf16 order: chunk c's odd elements go to step 2c, its even
// ones to step 2c + 1.
void pack_w_bf16(const uint16_t* w, int64_t ld, int64_t rows, int64_t k, int64_t S, float* wb) {
  const int64_t ls = w_lane_stride(S);
  for (int g = 0; g < 2; ++g) {
    for (int64_t c = 0; c < S / 2; ++c) {
      const __mmask32 mk = mask32(k - 32 * c);
      __m512 odd[16], even[16];
      GANNET_UNROLL for (int i = 0; i < 16; ++i) {
        const int64_t row = 16 * g + i;
        const __m512i v = row < rows ? _mm512_maskz_loadu_epi16(mk, w + row * ld + 32 * c) : _mm512_setzero_si512();
        odd[i] = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))));
        even[i] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      }
      transpose16(odd);
      transpose16(even);
      GANNET_UNROLL for (int l = 0; l < 16; ++l) {
        _mm512_storeu_ps(wb + l * ls + 2 * c * kNr + 16 * g, odd[l]);
        _mm512_storeu_ps(wb + l * ls + (2 * c + 1) * kNr + 16 * g, even[l]);
      }
    }
  }
}

// One lane, `steps` steps, of a kMr x 32 tile: p [kMr][32] (rows ldp floats apart) =
// (kFirst ? +0 : p) + x (.) w. xp: [steps][kMr], wp: [steps][32].
template <bool kFirst>
void micro(const float* xp, const float* wp, int64_t steps, float* p, int64_t ldp) {
  __m512 acc[kMr][2];
  GANNET_UNROLL for (int i = 0; i < kMr; ++i) {
    acc[i][0] = kFirst ? _mm512_setzero_ps() : _mm512_loadu_ps(p + i * ldp);
    acc[i][1] = kFirst ? _mm512_setzero_ps() : _mm512_loadu_ps(p + i * ldp + 16);
  }
  for (int64_t s = 0; s < steps; ++s, xp += kMr, wp += kNr) {
    const __m512 w0 = _mm512_loadu_ps(wp), w1 = _mm512_loadu_ps(wp + 16);
    GANNET_UNROLL for (int i = 0; i < kMr; ++i) {
      const __m512 xb = _mm512_set1_ps(xp[i]);
      acc[i][0] = _mm512_fmadd_ps(xb, w0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xb, w1, acc[i][1]);
    }
  }
  GANNET_UNROLL for (int i = 0; i < kMr; ++i) {
    _mm512_storeu_ps(p + i * ldp, acc[i][0]);
    _mm512_storeu_ps(p + i * ldp + 16, acc[i][1]);
  }
}

// y rows [row0, row0 + kMr * tiles) (those < m), columns [j, j + ncols): the canonical
// tree over the lane partials p [tiles][kMr][16 lanes][32] (each output's 16 partials in
// one 2 KiB run).
void tree_store(const float* p, int64_t tiles, int64_t row0, int64_t m, int64_t ncols, float* y, int64_t ldy) {
  for (int64_t t = 0; t < tiles; ++t)
    for (int i = 0; i < kMr; ++i) {
      const int64_t row = row0 + t * kMr + i;
      if (row >= m) return;
      for (int v = 0; v < 2; ++v) {
        if (16 * v >= ncols) break;
        const float* q = p + (t * kMr + i) * 16 * kNr + 16 * v;
        __m512 a[16];
        GANNET_UNROLL for (int l = 0; l < 16; ++l) a[l] = _mm512_loadu_ps(q + l * kNr);
        GANNET_UNROLL for (int l = 0; l < 8; ++l) a[l] = _mm512_add_ps(a[l], a[l + 8]);
        GANNET_UNROLL for (int l = 0; l < 4; ++l) a[l] = _mm512_add_ps(a[l], a[l + 4]);
        GANNET_UNROLL for (int l = 0; l < 2; ++l) a[l] = _mm512_add_ps(a[l], a[l + 2]);
        a[0] = _mm512_add_ps(a[0], a[1]);
        _mm512_mask_storeu_ps(y + row * ldy + 16 * v, mask16(ncols - 16 * v), a[0]);
      }
    }
}

}  // namespace

// x rounded to bf16 and back (f32_to_bf16: nearest even, NaN quieted), on 16 lanes.
inline __m512 round_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_set1_epi32(int(0xffff0000u));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), hi);
  const __m512i q = _mm512_or_si512(_mm512_and_si512(u, hi), _mm512_set1_epi32(0x00400000));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, r, q));
}

void lane_pack_x(LaneOrder order, const float* x, int64_t m, int64_t k, int64_t t0, int64_t t1, float* xp) {
  const int64_t S = lane_steps(order, k);
  const __mmask16 tile_rows = __mmask16((1u << kMr) - 1);
  auto load = [&](int64_t row, int64_t col) {  // 16 floats of x from col, +0 past k or m
    return row < m && col < k ? _mm512_maskz_loadu_ps(mask16(k - col), x + row * k + col) : _mm512_setzero_ps();
  };
  for (int64_t t = t0; t < t1; ++t) {
    float* xt = xp + t * 16 * S * kMr;
    if (order == LaneOrder::kF32) {
      // Chunk c of the tile's rows (rows 12-15 and rows past m are +0), transposed: lane l
      // of every row lands in the 12 floats of (l, step c).
      for (int64_t c = 0; c < S; ++c) {
        __m512 r[16];
        GANNET_UNROLL for (int i = 0; i < 16; ++i) r[i] = i < kMr ? load(t * kMr + i, 16 * c) : _mm512_setzero_ps();
        transpose16(r);
        GANNET_UNROLL for (int l = 0; l < 16; ++l) _mm512_mask_storeu_ps(xt + (l * S + c) * kMr, tile_rows, r[l]);
      }
      continue;
    }
    // bf16 order: chunk c's 32 elements rounded to bf16; lane l's odd element 2l + 1 goes
    // to step 2c, its even one to step 2c + 1.
    const __m512i odd_idx = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i even_idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t c = 0; c < S / 2; ++c) {
      __m512 odd[16], even[16];
      GANNET_UNROLL for (int i = 0; i < 16; ++i) {
        if (i < kMr) {
          const int64_t row = t * kMr + i;
          const __m512 a = round_bf16(load(row, 32 * c)), b = round_bf16(load(row, 32 * c + 16));
          odd[i] = _mm512_permutex2var_ps(a, odd_idx, b);
          even[i] = _mm512_permutex2var_ps(a, even_idx, b);
        } else {
          odd[i] = even[i] = _mm512_setzero_ps();
        }
      }
      transpose16(odd);
      transpose16(even);
      GANNET_UNROLL for (int l = 0; l < 16; ++l) {
        _mm512_mask_storeu_ps(xt + (l * S + 2 * c) * kMr, tile_rows, odd[l]);
        _mm512_mask_storeu_ps(xt + (l * S + 2 * c + 1) * kMr, tile_rows, even[l]);
      }
    }
  }
}

namespace {
struct Kernel {
  static constexpr int64_t kMr = kLaneMr, kNr = kLaneNr, kStepBlock = avx512::kStepBlock,
                          kBlockBytes = avx512::kBlockBytes;
  static int64_t w_lane_stride(int64_t S) { return avx512::w_lane_stride(S); }
  static void pack_w_f32(const float* w, int64_t ld, int64_t rows, int64_t k, int64_t S, float* wb) {
    avx512::pack_w_f32(w, ld, rows, k, S, wb);
  }
  static void pack_w_bf16(const uint16_t* w, int64_t ld, int64_t rows, int64_t k, int64_t S, float* wb) {
    avx512::pack_w_bf16(w, ld, rows, k, S, wb);
  }
  static void dequant(const PackedWeight& w, int64_t r0, int64_t nr, float* rows) { dequant_rows(w, r0, r0 + nr, rows); }
  // Packed weights decode straight into the panel (pack_lane_panel), with no [32, k] f32
  // buffer between dequant and pack_w_f32.
  static constexpr bool kPackedPanels = true;
  static void pack_packed(const PackedWeight& w, int64_t r0, int64_t nr, int64_t S, float* wb) {
    pack_lane_panel(w, r0, nr, S, avx512::w_lane_stride(S), wb);
  }
  template <bool kFirst>
  static void micro(const float* xp, const float* wp, int64_t steps, float* p, int64_t ldp, int /*rows*/) {
    avx512::micro<kFirst>(xp, wp, steps, p, ldp);  // all 12 rows: a partial tile's padding too
  }
  static void tree_store(const float* p, int64_t tiles, int64_t row0, int64_t m, int64_t ncols, float* y, int64_t ldy) {
    avx512::tree_store(p, tiles, row0, m, ncols, y, ldy);
  }
};
}  // namespace

void lane_gemm_cols(LaneOrder order, const float* xp, int64_t m, int64_t k, const LaneWeight& w, int64_t n0,
                    int64_t n1, float* y, int64_t ldy, const LaneBlocking& blocking) {
  lane_gemm_cols_blocked<Kernel>(order, xp, m, k, w, n0, n1, y, ldy, blocking);
}

}  // namespace gannet::kernels::avx512
