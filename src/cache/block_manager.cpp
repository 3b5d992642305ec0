#include "cache/block_manager.h"

#include <algorithm>

#include "core/error.h"

namespace gannet::cache {

BlockManager::BlockManager(int64_t num_blocks, int block_size, int64_t num_state_slots, int64_t watermark_blocks)
    : block_size_(block_size), watermark_(watermark_blocks) {
  if (num_blocks < 1) fail("the KV cache budget holds no block of ", block_size, " tokens");
  if (block_size < 1) fail("--block-size must be >= 1, got ", block_size);
  if (num_state_slots < 1) fail("at least one sequence state slot is needed");
  ref_.assign(size_t(num_blocks), 0);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_blocks_.push_back(int32_t(b));
  slot_used_.assign(size_t(num_state_slots), 0);
  for (int64_t s = num_state_slots - 1; s >= 0; --s) free_slots_.push_back(int32_t(s));
}

int32_t BlockManager::take_block() {
  GANNET_CHECK(!free_blocks_.empty(), "out of KV blocks");
  int32_t b = free_blocks_.back();
  free_blocks_.pop_back();
  GANNET_CHECK(ref_[size_t(b)] == 0);
  ref_[size_t(b)] = 1;
  return b;
}

void BlockManager::drop_block(int32_t b) {
  GANNET_CHECK(ref_[size_t(b)] > 0, "block ", b, " released twice");
  if (--ref_[size_t(b)] == 0) free_blocks_.push_back(b);
}

bool BlockManager::can_admit(int64_t tokens) const {
  return !free_slots_.empty() && num_free_blocks() - blocks_for(tokens) >= watermark_;
}

void BlockManager::admit(BlockTable& t, int64_t tokens) {
  GANNET_CHECK(t.blocks.empty() && t.state_slot < 0 && t.num_tokens == 0);
  GANNET_CHECK(!free_slots_.empty());
  t.state_slot = free_slots_.back();
  free_slots_.pop_back();
  slot_used_[size_t(t.state_slot)] = 1;
  std::vector<BlockCopy> none;
  grow(t, tokens, none);
  GANNET_CHECK(none.empty());
}

bool BlockManager::can_grow(const BlockTable& t, int64_t tokens) const {
  int64_t need = blocks_for(tokens) - int64_t(t.blocks.size());
  // A shared partial last block that will be written needs a private copy.
  if (t.num_tokens % block_size_ != 0 && tokens > t.num_tokens && !t.blocks.empty() &&
      ref_[size_t(t.blocks.back())] > 1)
    ++need;
  return need <= num_free_blocks();
}

int64_t BlockManager::positions_growable(const BlockTable& t) const {
  int64_t blocks = int64_t(t.blocks.size()) + num_free_blocks();
  if (t.num_tokens % block_size_ != 0 && !t.blocks.empty() && ref_[size_t(t.blocks.back())] > 1) {
    // Writing into the shared last block first needs a private copy of it.
    if (num_free_blocks() == 0) return t.num_tokens;
    --blocks;
  }
  return blocks * block_size_;
}

void BlockManager::grow(BlockTable& t, int64_t tokens, std::vector<BlockCopy>& copies) {
  if (tokens <= t.num_tokens) return;
  GANNET_CHECK(can_grow(t, tokens), "grow without capacity");
  // Copy-on-write for the block holding position num_tokens, if shared.
  if (t.num_tokens % block_size_ != 0) {
    int32_t& last = t.blocks[size_t(t.num_tokens / block_size_)];
    if (ref_[size_t(last)] > 1) {
      int32_t fresh = take_block();
      copies.push_back({last, fresh});
      drop_block(last);
      last = fresh;
      t.dirty_from = std::min(t.dirty_from, t.num_tokens / block_size_);
    }
  }
  if (int64_t(t.blocks.size()) < blocks_for(tokens)) t.dirty_from = std::min(t.dirty_from, int64_t(t.blocks.size()));
  while (int64_t(t.blocks.size()) < blocks_for(tokens)) t.blocks.push_back(take_block());
  t.num_tokens = tokens;
}

void BlockManager::fork(const BlockTable& parent, BlockTable& child, int64_t tokens) {
  GANNET_CHECK(child.blocks.empty() && child.state_slot < 0);
  GANNET_CHECK(!free_slots_.empty(), "fork without a free state slot");
  if (tokens < 0) tokens = parent.num_tokens;
  GANNET_CHECK(tokens <= parent.num_tokens, "fork of ", tokens, " positions from a table of ", parent.num_tokens);
  child.state_slot = free_slots_.back();
  free_slots_.pop_back();
  slot_used_[size_t(child.state_slot)] = 1;
  child.blocks.assign(parent.blocks.begin(), parent.blocks.begin() + blocks_for(tokens));  // keeps capacity
  child.num_tokens = tokens;
  child.dirty_from = 0;
  for (int32_t b : child.blocks) ++ref_[size_t(b)];
}

void BlockManager::truncate(BlockTable& t, int64_t tokens) {
  GANNET_CHECK(tokens >= 0, "truncate to ", tokens, " positions");
  if (tokens >= t.num_tokens) return;
  const int64_t keep = blocks_for(tokens);
  for (int64_t i = keep; i < int64_t(t.blocks.size()); ++i) drop_block(t.blocks[size_t(i)]);
  if (keep < int64_t(t.blocks.size())) {
    t.blocks.resize(size_t(keep));
    t.dirty_from = std::min(t.dirty_from, keep);
  }
  t.num_tokens = tokens;
}

void BlockManager::release(BlockTable& t) {
  for (int32_t b : t.blocks) drop_block(b);
  t.blocks.clear();
  t.dirty_from = 0;
  t.num_tokens = 0;
  if (t.state_slot >= 0) {
    GANNET_CHECK(slot_used_[size_t(t.state_slot)], "slot ", t.state_slot, " released twice");
    slot_used_[size_t(t.state_slot)] = 0;
    free_slots_.push_back(t.state_slot);
    t.state_slot = -1;
  }
}

}  // namespace gannet::cache
