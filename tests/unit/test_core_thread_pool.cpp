// ThreadPool: ranges cover [0, n) exactly once, for n below and above the thread count,
// with grain alignment; exceptions from any thread reach the caller and the pool stays usable.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

using gannet::ThreadPool;

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 4, 7, 64, 1000}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
          ASSERT_LT(t, threads);
          if (b % grain != 0) ADD_FAILURE() << "range start " << b << " not aligned to " << grain;
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        }, grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n " << n << " i " << i;
      }
    }
  }
}

TEST(ThreadPool, ExceptionsReachTheCallerAndThePoolKeepsWorking) {
  ThreadPool pool(2);
  for (int thrower : {0, 1}) {
    EXPECT_THROW(pool.parallel_for(100, [&](int64_t, int64_t, int t) {
      if (t == thrower) throw std::runtime_error("boom");
    }), std::runtime_error);
  }
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, RejectsZeroThreads) { EXPECT_THROW(ThreadPool(0), gannet::Error); }
