// AVX2 attention, one query head at a time: the canonical 16-lane dot per key in two
// ymm, exp and sum 16 lanes at a time, values accumulated over j in order, 8 channels per
// register.

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
      _mm256_maskstore_ps(scores + j, k, e);
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
      _mm256_maskstore_ps(out + 8 * (c0 + c), mask[c], _mm256_div_ps(acc[c], total));
  }
}

}  // namespace

GANNET_ATTEND_HEADS(attend_heads) {
  for (int g = 0; g < n_q; ++g)
    attend_one(q + int64_t(g) * head_dim, head_dim, scale, n_ctx, block_table, kv, kv_head,
               scores + g * ld, out + int64_t(g) * head_dim);
}

}  // namespace gannet::kernels::avx2
