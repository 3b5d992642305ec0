// AVX2 attention for the query heads of one token that share a kv head. Where head_dim
// is whole 16-channel chunks (attend_grouped): the canonical 16-lane dot of 8 keys at a
// time, their trees done together on one transposed register set (tree_reduce8x: the same
// additions as 8 separate trees), K and V rows found once per block of keys and used by
// every head of the group while in L1, and no masked loads. Other head sizes take
// attend_one, one head at a time. Both: exp and sum 16 lanes at a time, values accumulated
// over j in order, 8 channels per register.

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace gannet::kernels::avx2 {

namespace {

constexpr int kRegChunks = 8;  // 8-channel output chunks held in registers per pass

void attend_one(const float* q, int head_dim, float scale, int64_t n_ctx, const int32_t* block_table,
                const KvCacheLayer& kv, int kv_head, float* scores, float* out) {
  // Scores: lanes 0-7 of the canonical accumulator come from channels 16c..16c+7.
  float m = -INFINITY;
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float* kp = kv.k + kv_offset(kv, block_table, j, kv_head, head_dim);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int c = 0; c < head_dim; c += 16) {
      __m256i ml = mask8(head_dim - c), mh = mask8(head_dim - c - 8);
      lo = _mm256_fmadd_ps(_mm256_maskload_ps(q + c, ml), _mm256_maskload_ps(kp + c, ml), lo);
      hi = _mm256_fmadd_ps(_mm256_maskload_ps(q + c + 8, mh), _mm256_maskload_ps(kp + c + 8, mh), hi);
    }
    const float s = tree_reduce(lo, hi) * scale;
    scores[j] = s;
    m = s > m ? s : m;
  }

  // p_j = exp(s_j - m) and their canonical 16-lane sum (two ymm).
  const __m256 vm = _mm256_set1_ps(m);
  __m256 sum[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t j0 = 0; j0 < n_ctx; j0 += 16)
    for (int h = 0; h < 2; ++h) {
      const int64_t j = j0 + 8 * h;
      __m256i k = mask8(n_ctx - j);
      __m256 e = exp(_mm256_sub_ps(_mm256_maskload_ps(scores + j, k), vm));
      e = _mm256_and_ps(e, _mm256_castsi256_ps(k));
      sum[h] = _mm256_add_ps(sum[h], e);
      store_first(scores + j, e, n_ctx - j);
    }
  const __m256 total = _mm256_set1_ps(tree_reduce(sum[0], sum[1]));

  // out = (sum_j p_j v_j) / sum.
  const int nc = (head_dim + 7) / 8;
  for (int c0 = 0; c0 < nc; c0 += kRegChunks) {
    const int gc = std::min(kRegChunks, nc - c0);
    __m256 acc[kRegChunks];
    __m256i mask[kRegChunks];
    for (int c = 0; c < gc; ++c) {
      acc[c] = _mm256_setzero_ps();
      mask[c] = mask8(head_dim - 8 * (c0 + c));
    }
    for (int64_t j = 0; j < n_ctx; ++j) {
      const float* vp = kv.v + kv_offset(kv, block_table, j, kv_head, head_dim) + 8 * c0;
      const __m256 p = _mm256_set1_ps(scores[j]);
      for (int c = 0; c < gc; ++c)
        acc[c] = _mm256_fmadd_ps(p, _mm256_maskload_ps(vp + 8 * c, mask[c]), acc[c]);
    }
    for (int c = 0; c < gc; ++c)
      store_first(out + 8 * (c0 + c), _mm256_div_ps(acc[c], total), head_dim - 8 * (c0 + c));
  }
}

// tree_reduce(lo_i, hi_i) of 8 keys at once, from a[i] = lo_i + hi_i; key i in lane i.
// Each key's sum takes tree_reduce's additions: lanes l + (l + 4), then (0 + 2) and
// (1 + 3), then those two.
inline __m256 tree_reduce8x(const __m256 (&a)[8]) {
  __m256 u[4];  // [b_2p | b_2p+1], b_i[l] = a_i[l] + a_i[l + 4]
  GANNET_UNROLL for (int p = 0; p < 4; ++p)
    u[p] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * p], a[2 * p + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * p], a[2 * p + 1], 0x31));
  // c_i = (b_i[0] + b_i[2], b_i[1] + b_i[3]): v lanes c0 c0 c2 c2 | c1 c1 c3 c3, w likewise for 4-7
  const __m256 v = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], 0x44), _mm256_shuffle_ps(u[0], u[1], 0xee));
  const __m256 w = _mm256_add_ps(_mm256_shuffle_ps(u[2], u[3], 0x44), _mm256_shuffle_ps(u[2], u[3], 0xee));
  // d_i = c_i[0] + c_i[1], in lanes 0 2 4 6 | 1 3 5 7
  const __m256 d = _mm256_add_ps(_mm256_shuffle_ps(v, w, 0x88), _mm256_shuffle_ps(v, w, 0xdd));
  return _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

constexpr int kKeyBlock = 8;     // keys per score step
constexpr int kValueBlock = 32;  // V rows per pass over the group's heads

// p.v for H heads (p: head 0's p_j from j0, heads ld apart) over V rows vp[0..nj):
// 8-channel chunks [c0, c0 + NC) of each head's out (heads head_dim apart), accumulated
// over j in order from out (or +0), divided by the head's sum (slot ld - 1 of its scores
// row, j0 back from p) after the last block. Each V chunk is loaded once for the H heads,
// and H * NC independent chains hide the FMA latency.
template <int H, int NC>
inline void value_block(const float* p, int64_t ld, int64_t j0, const float* const* vp, int nj, int c0, float* out,
                        int head_dim, bool first, bool last) {
  __m256 acc[H][NC];
  GANNET_UNROLL for (int h = 0; h < H; ++h)
    GANNET_UNROLL for (int c = 0; c < NC; ++c)
      acc[h][c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + int64_t(h) * head_dim + 8 * (c0 + c));
  for (int i = 0; i < nj; ++i) {
    __m256 v[NC];
    GANNET_UNROLL for (int c = 0; c < NC; ++c) v[c] = _mm256_loadu_ps(vp[i] + 8 * (c0 + c));
    GANNET_UNROLL for (int h = 0; h < H; ++h) {
      const __m256 ph = _mm256_broadcast_ss(p + h * ld + i);
      GANNET_UNROLL for (int c = 0; c < NC; ++c) acc[h][c] = _mm256_fmadd_ps(ph, v[c], acc[h][c]);
    }
  }
  GANNET_UNROLL for (int h = 0; h < H; ++h) {
    const __m256 total = _mm256_set1_ps(p[h * ld - j0 + ld - 1]);
    GANNET_UNROLL for (int c = 0; c < NC; ++c)
      _mm256_storeu_ps(out + int64_t(h) * head_dim + 8 * (c0 + c), last ? _mm256_div_ps(acc[h][c], total) : acc[h][c]);
  }
}

// value_block over all nc chunks of H heads, NC at a time, then the remainder.
template <int H, int NC>
inline void value_heads(const float* p, int64_t ld, int64_t j0, const float* const* vp, int nj, int nc, float* out,
                        int head_dim, bool first, bool last) {
  int c0 = 0;
  for (; c0 + NC <= nc; c0 += NC) value_block<H, NC>(p, ld, j0, vp, nj, c0, out, head_dim, first, last);
  auto rest = [&]<int R>() {
    if constexpr (R < NC) value_block<H, R>(p, ld, j0, vp, nj, c0, out, head_dim, first, last);
  };
  switch (nc - c0) {
    case 1: rest.template operator()<1>(); break;
    case 2: rest.template operator()<2>(); break;
    case 3: rest.template operator()<3>(); break;
    case 4: rest.template operator()<4>(); break;
    case 5: rest.template operator()<5>(); break;
    case 6: rest.template operator()<6>(); break;
    case 7: rest.template operator()<7>(); break;
    default: break;
  }
}

// The scores of 8 keys kp[0..8) for one head q of N16 16-channel chunks (q in registers
// where N16 is fixed and small enough), scaled.
template <int N16>
inline __m256 key_scores(const float* q, int n16, const float* const (&kp)[kKeyBlock], __m256 vscale) {
  constexpr bool kInRegs = N16 > 0 && N16 <= 4;
  __m256 qv[kInRegs ? 2 * N16 : 1];
  if constexpr (kInRegs)
    GANNET_UNROLL for (int c = 0; c < 2 * N16; ++c) qv[c] = _mm256_loadu_ps(q + 8 * c);
  auto qc = [&](int c) {
    if constexpr (kInRegs) return qv[c];
    else return _mm256_loadu_ps(q + 8 * c);
  };
  const int nc16 = N16 > 0 ? N16 : n16;
  __m256 a[kKeyBlock];
  GANNET_UNROLL for (int i = 0; i < kKeyBlock; ++i) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    GANNET_UNROLL for (int c = 0; c < nc16; ++c) {
      lo = _mm256_fmadd_ps(qc(2 * c), _mm256_loadu_ps(kp[i] + 16 * c), lo);
      hi = _mm256_fmadd_ps(qc(2 * c + 1), _mm256_loadu_ps(kp[i] + 16 * c + 8), hi);
    }
    a[i] = _mm256_add_ps(lo, hi);
  }
  return _mm256_mul_ps(tree_reduce8x(a), vscale);
}

// head_dim a multiple of 16 (N16 of them when fixed, else 0). scores: [n_q, ld], ld >=
// n_ctx rounded up to 16, plus one (the score step writes whole blocks of 8; the lanes
// past n_ctx are never read as scores; slot ld - 1 keeps each head's sum).
template <int N16>
void attend_grouped(const float* q, int n_q, int head_dim, float scale, int64_t n_ctx, const int32_t* block_table,
                    const KvCacheLayer& kv, int kv_head, float* scores, int64_t ld, float* out) {
  const int n16 = N16 > 0 ? N16 : head_dim / 16;
  const __m256 vscale = _mm256_set1_ps(scale);
  constexpr int kMaxGroup = 16;
  __m256 vmax[kMaxGroup];
  for (int g0 = 0; g0 < n_q; g0 += kMaxGroup) {
    const int ng = std::min(kMaxGroup, n_q - g0);
    for (int g = 0; g < ng; ++g) vmax[g] = _mm256_set1_ps(-INFINITY);
    for (int64_t j0 = 0; j0 < n_ctx; j0 += kKeyBlock) {
      const int nk = int(std::min<int64_t>(kKeyBlock, n_ctx - j0));
      const float* kp[kKeyBlock];
      kv_rows(kv.k, kv, block_table, j0, nk, kv_head, head_dim, kp);
      for (int i = nk; i < kKeyBlock; ++i) kp[i] = kp[nk - 1];  // valid rows; their lanes are dropped
      const __m256 live = _mm256_castsi256_ps(mask8(nk));
      for (int g = 0; g < ng; ++g) {
        const __m256 sv = key_scores<N16>(q + int64_t(g0 + g) * head_dim, n16, kp, vscale);
        _mm256_storeu_ps(scores + (g0 + g) * ld + j0, sv);
        // max keeps vmax where either is NaN (NaN scores never win, as in the reference);
        // the lanes past n_ctx count as -inf
        vmax[g] = _mm256_max_ps(_mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sv, live), vmax[g]);
      }
    }
    for (int g = 0; g < ng; ++g) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, vmax[g]);
      float m = -INFINITY;
      for (float v : lanes) m = v > m ? v : m;  // the order of a max does not change its value
      // p_j = exp(s_j - m) and their canonical 16-lane sum (two ymm); lanes past n_ctx are
      // +0 in the sum and in the scores the value pass reads.
      float* sg = scores + (g0 + g) * ld;
      const __m256 vm = _mm256_set1_ps(m);
      __m256 sum[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t j0 = 0; j0 < n_ctx; j0 += 16)
        for (int h = 0; h < 2; ++h) {
          const int64_t j = j0 + 8 * h;
          const __m256 e = _mm256_and_ps(exp(_mm256_sub_ps(_mm256_loadu_ps(sg + j), vm)),
                                         _mm256_castsi256_ps(mask8(n_ctx - j)));
          sum[h] = _mm256_add_ps(sum[h], e);
          _mm256_storeu_ps(sg + j, e);
        }
      sg[ld - 1] = tree_reduce(sum[0], sum[1]);  // the padding slot past the scores keeps the sum
    }
  }

  // out = (sum_j p_j v_j) / sum: blocks of V rows, each used by every head before the
  // next; between blocks a head's partial sums wait in out (a float store/load is exact).
  const int nc = head_dim / 8;
  const float* vp[kValueBlock];
  for (int64_t j0 = 0; j0 < n_ctx; j0 += kValueBlock) {
    const int nj = int(std::min<int64_t>(kValueBlock, n_ctx - j0));
    const bool first = j0 == 0, last = j0 + nj == n_ctx;
    kv_rows(kv.v, kv, block_table, j0, nj, kv_head, head_dim, vp);
    // Four heads (a GQA group) share each V chunk, three chunks at a time: 12 chains,
    // 3 V registers and a broadcast within the 16 ymm registers.
    int g = 0;
    for (; g + 4 <= n_q; g += 4)
      value_heads<4, 3>(scores + g * ld + j0, ld, j0, vp, nj, nc, out + int64_t(g) * head_dim, head_dim, first, last);
    switch (n_q - g) {
      case 1: value_heads<1, 8>(scores + g * ld + j0, ld, j0, vp, nj, nc, out + int64_t(g) * head_dim, head_dim, first, last); break;
      case 2: value_heads<2, 4>(scores + g * ld + j0, ld, j0, vp, nj, nc, out + int64_t(g) * head_dim, head_dim, first, last); break;
      case 3: value_heads<3, 3>(scores + g * ld + j0, ld, j0, vp, nj, nc, out + int64_t(g) * head_dim, head_dim, first, last); break;
      default: break;
    }
  }
}

}  // namespace

GANNET_ATTEND_HEADS(attend_heads) {
  if (head_dim % 16 == 0 && ld >= (n_ctx + 15) / 16 * 16 + 1) {
    switch (head_dim / 16) {
      case 4: return attend_grouped<4>(q, n_q, head_dim, scale, n_ctx, block_table, kv, kv_head, scores, ld, out);
      case 8: return attend_grouped<8>(q, n_q, head_dim, scale, n_ctx, block_table, kv, kv_head, scores, ld, out);
      default: return attend_grouped<0>(q, n_q, head_dim, scale, n_ctx, block_table, kv, kv_head, scores, ld, out);
    }
  }
  for (int g = 0; g < n_q; ++g)
    attend_one(q + int64_t(g) * head_dim, head_dim, scale, n_ctx, block_table, kv, kv_head,
               scores + g * ld, out + int64_t(g) * head_dim);
}

}  // namespace gannet::kernels::avx2
