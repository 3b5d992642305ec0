// The prefix cache of the block manager: content hashes, hits, sharing, the evictable
// LRU list and its order, and refusal of blocks whose hash matches but contents do not.
#include <gtest/gtest.h>

#include <vector>

#include "cache/block_hash.h"
#include "cache/block_manager.h"

using namespace gannet::cache;

namespace {

// The chained hashes of a sequence's full blocks.
std::vector<BlockHash> chain(const std::vector<int32_t>& tokens, int bs) {
  std::vector<BlockHash> h;
  for (size_t i = 0; (i + 1) * size_t(bs) <= tokens.size(); ++i)
    h.push_back(hash_block(i ? h.back() : kRootBlockHash, 0, tokens.data() + i * size_t(bs), bs));
  return h;
}

// Admits `tokens` (computing everything), registers its full blocks, as the scheduler
// does once they are written.
BlockTable run(BlockManager& bm, const std::vector<int32_t>& tokens) {
  BlockTable t;
  bm.admit(t, int64_t(tokens.size()));
  const auto h = chain(tokens, bm.block_size());
  for (size_t i = 0; i < h.size(); ++i)
    bm.register_block(t.blocks[i], h[i], i ? h[i - 1] : kRootBlockHash, tokens.data() + i * size_t(bm.block_size()));
  return t;
}

std::vector<int32_t> match(const BlockManager& bm, const std::vector<int32_t>& tokens, int64_t* evictable = nullptr) {
  const auto h = chain(tokens, bm.block_size());
  std::vector<int32_t> out;
  const int64_t e = bm.match_prefix(h.data(), tokens.data(), int64_t(h.size()), out);
  if (evictable) *evictable = e;
  return out;
}

}  // namespace

// The byte layout hashed (parent lo, hi, extra as little-endian u64, then the tokens as
// little-endian i32) is fixed: the disk tier finds blocks by these hashes across runs.
// Expected values from Python's xxhash 4.1.0 (bundling xxHash 0.8.4), xxh3_128_intdigest
// of struct.pack('<QQQ', lo, hi, extra) + struct.pack('<4i', 1, 2, 3, -5).
TEST(BlockHash, MatchesAnIndependentXxh3) {
  const int32_t t[4] = {1, 2, 3, -5};
  const BlockHash a = hash_block(kRootBlockHash, 0, t, 4);
  EXPECT_EQ(a.lo, 0xa03d4e18f1c9229cull);
  EXPECT_EQ(a.hi, 0x8750a8058e55091full);
  const BlockHash b = hash_block(kRootBlockHash, 7, t, 4);
  EXPECT_EQ(b.lo, 0xb61a7f17dcd9d91aull);
  EXPECT_EQ(b.hi, 0xaada44b1a5947047ull);
}

TEST(BlockHash, ChainsParentExtraAndEveryToken) {
  const int32_t t[4] = {1, 2, 3, 4}, u[4] = {1, 2, 3, 5};
  const BlockHash base = hash_block(kRootBlockHash, 0, t, 4);
  EXPECT_NE(base, hash_block(kRootBlockHash, 0, u, 4));
  EXPECT_NE(base, hash_block(kRootBlockHash, 1, t, 4));
  EXPECT_NE(base, hash_block(base, 0, t, 4));
  EXPECT_NE(base, hash_block(kRootBlockHash, 0, t, 3));
  EXPECT_EQ(base, hash_block(kRootBlockHash, 0, t, 4));
}

TEST(PrefixCache, ReleasedBlocksAreKeptAndHit) {
  BlockManager bm(8, 4, 4, 0);
  bm.set_prefix_caching(true);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 2 full blocks + 2
  BlockTable ta = run(bm, a);
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  EXPECT_TRUE(bm.is_cached(ta.blocks[0]) && bm.is_cached(ta.blocks[1]) && !bm.is_cached(ta.blocks[2]));
  // While a still runs, a second sequence shares its cached blocks (refcount 2).
  std::vector<int32_t> b = a;
  b[9] = 99;
  int64_t evictable = -1;
  std::vector<int32_t> hit = match(bm, b, &evictable);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(evictable, 0);
  EXPECT_EQ(hit[0], ta.blocks[0]);
  BlockTable tb;
  bm.admit_cached(tb, hit, 8);
  EXPECT_EQ(bm.ref_count(hit[0]), 2);
  EXPECT_EQ(tb.num_tokens, 8);
  const std::vector<int32_t> a_blocks = ta.blocks;
  bm.release(ta);
  // a's partial block is free; its cached ones stay cached, held by b.
  EXPECT_EQ(bm.ref_count(a_blocks[0]), 1);
  EXPECT_EQ(bm.num_evictable_blocks(), 0);
  bm.release(tb);
  EXPECT_EQ(bm.num_evictable_blocks(), 2);
  EXPECT_EQ(bm.num_free_blocks(), 8);  // evictable blocks count as free
  // A later sequence with the same start takes them back out of the LRU list.
  hit = match(bm, a, &evictable);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(evictable, 2);
  BlockTable tc;
  bm.admit_cached(tc, hit, 8);
  EXPECT_EQ(bm.num_evictable_blocks(), 0);
  EXPECT_EQ(bm.num_free_blocks(), 6);
  EXPECT_EQ(bm.counters().hit_blocks, 4);
  bm.release(tc);
}

// A prefix that differs in its first block shares nothing, though later blocks hold the
// same tokens: hashes chain.
TEST(PrefixCache, OnlyWholeLeadingPrefixesHit) {
  BlockManager bm(8, 2, 2, 0);
  bm.set_prefix_caching(true);
  BlockTable t = run(bm, {1, 2, 3, 4, 5, 6});
  bm.release(t);
  EXPECT_EQ(match(bm, {9, 2, 3, 4, 5, 6}).size(), 0u);
  EXPECT_EQ(match(bm, {1, 2, 3, 9, 5, 6}).size(), 1u);
  EXPECT_EQ(match(bm, {1, 2, 3, 4, 5, 6, 7, 8}).size(), 3u);
  EXPECT_EQ(match(bm, {1}).size(), 0u);  // no full block
}

// A block found by hash whose stored tokens or parent differ is not a hit (a collision).
TEST(PrefixCache, HashMatchWithOtherContentsIsAMiss) {
  BlockManager bm(4, 2, 2, 0);
  bm.set_prefix_caching(true);
  BlockTable t;
  bm.admit(t, 4);
  const int32_t toks[2] = {1, 2}, other[2] = {3, 4};
  const BlockHash h = hash_block(kRootBlockHash, 0, toks, 2);
  bm.register_block(t.blocks[0], h, kRootBlockHash, other);  // as if h collided
  std::vector<int32_t> out;
  EXPECT_EQ(bm.match_prefix(&h, toks, 1, out), 0);
  EXPECT_TRUE(out.empty());
  const BlockHash wrong_parent{1, 2};
  bm.register_block(t.blocks[1], hash_block(wrong_parent, 0, toks, 2), wrong_parent, toks);
  const BlockHash h1 = hash_block(wrong_parent, 0, toks, 2);
  const BlockHash hs[2] = {h, h1};
  const int32_t seq[4] = {3, 4, 1, 2};
  out.clear();
  // Block 0 now holds what it claims ({3, 4}); block 1's recorded parent is not hs[0].
  bm.match_prefix(hs, seq, 2, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], t.blocks[0]);
  bm.release(t);
}

// Two blocks with the same contents: the second registration leaves it uncached (freed at
// once), and a registered block's refcount is untouched by registering again.
TEST(PrefixCache, DuplicateContentsAreCachedOnce) {
  BlockManager bm(6, 2, 3, 0);
  bm.set_prefix_caching(true);
  BlockTable a = run(bm, {1, 2, 3});
  BlockTable b = run(bm, {1, 2, 5});
  EXPECT_EQ(bm.num_cached_blocks(), 1);
  EXPECT_TRUE(bm.is_cached(a.blocks[0]));
  EXPECT_FALSE(bm.is_cached(b.blocks[0]));
  bm.release(b);
  bm.release(a);
  EXPECT_EQ(bm.num_evictable_blocks(), 1);
  EXPECT_EQ(bm.num_free_blocks(), 6);
}

// Blocks come from the free list first; then the least recently used cached block goes,
// and a released table's blocks enter the list back to front, so the block evicted is
// always a leaf: its parent outlives it.
TEST(PrefixCache, EvictionTakesTheLeastRecentlyUsedLeafFirst) {
  BlockManager bm(6, 2, 4, 0);
  bm.set_prefix_caching(true);
  std::vector<std::pair<int32_t, BlockHash>> evicted;
  bm.set_evict_hook(
      [&](int32_t b, const BlockHash& h, const BlockHash&, const int32_t*, uint64_t) { evicted.push_back({b, h}); });
  const std::vector<int32_t> p = {1, 2, 3, 4};     // blocks P0 P1
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6};  // P0 P1 A2
  BlockTable ta = run(bm, a);
  const int32_t p0 = ta.blocks[0], p1 = ta.blocks[1], a2 = ta.blocks[2];
  bm.release(ta);
  // b reuses P0 P1 later than a's release and adds B2.
  std::vector<int32_t> b = {1, 2, 3, 4, 7, 8, 9};
  std::vector<int32_t> hit = match(bm, b);
  ASSERT_EQ(hit.size(), 2u);
  BlockTable tb;
  bm.admit_cached(tb, hit, 4);
  std::vector<BlockCopy> copies;
  bm.grow(tb, 7, copies);
  const auto hb = chain(b, 2);
  bm.register_block(tb.blocks[2], hb[2], hb[1], b.data() + 4);
  const int32_t b2 = tb.blocks[2];
  bm.release(tb);
  EXPECT_EQ(bm.num_evictable_blocks(), 4);  // P0 P1 A2 B2; b's partial block is free
  // LRU order now: A2 (a's release), then b's release back to front: B2, P1, P0. The free
  // list (b's partial block, then one never used) goes first.
  BlockTable tn;
  bm.admit(tn, 4);  // two blocks, both from the free list
  EXPECT_TRUE(evicted.empty());
  bm.grow(tn, 6, copies);  // third block: evicts A2
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].first, a2);
  bm.grow(tn, 8, copies);  // then B2
  ASSERT_EQ(evicted.size(), 2u);
  EXPECT_EQ(evicted[1].first, b2);
  EXPECT_EQ(match(bm, p).size(), 2u);  // the shared prefix survives its leaves
  bm.grow(tn, 10, copies);  // then P1, a leaf now; P0 last
  EXPECT_EQ(evicted[2].first, p1);
  EXPECT_EQ(match(bm, p).size(), 1u);
  EXPECT_EQ(bm.counters().evictions, 3);
  (void)p0;
  bm.release(tn);
}

// Turning caching off forgets every cached block and gives them back as free.
TEST(PrefixCache, TurningOffDropsTheCache) {
  BlockManager bm(4, 2, 2, 0);
  bm.set_prefix_caching(true);
  BlockTable t = run(bm, {1, 2, 3, 4});
  bm.release(t);
  EXPECT_EQ(bm.num_evictable_blocks(), 2);
  bm.set_prefix_caching(false);
  EXPECT_EQ(bm.num_evictable_blocks(), 0);
  EXPECT_EQ(bm.num_cached_blocks(), 0);
  EXPECT_EQ(bm.num_free_blocks(), 4);
  bm.set_prefix_caching(true);
  EXPECT_EQ(match(bm, {1, 2, 3, 4}).size(), 0u);
}

// Writing into a cached block (a hit that must recompute the prompt's last position,
// which falls inside it) takes a private copy first, even with no other holder.
TEST(PrefixCache, WritingIntoACachedBlockCopiesIt) {
  BlockManager bm(6, 4, 2, 0);
  bm.set_prefix_caching(true);
  BlockTable t = run(bm, {1, 2, 3, 4, 5, 6, 7, 8});
  const int32_t last = t.blocks[1];
  bm.release(t);
  std::vector<int32_t> hit = match(bm, {1, 2, 3, 4, 5, 6, 7, 8});
  ASSERT_EQ(hit.size(), 2u);
  BlockTable u;
  bm.admit_cached(u, hit, 7);  // position 7 is computed again
  EXPECT_EQ(bm.ref_count(last), 1);
  EXPECT_TRUE(bm.can_grow(u, 8));
  std::vector<BlockCopy> copies;
  bm.grow(u, 8, copies);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, last);
  EXPECT_NE(u.blocks[1], last);
  EXPECT_TRUE(bm.is_cached(last));
  EXPECT_EQ(bm.ref_count(last), 0);  // back in the LRU list, intact
  EXPECT_EQ(bm.num_evictable_blocks(), 1);
  bm.release(u);
}
