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
  int32_t b;
  if (!free_blocks_.empty()) {
    b = free_blocks_.back();
    free_blocks_.pop_back();
  } else {
    GANNET_CHECK(lru_head_ >= 0, "out of KV blocks");
    b = lru_head_;  // the least recently used cached block
    if (evict_hook_)
      evict_hook_(b, hash_[size_t(b)], parent_[size_t(b)], tokens_.data() + int64_t(b) * block_size_,
                  ready_step_[size_t(b)]);
    lru_remove(b);
    --num_evictable_;
    uncache(b);
    ++counters_.evictions;
  }
  GANNET_CHECK(ref_[size_t(b)] == 0);
  ref_[size_t(b)] = 1;
  return b;
}

void BlockManager::drop_block(int32_t b) {
  GANNET_CHECK(ref_[size_t(b)] > 0, "block ", b, " released twice");
  if (--ref_[size_t(b)] > 0) return;
  if (caching_ && cached_[size_t(b)]) {
    lru_push_back(b);
    ++num_evictable_;
  } else {
    free_blocks_.push_back(b);
  }
}

void BlockManager::lru_remove(int32_t b) {
  const int32_t p = lru_prev_[size_t(b)], n = lru_next_[size_t(b)];
  (p >= 0 ? lru_next_[size_t(p)] : lru_head_) = n;
  (n >= 0 ? lru_prev_[size_t(n)] : lru_tail_) = p;
  lru_prev_[size_t(b)] = lru_next_[size_t(b)] = -1;
}

void BlockManager::lru_push_back(int32_t b) {
  lru_prev_[size_t(b)] = lru_tail_;
  lru_next_[size_t(b)] = -1;
  (lru_tail_ >= 0 ? lru_next_[size_t(lru_tail_)] : lru_head_) = b;
  lru_tail_ = b;
}

int32_t BlockManager::index_find(const BlockHash& h) const {
  for (uint64_t i = h.lo & index_mask_;; i = (i + 1) & index_mask_) {
    const int32_t b = index_[i];
    if (b < 0) return -1;
    if (hash_[size_t(b)] == h) return b;
  }
}

bool BlockManager::index_insert(int32_t block) {
  const BlockHash& h = hash_[size_t(block)];
  uint64_t i = h.lo & index_mask_;
  for (; index_[i] >= 0; i = (i + 1) & index_mask_)
    if (hash_[size_t(index_[i])] == h) return false;
  index_[i] = block;
  ++num_cached_;
  return true;
}

void BlockManager::index_erase(int32_t block) {
  uint64_t i = hash_[size_t(block)].lo & index_mask_;
  while (index_[i] != block) {
    GANNET_CHECK(index_[i] >= 0, "block ", block, " is not in the prefix index");
    i = (i + 1) & index_mask_;
  }
  // Backward-shift deletion: later entries of the probe run move up into the hole when
  // their home slot does not lie between the hole and them.
  for (uint64_t j = (i + 1) & index_mask_;; j = (j + 1) & index_mask_) {
    const int32_t b = index_[j];
    if (b < 0) break;
    const uint64_t home = hash_[size_t(b)].lo & index_mask_;
    if (((j - home) & index_mask_) >= ((j - i) & index_mask_)) {
      index_[i] = b;
      i = j;
    }
  }
  index_[i] = -1;
  --num_cached_;
}

void BlockManager::uncache(int32_t b) {
  GANNET_CHECK(cached_[size_t(b)]);
  index_erase(b);
  cached_[size_t(b)] = 0;
}

void BlockManager::set_prefix_caching(bool on) {
  if (on == caching_) return;
  if (on) {
    const size_t n = ref_.size();
    cached_.assign(n, 0);
    hash_.assign(n, BlockHash{});
    parent_.assign(n, BlockHash{});
    ready_step_.assign(n, 0);
    tokens_.assign(n * size_t(block_size_), 0);
    lru_prev_.assign(n, -1);
    lru_next_.assign(n, -1);
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;  // load factor <= 1/2
    index_.assign(cap, -1);
    index_mask_ = cap - 1;
    num_cached_ = 0;
  } else {
    while (lru_head_ >= 0) {
      const int32_t b = lru_head_;
      lru_remove(b);
      --num_evictable_;
      uncache(b);
      free_blocks_.push_back(b);
    }
    for (int32_t b = 0; b < int32_t(ref_.size()); ++b)
      if (cached_[size_t(b)]) uncache(b);
    std::sort(free_blocks_.begin(), free_blocks_.end(), std::greater<int32_t>());  // lowest ids first again
  }
  caching_ = on;
}

int64_t BlockManager::match_prefix(const BlockHash* hashes, const int32_t* tokens, int64_t n_blocks,
                                   std::vector<int32_t>& out) const {
  int64_t evictable = 0;
  if (!caching_) return 0;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const int32_t b = index_find(hashes[i]);
    if (b < 0) break;
    const BlockHash& parent = i == 0 ? kRootBlockHash : hashes[i - 1];
    if (parent_[size_t(b)] != parent ||
        !std::equal(tokens + i * block_size_, tokens + (i + 1) * block_size_,
                    tokens_.begin() + int64_t(b) * block_size_))
      break;  // a hash collision: not the same block
    out.push_back(b);
    evictable += ref_[size_t(b)] == 0;
  }
  return evictable;
}

void BlockManager::admit_cached(BlockTable& t, const std::vector<int32_t>& cached, int64_t tokens) {
  GANNET_CHECK(t.blocks.empty() && t.state_slot < 0 && t.num_tokens == 0);
  GANNET_CHECK(!free_slots_.empty());
  GANNET_CHECK(int64_t(cached.size()) == blocks_for(tokens), "admission of ", tokens, " cached positions with ",
               cached.size(), " blocks");
  t.state_slot = free_slots_.back();
  free_slots_.pop_back();
  slot_used_[size_t(t.state_slot)] = 1;
  for (int32_t b : cached) {
    GANNET_CHECK(cached_[size_t(b)], "block ", b, " is not cached");
    if (ref_[size_t(b)] == 0) {
      lru_remove(b);
      --num_evictable_;
    }
    ++ref_[size_t(b)];
  }
  t.blocks.insert(t.blocks.end(), cached.begin(), cached.end());
  t.num_tokens = tokens;
  t.dirty_from = 0;
  counters_.hit_blocks += int64_t(cached.size());
}

void BlockManager::pin(int32_t block) {
  GANNET_CHECK(caching_ && cached_[size_t(block)], "pinning block ", block, " that is not cached");
  if (ref_[size_t(block)]++ == 0) {
    lru_remove(block);
    --num_evictable_;
  }
}

void BlockManager::for_each_cached(
    const std::function<void(int32_t, const BlockHash&, const BlockHash&, const int32_t*)>& fn) const {
  if (!caching_) return;
  for (int32_t b = 0; b < int32_t(ref_.size()); ++b)
    if (cached_[size_t(b)]) fn(b, hash_[size_t(b)], parent_[size_t(b)], tokens_.data() + int64_t(b) * block_size_);
}

void BlockManager::register_block(int32_t block, const BlockHash& hash, const BlockHash& parent,
                                  const int32_t* tokens, uint64_t ready_step) {
  if (!caching_ || cached_[size_t(block)]) return;
  GANNET_CHECK(ref_[size_t(block)] > 0, "registering block ", block, " that no sequence holds");
  hash_[size_t(block)] = hash;
  if (!index_insert(block)) return;  // the same contents are cached already
  cached_[size_t(block)] = 1;
  parent_[size_t(block)] = parent;
  ready_step_[size_t(block)] = ready_step;
  std::copy(tokens, tokens + block_size_, tokens_.begin() + int64_t(block) * block_size_);
  ++counters_.registered;
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
      must_copy_to_write(t.blocks.back()))
    ++need;
  return need <= num_free_blocks();
}

int64_t BlockManager::positions_growable(const BlockTable& t) const {
  int64_t blocks = int64_t(t.blocks.size()) + num_free_blocks();
  if (t.num_tokens % block_size_ != 0 && !t.blocks.empty() && must_copy_to_write(t.blocks.back())) {
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
    if (must_copy_to_write(last)) {
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
  for (int64_t i = int64_t(t.blocks.size()) - 1; i >= keep; --i) drop_block(t.blocks[size_t(i)]);
  if (keep < int64_t(t.blocks.size())) {
    t.blocks.resize(size_t(keep));
    t.dirty_from = std::min(t.dirty_from, keep);
  }
  t.num_tokens = tokens;
}

void BlockManager::release(BlockTable& t) {
  // Back to front: each block enters the LRU list after the blocks that follow it.
  for (auto it = t.blocks.rbegin(); it != t.blocks.rend(); ++it) drop_block(*it);
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
