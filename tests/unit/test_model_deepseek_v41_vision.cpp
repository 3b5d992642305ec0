// DeepSeek-V4.1 with images (model/deepseek_v41/vision + the backbone's image spans)
// against tests/golden/deepseek-v41-vision-tiny (transformers' image-text-to-text model in
// float32): the ViT's output and the aligner's rows from the reference pixel values, the
// merged input embeddings, the logits at all 46 positions (router bias_vl and Engram DEAD
// spans in play) and the 16 greedy ids; and the invariants: an image's rows do not depend
// on the other images, and any chunking of the prompt (spans split included) gives the same
// bits as one call.
// labels: exact
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/deepseek_v41/model.h"

namespace {

using gannet::model::deepseek_v41::DeepseekV41;
using gannet::model::deepseek_v41::SeqState;

std::filesystem::path golden_dir() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  return std::filesystem::path(src ? src : ".") / "tests" / "golden" / "deepseek-v41-vision-tiny";
}

nlohmann::json load_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

struct Fixture {
  gannet::io::ModelConfig cfg = gannet::io::load_model_config(golden_dir().string());
  gannet::io::Checkpoint ckpt{golden_dir().string()};
  DeepseekV41 model{cfg, ckpt};
  nlohmann::json golden = load_json(golden_dir() / "golden.json");
  std::map<std::string, std::vector<float>> ref;  // vision_reference.safetensors, F32 arrays
  Fixture() {
    gannet::io::SafetensorsFile f((golden_dir() / "vision_reference.safetensors").string());
    for (const auto& t : f.tensors()) {
      if (t.dtype != gannet::DType::F32) continue;
      std::vector<float> v(size_t(t.numel()));
      std::memcpy(v.data(), f.tensor_data(t), v.size() * 4);
      ref[t.name] = std::move(v);
    }
  }
  std::vector<int32_t> prompt() const { return golden["prompt_ids"].get<std::vector<int32_t>>(); }
  // The two images' spans, encoded from the reference pixel values.
  std::vector<std::vector<float>> spans() const {
    const auto* enc = model.vision();
    const float* px = ref.at("pixel_values").data();
    return {enc->encode(px, 8, 11, nullptr), enc->encode(px + 88 * 588, 6, 4, nullptr)};
  }
  // Per prompt row: its span row, or null.
  std::vector<const float*> embeds(const std::vector<std::vector<float>>& s) const {
    std::vector<const float*> e(prompt().size(), nullptr);
    const int64_t D = model.config().hidden_size;
    for (size_t i = 0; i < 2; ++i) {
      const int64_t start = golden["image_spans"][i]["span_start"], len = golden["image_spans"][i]["span_length"];
      for (int64_t j = 0; j < len; ++j) e[size_t(start + j)] = s[i].data() + j * D;
    }
    return e;
  }
};

Fixture& fx() {
  static Fixture f;
  return f;
}

int64_t argmax(const float* x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[b]) b = i;
  return b;
}

double max_diff(const float* a, const float* b, size_t n) {
  double w = 0;
  for (size_t i = 0; i < n; ++i) w = std::max(w, std::fabs(double(a[i]) - double(b[i])));
  return w;
}

TEST(ModelDeepseekV41Vision, ConfigAndWeights) {
  const auto& c = fx().model.config();
  ASSERT_TRUE(c.vision.present);
  EXPECT_EQ(c.vision.hidden_size, 64);
  EXPECT_EQ(c.vision.num_hidden_layers, 2);
  EXPECT_EQ(c.vision.max_image_tokens, 64);
  EXPECT_EQ(c.vision.min_pixels, 3136);
  EXPECT_EQ(c.image_token_id, 496);
  ASSERT_NE(fx().model.vision(), nullptr);
  EXPECT_EQ(fx().model.vision()->span_tokens(8, 11), 17);
  EXPECT_EQ(fx().model.vision()->span_tokens(6, 4), 8);
}

// Every vision key is honoured or refused by name.
TEST(ModelDeepseekV41Vision, ConfigRefusesUnknownAndBadVisionKeys) {
  const nlohmann::json base = load_json(golden_dir() / "config.json");
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) -> std::string {
    nlohmann::json j = base;
    edit(j);
    try {
      (void)gannet::io::parse_deepseek_v41_config(j, "config.json");
    } catch (const gannet::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of([](nlohmann::json&) {}), "");
  EXPECT_NE(error_of([](nlohmann::json& j) { j["vision_config"]["spatial_merge_size"] = 2; })
                .find("vision_config.spatial_merge_size"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) { j["vision_config"]["num_attention_heads"] = 5; }).find("hidden_size"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) { j["vision_config"]["model_type"] = "siglip"; }).find("model_type"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) { j["image_token_id"] = 100000; }).find("image_token_id"), std::string::npos);
  // Without vision_config the checkpoint is text-only, whatever image_token_id says.
  nlohmann::json text = base;
  text.erase("vision_config");
  EXPECT_FALSE(gannet::io::parse_deepseek_v41_config(text, "config.json").vision.present);
}

TEST(ModelDeepseekV41Vision, VitAndAlignerMatchReference) {
  auto& f = fx();
  const auto* enc = f.model.vision();
  const float* px = f.ref.at("pixel_values").data();
  gannet::ThreadPool pool(2);
  const std::vector<float> v1 = enc->vit(px, 8, 11, &pool), v2 = enc->vit(px + 88 * 588, 6, 4, nullptr);
  const std::vector<float>& want = f.ref.at("vit_last_hidden_state");
  EXPECT_LT(max_diff(v1.data(), want.data(), v1.size()), 2e-5);
  EXPECT_LT(max_diff(v2.data(), want.data() + 88 * 64, v2.size()), 2e-5);
  const std::vector<float> a1 = enc->align(v1.data(), 8, 11, nullptr), a2 = enc->align(v2.data(), 6, 4, &pool);
  ASSERT_EQ(a1.size(), f.ref.at("aligner_rows.image1").size());
  ASSERT_EQ(a2.size(), f.ref.at("aligner_rows.image2").size());
  EXPECT_LT(max_diff(a1.data(), f.ref.at("aligner_rows.image1").data(), a1.size()), 2e-5);
  EXPECT_LT(max_diff(a2.data(), f.ref.at("aligner_rows.image2").data(), a2.size()), 2e-5);
  // An image's rows are the same bits whatever thread count (and alone, as always).
  const std::vector<float> v1b = enc->vit(px, 8, 11, nullptr);
  EXPECT_EQ(std::memcmp(v1.data(), v1b.data(), v1.size() * 4), 0);
}

TEST(ModelDeepseekV41Vision, MergedEmbeddingsMatchReference) {
  auto& f = fx();
  const auto s = f.spans();
  const auto e = f.embeds(s);
  const int64_t D = f.model.config().hidden_size;
  const std::vector<float>& want = f.ref.at("inputs_embeds_merged");
  const auto mask = f.golden["image_mask"].get<std::vector<int>>();
  for (size_t p = 0; p < e.size(); ++p) {
    EXPECT_EQ(e[p] != nullptr, mask[p] != 0) << p;
    if (e[p]) {
      EXPECT_LT(max_diff(e[p], want.data() + int64_t(p) * D, size_t(D)), 2e-5) << "position " << p;
    }
  }
}

TEST(ModelDeepseekV41Vision, PromptLogitsMatchReference) {
  auto& f = fx();
  const auto p = f.prompt();
  const auto s = f.spans();
  const auto e = f.embeds(s);
  const int64_t n = int64_t(p.size()), V = f.model.config().vocab_size;
  std::vector<float> logits(size_t(n * V));
  SeqState st = f.model.new_state(128);
  gannet::ThreadPool pool(2);
  f.model.forward(st, p.data(), n, logits.data(), &pool, 0, e.data());
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& ref = f.golden["logits_float32"][size_t(i)];
    for (int64_t v = 0; v < V; ++v)
      worst = std::max(worst, std::fabs(double(logits[size_t(i * V + v)]) - ref[size_t(v)].get<double>()));
    if (f.golden["margins_float32"][size_t(i)].get<double>() > 2e-2) {
      EXPECT_EQ(argmax(logits.data() + i * V, V), f.golden["top1_float32"][size_t(i)].get<int64_t>()) << "position " << i;
    }
  }
  std::printf("max |logit - reference| over %lld positions: %.3g\n", (long long)n, worst);
  EXPECT_LT(worst, 1e-2);
}

TEST(ModelDeepseekV41Vision, GreedyDecodeMatchesReference) {
  auto& f = fx();
  const auto p = f.prompt();
  const auto s = f.spans();
  const auto e = f.embeds(s);
  const int64_t V = f.model.config().vocab_size;
  SeqState st = f.model.new_state(128);
  std::vector<float> logits(p.size() * size_t(V));
  f.model.forward(st, p.data(), int64_t(p.size()), logits.data(), nullptr, 0, e.data());
  int32_t next = int32_t(argmax(logits.data() + (int64_t(p.size()) - 1) * V, V));
  const auto& want = f.golden["greedy"]["float32_ids"];
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(next, want[k].get<int32_t>()) << "greedy step " << k;
    std::vector<float> l(static_cast<size_t>(V));
    f.model.forward(st, &next, 1, l.data(), nullptr);
    next = int32_t(argmax(l.data(), V));
  }
}

// Chunks that cut through both image spans (and the window and ratio-2 groups) give the
// bits of one call, on 1 and 2 threads: the spans' Engram DEAD history and router choice
// carry across chunk boundaries.
TEST(ModelDeepseekV41Vision, ChunkingThroughSpansIsBitExact) {
  auto& f = fx();
  const auto p = f.prompt();
  const auto s = f.spans();
  const auto e = f.embeds(s);
  const int64_t n = int64_t(p.size()), V = f.model.config().vocab_size;
  std::vector<float> one(size_t(n * V));
  SeqState st = f.model.new_state(128);
  f.model.forward(st, p.data(), n, one.data(), nullptr, 0, e.data());
  gannet::ThreadPool pool(2);
  for (int64_t len : {1, 3, 5, 10}) {
    for (gannet::ThreadPool* tp : {(gannet::ThreadPool*)nullptr, &pool}) {
      SeqState c = f.model.new_state(128);
      std::vector<float> got(size_t(n * V));
      for (int64_t at = 0; at < n; at += len) {
        const int64_t k = std::min(len, n - at);
        f.model.forward(c, p.data() + at, k, got.data() + at * V, tp, 0, e.data() + at);
      }
      EXPECT_EQ(std::memcmp(one.data(), got.data(), one.size() * 4), 0) << "chunks of " << len;
    }
  }
}

// Without the image rows the same prompt ids compute something else: the spans matter
// (guards against a forward that ignores embeds).
TEST(ModelDeepseekV41Vision, TextOnlyCallDiffers) {
  auto& f = fx();
  const auto p = f.prompt();
  const int64_t n = int64_t(p.size()), V = f.model.config().vocab_size;
  std::vector<float> a(size_t(n * V)), b(size_t(n * V));
  const auto s = f.spans();
  const auto e = f.embeds(s);
  SeqState s1 = f.model.new_state(128), s2 = f.model.new_state(128);
  f.model.forward(s1, p.data(), n, a.data(), nullptr, 0, e.data());
  f.model.forward(s2, p.data(), n, b.data(), nullptr);
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

}  // namespace
