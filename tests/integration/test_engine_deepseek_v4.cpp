// DeepSeek-V4-Flash in the engine (tests/golden/deepseek-v4-tiny, token-id prompts): the
// reference's greedy ids with --no-kv-fake-quant, and bit-identical results alone or
// batched, one-shot or chunked (budget 3 splits ratio-4 and ratio-8 groups), async or not.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "engine/engine.h"

using namespace gannet;

namespace {

std::string model_dir() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  return (std::filesystem::path(src ? src : ".") / "tests" / "golden" / "deepseek-v4-tiny").string();
}

EngineArgs args(bool async, int64_t budget = 2048) {
  EngineArgs a;
  a.model = model_dir();
  a.quiet = true;
  a.threads = 2;
  a.max_num_seqs = 16;
  a.kv_cache_memory = 16ull << 20;
  a.block_size = 16;
  a.async_scheduling = async;
  a.max_num_batched_tokens = budget;
  a.kv_fake_quant = 0;
  return a;
}

std::map<int, std::vector<int32_t>> run(engine::Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                        const std::vector<int>& which) {
  for (int i : which) {
    SamplingParams p;
    p.max_tokens = 6;
    p.ignore_eos = true;
    p.temperature = i % 2 ? 1.0 : 0.0;
    p.seed = 40 + uint64_t(i);
    e.add_request("r" + std::to_string(i), prompts[size_t(i)], p);
  }
  std::map<int, std::vector<int32_t>> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) out[std::stoi(o.request_id.substr(1))] = o.outputs[0].token_ids;
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  return out;
}

TEST(EngineDeepseekV4, GreedyMatchesReferenceAndBatchingIsExact) {
  std::ifstream in(std::filesystem::path(model_dir()) / "golden.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json g = nlohmann::json::parse(ss.str());
  {
    engine::Engine e(args(true));
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 16;
    p.ignore_eos = true;
    e.add_request("g", g["prompt_ids"].get<std::vector<int32_t>>(), p);
    std::vector<int32_t> got;
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) got = o.outputs[0].token_ids;
    EXPECT_EQ(got, g["greedy"]["float32_ids"].get<std::vector<int32_t>>());
  }
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 10; ++i) {
    std::vector<int32_t> p;
    for (int j = 0, n = 1 + int(rng() % 50); j < n; ++j) p.push_back(int32_t(rng() % 1024));
    prompts.push_back(p);
  }
  std::map<int, std::vector<int32_t>> alone;
  {
    engine::Engine e(args(false));
    for (int i = 0; i < 10; ++i) alone[i] = run(e, prompts, {i}).at(i);
  }
  for (bool async : {false, true})
    for (int64_t budget : {int64_t(2048), int64_t(3)}) {
      engine::Engine e(args(async, budget));
      EXPECT_EQ(run(e, prompts, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), alone) << "budget " << budget << " async " << async;
    }
}

}  // namespace
