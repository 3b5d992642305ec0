// CacheEngine commits its whole arena at construction (every page resident), so an
// impossible budget fails at start-up, not when the last block is first written.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "cache/cache_engine.h"

using namespace gannet;

TEST(CacheEngine, ArenaIsResidentAfterConstruction) {
  model::CacheSpec spec;
  spec.num_layers = 3;
  spec.num_kv_heads = 2;
  spec.head_dim = 64;
  spec.kv_dtype = DType::F32;
  cache::CacheEngine c(spec, /*num_blocks=*/64, /*block_size=*/16, /*num_state_slots=*/4);
  ASSERT_EQ(c.bytes(), uint64_t(3 * 2 * 64 * 16 * 2 * 64 * 4));
  const long page = sysconf(_SC_PAGESIZE);
  const auto* base = reinterpret_cast<const uint8_t*>(c.views().layers[0].k);
  std::vector<unsigned char> resident(size_t((c.bytes() + uint64_t(page) - 1) / uint64_t(page)));
  ASSERT_EQ(mincore(const_cast<uint8_t*>(base), c.bytes(), resident.data()), 0);
  size_t missing = 0;
  for (unsigned char r : resident) missing += (r & 1) ? 0 : 1;
  EXPECT_EQ(missing, 0u) << "of " << resident.size() << " pages";
}
