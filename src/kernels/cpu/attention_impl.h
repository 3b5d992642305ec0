// Per-ISA bodies of attention.h: one (token, head) at a time.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention.h"

namespace gannet::kernels {

// q, out: [head_dim]; the token attends to positions [0, n_ctx) of the sequence whose
// blocks are block_table, reading kv head kv_head. scores: scratch [n_ctx rounded up to 16].
#define GANNET_ATTEND_ONE(name)                                                           \
  void name(const float* q, int head_dim, float scale, int64_t n_ctx,                    \
            const int32_t* block_table, const KvCacheLayer& kv, int kv_head, float* scores, \
            float* out)

namespace ref {
GANNET_ATTEND_ONE(attend_one);
}
namespace avx2 {
GANNET_ATTEND_ONE(attend_one);
}
namespace avx512 {
GANNET_ATTEND_ONE(attend_one);
}

// Offset of (position, kv head) in the K or V arena.
inline int64_t kv_offset(const KvCacheLayer& kv, const int32_t* block_table, int64_t pos,
                         int kv_head, int head_dim) {
  return int64_t(block_table[pos / kv.block_size]) * kv.block_stride +
         (pos % kv.block_size) * kv.slot_stride + int64_t(kv_head) * head_dim;
}

}  // namespace gannet::kernels
