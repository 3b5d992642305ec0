// AVX-512 attention for the query heads of one token that share a kv head. Scores for 16
// keys at a time share one transposed tree reduction (tree_reduce16x: the same bits as 16
// separate trees); values are accumulated over j in order, 16 channels per register, with
// up to 16 / chunks heads interleaved so one V row load feeds several heads' chains.
// K and V rows are visited in blocks that stay in L1 while every head of the group uses
// them, so GQA reads the cache once per group instead of once per head.

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/simd_avx512.h"

namespace gannet::kernels::avx512 {

namespace {

constexpr int kMaxRegChunks = 8;     // output chunks (16 channels each) kept in registers
constexpr int64_t kValueBlock = 32;  // V rows per pass over the group's heads

// p·v for H heads (scores rows p, stride ld) over V rows vp[0..nj) at positions j0..:
// acc[h][c] = fma(p_h[j], v_j[c], acc[h][c]) in order of j, started from out (or +0).
template <int NC, int H>
inline void value_block(const float* p, int64_t ld, int64_t j0, int nj, const float* const* vp,
                        float* out, int head_dim, bool first, bool last, __mmask16 tail) {
  auto cm = [&](int c) { return c == NC - 1 ? tail : __mmask16(0xffff); };
  __m512 acc[H][NC];
  GANNET_UNROLL
  for (int h = 0; h < H; ++h)
    GANNET_UNROLL
    for (int c = 0; c < NC; ++c)
      acc[h][c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(cm(c), out + int64_t(h) * head_dim + 16 * c);
  for (int i = 0; i < nj; ++i) {
    __m512 v[NC];
    GANNET_UNROLL
    for (int c = 0; c < NC; ++c) v[c] = _mm512_maskz_loadu_ps(cm(c), vp[i] + 16 * c);
    GANNET_UNROLL
    for (int h = 0; h < H; ++h) {
      const __m512 ph = _mm512_set1_ps(p[h * ld + j0 + i]);
      GANNET_UNROLL
      for (int c = 0; c < NC; ++c) acc[h][c] = _mm512_fmadd_ps(ph, v[c], acc[h][c]);
    }
  }
  GANNET_UNROLL
  for (int h = 0; h < H; ++h) {
    const __m512 total = _mm512_set1_ps(p[h * ld + ld - 1]);
    GANNET_UNROLL
    for (int c = 0; c < NC; ++c)
      _mm512_mask_storeu_ps(out + int64_t(h) * head_dim + 16 * c, cm(c), last ? _mm512_div_ps(acc[h][c], total) : acc[h][c]);
  }
}

// NC: 16-channel chunks per head when fixed at compile time, or 0 for any head_dim.
template <int NC>
void attend(const float* q, int n_q, int head_dim, float scale, int64_t n_ctx,
            const int32_t* block_table, const KvCacheLayer& kv, int kv_head, float* scores,
            int64_t ld, float* out) {
  const int nc = NC ? NC : (head_dim + 15) / 16;
  const __mmask16 tail = mask16(head_dim - (nc - 1) * 16);
  auto chunk_mask = [&](int c) { return c == nc - 1 ? tail : __mmask16(0xffff); };

  // Scores, 16 keys per step; the 16 K rows stay in L1 across the group's heads.
  const __m512 vscale = _mm512_set1_ps(scale);
  constexpr int kMaxGroup = 16;
  __m512 vmax[kMaxGroup];
  for (int g0 = 0; g0 < n_q; g0 += kMaxGroup) {
    const int ng = std::min(kMaxGroup, n_q - g0);
    for (int g = 0; g < ng; ++g) vmax[g] = _mm512_set1_ps(-INFINITY);
    for (int64_t j0 = 0; j0 < n_ctx; j0 += 16) {
      const int nk = int(std::min<int64_t>(16, n_ctx - j0));
      const float* kp[16];
      kv_rows(kv.k, kv, block_table, j0, nk, kv_head, head_dim, kp);
      const __mmask16 mk = mask16(nk);
      // Rows past the context repeat the last one (valid memory); their scores are masked off.
      for (int i = nk; i < 16; ++i) kp[i] = kp[nk - 1];
      for (int g = 0; g < ng; ++g) {
        const float* qg = q + int64_t(g0 + g) * head_dim;
        // With NC fixed, q stays in registers across the 16 keys.
        __m512 qv[NC ? NC : 1];
        if constexpr (NC > 0)
          for (int c = 0; c < NC; ++c) qv[c] = _mm512_maskz_loadu_ps(chunk_mask(c), qg + 16 * c);
        auto q_chunk = [&](int c) {
          if constexpr (NC > 0) return qv[c];
          else return _mm512_maskz_loadu_ps(chunk_mask(c), qg + 16 * c);
        };
        __m512 acc[16];
        GANNET_UNROLL
        for (int i = 0; i < 16; ++i) {
          __m512 a = _mm512_setzero_ps();
          for (int c = 0; c < nc; ++c)
            a = _mm512_fmadd_ps(q_chunk(c), _mm512_maskz_loadu_ps(chunk_mask(c), kp[i] + 16 * c), a);
          acc[i] = a;
        }
        const __m512 s = _mm512_mul_ps(tree_reduce16x(acc), vscale);
        _mm512_mask_storeu_ps(scores + (g0 + g) * ld + j0, mk, s);
        vmax[g] = _mm512_mask_max_ps(vmax[g], mk, s, vmax[g]);  // NaN scores never win
      }
    }
    // p_j = exp(s_j - m) and their canonical 16-lane sum, per head.
    for (int g = 0; g < ng; ++g) {
      float* sg = scores + (g0 + g) * ld;
      const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax[g]));  // max: order-free
      __m512 vsum = _mm512_setzero_ps();
      for (int64_t j0 = 0; j0 < n_ctx; j0 += 16) {
        const __mmask16 mk = mask16(n_ctx - j0);
        __m512 e = _mm512_maskz_mov_ps(mk, exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, sg + j0), vm)));
        vsum = _mm512_add_ps(vsum, e);
        _mm512_mask_storeu_ps(sg + j0, mk, e);
      }
      // The sum is kept in the padding slot after the scores for the division below.
      sg[ld - 1] = tree_reduce(vsum);
    }
  }

  // out = (sum_j p_j v_j) / sum: blocks of V rows, each used by every head before the next;
  // between blocks a head's partial sums wait in out (a float store/load is exact).
  const float* vp[kValueBlock];
  for (int64_t j0 = 0; j0 < n_ctx; j0 += kValueBlock) {
    const int nj = int(std::min<int64_t>(kValueBlock, n_ctx - j0));
    const bool first = j0 == 0, last = j0 + nj == n_ctx;
    kv_rows(kv.v, kv, block_table, j0, nj, kv_head, head_dim, vp);
    if constexpr (NC > 0 && NC <= 8) {
      // Up to 16 accumulators: HP heads share each loaded V row; each head's chain over j
      // is unchanged, and the independent chains hide the FMA latency.
      constexpr int HP = 16 / NC;
      int g = 0;
      for (; g + HP <= n_q; g += HP)
        value_block<NC, HP>(scores + g * ld, ld, j0, nj, vp, out + int64_t(g) * head_dim, head_dim, first, last, tail);
      switch (n_q - g) {
        case 1: value_block<NC, 1>(scores + g * ld, ld, j0, nj, vp, out + int64_t(g) * head_dim, head_dim, first, last, tail); break;
        case 2: if constexpr (HP > 2) value_block<NC, 2>(scores + g * ld, ld, j0, nj, vp, out + int64_t(g) * head_dim, head_dim, first, last, tail); break;
        case 3: if constexpr (HP > 3) value_block<NC, 3>(scores + g * ld, ld, j0, nj, vp, out + int64_t(g) * head_dim, head_dim, first, last, tail); break;
        default: break;
      }
      continue;
    }
    for (int g = 0; g < n_q; ++g) {
      const float* pg = scores + g * ld + j0;
      float* og = out + int64_t(g) * head_dim;
      const __m512 total = _mm512_set1_ps(scores[g * ld + ld - 1]);
      for (int c0 = 0; c0 < nc; c0 += kMaxRegChunks) {
        const int gc = NC ? NC : std::min(kMaxRegChunks, nc - c0);
        __m512 acc[NC ? NC : kMaxRegChunks];
        for (int c = 0; c < gc; ++c)
          acc[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(chunk_mask(c0 + c), og + 16 * (c0 + c));
        for (int i = 0; i < nj; ++i) {
          const __m512 p = _mm512_set1_ps(pg[i]);
          for (int c = 0; c < gc; ++c)
            acc[c] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(chunk_mask(c0 + c), vp[i] + 16 * (c0 + c)), acc[c]);
        }
        for (int c = 0; c < gc; ++c)
          _mm512_mask_storeu_ps(og + 16 * (c0 + c), chunk_mask(c0 + c), last ? _mm512_div_ps(acc[c], total) : acc[c]);
      }
    }
  }
}

}  // namespace

GANNET_ATTEND_HEADS(attend_heads) {
  switch ((head_dim + 15) / 16) {
    case 4: attend<4>(q, n_q, head_dim, scale, n_ctx, block_table, kv, kv_head, scores, ld, out); break;
    case 8: attend<8>(q, n_q, head_dim, scale, n_ctx, block_table, kv, kv_head, scores, ld, out); break;
    default: attend<0>(q, n_q, head_dim, scale, n_ctx, block_table, kv, kv_head, scores, ld, out); break;
  }
}

}  // namespace gannet::kernels::avx512
