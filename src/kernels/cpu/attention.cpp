// attention.h: the scalar reference, the split over (token, head) pairs, and kv_store.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/canonical.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/exp.h"

namespace gannet::kernels {

namespace {
std::atomic<int64_t> g_max_context{0};  // attention_reserve_context
}  // namespace


namespace ref {

namespace {
void attend_one(const float* q, int head_dim, float scale, int64_t n_ctx, const int32_t* block_table,
                const KvCacheLayer& kv, int kv_head, float* scores, float* out) {
  for (int64_t j = 0; j < n_ctx; ++j)
    scores[j] = dot_f32_ref(q, kv.k + kv_offset(kv, block_table, j, kv_head, head_dim), head_dim) * scale;
  float m = -INFINITY;
  for (int64_t j = 0; j < n_ctx; ++j) m = scores[j] > m ? scores[j] : m;
  for (int64_t j = 0; j < n_ctx; ++j) scores[j] = exp_f32(scores[j] - m);
  const float sum = sum_f32_ref(scores, n_ctx);
  for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float* v = kv.v + kv_offset(kv, block_table, j, kv_head, head_dim);
    for (int d = 0; d < head_dim; ++d) out[d] = std::fma(scores[j], v[d], out[d]);
  }
  for (int d = 0; d < head_dim; ++d) out[d] = out[d] / sum;
}
}  // namespace

GANNET_ATTEND_HEADS(attend_heads) {
  for (int g = 0; g < n_q; ++g)
    attend_one(q + int64_t(g) * head_dim, head_dim, scale, n_ctx, block_table, kv, kv_head,
               scores + g * ld, out + int64_t(g) * head_dim);
}

}  // namespace ref

void attention_isa(Isa isa, const float* q, int64_t n_tokens, int n_heads, int n_kv_heads,
                   int head_dim, float scale, const int32_t* token_seq, const int32_t* token_pos,
                   const AttentionSeq* seqs, const KvCacheLayer& kv, float* out, ThreadPool* pool) {
  GANNET_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "n_heads=", n_heads, " n_kv_heads=", n_kv_heads);
  GANNET_CHECK(head_dim > 0 && kv.block_size > 0, "head_dim=", head_dim, " block_size=", kv.block_size);
  auto heads = pick_variant(isa, ref::attend_heads, avx2::attend_heads, avx512::attend_heads);
  const int group = n_heads / n_kv_heads;
  // A unit is (kv head or single query head, token), numbered head-major so a thread's
  // contiguous range covers whole heads (balanced over prefill's growing contexts).
  // Whole GQA groups read each K/V row once for the group; single heads give more units
  // when there are few (decode with few kv heads). The bits are the same either way.
  const int threads = pool ? pool->size() : 1;
  const int per_unit = n_tokens * n_kv_heads >= 2 * threads ? group : 1;
  const int n_units_per_token = n_heads / per_unit;
  const int64_t hint = g_max_context.load(std::memory_order_relaxed);
  auto run = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;  // [per_unit, ld], grows only
    for (int64_t u = begin; u < end; ++u) {
      const int h0 = int(u / n_tokens) * per_unit;
      const int64_t t = u % n_tokens;
      const int64_t n_ctx = int64_t(token_pos[t]) + 1;
      GANNET_CHECK(n_ctx >= 1, "token ", t, " has position ", token_pos[t]);
      const int64_t ld = (n_ctx + 15) / 16 * 16 + 16;
      if (int64_t(scores.size()) < per_unit * ld)
        scores.resize(size_t(std::max(per_unit * ld, int64_t(group) * ((hint + 15) / 16 * 16 + 16))));
      const int64_t row = (t * n_heads + h0) * int64_t(head_dim);
      heads(q + row, per_unit, head_dim, scale, n_ctx, seqs[token_seq[t]].block_table, kv,
            h0 / group, scores.data(), ld, out + row);
    }
  };
  const int64_t units = n_tokens * n_units_per_token;
  if (threads == 1) run(0, units);
  else pool->parallel_for(units, [&](int64_t b, int64_t e, int) { run(b, e); });
}

void attention_reserve_context(int64_t max_context) {
  int64_t cur = g_max_context.load();
  while (max_context > cur && !g_max_context.compare_exchange_weak(cur, max_context)) {
  }
}

void attention(const float* q, int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim,
               float scale, const int32_t* token_seq, const int32_t* token_pos,
               const AttentionSeq* seqs, const KvCacheLayer& kv, float* out, ThreadPool* pool) {
  attention_isa(active_isa(), q, n_tokens, n_heads, n_kv_heads, head_dim, scale, token_seq,
                token_pos, seqs, kv, out, pool);
}

void kv_store(const float* k_rows, const float* v_rows, int64_t n_tokens, const AttentionSeq* seqs,
              const int32_t* token_seq, const int32_t* token_pos, int n_kv_heads, int head_dim,
              const KvCacheLayerMut& kv) {
  const KvCacheLayer view = as_const(kv);
  const int64_t row = int64_t(n_kv_heads) * head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    GANNET_CHECK(token_pos[t] >= 0, "token ", t, " has position ", token_pos[t]);
    const int64_t off = kv_offset(view, seqs[token_seq[t]].block_table, token_pos[t], 0, head_dim);
    std::memcpy(kv.k + off, k_rows + t * row, row * sizeof(float));
    std::memcpy(kv.v + off, v_rows + t * row, row * sizeof(float));
  }
}

void kv_store_bf16(const float* k_rows, const float* v_rows, int64_t n_tokens, const AttentionSeq* seqs,
                   const int32_t* token_seq, const int32_t* token_pos, int n_kv_heads, int head_dim,
                   const KvCacheLayerBf16& kv) {
  const int64_t row = int64_t(n_kv_heads) * head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    GANNET_CHECK(token_pos[t] >= 0, "token ", t, " has position ", token_pos[t]);
    const int32_t* table = seqs[token_seq[t]].block_table;
    const int64_t off =
        int64_t(table[token_pos[t] / kv.block_size]) * kv.block_stride + (token_pos[t] % kv.block_size) * kv.slot_stride;
    for (int64_t i = 0; i < row; ++i) {
      kv.k[off + i] = f32_to_bf16(k_rows[t * row + i]);
      kv.v[off + i] = f32_to_bf16(v_rows[t * row + i]);
    }
  }
}

void attention_bf16(const float* q, int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim, float scale,
                    const int32_t* token_seq, const int32_t* token_pos, const AttentionSeq* seqs, int32_t n_seqs,
                    const KvCacheLayerBf16& kv, float* out, ThreadPool* pool) {
  // The blocks each sequence reads (up to its furthest position in the batch), widened
  // into consecutive scratch blocks; each sequence gets a table over them.
  const int64_t row = int64_t(n_kv_heads) * head_dim, bs = kv.block_size;
  std::vector<int64_t> last(static_cast<size_t>(n_seqs), -1);
  for (int64_t t = 0; t < n_tokens; ++t) last[size_t(token_seq[t])] = std::max<int64_t>(last[size_t(token_seq[t])], token_pos[t]);
  std::vector<int64_t> first_block(static_cast<size_t>(n_seqs) + 1, 0);
  for (int32_t s = 0; s < n_seqs; ++s) first_block[size_t(s) + 1] = first_block[size_t(s)] + (last[size_t(s)] + bs) / bs;
  const int64_t blocks = first_block[size_t(n_seqs)];
  thread_local std::vector<float> wk, wv;  // grow only
  thread_local std::vector<int32_t> tables;
  thread_local std::vector<AttentionSeq> wide_seqs;
  if (int64_t(wk.size()) < blocks * bs * row) wk.resize(size_t(blocks * bs * row)), wv.resize(size_t(blocks * bs * row));
  tables.resize(size_t(blocks));
  wide_seqs.resize(size_t(n_seqs));
  for (int32_t s = 0; s < n_seqs; ++s) {
    for (int64_t b = first_block[size_t(s)]; b < first_block[size_t(s) + 1]; ++b) {
      tables[size_t(b)] = int32_t(b);
      const int64_t src = int64_t(seqs[s].block_table[b - first_block[size_t(s)]]) * kv.block_stride;
      for (int64_t o = 0; o < bs; ++o)
        for (int64_t i = 0; i < row; ++i) {
          wk[size_t((b * bs + o) * row + i)] = bf16_to_f32(kv.k[src + o * kv.slot_stride + i]);
          wv[size_t((b * bs + o) * row + i)] = bf16_to_f32(kv.v[src + o * kv.slot_stride + i]);
        }
    }
    wide_seqs[size_t(s)] = seqs[s];
    wide_seqs[size_t(s)].block_table = tables.data() + first_block[size_t(s)];
  }
  KvCacheLayer view;
  view.k = wk.data();
  view.v = wv.data();
  view.block_stride = bs * row;
  view.slot_stride = row;
  view.block_size = int(bs);
  attention(q, n_tokens, n_heads, n_kv_heads, head_dim, scale, token_seq, token_pos, wide_seqs.data(), view, out, pool);
}

}  // namespace gannet::kernels
