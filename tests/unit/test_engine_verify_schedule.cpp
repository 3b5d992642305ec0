// choose_verify_depths (engine/verify_schedule.h) against cases worked by hand.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/verify_schedule.h"

using gannet::engine::choose_verify_depths;

TEST(VerifySchedule, FlatProfileVerifiesEverythingWithAnyChance) {
  // Steps cost the same whatever their size: every draft with a > 0 adds expected tokens.
  const std::vector<double> flat(16, 1.0);
  EXPECT_EQ(choose_verify_depths({{0.9, 0.5, 0.0, 0.7}, {0.2}}, flat), (std::vector<int>{2, 1}));
}

TEST(VerifySchedule, LinearProfileKeepsOnlyLikelyDrafts) {
  // t(B) = B: the rate tau / B rises only while the next pair's a beats the running mean.
  // One request, conf {0.9, 0.9, 0.5}: a = 0.9, 0.81, 0.405.
  //   B=1: 1/1 = 1.    + 0.9: 1.9/2 = 0.95 < 1: stop. Depth 0.
  std::vector<double> linear;
  for (int b = 1; b <= 16; ++b) linear.push_back(double(b));
  EXPECT_EQ(choose_verify_depths({{0.9, 0.9, 0.5}}, linear), (std::vector<int>{0}));
  // t(B) = 1 + 0.1 (B - 1): a = 0.9 -> 1.9 / 1.1 = 1.727 > 1; a = 0.81 -> 2.71 / 1.2 = 2.258;
  // a = 0.405 -> 3.115 / 1.3 = 2.396 > 2.258: all three.
  std::vector<double> cheap;
  for (int b = 1; b <= 16; ++b) cheap.push_back(1.0 + 0.1 * (b - 1));
  EXPECT_EQ(choose_verify_depths({{0.9, 0.9, 0.5}}, cheap), (std::vector<int>{3}));
  // t(B) = 1 + 0.5 (B - 1): 0.9 -> 1.9 / 1.5 = 1.267 > 1; 0.81 -> 2.71 / 2 = 1.355 > 1.267;
  // 0.405 -> 3.115 / 2.5 = 1.246 < 1.355: depth 2.
  std::vector<double> mid;
  for (int b = 1; b <= 16; ++b) mid.push_back(1.0 + 0.5 * (b - 1));
  EXPECT_EQ(choose_verify_depths({{0.9, 0.9, 0.5}}, mid), (std::vector<int>{2}));
}

TEST(VerifySchedule, PairsAcrossRequestsGoByProbability) {
  // Two requests, B starts at 2 (their last tokens). t = {_, 1.0, 1.1, 1.2, 1.3, 2.0, ...}.
  // a: r0 = {0.5, 0.25}, r1 = {0.8, 0.4}. Order: (r1,1) 0.8, (r0,1) 0.5, (r1,2) 0.4, (r0,2) 0.25.
  //   B=2: 2/1.0 = 2.  +0.8: 2.8/1.1 = 2.545.  +0.5: 3.3/1.2 = 2.75.  +0.4: 3.7/1.3 = 2.846.
  //   +0.25: 3.95/2.0 = 1.975: stop. Depths: r0 = 1, r1 = 2.
  const std::vector<double> t = {0.9, 1.0, 1.1, 1.2, 1.3, 2.0, 2.1};
  EXPECT_EQ(choose_verify_depths({{0.5, 0.5}, {0.8, 0.5}}, t), (std::vector<int>{1, 2}));
  // Equal probabilities: the lower request first. t(3) = 1 lets one draft in (2.5 / 1 > 2),
  // t(4) = 10 stops the second (3 / 10 < 2.5).
  const std::vector<double> t2 = {1.0, 1.0, 1.0, 10.0, 10.0};
  EXPECT_EQ(choose_verify_depths({{0.5}, {0.5}}, t2), (std::vector<int>{1, 0}));
  const std::vector<double> t3 = {1.0, 1.0, 1.0, 1.0, 10.0};
  EXPECT_EQ(choose_verify_depths({{0.5}, {0.5}}, t3), (std::vector<int>{1, 1}));
  // t(3) = 10: 2.5 / 10 < 2, nothing added.
  const std::vector<double> t4 = {1.0, 1.0, 10.0, 10.0};
  EXPECT_EQ(choose_verify_depths({{0.5}, {0.5}}, t4), (std::vector<int>{0, 0}));
}

TEST(VerifySchedule, ProfileBoundsAndBadInput) {
  // A profile of 2 token counts: one request may add one draft at most.
  EXPECT_EQ(choose_verify_depths({{1.0, 1.0, 1.0}}, {1.0, 1.0}), (std::vector<int>{1}));
  EXPECT_TRUE(choose_verify_depths({}, {1.0}).empty());
  EXPECT_THROW(choose_verify_depths({{0.5}, {0.5}}, {1.0}), gannet::Error);
  EXPECT_THROW(choose_verify_depths({{1.5}}, {1.0, 1.0}), gannet::Error);
  EXPECT_THROW(choose_verify_depths({{0.5}}, {1.0, 0.0}), gannet::Error);
}
