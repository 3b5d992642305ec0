// Per-ISA bodies of attention.h: one token's query heads that share a kv head.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention.h"

namespace gannet::kernels {

// q, out: [n_q, head_dim], n_q query heads of one token that all read kv head kv_head;
// the token attends to positions [0, n_ctx) of the sequence whose blocks are block_table.
// scores: scratch [n_q, ld], ld >= n_ctx rounded up to 16. Each head is computed exactly as
// if alone; grouping only lets K/V rows be read once for all n_q heads.
#define GANNET_ATTEND_HEADS(name)                                                          \
  void name(const float* q, int n_q, int head_dim, float scale, int64_t n_ctx,            \
            const int32_t* block_table, const KvCacheLayer& kv, int kv_head, float* scores, \
            int64_t ld, float* out)

namespace ref {
GANNET_ATTEND_HEADS(attend_heads);
}
namespace avx2 {
GANNET_ATTEND_HEADS(attend_heads);
}
namespace avx512 {
GANNET_ATTEND_HEADS(attend_heads);
}

// Offset of (position, kv head) in the K or V arena.
inline int64_t kv_offset(const KvCacheLayer& kv, const int32_t* block_table, int64_t pos,
                         int kv_head, int head_dim) {
  return int64_t(block_table[pos / kv.block_size]) * kv.block_stride +
         (pos % kv.block_size) * kv.slot_stride + int64_t(kv_head) * head_dim;
}

// Row pointers of n consecutive positions j0.. (K or V arena base), with one division.
inline void kv_rows(const float* base, const KvCacheLayer& kv, const int32_t* block_table,
                    int64_t j0, int n, int kv_head, int head_dim, const float** rows) {
  int64_t block = j0 / kv.block_size, slot = j0 % kv.block_size;
  for (int i = 0; i < n; ++i) {
    rows[i] = base + int64_t(block_table[block]) * kv.block_stride + slot * kv.slot_stride +
              int64_t(kv_head) * head_dim;
    if (++slot == kv.block_size) slot = 0, ++block;
  }
}

}  // namespace gannet::kernels
