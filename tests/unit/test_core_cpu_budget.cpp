// usable_cpus(): the affinity mask and the cgroup quota bound the default thread count.
#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

#include "core/cpu_budget.h"

using namespace gannet;

TEST(CpuBudget, CgroupV2CpuMax) {
  EXPECT_FALSE(cpus_from_cgroup_v2_cpu_max("max 100000\n").has_value());
  EXPECT_EQ(cpus_from_cgroup_v2_cpu_max("200000 100000\n"), 2);
  EXPECT_EQ(cpus_from_cgroup_v2_cpu_max("150000 100000"), 2);  // 1.5 CPUs: round up
  EXPECT_EQ(cpus_from_cgroup_v2_cpu_max("50000 100000"), 1);
  EXPECT_FALSE(cpus_from_cgroup_v2_cpu_max("").has_value());
  EXPECT_FALSE(cpus_from_cgroup_v2_cpu_max("garbage").has_value());
}

// Narrowing the affinity mask to one CPU narrows usable_cpus() to one; restoring it
// restores the count.
TEST(CpuBudget, FollowsTheAffinityMask) {
  cpu_set_t old;
  CPU_ZERO(&old);
  ASSERT_EQ(sched_getaffinity(0, sizeof old, &old), 0);
  const int before = usable_cpus();
  EXPECT_GE(before, 1);
  EXPECT_LE(before, CPU_COUNT(&old));
  EXPECT_EQ(affinity_cpus(), CPU_COUNT(&old));
  int first = 0;
  while (!CPU_ISSET(first, &old)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(affinity_cpus(), 1);
  EXPECT_EQ(usable_cpus(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof old, &old), 0);
  EXPECT_EQ(usable_cpus(), before);
}
