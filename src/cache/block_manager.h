// Hands out KV blocks and per-sequence state slots, and checks both at admission.
//
// Blocks are reference counted so the n samples of a request share their prompt's
// blocks; the first write into a shared block copies it (copy-on-write), reported as a
// BlockCopy that the cache engine performs before the next forward pass. A watermark of
// free blocks is kept back at admission so running decodes can still grow.
//
// Prefix caching (set_prefix_caching): a full block whose K/V are written can be
// registered under its content hash (block_hash.h). When its last reference goes it is
// kept, evictable, in an LRU list instead of the free list, and a new sequence whose
// tokens start the same way takes it (match_prefix, admit_cached) instead of computing
// it again. Blocks are taken from the free list first, then by evicting the least
// recently used cached block. Tables are released back to front, so a block is always
// more recently used than the blocks after it in any sequence: the block evicted is a
// leaf (nothing cached still needs it as a parent).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "cache/block_hash.h"

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
  // Blocks a sequence can take: never-cached free ones plus evictable cached ones.
  int64_t num_free_blocks() const { return int64_t(free_blocks_.size()) + num_evictable_; }
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
  // (from t.num_tokens on) fall in a block shared with another sequence or cached, that
  // block is replaced by a private copy, appended to `copies`.
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

  // --- Prefix caching -------------------------------------------------------------
  // Off: registration does nothing and freed blocks go straight to the free list.
  // Turning it off drops every cached block.
  void set_prefix_caching(bool on);
  bool prefix_caching() const { return caching_; }
  // The longest run of cached blocks holding a sequence's first full blocks: hashes[i] is
  // the chained hash of block i, tokens its token ids (n_blocks * block_size of them).
  // Each hit compares the block's tokens and parent hash, never just its hash. Appends the
  // block ids to `out`; returns how many of them are evictable (unreferenced), which
  // taking them removes from num_free_blocks().
  int64_t match_prefix(const BlockHash* hashes, const int32_t* tokens, int64_t n_blocks,
                       std::vector<int32_t>& out) const;
  // Admission with a cached prefix: a state slot, a reference to each of `cached` (from
  // match_prefix, unchanged since) and the table covering `tokens` positions of them
  // (<= cached.size() * block_size; the positions after are written by the sequence,
  // copy-on-write if it lands in a cached block). The table must be empty.
  void admit_cached(BlockTable& t, const std::vector<int32_t>& cached, int64_t tokens);
  // Block `block` is full and its K/V are written: cache it under `hash` (its parent's
  // hash `parent`, its `tokens`). A hash already cached by another block leaves this one
  // uncached; a block already cached is left as it is.
  // ready_step: the scheduler step whose run writes the block's last position (its
  // contents are complete once that step has run; 0: already).
  void register_block(int32_t block, const BlockHash& hash, const BlockHash& parent, const int32_t* tokens,
                      uint64_t ready_step = 0);
  bool is_cached(int32_t block) const { return caching_ && cached_[size_t(block)] != 0; }
  int64_t num_cached_blocks() const { return num_cached_; }
  int64_t num_evictable_blocks() const { return num_evictable_; }
  // Holding cached blocks while an admission decides (a block with no other holder leaves
  // the LRU list, so nothing evicts it meanwhile): pin adds a reference, unpin drops it.
  void pin(int32_t block);
  void unpin(int32_t block) { drop_block(block); }
  // A block for the caller to fill (the disk tier reading one back), with one reference;
  // taking it may evict the least recently used cached block.
  int32_t take_free_block() { return take_block(); }
  // Every cached block (its hash, parent's hash and tokens), in no particular order: the
  // disk tier saves them at shutdown.
  void for_each_cached(const std::function<void(int32_t, const BlockHash&, const BlockHash&, const int32_t*)>& fn) const;
  // Counters since construction.
  struct CacheCounters {
    int64_t hit_blocks = 0;      // blocks admit_cached took from the cache
    int64_t evictions = 0;       // cached blocks evicted to be reused
    int64_t registered = 0;      // blocks registered
  };
  const CacheCounters& counters() const { return counters_; }
  // Called with a cached block just before eviction reuses it (its contents are still
  // intact once its ready step has run): the disk tier copies it out. Hash, parent hash,
  // tokens, ready step.
  using EvictHook = std::function<void(int32_t block, const BlockHash&, const BlockHash&, const int32_t*, uint64_t)>;
  void set_evict_hook(EvictHook hook) { evict_hook_ = std::move(hook); }

 private:
  int32_t take_block();
  void drop_block(int32_t b);
  void lru_remove(int32_t b);
  void lru_push_back(int32_t b);
  void uncache(int32_t b);
  // Writing into b needs a private copy first: another table holds it, or it is cached
  // (its contents must stay what its hash says for later hits).
  bool must_copy_to_write(int32_t b) const { return ref_[size_t(b)] > 1 || (caching_ && cached_[size_t(b)]); }

  int block_size_;
  int64_t watermark_;
  std::vector<int32_t> ref_;          // [num_blocks]
  std::vector<int32_t> free_blocks_;  // stack; lowest ids handed out first
  std::vector<uint8_t> slot_used_;    // [num_state_slots]
  std::vector<int32_t> free_slots_;
  // Prefix cache: per block whether it is cached, its hash, its parent's and its tokens;
  // the index from hash to block; the evictable blocks in LRU order (head: oldest).
  bool caching_ = false;
  std::vector<uint8_t> cached_;
  std::vector<BlockHash> hash_, parent_;
  std::vector<uint64_t> ready_step_;
  std::vector<int32_t> tokens_;  // [num_blocks, block_size] while caching
  // Open addressing (linear probing) over block ids keyed by hash_[id], sized once for
  // every block: registering and evicting in steady decoding allocate nothing.
  std::vector<int32_t> index_;  // -1: empty
  uint64_t index_mask_ = 0;
  int64_t num_cached_ = 0;
  int32_t index_find(const BlockHash& h) const;
  bool index_insert(int32_t block);  // false: the hash is there already
  void index_erase(int32_t block);
  std::vector<int32_t> lru_prev_, lru_next_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int64_t num_evictable_ = 0;
  CacheCounters counters_;
  EvictHook evict_hook_;
};

}  // namespace gannet::cache
