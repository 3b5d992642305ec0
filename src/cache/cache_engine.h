// Turns a model's CacheSpec into memory: for every layer a K and a V arena of fixed-size
// blocks, plus one state slot per concurrent sequence. Allocated once, from a budget, as
// anonymous memory committed (populated) at construction, so a budget the machine cannot
// hold is an error at start-up (principle 6).
#pragma once

#include <cstdint>
#include <vector>

#include "cache/block_manager.h"
#include "model/cache_spec.h"
#include "model/model.h"

namespace gannet::cache {

class CacheEngine {
 public:
  // Throws gannet::Error naming the size when the memory cannot be committed.
  CacheEngine(const model::CacheSpec& spec, int64_t num_blocks, int block_size, int64_t num_state_slots = 1);
  ~CacheEngine();
  CacheEngine(const CacheEngine&) = delete;
  CacheEngine& operator=(const CacheEngine&) = delete;

  // How many blocks of block_size tokens fit in `bytes` after `num_state_slots` slots.
  static int64_t blocks_for_budget(const model::CacheSpec& spec, uint64_t bytes, int block_size,
                                   int64_t num_state_slots);

  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int64_t capacity_tokens() const { return num_blocks_ * block_size_; }
  uint64_t bytes() const { return bytes_; }
  const model::CacheViews& views() const { return views_; }

  // Copy-on-write support: copies block src to dst in every layer's K and V.
  void copy_blocks(const std::vector<BlockCopy>& copies);
  void copy_state(int32_t src_slot, int32_t dst_slot);

 private:
  model::CacheSpec spec_;
  int64_t num_blocks_;
  int block_size_;
  int64_t num_slots_;
  uint64_t bytes_ = 0;
  float* kv_ = nullptr;        // [layers, {K,V}, blocks, block_size, kv_heads, head_dim]
  uint8_t* state_ = nullptr;   // [slots, state_bytes_per_seq]
  model::CacheViews views_;
};

}  // namespace gannet::cache
