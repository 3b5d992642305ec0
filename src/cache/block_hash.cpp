#include "cache/block_hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include "core/error.h"

namespace gannet::cache {

BlockHash hash_block(const BlockHash& parent, uint64_t extra, const int32_t* tokens, int64_t n) {
  static_assert(sizeof(int32_t) == 4);
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  GANNET_CHECK(XXH3_128bits_reset(&st) == XXH_OK);
  const uint64_t head[3] = {parent.lo, parent.hi, extra};
  XXH3_128bits_update(&st, head, sizeof head);
  XXH3_128bits_update(&st, tokens, size_t(n) * sizeof(int32_t));
  const XXH128_hash_t h = XXH3_128bits_digest(&st);
  return BlockHash{h.low64, h.high64};
}

}  // namespace gannet::cache
