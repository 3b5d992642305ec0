// Causal attention over a paged KV cache, prefill and decode in one kernel: one query
// row per token, each attending to positions 0..pos of its own sequence.
//
// Order per (token, head), the specification every variant reproduces bit for bit:
//   s_j = dot_f32_ref(q, k_j, head_dim) * scale, j = 0..pos in order
//   m = max_j s_j;  p_j = exp_f32(s_j - m);  sum = sum_f32_ref(p, pos + 1)
//   acc[d] = fma(p_j, v_j[d], acc[d]) for j = 0..pos in order, from +0
//   out[d] = acc[d] / sum
// So a token's output depends only on its q, its position and its sequence's cached
// K/V: not on the batch, chunking or thread count (DESIGN principle 1).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace gannet {
class ThreadPool;
}

namespace gannet::kernels {

// One layer's K and V arenas. Element (block b, slot o, kv head h, channel d) lives at
// b * block_stride + o * slot_stride + h * head_dim + d in both k and v.
struct KvCacheLayer {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t block_stride = 0, slot_stride = 0;
  int block_size = 0;
};

// The same view with writable arenas (kv_store).
struct KvCacheLayerMut {
  float* k = nullptr;
  float* v = nullptr;
  int64_t block_stride = 0, slot_stride = 0;
  int block_size = 0;
};

inline KvCacheLayer as_const(const KvCacheLayerMut& m) {
  return {m.k, m.v, m.block_stride, m.slot_stride, m.block_size};
}

// A sequence's physical block ids in order: position p is in block block_table[p / block_size],
// slot p % block_size.
struct AttentionSeq {
  const int32_t* block_table = nullptr;
  int32_t state_slot = -1;  // the sequence's state slot (kernels/cache_spec.h), -1: none
  // Bounded replay (DeepSeek-V4.1): positions before this skip the layers after the last
  // KV source; 0: none. Models without such layers ignore it (the engine refuses the flag).
  int64_t replay_from = 0;
  // Prefix-cache replay (models with per-sequence state, Model::prefix_replay_start):
  // positions before cached_until are in cached blocks whose entries are not written
  // again; positions from window_from on are recomputed to rebuild the state, and no
  // window reaches before window_from. 0, 0: none.
  int64_t window_from = 0, cached_until = 0;
};

// q, out: [n_tokens, n_heads, head_dim]; token_seq, token_pos: [n_tokens]; query head h
// reads kv head h / (n_heads / n_kv_heads). Work is split over (token, head) pairs; pool may
// be nullptr.
// The longest context attention will see (the model's positions): each thread's score
// scratch is sized for it on first use, so later steps never allocate as contexts grow.
void attention_reserve_context(int64_t max_context);

void attention(const float* q, int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim,
               float scale, const int32_t* token_seq, const int32_t* token_pos,
               const AttentionSeq* seqs, const KvCacheLayer& kv, float* out, ThreadPool* pool);
void attention_isa(Isa isa, const float* q, int64_t n_tokens, int n_heads, int n_kv_heads,
                   int head_dim, float scale, const int32_t* token_seq, const int32_t* token_pos,
                   const AttentionSeq* seqs, const KvCacheLayer& kv, float* out, ThreadPool* pool);

// A layer's K and V arenas holding bf16 (the dense models' --kv-cache-dtype bf16); same
// layout as KvCacheLayerMut, strides in elements.
struct KvCacheLayerBf16 {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int64_t block_stride = 0, slot_stride = 0;
  int block_size = 0;
};

// kv_store into bf16 arenas: each value rounded to bf16 (nearest even).
void kv_store_bf16(const float* k_rows, const float* v_rows, int64_t n_tokens, const AttentionSeq* seqs,
                   const int32_t* token_seq, const int32_t* token_pos, int n_kv_heads, int head_dim,
                   const KvCacheLayerBf16& kv);
// attention() over bf16 arenas: every K/V value read is its exact f32 widening, so the
// result is attention() over an f32 cache holding the bf16-rounded values, bit for bit.
// (The blocks each sequence of the batch reads are widened once per call.)
void attention_bf16(const float* q, int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim, float scale,
                    const int32_t* token_seq, const int32_t* token_pos, const AttentionSeq* seqs, int32_t n_seqs,
                    const KvCacheLayerBf16& kv, float* out, ThreadPool* pool);

// Writes each token's K and V rows into its sequence's slot for its position.
// k_rows, v_rows: [n_tokens, n_kv_heads * head_dim].
void kv_store(const float* k_rows, const float* v_rows, int64_t n_tokens, const AttentionSeq* seqs,
              const int32_t* token_seq, const int32_t* token_pos, int n_kv_heads, int head_dim,
              const KvCacheLayerMut& kv);

}  // namespace gannet::kernels
