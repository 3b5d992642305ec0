// Turns a model's CacheSpec (kernels/cache_spec.h) into memory: for every group and layer
// an arena of fixed-size blocks, plus one state slot per concurrent sequence. Allocated once, from a budget, as
// anonymous memory committed (populated) at construction, so a budget the machine cannot
// hold is an error at start-up (principle 6).
#pragma once

#include <cstdint>
#include <vector>

#include "cache/block_manager.h"
#include "kernels/cache_spec.h"

namespace gannet::cache {

class CacheEngine {
 public:
  // Throws gannet::Error naming the size when the memory cannot be committed.
  CacheEngine(const kernels::CacheSpec& spec, int64_t num_blocks, int block_size, int64_t num_state_slots = 1);
  ~CacheEngine();
  CacheEngine(const CacheEngine&) = delete;
  CacheEngine& operator=(const CacheEngine&) = delete;

  // How many blocks of block_size tokens fit in `bytes` after `num_state_slots` slots.
  static int64_t blocks_for_budget(const kernels::CacheSpec& spec, uint64_t bytes, int block_size,
                                   int64_t num_state_slots);

  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int64_t capacity_tokens() const { return num_blocks_ * block_size_; }
  uint64_t bytes() const { return bytes_; }
  const kernels::CacheViews& views() const { return views_; }

  // Copy-on-write support: copies block src to dst in every group's every layer.
  void copy_blocks(const std::vector<BlockCopy>& copies);
  void copy_state(int32_t src_slot, int32_t dst_slot);
  // A block's bytes in every group's every layer, in CacheSpec order (block_bytes() of
  // them): out of the arenas, and back in (the prefix cache's disk tier).
  uint64_t block_bytes() const { return spec_.bytes_per_block(block_size_); }
  void read_block(int32_t block, uint8_t* out) const;
  void write_block(int32_t block, const uint8_t* in);
  const kernels::CacheSpec& spec() const { return spec_; }

 private:
  kernels::CacheSpec spec_;
  int64_t num_blocks_;
  int block_size_;
  int64_t num_slots_;
  uint64_t bytes_ = 0;
  uint8_t* mem_ = nullptr;     // [groups x layers arenas of num_blocks blocks][slots]
  uint8_t* state_ = nullptr;   // [slots, state_bytes_per_seq]
  kernels::CacheViews views_;
};

}  // namespace gannet::cache
