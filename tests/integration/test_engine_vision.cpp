// DeepSeek-V4.1 with images in the engine (tests/golden/deepseek-v41-vision-tiny, token-id
// prompts with one placeholder per image, the golden's PNG files decoded and preprocessed
// by the engine): greedy decoding reproduces the reference's 16 ids; a request with images
// gives the same token ids and logprobs bit for bit alone, batched with text-only requests,
// with chunk budgets that split the image spans, under preemption and recompute, on 1 or
// 2 threads, async on or off; the prefix cache hits the same image and never another image
// behind the same placeholder ids; bad image input is refused by name and queues nothing.
// labels: exact sanitize
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/model.h"
#include "test_scale.h"
#include "vision/image.h"

using namespace gannet;

namespace {

std::filesystem::path golden_dir() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  return std::filesystem::path(src ? src : ".") / "tests" / "golden" / "deepseek-v41-vision-tiny";
}

const nlohmann::json& golden() {
  static const nlohmann::json g = [] {
    std::ifstream in(golden_dir() / "golden.json");
    return nlohmann::json::parse(in);
  }();
  return g;
}

const std::vector<vision::RgbImage>& images() {
  static const std::vector<vision::RgbImage> v = {vision::load_image_file((golden_dir() / "image1.png").string()),
                                                  vision::load_image_file((golden_dir() / "image2.png").string())};
  return v;
}

// The golden prompt with each image span collapsed to its one placeholder.
std::vector<int32_t> image_prompt() {
  const auto ids = golden()["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> out;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] != 496 || i == 0 || ids[i - 1] != 496 || i == 29) out.push_back(ids[i]);
  return out;
}

EngineArgs base_args(bool async) {
  EngineArgs a;
  a.async_scheduling = async;
  a.model = golden_dir().string();
  a.quiet = true;
  a.threads = 2;
  a.max_num_seqs = 16;
  a.kv_cache_memory = 16ull << 20;
  a.block_size = 16;
  a.enable_prefix_caching = 0;
  return a;
}

struct Case {
  std::vector<int32_t> prompt;
  SamplingParams params;
  bool with_images = false;
};

std::vector<Case> make_cases() {
  std::mt19937 rng(5);
  std::vector<Case> cases;
  for (int i = 0; i < test_support::scaled(8, 5); ++i) {
    Case c;
    c.with_images = i % 3 == 0;
    if (c.with_images) {
      c.prompt = image_prompt();
    } else {
      const int len = 1 + int(rng() % 40);
      for (int j = 0; j < len; ++j) c.prompt.push_back(int32_t(rng() % 480));
    }
    c.params.max_tokens = 5 + int(rng() % 6);
    c.params.logprobs = 2;
    c.params.ignore_eos = true;
    c.params.temperature = i % 2 ? 1.0 : 0.0;
    c.params.seed = 300 + uint64_t(i);
    cases.push_back(c);
  }
  return cases;
}

using Result = std::pair<std::vector<int32_t>, std::vector<float>>;

std::map<int, Result> run(engine::Engine& e, const std::vector<Case>& cases, const std::vector<int>& which) {
  for (int i : which) {
    const Case& c = cases[size_t(i)];
    if (c.with_images) e.add_request("r" + std::to_string(i), c.prompt, c.params, images());
    else e.add_request("r" + std::to_string(i), c.prompt, c.params);
  }
  std::map<int, Result> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) {
        Result r;
        r.first = o.outputs[0].token_ids;
        for (const auto& p : o.outputs[0].logprobs) {
          r.second.push_back(p.logprob);
          for (const auto& t : p.top) r.second.push_back(t.logprob);
        }
        out[std::stoi(o.request_id.substr(1))] = r;
      }
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  EXPECT_EQ(e.num_executor_rows(), 0u);
  return out;
}

std::vector<int> all(const std::vector<Case>& c) {
  std::vector<int> v;
  for (size_t i = 0; i < c.size(); ++i) v.push_back(int(i));
  return v;
}

TEST(EngineVision, GreedyWithImagesMatchesReference) {
  engine::Engine e(base_args(false));
  EXPECT_EQ(e.image_token_id(), 496);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 16;
  p.ignore_eos = true;
  e.add_request("g", image_prompt(), p, images());
  std::vector<int32_t> got, prompt;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) got = o.outputs[0].token_ids, prompt = o.prompt_token_ids;
  EXPECT_EQ(prompt, golden()["prompt_ids"].get<std::vector<int32_t>>()) << "placeholders expanded to the spans";
  EXPECT_EQ(got, golden()["greedy"]["float32_ids"].get<std::vector<int32_t>>());
}

TEST(EngineVision, ImageRequestsAreBatchChunkPreemptionAndThreadInvariant) {
  const auto cases = make_cases();
  std::map<int, Result> alone;
  {
    engine::Engine e(base_args(false));
    for (int i : all(cases)) alone[i] = run(e, cases, {i}).at(i);
  }
  for (bool async : {false, true}) {
    const std::string mode = async ? " (async on)" : " (async off)";
    engine::Engine batched(base_args(async));
    EXPECT_EQ(run(batched, cases, all(cases)), alone) << "batched" << mode;
    for (int budget : {1, 5, 13}) {  // 5 and 13 cut both spans (7-23, 29-36)
      EngineArgs a = base_args(async);
      a.max_num_batched_tokens = budget;
      engine::Engine e(a);
      EXPECT_EQ(run(e, cases, all(cases)), alone) << "chunk budget " << budget << mode;
    }
    EngineArgs a = base_args(async);
    io::ModelConfig cfg = io::load_model_config(golden_dir().string());
    io::Checkpoint ck(golden_dir().string());
    const kernels::CacheSpec spec = model::create_model(cfg, ck)->cache_spec();
    a.kv_cache_memory = 16 * uint64_t(spec.state_bytes_per_seq) + 6 * spec.bytes_per_block(16);
    engine::Engine pre(a);
    EXPECT_EQ(run(pre, cases, all(cases)), alone) << "preempted" << mode;
    EXPECT_GT(pre.scheduler().num_preemptions(), 0) << "the budget was meant to force preemptions";
    EngineArgs one = base_args(async);
    one.threads = 1;
    engine::Engine e1(one);
    EXPECT_EQ(run(e1, cases, all(cases)), alone) << "1 thread" << mode;
  }
}

// DSpark drafting (its rings seeded from rows that include image spans) and decoder
// bounded replay (keep 10 of the image prompt: the spans fall in the skipped rows) keep
// their contracts with images in the prompt: DSpark gives the plain run's bits, bounded
// replay the same bits batched and chunked through the spans.
TEST(EngineVision, DsparkAndBoundedReplayWithImages) {
  const auto cases = make_cases();
  std::map<int, Result> plain, replay;
  {
    engine::Engine e(base_args(false));
    for (int i : all(cases)) plain[i] = run(e, cases, {i}).at(i);
    EngineArgs a = base_args(false);
    a.yoco_keep_tokens = 10;
    engine::Engine er(a);
    for (int i : all(cases)) replay[i] = run(er, cases, {i}).at(i);
  }
  EXPECT_NE(replay.at(0), plain.at(0)) << "bounded replay changes the image request's results (the test is not vacuous)";
  for (bool async : {false, true}) {
    EngineArgs d = base_args(async);
    d.speculative = "dspark";
    d.num_speculative_tokens = 3;
    engine::Engine ed(d);
    EXPECT_EQ(run(ed, cases, all(cases)), plain) << "dspark" << (async ? ", async" : "");
    for (int64_t budget : {int64_t(2048), int64_t(7)}) {
      EngineArgs a = base_args(async);
      a.yoco_keep_tokens = 10;
      a.max_num_batched_tokens = budget;
      engine::Engine e(a);
      EXPECT_EQ(run(e, cases, all(cases)), replay) << "replay, budget " << budget << (async ? ", async" : "");
    }
  }
}

TEST(EngineVision, PrefixCacheKeysImageBlocksByContent) {
  EngineArgs a = base_args(false);
  a.enable_prefix_caching = 1;
  engine::Engine e(a);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 4;
  p.ignore_eos = true;
  // Long enough after the images that a hit leaves something to compute past the replay
  // the model's windows need (prefix_replay_start).
  std::vector<int32_t> prompt = image_prompt();
  for (int i = 0; i < 160; ++i) prompt.push_back(int32_t(3 + (i * 37) % 470));
  auto once = [&](const std::string& id, const std::vector<vision::RgbImage>& imgs) {
    e.add_request(id, prompt, p, imgs);
    std::pair<std::vector<int32_t>, int64_t> r;
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) r = {o.outputs[0].token_ids, o.metrics.cached_tokens};
    return r;
  };
  const auto first = once("a", images());
  EXPECT_EQ(first.second, 0);
  const auto again = once("b", images());
  EXPECT_GT(again.second, 0) << "the same images hit";
  EXPECT_EQ(again.first, first.first);
  // Another first image (mirrored) behind the same placeholder ids: the first block holds
  // its span from position 7, so nothing may hit.
  std::vector<vision::RgbImage> other = images();
  other[0] = vision::apply_orientation(other[0], 2);
  const auto diff = once("c", other);
  EXPECT_EQ(diff.second, 0) << "another image must not hit the first one's blocks";
  engine::Engine fresh(base_args(false));
  fresh.add_request("d", prompt, p, other);
  std::vector<int32_t> want;
  while (fresh.has_unfinished())
    for (RequestOutput& o : fresh.step())
      if (o.finished) want = o.outputs[0].token_ids;
  EXPECT_EQ(diff.first, want);
}

TEST(EngineVision, BadImageInputIsRefusedByName) {
  EngineArgs a = base_args(false);
  a.limit_images_per_prompt = 1;
  engine::Engine e(a);
  SamplingParams p;
  p.max_tokens = 2;
  auto error_of = [&](const std::vector<int32_t>& prompt, const std::vector<vision::RgbImage>& imgs) -> std::string {
    try {
      e.add_request("x", prompt, p, imgs);
    } catch (const Error& err) {
      return err.what();
    }
    return "";
  };
  std::vector<int32_t> one = {0, 5, 496, 7};
  EXPECT_NE(error_of(image_prompt(), images()).find("--limit-images-per-prompt"), std::string::npos);
  EXPECT_NE(error_of(one, {}).find("no images were given"), std::string::npos);
  EXPECT_NE(error_of({0, 5, 7}, {images()[0]}).find("placeholder"), std::string::npos);
  EXPECT_FALSE(e.has_unfinished());
  // A text-only V4.1 checkpoint takes no images.
  EngineArgs t = base_args(false);
  t.model = (golden_dir().parent_path() / "deepseek-v41-tiny").string();
  engine::Engine text(t);
  EXPECT_LT(text.image_token_id(), 0);
  try {
    text.add_request("y", one, p, {images()[0]});
    ADD_FAILURE() << "accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("takes no images"), std::string::npos) << err.what();
  }
}

}  // namespace
