// Expert placement and EPLB's greedy rebalance (model/eplb.h): invariants every placement
// keeps, and that a skewed load ends more even than the contiguous start.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "model/eplb.h"
#include "model/expert_parallel.h"

namespace gannet::model {
namespace {

// Every expert has a replica; no slot index is out of range; a rank holds an expert at most once.
void check_valid(const ExpertPlacement& p) {
  ASSERT_EQ(int64_t(p.slot_expert.size()), p.ranks * p.slots);
  for (int64_t e = 0; e < p.n_experts; ++e) {
    ASSERT_FALSE(p.replicas[size_t(e)].empty()) << "expert " << e;
    std::set<int> ranks;
    for (int32_t g : p.replicas[size_t(e)]) {
      EXPECT_EQ(p.slot_expert[size_t(g)], e);
      EXPECT_TRUE(ranks.insert(p.rank_of(g)).second) << "expert " << e << " twice on rank " << p.rank_of(g);
    }
  }
}

TEST(Eplb, InitialPlacementIsContiguousShares) {
  const ExpertPlacement p = initial_placement(10, 4, 1);
  EXPECT_EQ(p.slots, 4);  // ceil(10 / 4) + 1
  check_valid(p);
  // Rank r: experts [10 r / 4, 10 (r + 1) / 4) = [0, 2), [2, 5), [5, 7), [7, 10).
  const int owner[10] = {0, 0, 1, 1, 1, 2, 2, 3, 3, 3};
  for (int64_t e = 0; e < 10; ++e) {
    ASSERT_EQ(p.replicas[size_t(e)].size(), 1u);
    EXPECT_EQ(p.rank_of(p.replicas[size_t(e)][0]), owner[e]) << e;
  }
  EXPECT_EQ(std::count(p.slot_expert.begin(), p.slot_expert.end(), -1), 6);
  // Every rank holds some experts even when E / N rounds badly (8 experts, 6 ranks).
  const ExpertPlacement q = initial_placement(8, 6, 0);
  check_valid(q);
  for (int r = 0; r < 6; ++r)
    EXPECT_GT(std::count_if(q.slot_expert.begin() + r * q.slots, q.slot_expert.begin() + (r + 1) * q.slots,
                            [](int32_t e) { return e >= 0; }),
              0)
        << "rank " << r;
  EXPECT_THROW(slots_per_rank(8, 0, 0), Error);
  EXPECT_THROW(slots_per_rank(8, 2, -1), Error);
}

TEST(Eplb, RebalanceReplicatesHotExpertsAndEvensTheRanks) {
  const int64_t E = 16;
  const int N = 4;
  const ExpertPlacement start = initial_placement(E, N, 2);
  std::vector<int64_t> load(E);
  for (int64_t e = 0; e < E; ++e) load[size_t(e)] = e < 2 ? 1000 : 10 + e;  // two hot experts on rank 0
  const ExpertPlacement p = rebalance(load, start);
  check_valid(p);
  EXPECT_EQ(p.replicas[0].size(), size_t(N));  // as many copies as ranks, no more
  EXPECT_EQ(p.replicas[1].size(), size_t(N));
  const double before = max_over_mean(rank_loads(load, start));
  const double after = max_over_mean(rank_loads(load, p));
  EXPECT_GT(before, 2.5);
  EXPECT_LT(after, 1.1);
  // A pure function of its inputs: the same placement again (every rank computes it).
  EXPECT_EQ(rebalance(load, start).slot_expert, p.slot_expert);
}

TEST(Eplb, WithoutSpareSlotsExpertsMoveAndKeptOnesStayPut) {
  const int64_t E = 8;
  const ExpertPlacement start = initial_placement(E, 2, 0);  // 0-3 on rank 0, 4-7 on rank 1
  const std::vector<int64_t> load = {100, 90, 80, 70, 1, 1, 1, 1};
  const ExpertPlacement p = rebalance(load, start);
  check_valid(p);
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(p.replicas[size_t(e)].size(), 1u);
  const std::vector<double> r = rank_loads(load, p);
  EXPECT_LT(max_over_mean(r), max_over_mean(rank_loads(load, start)));
  EXPECT_NEAR(r[0], r[1], 20.0);
  // An expert that stays on its rank keeps its slot (no bytes move for it).
  for (int64_t g = 0; g < 8; ++g) {
    const int32_t e = p.slot_expert[size_t(g)];
    for (int32_t og : start.replicas[size_t(e)])
      if (start.rank_of(og) == p.rank_of(int32_t(g))) {
        EXPECT_EQ(og, g) << "expert " << e;
      }
  }
}

TEST(Eplb, ZeroLoadChangesNothingAndMaxOverMean) {
  const ExpertPlacement start = initial_placement(6, 3, 1);
  const ExpertPlacement p = rebalance(std::vector<int64_t>(6, 0), start);
  check_valid(p);
  for (int64_t e = 0; e < 6; ++e) EXPECT_EQ(p.replicas[size_t(e)].size(), 1u);  // no load: no copies
  // No load at all (a window of replay-only forwards): every rank still gets experts.
  const ExpertPlacement q = rebalance(std::vector<int64_t>(8, 0), initial_placement(8, 4, 1));
  check_valid(q);
  for (int r = 0; r < 4; ++r)
    EXPECT_GT(std::count_if(q.slot_expert.begin() + r * q.slots, q.slot_expert.begin() + (r + 1) * q.slots,
                            [](int32_t e) { return e >= 0; }),
              0)
        << "rank " << r;
  EXPECT_EQ(max_over_mean({}), 0.0);
  EXPECT_EQ(max_over_mean({0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(max_over_mean({1, 3}), 1.5);
}

TEST(ExpertParallel, TensorNamesOfRoutedExperts) {
  EXPECT_EQ(routed_expert_of_tensor("layers.3.ffn.experts.17.w1.weight"), 17);
  EXPECT_EQ(routed_expert_of_tensor("layers.3.ffn.experts.17.w1.scale"), 17);
  EXPECT_EQ(routed_expert_of_tensor("layers.3.ffn.shared_experts.w1.weight"), -1);
  EXPECT_EQ(routed_expert_of_tensor("layers.3.ffn.gate.weight"), -1);
  EXPECT_EQ(routed_expert_of_tensor("mtp.0.ffn.experts.2.w1.weight"), -1);  // the drafter's stay whole
  EXPECT_EQ(routed_expert_of_tensor("layers.0.ffn.experts.x.w1"), -1);
}

TEST(ExpertParallel, RefusesMoreRanksThanExperts) {
  EXPECT_THROW(ExpertParallel(0, 4, 3, 1, {}), Error);
  EXPECT_THROW(ExpertParallel(2, 2, 8, 1, {}), Error);
  ExpertParallelOptions o;
  o.eplb_interval = -1;
  EXPECT_THROW(ExpertParallel(0, 2, 8, 1, o), Error);
  const ExpertParallel ep(1, 2, 8, 2, {});
  EXPECT_FALSE(ep.loads_expert(0));
  EXPECT_TRUE(ep.loads_expert(4));
}

}  // namespace
}  // namespace gannet::model
