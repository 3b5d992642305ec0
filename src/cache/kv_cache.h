// The KV arenas: for every layer a K and a V arena of fixed-size blocks, allocated once
// from a budget (principle 6). Block b, slot o of a layer holds [kv_heads, head_dim].
#pragma once

#include <cstdint>
#include <vector>

#include "model/cache_spec.h"
#include "model/model.h"

namespace gannet::cache {

class KvCache {
 public:
  KvCache(const model::CacheSpec& spec, int64_t num_blocks, int block_size);

  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int64_t capacity_tokens() const { return num_blocks_ * block_size_; }
  uint64_t bytes() const { return uint64_t(storage_.size()) * sizeof(float); }
  const model::CacheViews& views() const { return views_; }

 private:
  model::CacheSpec spec_;
  int64_t num_blocks_;
  int block_size_;
  std::vector<float> storage_;  // [layers, {K,V}, blocks, block_size, kv_heads, head_dim]
  model::CacheViews views_;
};

}  // namespace gannet::cache
