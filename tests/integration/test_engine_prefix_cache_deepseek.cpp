// Prefix caching on DeepSeek-V4.1 (tests/golden/deepseek-v41-tiny: 6 layers, an 8-token
// window, ratio-2 and ratio-1 KV sources, Engram) and DeepSeek-V4 (deepseek-v4-tiny: 4
// layers, an 8-token window, overlapping ratio-4 groups with an indexer, ratio 8). Cached
// blocks hold the compressed entries and index keys; the per-sequence state (window rings,
// open groups, V4.1's Engram history) is rebuilt by recomputing the positions before the
// hit that its windows can reach (Model::prefix_replay_start). A hit is then bit-identical
// to a full computation: token ids and logprobs, sequentially, batched and chunked (replays
// split across steps), async or not, after preemption, from the disk tier, and on V4.1 with
// decoder bounded replay on. Hits and replayed positions are counted, so none of it can
// pass by missing the cache. With DSpark drafting, hits draft exactly as misses do. State
// snapshots (a prompt's state saved after its last full block, copied by a later hit
// instead of replaying) give the same results, for agent turns under bounded replay and
// with DSpark too.
// labels: exact sanitize
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include "core/error.h"
#include "engine/engine.h"

using namespace gannet;

namespace {

std::string model_dir(const std::string& golden) {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  return (std::filesystem::path(src ? src : ".") / "tests" / "golden" / golden).string();
}

const char* const kV41 = "deepseek-v41-tiny";

struct Case {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct Result {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> lps;
  int64_t cached = 0;
  // Speculative decoding: drafts, acceptances and the drafter's confidences (summed per
  // calibration bin), which depend on the drafter's state.
  std::vector<double> spec;
};

// 14 requests: 10 share a 150-token prefix (9 full 16-token blocks) with suffixes of
// 1..40 tokens, 2 repeat earlier ones, 2 are unrelated; one has n = 2 samples.
std::vector<Case> make_cases() {
  std::mt19937 rng(5);
  auto tokens = [&](int n) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(int32_t(rng() % 512));
    return v;
  };
  const std::vector<int32_t> shared = tokens(150);
  std::vector<Case> cases;
  auto add = [&](std::vector<int32_t> p, int i) {
    Case c;
    c.prompt = std::move(p);
    c.params.max_tokens = 5 + i % 4;
    c.params.logprobs = 2;
    c.params.ignore_eos = true;
    if (i % 2) {
      c.params.temperature = 1.0;
      c.params.seed = 70 + uint64_t(i);
    } else {
      c.params.temperature = 0;
    }
    cases.push_back(c);
  };
  for (int i = 0; i < 10; ++i) {
    std::vector<int32_t> p = shared;
    for (int32_t t : tokens(1 + int(rng() % 40))) p.push_back(t);
    add(p, i);
  }
  add(cases[2].prompt, 10);
  add(cases[5].prompt, 11);
  add(tokens(120), 12);
  add(tokens(30), 13);
  cases[7].params.n = 2;
  return cases;
}

EngineArgs args(const std::string& golden, bool caching, bool async, int64_t budget = 2048, int64_t keep = -1) {
  EngineArgs a;
  a.model = model_dir(golden);
  a.quiet = true;
  a.threads = 2;
  a.max_num_seqs = 32;
  a.kv_cache_memory = 16ull << 20;
  a.block_size = 16;
  a.async_scheduling = async;
  a.max_num_batched_tokens = budget;
  a.enable_prefix_caching = caching ? 1 : 0;
  // Hits replay unless a test turns state snapshots on (or a shared prefix ending on a
  // prompt's last full block would restore its snapshot instead).
  if (caching) a.prefix_state_snapshots = 0;
  if (keep > 0) a.yoco_keep_tokens = keep;
  else if (golden == kV41) a.yoco_replay = 0;  // the full prefill unless a test asks for bounded replay
  return a;
}

std::map<int, Result> run(engine::Engine& e, const std::vector<Case>& cases, const std::vector<int>& which) {
  for (int i : which) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
  std::map<int, Result> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) {
        Result r;
        for (const auto& c : o.outputs) {
          r.ids.push_back(c.token_ids);
          std::vector<float> lp;
          for (const auto& p : c.logprobs) {
            lp.push_back(p.logprob);
            for (const auto& t : p.top) lp.push_back(t.logprob), lp.push_back(float(t.id));
          }
          r.lps.push_back(lp);
        }
        r.cached = o.metrics.cached_tokens;
        const RequestMetrics& m = o.metrics;
        r.spec = {double(m.spec_steps), double(m.spec_drafted), double(m.spec_accepted)};
        r.spec.insert(r.spec.end(), m.spec_calib_conf.begin(), m.spec_calib_conf.end());
        out[std::stoi(o.request_id.substr(1))] = r;
      }
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  EXPECT_EQ(e.block_manager().num_free_slots(), e.block_manager().num_state_slots());
  EXPECT_EQ(e.num_executor_rows(), 0u);
  return out;
}

std::map<int, Result> run_each(engine::Engine& e, const std::vector<Case>& cases) {
  std::map<int, Result> out;
  for (int i = 0; i < int(cases.size()); ++i) out[i] = run(e, cases, {i}).at(i);
  return out;
}

std::vector<int> all(size_t n) {
  std::vector<int> v;
  for (size_t i = 0; i < n; ++i) v.push_back(int(i));
  return v;
}

void expect_same(const std::map<int, Result>& ref, const std::map<int, Result>& got, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  for (auto& [i, r] : ref) {
    EXPECT_EQ(r.ids, got.at(i).ids) << what << ": request " << i;
    EXPECT_EQ(r.lps, got.at(i).lps) << what << ": request " << i;
  }
}

// Without caching, each request alone: every position computed.
const std::map<int, Result>& reference(const std::string& golden, int64_t keep) {
  static std::map<std::pair<std::string, int64_t>, std::map<int, Result>> refs;
  auto it = refs.find({golden, keep});
  if (it == refs.end()) {
    engine::Engine e(args(golden, false, false, 2048, keep));
    it = refs.emplace(std::make_pair(golden, keep), run_each(e, make_cases())).first;
  }
  return it->second;
}

}  // namespace

class EnginePrefixCache : public ::testing::TestWithParam<std::string> {};

TEST_P(EnginePrefixCache, SequentialHitsEqualFullComputation) {
  const auto cases = make_cases();
  for (auto [async, snapshots] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
    EngineArgs a = args(GetParam(), true, async);
    if (snapshots) a.prefix_state_snapshots = 4;
    engine::Engine e(a);
    ASSERT_TRUE(e.scheduler().config().prefix_caching);
    auto got = run_each(e, cases);
    expect_same(reference(GetParam(), -1), got,
                std::string("sequential") + (async ? ", async" : "") + (snapshots ? ", snapshots" : ""));
    const auto& st = e.scheduler().prefix_stats();
    EXPECT_GT(st.hit_tokens, 500);
    if (snapshots) {  // repeated prompts, and requests 1.. on request 0's, restore a snapshot
      EXPECT_GT(st.snapshot_restores, 2);
    } else {
      EXPECT_GT(st.replayed_tokens, 0) << "the state is rebuilt by replaying cached positions";
      EXPECT_EQ(st.snapshot_saves, 0);
    }
    EXPECT_EQ(got[0].cached, 0);
    for (int i = 1; i < 10; ++i) EXPECT_GT(got[i].cached, 0) << "request " << i;
    EXPECT_EQ(got[13].cached, 0) << "30 tokens: too short a hit for its replay";
  }
}

// One batch with small chunk budgets: admissions find blocks earlier ones wrote, and
// replays are split across steps and across the 8-token window.
TEST_P(EnginePrefixCache, ChunkedBatchEqualsFullComputation) {
  const auto cases = make_cases();
  for (bool async : {false, true})
    for (int64_t budget : {int64_t(2048), int64_t(7), int64_t(33)}) {
      EngineArgs a = args(GetParam(), true, async, budget);
      if (budget == 33) a.prefix_state_snapshots = 4;  // saved and restored while others run
      engine::Engine e(a);
      auto got = run(e, cases, all(cases.size()));
      expect_same(reference(GetParam(), -1), got, "batch, budget " + std::to_string(budget) + (async ? ", async" : ""));
      if (budget < 2048) {
        EXPECT_GT(e.scheduler().prefix_stats().hit_tokens, 0) << budget;
      }
    }
}

// Decoder bounded replay on (the layers after the last KV source run only on the last 20
// prompt positions): hits equal the bounded computation without caching.
TEST(EnginePrefixCacheV41, HitsUnderBoundedReplayEqualItsFullComputation) {
  const auto cases = make_cases();
  for (bool async : {false, true}) {
    engine::Engine e(args(kV41, true, async, 2048, 20));
    auto got = run_each(e, cases);
    expect_same(reference(kV41, 20), got, async ? "bounded replay, async" : "bounded replay");
    EXPECT_GT(e.scheduler().prefix_stats().hit_tokens, 500);
  }
}

// A KV budget far below the batch's needs: preempted sequences come back with hits.
TEST_P(EnginePrefixCache, HitsAfterPreemptionEqualFullComputation) {
  const auto cases = make_cases();
  EngineArgs probe = args(GetParam(), true, false);
  engine::Engine p(probe);
  const uint64_t per_block = p.model().cache_spec().bytes_per_block(16);
  const uint64_t state = uint64_t(p.model().cache_spec().state_bytes_per_seq) * 32;
  for (bool async : {false, true}) {
    EngineArgs a = args(GetParam(), true, async, 64);
    a.kv_cache_memory = state + 14 * per_block;  // one request needs up to 13 blocks
    engine::Engine e(a);
    auto got = run(e, cases, all(cases.size()));
    expect_same(reference(GetParam(), -1), got, async ? "preempted, async" : "preempted");
    EXPECT_GT(e.scheduler().num_preemptions(), 0);
    EXPECT_GT(e.scheduler().prefix_stats().hit_tokens, 0);
  }
}

// The disk tier holds V4.1 blocks too: a restart starts with hits, exactly.
TEST_P(EnginePrefixCache, DiskTierRestartEqualsFullComputation) {
  const auto cases = make_cases();
  const std::string dir = ::testing::TempDir() + "gannet_" + GetParam() + "_prefix_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  {
    EngineArgs a = args(GetParam(), true, false);
    a.prefix_cache_dir = dir;
    engine::Engine e(a);
    run_each(e, cases);
  }
  EngineArgs a = args(GetParam(), true, true);
  a.prefix_cache_dir = dir;
  engine::Engine e(a);
  EXPECT_GT(e.disk_tier()->stats().files, 10);
  auto got = run_each(e, cases);
  expect_same(reference(GetParam(), -1), got, "after restart");
  EXPECT_GT(got[0].cached, 0) << "the previous run's blocks, from disk";
  EXPECT_GT(e.scheduler().prefix_stats().disk_hit_blocks, 0);
  std::filesystem::remove_all(dir);
}

// DSpark with prefix caching: the drafter's rings are seeded from the rows a hit replays
// (exact from a window before the hit, as its target layers' inputs are), so a hit
// drafts exactly what a miss drafts: the same tokens and logprobs, and the same drafts,
// acceptances and confidences, one by one, or batched and chunked with async scheduling.
TEST(EnginePrefixCacheV41, DsparkHitsDraftAsMisses) {
  const auto cases = make_cases();
  for (int64_t keep : {int64_t(-1), int64_t(20)}) {
    auto dspark = [&](bool caching, bool async, int64_t budget) {
      EngineArgs a = args(kV41, caching, async, budget, keep);
      a.speculative = "dspark";
      return a;
    };
    std::map<int, Result> ref;
    {
      engine::Engine e(dspark(false, false, 2048));
      ref = run_each(e, cases);
    }
    double drafted = 0;
    for (auto& [i, r] : ref) drafted += r.spec.at(1);
    ASSERT_GT(drafted, 20) << "the reference must draft";
    // One by one in lock-step, and a chunked batch planned ahead (async).
    for (auto [async, budget] : {std::pair{false, int64_t(2048)}, std::pair{true, int64_t(33)}}) {
      const std::string what = std::string("dspark, keep ") + std::to_string(keep) + ", budget " +
                               std::to_string(budget) + (async ? ", async" : "");
      engine::Engine e(dspark(true, async, budget));
      ASSERT_TRUE(e.scheduler().config().prefix_caching) << what;
      auto got = budget == 2048 ? run_each(e, cases) : run(e, cases, all(cases.size()));
      expect_same(ref, got, what);
      if (budget == 2048) {  // one at a time: the drafter saw what the reference's saw
        for (auto& [i, r] : ref) EXPECT_EQ(r.spec, got.at(i).spec) << what << ": request " << i;
      }
      EXPECT_GT(e.scheduler().prefix_stats().hit_tokens, 300) << what;
    }
  }
}

// Agent turns: each turn's prompt is the previous one's, its 20 outputs and 30 new
// tokens. A prompt's state after its last full block is saved (a state snapshot), and so
// is the state after each block boundary its decoding crosses (one kept per sequence);
// the next turn's hit restores the last one instead of replaying: nothing cached is
// computed again, and the tokens and logprobs (and with DSpark, one by one, the drafts,
// acceptances and confidences) equal those of every turn computed in full without
// caching. DSpark's decodes are speculative rows, which take no snapshot: its turns
// restore the previous prompt's. Snapshots off, the same turns replay.
void agent_turns(const std::string& golden, int64_t keep, bool dspark) {
  std::mt19937 rng(11);
  auto tokens = [&](int n) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(int32_t(rng() % 512));
    return v;
  };
  std::vector<int32_t> first = tokens(100);
  std::vector<std::vector<int32_t>> extra = {tokens(30), tokens(30), tokens(30)};
  auto make = [&](int64_t snapshots, bool caching, bool async) {
    EngineArgs a = args(golden, caching, async, 2048, keep);
    if (caching) a.prefix_state_snapshots = snapshots;
    if (dspark) a.speculative = "dspark";
    return a;
  };
  // The turns, prompts from the caching engine's outputs.
  auto turns = [&](engine::Engine& e, std::vector<Case>& cases) {
    std::map<int, Result> got;
    std::vector<int32_t> prompt = first;
    for (int t = 0; t < 4; ++t) {
      Case c;
      c.prompt = prompt;
      c.params.max_tokens = 20;
      c.params.logprobs = 2;
      c.params.ignore_eos = true;
      c.params.temperature = t % 2 ? 1.0 : 0;
      c.params.seed = 90 + uint64_t(t);
      cases.push_back(c);
      got[t] = run(e, cases, {t}).at(t);
      if (t < 3) {
        prompt.insert(prompt.end(), got[t].ids[0].begin(), got[t].ids[0].end());
        prompt.insert(prompt.end(), extra[size_t(t)].begin(), extra[size_t(t)].end());
      }
    }
    return got;
  };
  for (bool async : {false, true}) {
    const std::string what = golden + ", keep " + std::to_string(keep) + (dspark ? ", dspark" : "") + (async ? ", async" : "");
    std::vector<Case> cases;
    engine::Engine e(make(-1, true, async));
    ASSERT_GT(e.scheduler().config().num_snapshots, 0) << what;
    auto got = turns(e, cases);
    const auto& st = e.scheduler().prefix_stats();
    EXPECT_EQ(st.snapshot_restores, 3) << what;
    EXPECT_EQ(st.replayed_tokens, 0) << what;
    // Each prompt's, and without DSpark at least one per turn's decoding (19 positions
    // cross a 16-token block boundary), the last of which the next turn restores.
    EXPECT_GE(st.snapshot_saves, dspark ? 4 : 8) << what;
    for (int t = 1; t < 4; ++t) {
      const int64_t len = int64_t(cases[size_t(t - 1)].prompt.size());
      EXPECT_EQ(got[t].cached, (dspark ? len : len + 19) / 16 * 16) << what << ": turn " << t;
    }
    engine::Engine full(make(0, false, false));
    auto ref = run_each(full, cases);
    expect_same(ref, got, what);
    if (dspark && !async) {
      for (auto& [i, r] : ref) EXPECT_EQ(r.spec, got.at(i).spec) << what << ": turn " << i;
    }
    // Snapshots off: the same turns replay, with the same results.
    std::vector<Case> again;
    engine::Engine off(make(0, true, async));
    EXPECT_EQ(off.scheduler().config().num_snapshots, 0);
    auto replayed = turns(off, again);
    expect_same(ref, replayed, what + ", snapshots off");
    EXPECT_GT(off.scheduler().prefix_stats().replayed_tokens, 0) << what;
    EXPECT_EQ(off.scheduler().prefix_stats().snapshot_saves, 0) << what;
  }
}

TEST_P(EnginePrefixCache, AgentTurnsRestoreStateSnapshots) { agent_turns(GetParam(), -1, false); }

TEST(EnginePrefixCacheV41, StateSnapshotsUnderBoundedReplayAndDspark) {
  agent_turns(kV41, 20, false);
  agent_turns(kV41, -1, true);
}

INSTANTIATE_TEST_SUITE_P(DeepSeek, EnginePrefixCache, ::testing::Values(std::string(kV41), std::string("deepseek-v4-tiny")),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == kV41 ? std::string("V41") : std::string("V4");
                         });
