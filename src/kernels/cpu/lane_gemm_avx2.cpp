// Lane-split GEMM on AVX2 (lane_gemm.h): packing, the 6 x 16 single-lane register tile and
// the canonical tree across the 16 lane partials. Each lane's partial is the same chain
// of FMAs as in the AVX-512 kernel and the scalar reference, so every output has their
// bits; only the register tile differs (16 ymm: 12 accumulators, 2 weight vectors, one
// broadcast).
#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/lane_gemm.h"
#include "kernels/cpu/lane_gemm_impl.h"
#include "kernels/cpu/packed_matmul_impl.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/simd_avx2.h"

namespace gannet::kernels::avx2 {

namespace {

constexpr int kMr = int(kLaneMr), kNr = int(kLaneNr);
// Steps of one lane per register-tile pass: the w slice of a pass ([steps][16] f32, 8 KiB)
// stays in L1 while every x tile of the m-block streams past it.
constexpr int64_t kStepBlock = 128;
// Packed w of an n-block and packed x of an m-block each take about this much (AVX2-only
// servers have 512 KiB to 1 MiB of L2 per core).
constexpr int64_t kBlockBytes = int64_t(384) << 10;

// Floats between the lanes of a packed w panel: S steps of 16, plus one cache line so the
// 8 stores of a transposed block do not all land in the same L1 set.
inline int64_t w_lane_stride(int64_t S) { return S * kNr + 16; }

// Lanes [0, n) of 8 set (n may be <= 0 or >= 8).
inline __m256i first_lanes(int64_t n) {
  const int32_t c = int32_t(std::clamp<int64_t>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Packs `rows` (<= 16) f32 rows [rows, ld] of length k into wb [16][S][16] (lane stride
// w_lane_stride) in f32 order; rows past `rows` and elements past k are +0.
void pack_w_f32(const float* w, int64_t ld, int64_t rows, int64_t k, int64_t S, float* wb) {
  const int64_t ls = w_lane_stride(S);
  for (int g = 0; g < 2; ++g)  // rows 8g .. 8g + 7
    for (int64_t c = 0; c < S; ++c)
      for (int h = 0; h < 2; ++h) {  // lanes 8h .. 8h + 7
        const int64_t col = 16 * c + 8 * h;
        const __m256i mk = first_lanes(k - col);
        __m256 r[8];
        GANNET_UNROLL for (int i = 0; i < 8; ++i) {
          const int64_t row = 8 * g + i;
          r[i] = row < rows ? _mm256_maskload_ps(w + row * ld + col, mk) : _mm256_setzero_ps();
        }
        transpose8(r);
        GANNET_UNROLL for (int q = 0; q < 8; ++q) _mm256_storeu_ps(wb + (8 * h + q) * ls + c * kNr + 8 * g, r[q]);
      }
}

// The same from bf16 rows in bf16 order: chunk c's odd elements go to step 2c, its even
// ones to step 2c + 1 (lane l: elements 32c + 2l + 1, then 32c + 2l).
void pack_w_bf16(const uint16_t* w, int64_t ld, int64_t rows, int64_t k, int64_t S, float* wb) {
  const int64_t ls = w_lane_stride(S);
  alignas(32) uint16_t tail[32];
  for (int g = 0; g < 2; ++g)
    for (int64_t c = 0; c < S / 2; ++c)
      for (int h = 0; h < 2; ++h) {  // lanes 8h .. 8h + 7: elements 32c + 16h .. + 15
        const int64_t col = 32 * c + 16 * h;
        __m256 odd[8], even[8];
        GANNET_UNROLL for (int i = 0; i < 8; ++i) {
          const int64_t row = 8 * g + i;
          __m256i v = _mm256_setzero_si256();
          if (row < rows && col < k) {
            const uint16_t* src = w + row * ld + col;
            if (col + 16 <= k) {
              v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
            } else {
              std::memset(tail, 0, sizeof(tail));
              std::memcpy(tail, src, size_t(k - col) * 2);
              v = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
            }
          }
          odd[i] = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));
          even[i] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        }
        transpose8(odd);
        transpose8(even);
        GANNET_UNROLL for (int q = 0; q < 8; ++q) {
          _mm256_storeu_ps(wb + (8 * h + q) * ls + 2 * c * kNr + 8 * g, odd[q]);
          _mm256_storeu_ps(wb + (8 * h + q) * ls + (2 * c + 1) * kNr + 8 * g, even[q]);
        }
      }
}

// One lane, `steps` steps, of the first R rows of a kMr x 16 tile: p [R][16] (rows ldp
// floats apart) = (kFirst ? +0 : p) + x (.) w. xp: [steps][kMr], wp: [steps][16]. The
// last tile of a product whose m is not a multiple of kMr runs only its live rows (m = 32,
// a decode batch: 32 rows computed instead of 36).
template <bool kFirst, int R>
void micro_rows(const float* xp, const float* wp, int64_t steps, float* p, int64_t ldp) {
  __m256 acc[R][2];
  GANNET_UNROLL for (int i = 0; i < R; ++i) {
    acc[i][0] = kFirst ? _mm256_setzero_ps() : _mm256_loadu_ps(p + i * ldp);
    acc[i][1] = kFirst ? _mm256_setzero_ps() : _mm256_loadu_ps(p + i * ldp + 8);
  }
  for (int64_t s = 0; s < steps; ++s, xp += kMr, wp += kNr) {
    const __m256 w0 = _mm256_loadu_ps(wp), w1 = _mm256_loadu_ps(wp + 8);
    GANNET_UNROLL for (int i = 0; i < R; ++i) {
      const __m256 xb = _mm256_broadcast_ss(xp + i);
      acc[i][0] = _mm256_fmadd_ps(xb, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xb, w1, acc[i][1]);
    }
  }
  GANNET_UNROLL for (int i = 0; i < R; ++i) {
    _mm256_storeu_ps(p + i * ldp, acc[i][0]);
    _mm256_storeu_ps(p + i * ldp + 8, acc[i][1]);
  }
}

template <bool kFirst>
void micro(const float* xp, const float* wp, int64_t steps, float* p, int64_t ldp, int rows) {
  static_assert(kMr == 6);
  switch (rows) {
    case 1: return micro_rows<kFirst, 1>(xp, wp, steps, p, ldp);
    case 2: return micro_rows<kFirst, 2>(xp, wp, steps, p, ldp);
    case 3: return micro_rows<kFirst, 3>(xp, wp, steps, p, ldp);
    case 4: return micro_rows<kFirst, 4>(xp, wp, steps, p, ldp);
    case 5: return micro_rows<kFirst, 5>(xp, wp, steps, p, ldp);
    default: return micro_rows<kFirst, kMr>(xp, wp, steps, p, ldp);
  }
}

// y rows [row0, row0 + kMr * tiles) (those < m), columns [j, j + ncols): the canonical
// tree over the lane partials p [tiles][kMr][16 lanes][16] (each output's 16 partials in
// one 1 KiB run).
void tree_store(const float* p, int64_t tiles, int64_t row0, int64_t m, int64_t ncols, float* y, int64_t ldy) {
  for (int64_t t = 0; t < tiles; ++t)
    for (int i = 0; i < kMr; ++i) {
      const int64_t row = row0 + t * kMr + i;
      if (row >= m) return;
      for (int v = 0; v < 2; ++v) {
        if (8 * v >= ncols) break;
        const float* q = p + (t * kMr + i) * 16 * kNr + 8 * v;
        __m256 a[16];
        GANNET_UNROLL for (int l = 0; l < 16; ++l) a[l] = _mm256_loadu_ps(q + l * kNr);
        GANNET_UNROLL for (int l = 0; l < 8; ++l) a[l] = _mm256_add_ps(a[l], a[l + 8]);
        GANNET_UNROLL for (int l = 0; l < 4; ++l) a[l] = _mm256_add_ps(a[l], a[l + 4]);
        GANNET_UNROLL for (int l = 0; l < 2; ++l) a[l] = _mm256_add_ps(a[l], a[l + 2]);
        a[0] = _mm256_add_ps(a[0], a[1]);
        store_first(y + row * ldy + 8 * v, a[0], ncols - 8 * v);
      }
    }
}

}  // namespace

// x rounded to bf16 and back (f32_to_bf16: nearest even, NaN quieted), on 8 lanes.
inline __m256 round_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i hi = _mm256_set1_epi32(int(0xffff0000u));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), hi);
  const __m256i q = _mm256_or_si256(_mm256_and_si256(u, hi), _mm256_set1_epi32(0x00400000));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(r, q, nan));
}

// Elements 1, 3, .., 15 (odd) or 0, 2, .., 14 of the 16 in (a, b), in order.
inline __m256 odd_of(__m256 a, __m256 b) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
}
inline __m256 even_of(__m256 a, __m256 b) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
}

void lane_pack_x(LaneOrder order, const float* x, int64_t m, int64_t k, int64_t t0, int64_t t1, float* xp) {
  const int64_t S = lane_steps(order, k);
  auto load = [&](int64_t row, int64_t col) {  // 8 floats of x from col, +0 past k or m
    return row < m && col < k ? _mm256_maskload_ps(x + row * k + col, first_lanes(k - col)) : _mm256_setzero_ps();
  };
  for (int64_t t = t0; t < t1; ++t) {
    float* xt = xp + t * 16 * S * kMr;
    if (order == LaneOrder::kF32) {
      // Lanes 8h .. 8h + 7 of chunk c of the tile's rows (rows 6-7 and rows past m are +0),
      // transposed: lane l of every row lands in the 6 floats of (l, step c).
      for (int64_t c = 0; c < S; ++c)
        for (int h = 0; h < 2; ++h) {
          __m256 r[8];
          GANNET_UNROLL for (int i = 0; i < 8; ++i) r[i] = i < kMr ? load(t * kMr + i, 16 * c + 8 * h) : _mm256_setzero_ps();
          transpose8(r);
          GANNET_UNROLL for (int q = 0; q < 8; ++q) store_first(xt + ((8 * h + q) * S + c) * kMr, r[q], kMr);
        }
      continue;
    }
    // bf16 order: chunk c's 32 elements rounded to bf16; lane l's odd element 2l + 1 goes
    // to step 2c, its even one to step 2c + 1.
    for (int64_t c = 0; c < S / 2; ++c)
      for (int h = 0; h < 2; ++h) {  // lanes 8h .. 8h + 7: elements 32c + 16h .. + 15
        __m256 odd[8], even[8];
        GANNET_UNROLL for (int i = 0; i < 8; ++i) {
          if (i < kMr) {
            const int64_t row = t * kMr + i, col = 32 * c + 16 * h;
            const __m256 a = round_bf16(load(row, col)), b = round_bf16(load(row, col + 8));
            odd[i] = odd_of(a, b);
            even[i] = even_of(a, b);
          } else {
            odd[i] = even[i] = _mm256_setzero_ps();
          }
        }
        transpose8(odd);
        transpose8(even);
        GANNET_UNROLL for (int q = 0; q < 8; ++q) {
          store_first(xt + ((8 * h + q) * S + 2 * c) * kMr, odd[q], kMr);
          store_first(xt + ((8 * h + q) * S + 2 * c + 1) * kMr, even[q], kMr);
        }
      }
  }
}

namespace {
struct Kernel {
  static constexpr int64_t kMr = kLaneMr, kNr = kLaneNr, kStepBlock = avx2::kStepBlock,
                          kBlockBytes = avx2::kBlockBytes;
  static int64_t w_lane_stride(int64_t S) { return avx2::w_lane_stride(S); }
  static void pack_w_f32(const float* w, int64_t ld, int64_t rows, int64_t k, int64_t S, float* wb) {
    avx2::pack_w_f32(w, ld, rows, k, S, wb);
  }
  static void pack_w_bf16(const uint16_t* w, int64_t ld, int64_t rows, int64_t k, int64_t S, float* wb) {
    avx2::pack_w_bf16(w, ld, rows, k, S, wb);
  }
  static void dequant(const PackedWeight& w, int64_t r0, int64_t nr, float* rows) { dequant_rows(w, r0, r0 + nr, rows); }
  // Packed weights: decoded 16 columns of 8 rows at a time straight into the panel
  // (pack_lane_panel), with no [16, k] f32 buffer between dequant and pack_w_f32. One
  // thread, 32 rows of 2048 x 2048 (Xeon, GANNET_ISA=avx2, 3 interleaved runs): FP8, MXFP4
  // and int8 1.22-1.32x faster; 16 rows on 2 threads 1.27-1.55x.
  static constexpr bool kPackedPanels = true;
  static void pack_packed(const PackedWeight& w, int64_t r0, int64_t nr, int64_t S, float* wb) {
    pack_lane_panel(w, r0, nr, S, avx2::w_lane_stride(S), wb);
  }
  template <bool kFirst>
  static void micro(const float* xp, const float* wp, int64_t steps, float* p, int64_t ldp, int rows) {
    avx2::micro<kFirst>(xp, wp, steps, p, ldp, rows);
  }
  static void tree_store(const float* p, int64_t tiles, int64_t row0, int64_t m, int64_t ncols, float* y, int64_t ldy) {
    avx2::tree_store(p, tiles, row0, m, ncols, y, ldy);
  }
};
}  // namespace

void lane_gemm_cols(LaneOrder order, const float* xp, int64_t m, int64_t k, const LaneWeight& w, int64_t n0,
                    int64_t n1, float* y, int64_t ldy, const LaneBlocking& blocking) {
  lane_gemm_cols_blocked<Kernel>(order, xp, m, k, w, n0, n1, y, ldy, blocking);
}

}  // namespace gannet::kernels::avx2
