// CacheEngine commits its whole arena at construction (every page resident), so an
// impossible budget fails at start-up, not when the last block is first written.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "cache/cache_engine.h"
#include "core/error.h"

using namespace gannet;

TEST(CacheEngine, ArenaIsResidentAfterConstruction) {
  kernels::CacheSpec spec;
  spec.groups.push_back({"k", 3, 2 * 64 * 4, 1, kernels::CacheFormat::kF32});
  spec.groups.push_back({"v", 3, 2 * 64 * 4, 1, kernels::CacheFormat::kF32});
  spec.groups.push_back({"pairs", 2, 96, 2, kernels::CacheFormat::kMixed});
  spec.state_bytes_per_seq = 1024;
  cache::CacheEngine c(spec, /*num_blocks=*/64, /*block_size=*/16, /*num_state_slots=*/4);
  ASSERT_EQ(c.bytes(), uint64_t(3 * 2 * 64 * 16 * 2 * 64 * 4 + 2 * 64 * 8 * 96 + 4 * 1024));
  const long page = sysconf(_SC_PAGESIZE);
  const auto* base = c.views().groups[0][0].base;
  std::vector<unsigned char> resident(size_t((c.bytes() + uint64_t(page) - 1) / uint64_t(page)));
  ASSERT_EQ(mincore(const_cast<uint8_t*>(base), c.bytes(), resident.data()), 0);
  size_t missing = 0;
  for (unsigned char r : resident) missing += (r & 1) ? 0 : 1;
  EXPECT_EQ(missing, 0u) << "of " << resident.size() << " pages";
}

// The views tile the arena without overlap: every group's every layer, then the state
// slots; an entry of a 2-token group sits at block_table[pos / block_size], slot
// (pos % block_size) / 2.
TEST(CacheEngine, GroupViewsTileTheArena) {
  kernels::CacheSpec spec;
  spec.groups.push_back({"k", 2, 32, 1, kernels::CacheFormat::kF32});
  spec.groups.push_back({"pairs", 3, 48, 2, kernels::CacheFormat::kMixed});
  spec.state_bytes_per_seq = 64;
  cache::CacheEngine c(spec, 5, 4, 3);
  const kernels::CacheViews& v = c.views();
  ASSERT_EQ(v.groups.size(), 2u);
  ASSERT_EQ(v.groups[1].size(), 3u);
  EXPECT_EQ(v.groups[0][1].base, v.groups[0][0].base + 5 * 4 * 32);
  EXPECT_EQ(v.groups[1][0].base, v.groups[0][1].base + 5 * 4 * 32);
  EXPECT_EQ(v.groups[1][0].block_stride, 2 * 48);
  EXPECT_EQ(v.state, v.groups[1][2].base + 5 * 2 * 48);
  EXPECT_EQ(v.state_slot(2) + 64, v.groups[0][0].base + c.bytes());
  const int32_t table[] = {4, 0, 2};
  EXPECT_EQ(v.groups[1][1].entry(table, 0), v.groups[1][1].base + 4 * 96);
  EXPECT_EQ(v.groups[1][1].entry(table, 3), v.groups[1][1].base + 0 * 96 + 48);  // position 6: block 1, slot 1
  EXPECT_EQ(v.groups[1][1].entry(table, 4), v.groups[1][1].base + 2 * 96);
  EXPECT_THROW(cache::CacheEngine(spec, 5, 3, 1), Error);  // a 3-token block cannot hold 2-token entries
}

// Entries longer than a block (DeepSeek-V4's ratio-128 compression over 64-token blocks)
// take one slot in the block of their last position.
TEST(CacheEngine, EntriesLongerThanABlock) {
  kernels::CacheSpec spec;
  spec.groups.push_back({"long", 1, 16, 8, kernels::CacheFormat::kF32});
  EXPECT_EQ(spec.bytes_per_block(4), 16u);
  cache::CacheEngine c(spec, 6, 4, 1);
  const kernels::CacheArena& a = c.views().groups[0][0];
  const int32_t table[] = {5, 3, 1, 0};
  EXPECT_EQ(a.entry(table, 0), a.base + 3 * 16);  // positions 0..7: block of position 7 (table[1] = 3)
  EXPECT_EQ(a.entry(table, 1), a.base + 0 * 16);  // positions 8..15: table[3] = 0
  EXPECT_THROW(cache::CacheEngine(spec, 6, 3, 1), Error);  // 3 and 8 do not divide one another
}
