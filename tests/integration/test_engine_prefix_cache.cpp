// Prefix caching at engine level (dense model): a request served partly from cached
// blocks returns bit-identical token ids and logprobs to the same request computed in
// full, whether the hit comes from an earlier request (the same prompt twice, a shared
// system prompt run one after another), from a batch sharing a system prompt, after
// preemption, or with the whole prompt cached (its last position computed again). n > 1
// samples and prompt logprobs (which compute every position) likewise. Hits are counted,
// so none of these can pass by missing the cache. The disk tier: evicted blocks come back
// from disk, a restart finds the last run's blocks, corrupt files are dropped, another
// model's files are ignored, and the size budget holds.
// labels: exact sanitize
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "engine/engine.h"
#include "tiny_checkpoint.h"

using namespace gannet;

namespace {

struct Case {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct Result {
  std::vector<std::vector<int32_t>> ids;  // per sample
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<float> prompt_logprobs;
  int64_t cached_tokens = 0;
};

constexpr int kBlock = 16;

// 20 requests: 12 share a 70-token system prompt (4 full blocks and 6 tokens) with
// suffixes of 1..30 tokens, 2 repeat one of those exactly, 2 are 64-token prompts (whole
// blocks: a full hit recomputes the last position), 2 are unrelated, and 2 share the
// system prompt with n = 2 samples or prompt logprobs.
std::vector<Case> make_cases() {
  std::mt19937 rng(99);
  auto tokens = [&](int n) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(int32_t(2 + rng() % 120000));
    return v;
  };
  const std::vector<int32_t> system = tokens(70);
  const std::vector<int32_t> whole = tokens(64);
  std::vector<Case> cases;
  auto add = [&](std::vector<int32_t> prompt, int i) {
    Case c;
    c.prompt = std::move(prompt);
    c.params.max_tokens = 6 + i % 5;
    c.params.logprobs = 2;
    c.params.ignore_eos = true;
    if (i % 2) {
      c.params.temperature = 1.0;
      c.params.seed = 500 + uint64_t(i);
    } else {
      c.params.temperature = 0;
    }
    cases.push_back(c);
  };
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> p = system;
    for (int32_t t : tokens(1 + int(rng() % 30))) p.push_back(t);
    add(p, i);
  }
  add(cases[3].prompt, 12);
  add(cases[4].prompt, 13);
  add(whole, 14);
  add(whole, 15);
  add(tokens(40), 16);
  add(tokens(90), 17);
  std::vector<int32_t> p = system;
  for (int32_t t : tokens(9)) p.push_back(t);
  add(p, 18);
  cases.back().params.n = 2;
  add(p, 19);
  cases.back().params.prompt_logprobs = 1;
  return cases;
}

EngineArgs args(bool caching, bool async, uint64_t kv_bytes = 64ull << 20, int64_t budget = 2048) {
  EngineArgs a;
  a.model = gannet::test_support::tiny_checkpoint("llama", 3);
  a.quiet = true;
  a.threads = 2;
  a.kv_cache_memory = kv_bytes;
  a.block_size = kBlock;
  a.async_scheduling = async;
  a.max_num_batched_tokens = budget;
  a.enable_prefix_caching = caching ? 1 : 0;
  return a;
}

Result collect(const RequestOutput& o) {
  Result r;
  for (const CompletionOutput& c : o.outputs) {
    r.ids.push_back(c.token_ids);
    std::vector<float> lp;
    std::vector<int32_t> top;
    for (const PositionLogprobs& p : c.logprobs) {
      lp.push_back(p.logprob);
      for (const TokenLogprob& t : p.top) top.push_back(t.id);
    }
    r.logprobs.push_back(lp);
    r.top_ids.push_back(top);
  }
  for (const auto& p : o.prompt_logprobs) r.prompt_logprobs.push_back(p ? p->logprob : 0.0f);
  r.cached_tokens = o.metrics.cached_tokens;
  return r;
}

std::map<int, Result> run(engine::Engine& e, const std::vector<Case>& cases, const std::vector<int>& which) {
  for (int i : which) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
  std::map<int, Result> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) out[std::stoi(o.request_id.substr(1))] = collect(o);
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  EXPECT_EQ(e.block_manager().num_free_slots(), e.block_manager().num_state_slots());
  EXPECT_EQ(e.scheduler().num_deferred_releases(), 0u);
  EXPECT_EQ(e.num_executor_rows(), 0u);
  return out;
}

std::vector<int> all(size_t n) {
  std::vector<int> v;
  for (size_t i = 0; i < n; ++i) v.push_back(int(i));
  return v;
}

// Each request alone on a fresh engine without caching: computed in full.
const std::map<int, Result>& reference() {
  static const std::map<int, Result> ref = [] {
    const auto cases = make_cases();
    std::map<int, Result> out;
    engine::Engine e(args(false, false));
    for (int i = 0; i < int(cases.size()); ++i) out[i] = run(e, cases, {i}).at(i);
    return out;
  }();
  return ref;
}

void expect_same(const std::map<int, Result>& got, const std::string& what) {
  const auto& ref = reference();
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (auto& [i, g] : got) {
    const Result& r = ref.at(i);
    EXPECT_EQ(g.ids, r.ids) << what << ": request " << i;
    EXPECT_EQ(g.top_ids, r.top_ids) << what << ": request " << i;
    ASSERT_EQ(g.logprobs.size(), r.logprobs.size()) << what;
    for (size_t k = 0; k < g.logprobs.size(); ++k) {
      ASSERT_EQ(g.logprobs[k].size(), r.logprobs[k].size()) << what << ": request " << i;
      for (size_t p = 0; p < g.logprobs[k].size(); ++p)
        ASSERT_EQ(g.logprobs[k][p], r.logprobs[k][p]) << what << ": request " << i << " sample " << k << " pos " << p;
    }
    ASSERT_EQ(g.prompt_logprobs, r.prompt_logprobs) << what << ": request " << i;
  }
}

const bool kModes[] = {false, true};

}  // namespace

// One after another on one engine: every request after the first that shares a prefix
// hits it; repeats and the whole-block prompt hit all but their last position.
TEST(EnginePrefixCache, SequentialHitsEqualFullComputation) {
  const auto cases = make_cases();
  for (bool async : kModes) {
    engine::Engine e(args(true, async));
    std::map<int, Result> got;
    for (int i = 0; i < int(cases.size()); ++i) got[i] = run(e, cases, {i}).at(i);
    expect_same(got, async ? "sequential, async" : "sequential");
    for (int i = 1; i < 12; ++i) EXPECT_EQ(got[i].cached_tokens, 64) << "request " << i << ": 4 system-prompt blocks";
    EXPECT_EQ(got[0].cached_tokens, 0);
    EXPECT_EQ(got[12].cached_tokens, int64_t(cases[12].prompt.size() - 1) / kBlock * kBlock);
    EXPECT_EQ(got[15].cached_tokens, 63) << "a whole cached prompt computes its last position again";
    EXPECT_EQ(got[16].cached_tokens, 0);
    EXPECT_EQ(got[18].cached_tokens, 64);
    EXPECT_EQ(got[19].cached_tokens, 0) << "prompt logprobs need every position computed";
    EXPECT_GT(e.scheduler().prefix_stats().hit_tokens, 900);
    // The whole batch again: everything is cached now.
    auto again = run(e, cases, all(cases.size()));
    expect_same(again, async ? "repeated batch, async" : "repeated batch");
    for (int i = 0; i < 19; ++i) EXPECT_GT(again[i].cached_tokens, 0) << "request " << i;
  }
}

// One batch sharing a system prompt, prefilled in chunks so later admissions find the
// blocks earlier ones have written; with and without asynchronous scheduling.
TEST(EnginePrefixCache, BatchSharingASystemPromptEqualsFullComputation) {
  const auto cases = make_cases();
  for (bool async : kModes)
    for (int64_t budget : {int64_t(2048), int64_t(40)}) {
      engine::Engine e(args(true, async, 64ull << 20, budget));
      auto got = run(e, cases, all(cases.size()));
      expect_same(got, "batch, budget " + std::to_string(budget) + (async ? ", async" : ""));
      if (budget == 40) {
        EXPECT_GT(e.scheduler().prefix_stats().hit_tokens, 300) << "chunked admissions should hit";
      }
    }
}

// A KV budget far below what the batch needs: sequences are preempted and recomputed,
// taking their own and each other's cached blocks back (eviction runs too).
TEST(EnginePrefixCache, HitsAfterPreemptionEqualFullComputation) {
  const auto cases = make_cases();
  for (bool async : kModes) {
    // 20 blocks of 16 tokens (512 bytes per token in the tiny model).
    engine::Engine e(args(true, async, uint64_t(20) * kBlock * 512, 64));
    auto got = run(e, cases, all(cases.size()));
    expect_same(got, async ? "preempted, async" : "preempted");
    EXPECT_GT(e.scheduler().num_preemptions(), 0) << "the budget was meant to force preemptions";
    EXPECT_GT(e.scheduler().prefix_stats().hit_tokens, 0);
    EXPECT_GT(e.block_manager().counters().evictions, 0);
  }
}

// --no-prefix-caching: no block is kept, nothing hits.
TEST(EnginePrefixCache, OffMeansNoHits) {
  const auto cases = make_cases();
  engine::Engine e(args(false, true));
  auto got = run(e, cases, all(cases.size()));
  run(e, cases, all(cases.size()));
  expect_same(got, "caching off");
  EXPECT_EQ(e.scheduler().prefix_stats().hit_tokens, 0);
  EXPECT_EQ(e.block_manager().num_cached_blocks(), 0);
  for (auto& [i, r] : got) EXPECT_EQ(r.cached_tokens, 0);
}

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "gannet_prefix_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  return d;
}

std::vector<std::filesystem::path> block_files(const std::string& dir) {
  std::vector<std::filesystem::path> v;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".kvb") v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

EngineArgs disk_args(const std::string& dir, uint64_t kv_bytes, bool async) {
  EngineArgs a = args(true, async, kv_bytes);
  a.prefix_cache_dir = dir;
  return a;
}

// Sequentially, each request alone (the hits the disk tier can give).
std::map<int, Result> run_each(engine::Engine& e, const std::vector<Case>& cases) {
  std::map<int, Result> got;
  for (int i = 0; i < int(cases.size()); ++i) got[i] = run(e, cases, {i}).at(i);
  return got;
}

}  // namespace

// Blocks evicted from a small memory cache go to disk and come back on later hits; what
// memory still holds at shutdown is saved, so a restarted engine starts with hits. Both
// runs are bit-identical to full computation.
TEST(EnginePrefixCache, DiskTierServesEvictedBlocksAndSurvivesRestart) {
  const auto cases = make_cases();
  const std::string dir = fresh_dir("restart");
  const uint64_t kv = uint64_t(12) * kBlock * 512;  // 12 blocks: most cached blocks get evicted
  for (bool async : kModes) {
    std::filesystem::remove_all(dir);
    {
      engine::Engine e(disk_args(dir, kv, async));
      auto got = run_each(e, cases);
      expect_same(got, async ? "disk tier, async" : "disk tier");
      e.disk_tier()->flush();
      EXPECT_GT(e.disk_tier()->stats().writes, 10);
      EXPECT_GT(e.scheduler().prefix_stats().disk_hit_blocks, 0) << "evicted blocks should come back from disk";
    }
    engine::Engine e(disk_args(dir, kv, async));
    auto got = run_each(e, cases);
    expect_same(got, async ? "after restart, async" : "after restart");
    EXPECT_EQ(got[0].cached_tokens, int64_t(cases[0].prompt.size() - 1) / kBlock * kBlock)
        << "the first request hits the previous run's blocks";
    EXPECT_EQ(got[16].cached_tokens, 32);
    EXPECT_GT(e.disk_tier()->stats().hits, 10);
    EXPECT_EQ(e.disk_tier()->stats().corrupt, 0);
  }
  std::filesystem::remove_all(dir);
}

// Under load: the blocks a batch needs are on disk only (a previous run saved them; memory
// holds few), and requests are admitted while steps run (asynchronous scheduling, a small
// token budget). Disk hits are read ahead off the engine thread and filled into blocks by
// the plan that takes them, so they work while steps are in flight (before, reads waited
// for an idle engine), and the outputs are those of full computation.
TEST(EnginePrefixCache, DiskHitsWorkUnderLoad) {
  const auto cases = make_cases();
  const std::string dir = fresh_dir("load");
  const uint64_t kv = uint64_t(24) * kBlock * 512;
  {
    engine::Engine e(disk_args(dir, kv, true));
    expect_same(run_each(e, cases), "filling the disk tier");
  }
  for (bool async : kModes) {
    EngineArgs a = disk_args(dir, kv, async);
    a.max_num_batched_tokens = 40;
    engine::Engine e(a);
    auto got = run(e, cases, all(cases.size()));
    expect_same(got, async ? "batch from disk, async" : "batch from disk");
    const engine::PrefixCacheStats& st = e.scheduler().prefix_stats();
    EXPECT_GT(st.disk_hit_blocks, 10);
    if (async) EXPECT_GT(st.disk_hit_blocks_in_flight, 5) << "disk hits while steps are in flight";
    else EXPECT_EQ(st.disk_hit_blocks_in_flight, 0);
    EXPECT_GT(got[0].cached_tokens, 0) << "the first request hits the previous run's blocks";
    EXPECT_EQ(e.disk_tier()->stats().corrupt, 0);
  }
  std::filesystem::remove_all(dir);
}

// Corrupt and truncated files are detected by their checksums and sizes, deleted and
// never used: the results stay exact, computed instead.
TEST(EnginePrefixCache, CorruptDiskBlocksAreDroppedNeverUsed) {
  const auto cases = make_cases();
  const std::string dir = fresh_dir("corrupt");
  const uint64_t kv = uint64_t(12) * kBlock * 512;
  {
    engine::Engine e(disk_args(dir, kv, false));
    run_each(e, cases);
  }
  const auto files = block_files(dir);
  ASSERT_GT(files.size(), 20u);
  auto slurp = [](const std::filesystem::path& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  std::vector<std::string> original, broken;
  for (const auto& f : files) original.push_back(slurp(f));
  int damaged = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto size = std::filesystem::file_size(files[i]);
    if (i % 3 == 0) {  // one payload byte flipped
      std::fstream f(files[i], std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(std::streamoff(size - 100));
      char c;
      f.read(&c, 1);
      c = char(c ^ 0x10);
      f.seekp(std::streamoff(size - 100));
      f.write(&c, 1);
      ++damaged;
    } else if (i % 3 == 1) {  // cut short
      std::filesystem::resize_file(files[i], size / 2);
      ++damaged;
    }
  }
  for (const auto& f : files) broken.push_back(slurp(f));
  engine::Engine e(disk_args(dir, kv, false));
  auto got = run_each(e, cases);
  expect_same(got, "corrupt disk tier");
  e.disk_tier()->flush();
  const auto st = e.disk_tier()->stats();
  EXPECT_GT(st.corrupt, 0);
  EXPECT_GT(st.hits, 0) << "the intact third still serves";
  // Each detection deleted one damaged file (the block, computed again, may have been
  // written back since: then with its original bytes); intact files were never flagged.
  int detected = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const bool exists = std::filesystem::exists(files[i]);
    const std::string now = exists ? slurp(files[i]) : std::string();
    if (i % 3 == 2) {
      EXPECT_TRUE(!exists || now == original[i]) << files[i];
      continue;
    }
    EXPECT_TRUE(!exists || now == broken[i] || now == original[i]) << files[i];
    detected += !exists || now == original[i];
  }
  EXPECT_EQ(detected, st.corrupt);
  EXPECT_LE(st.corrupt, damaged);
  std::filesystem::remove_all(dir);
}

// A directory written by another model is ignored (counted, warned about); a budget
// smaller than what is evicted keeps the files within it, oldest removed first.
TEST(EnginePrefixCache, DiskTierIgnoresOtherModelsAndKeepsItsBudget) {
  const auto cases = make_cases();
  const std::string dir = fresh_dir("foreign");
  const uint64_t kv = uint64_t(12) * kBlock * 512;
  {
    engine::Engine e(disk_args(dir, kv, false));
    run_each(e, cases);
  }
  const size_t ours = block_files(dir).size();
  ASSERT_GT(ours, 20u);
  {
    EngineArgs a = disk_args(dir, kv, false);
    a.model = gannet::test_support::tiny_checkpoint("llama", 4);  // other weights, same shapes
    engine::Engine e(a);
    EXPECT_EQ(e.disk_tier()->stats().files, 0);
    EXPECT_EQ(e.disk_tier()->stats().foreign, int64_t(ours));
    for (int i = 0; i < 3; ++i) run(e, cases, {i});
    EXPECT_EQ(e.disk_tier()->stats().hits, 0);
  }
  {
    EngineArgs a = disk_args(dir, kv, false);
    a.kv_cache_dtype = "bf16";  // other K/V contents: another identity too
    engine::Engine e(a);
    EXPECT_EQ(e.disk_tier()->stats().files, 0);
  }
  std::filesystem::remove_all(dir);
  {
    EngineArgs a = disk_args(dir, kv, false);
    const uint64_t file = 8192 + 200;  // a block's bytes and its header
    a.prefix_cache_disk_size = 5 * file;
    engine::Engine e(a);
    run_each(e, cases);
    e.disk_tier()->flush();
    EXPECT_GT(e.disk_tier()->stats().removed, 0);
    EXPECT_LE(e.disk_tier()->stats().bytes, int64_t(5 * file));
  }
  std::error_code ec;
  uint64_t total = 0;
  for (const auto& f : block_files(dir)) total += std::filesystem::file_size(f, ec);
  EXPECT_LE(total, uint64_t(5 * (8192 + 200)));
  std::filesystem::remove_all(dir);
}
