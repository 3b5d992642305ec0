#include "cache/kv_cache.h"

#include "core/error.h"

namespace gannet::cache {

KvCache::KvCache(const model::CacheSpec& spec, int64_t num_blocks, int block_size)
    : spec_(spec), num_blocks_(num_blocks), block_size_(block_size) {
  GANNET_CHECK(spec.kv_dtype == DType::F32, "only f32 KV caches exist so far");
  if (num_blocks < 1 || block_size < 1) fail("KV cache needs at least one block of at least one token");
  const int64_t row = spec.num_kv_heads * spec.head_dim;  // floats per token per layer
  const int64_t arena = num_blocks * block_size * row;     // floats per layer per K or V
  storage_.assign(size_t(2 * spec.num_layers * arena), 0.0f);
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    kernels::KvCacheLayerMut v;
    v.k = storage_.data() + (2 * l) * arena;
    v.v = storage_.data() + (2 * l + 1) * arena;
    v.block_stride = block_size * row;
    v.slot_stride = row;
    v.block_size = block_size;
    views_.layers.push_back(v);
  }
}

}  // namespace gannet::cache
