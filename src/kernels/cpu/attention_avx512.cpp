// AVX-512 attention for one (token, head): scores for 16 keys at a time share one
// transposed tree reduction (tree_reduce16x, same bits as 16 separate trees); values are
// accumulated over j in order, 16 channels per register.
#pragma GCC optimize("fp-contract=off")  // see simd_avx512.h
// Under that pragma GCC 12 misreports the intrinsics' own _mm*_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/simd_avx512.h"

namespace gannet::kernels::avx512 {

namespace {

constexpr int kMaxRegChunks = 8;  // head_dim <= 128 keeps q and the output in registers

// NC: 16-channel chunks per head if fixed at compile time (q kept in registers), or 0 for
// any head_dim.
template <int NC>
void attend(const float* q, int head_dim, float scale, int64_t n_ctx, const int32_t* block_table,
            const KvCacheLayer& kv, int kv_head, float* scores, float* out) {
  const int nc = NC ? NC : (head_dim + 15) / 16;
  const __mmask16 tail = mask16(head_dim - (nc - 1) * 16);
  __m512 qv[NC ? NC : 1];
  if constexpr (NC > 0)
    for (int c = 0; c < NC; ++c) qv[c] = _mm512_maskz_loadu_ps(c == NC - 1 ? tail : 0xffff, q + 16 * c);
  auto q_chunk = [&](int c) {
    if constexpr (NC > 0) return qv[c];
    else return _mm512_maskz_loadu_ps(c == nc - 1 ? tail : 0xffff, q + 16 * c);
  };

  // Scores, 16 keys per step.
  const __m512 vscale = _mm512_set1_ps(scale);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t j0 = 0; j0 < n_ctx; j0 += 16) {
    const int nk = int(std::min<int64_t>(16, n_ctx - j0));
    __m512 acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    for (int i = 0; i < nk; ++i) {
      const float* kp = kv.k + kv_offset(kv, block_table, j0 + i, kv_head, head_dim);
      __m512 a = _mm512_setzero_ps();
      for (int c = 0; c < nc; ++c)
        a = _mm512_fmadd_ps(q_chunk(c), _mm512_maskz_loadu_ps(c == nc - 1 ? tail : 0xffff, kp + 16 * c), a);
      acc[i] = a;
    }
    const __mmask16 mk = mask16(nk);
    __m512 s = _mm512_mul_ps(tree_reduce16x(acc), vscale);
    _mm512_mask_storeu_ps(scores + j0, mk, s);
    vmax = _mm512_mask_max_ps(vmax, mk, s, vmax);  // NaN scores never become the max
  }

  // p_j = exp(s_j - m) and their canonical 16-lane sum.
  const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));  // max: any order is exact
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j0 = 0; j0 < n_ctx; j0 += 16) {
    const __mmask16 mk = mask16(n_ctx - j0);
    __m512 e = _mm512_maskz_mov_ps(mk, exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, scores + j0), vm)));
    vsum = _mm512_add_ps(vsum, e);
    _mm512_mask_storeu_ps(scores + j0, mk, e);
  }
  const __m512 total = _mm512_set1_ps(tree_reduce(vsum));

  // out = (sum_j p_j v_j) / sum, up to 8 chunks of channels at a time.
  for (int c0 = 0; c0 < nc; c0 += kMaxRegChunks) {
    const int gc = NC ? NC : std::min(kMaxRegChunks, nc - c0);
    __m512 acc[NC ? NC : kMaxRegChunks];
    for (int c = 0; c < gc; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n_ctx; ++j) {
      const float* vp = kv.v + kv_offset(kv, block_table, j, kv_head, head_dim) + 16 * c0;
      const __m512 p = _mm512_set1_ps(scores[j]);
      for (int c = 0; c < gc; ++c)
        acc[c] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(c0 + c == nc - 1 ? tail : 0xffff, vp + 16 * c), acc[c]);
    }
    for (int c = 0; c < gc; ++c)
      _mm512_mask_storeu_ps(out + 16 * (c0 + c), c0 + c == nc - 1 ? tail : 0xffff, _mm512_div_ps(acc[c], total));
  }
}

}  // namespace

GANNET_ATTEND_ONE(attend_one) {
  switch ((head_dim + 15) / 16) {
    case 4: attend<4>(q, head_dim, scale, n_ctx, block_table, kv, kv_head, scores, out); break;
    case 8: attend<8>(q, head_dim, scale, n_ctx, block_table, kv, kv_head, scores, out); break;
    default: attend<0>(q, head_dim, scale, n_ctx, block_table, kv, kv_head, scores, out); break;
  }
}

}  // namespace gannet::kernels::avx512
