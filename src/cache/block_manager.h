// Hands out KV blocks and per-sequence state slots, and checks both at admission.
//
// Blocks are reference counted so the n samples of a request share their prompt's
// blocks; the first write into a shared block copies it (copy-on-write), reported as a
// BlockCopy that the cache engine performs before the next forward pass. A watermark of
// free blocks is kept back at admission so running decodes can still grow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gannet::cache {

// A sequence's cache: its blocks in order, how many token positions they hold, its slot.
struct BlockTable {
  std::vector<int32_t> blocks;
  int64_t num_tokens = 0;   // positions covered by allocation (<= blocks.size() * block_size)
  int32_t state_slot = -1;  // -1: none held
  // Entries from this index on changed since the last mark_synced(): a copy holding the
  // table up to the last sync needs only these (none when it equals blocks.size()).
  int64_t dirty_from = 0;
  bool changed_since_sync() const { return dirty_from < int64_t(blocks.size()); }
  void mark_synced() { dirty_from = int64_t(blocks.size()); }
};

struct BlockCopy {
  int32_t src, dst;
};

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int block_size, int64_t num_state_slots, int64_t watermark_blocks);

  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return int64_t(ref_.size()); }
  int64_t num_free_blocks() const { return int64_t(free_blocks_.size()); }
  int64_t num_state_slots() const { return int64_t(slot_used_.size()); }
  int64_t num_free_slots() const { return int64_t(free_slots_.size()); }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Admission of a new sequence needing `tokens` positions now: a free state slot and
  // enough blocks while leaving the watermark free.
  bool can_admit(int64_t tokens) const;
  // Takes a state slot and blocks for `tokens` positions (table must be empty).
  void admit(BlockTable& t, int64_t tokens);

  int64_t watermark() const { return watermark_; }

  // Growing a sequence to `tokens` positions; no watermark (running work uses it).
  bool can_grow(const BlockTable& t, int64_t tokens) const;
  // The most positions t could cover after growing into every free block (accounting for
  // a copy-on-write of its shared last block).
  int64_t positions_growable(const BlockTable& t) const;
  // Grows to `tokens` positions. Copy-on-write: when the positions about to be written
  // (from t.num_tokens on) fall in a block shared with another sequence, that block is
  // replaced by a private copy, appended to `copies`.
  void grow(BlockTable& t, int64_t tokens, std::vector<BlockCopy>& copies);

  // A new sequence sharing parent's blocks for its first `tokens` positions (refcounts + 1;
  // -1: all of them) with its own state slot (the state is copied by the caller). Needs a
  // free slot: check can_fork first. The prefix matters when the parent has already grown
  // past the fork point (asynchronous scheduling plans its next step first).
  bool can_fork() const { return !free_slots_.empty(); }
  void fork(const BlockTable& parent, BlockTable& child, int64_t tokens = -1);

  // Shrinks t to its first `tokens` positions (speculative decoding: rejected drafts),
  // dropping the blocks past them (freed when their count drops to 0). Positions past
  // `tokens` in the last kept block become unwritten again: if that block is shared, the
  // next grow() copies it first, as for any partial block.
  void truncate(BlockTable& t, int64_t tokens);
  // Returns blocks (when their count drops to 0) and the slot; leaves t empty.
  void release(BlockTable& t);

  int32_t ref_count(int32_t block) const { return ref_[size_t(block)]; }

 private:
  int32_t take_block();
  void drop_block(int32_t b);

  int block_size_;
  int64_t watermark_;
  std::vector<int32_t> ref_;          // [num_blocks]
  std::vector<int32_t> free_blocks_;  // stack; lowest ids handed out first
  std::vector<uint8_t> slot_used_;    // [num_state_slots]
  std::vector<int32_t> free_slots_;
};

}  // namespace gannet::cache
