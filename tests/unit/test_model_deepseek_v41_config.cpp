// DeepSeek-V4.1 configuration: the released values (tests/fixtures/deepseek-v41-flash)
// give the cache the model card states (890 bytes per token: compressed KV 288 + index key
// 68 bytes per entry, ratio-2 sources 2, 8, 14 and the ratio-1 source 20), the Engram
// layout's primes add up to engram_num_embeddings, and fields gannet cannot honour are
// refused by name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/deepseek_v41_config.h"
#include "io/model_config.h"
#include "model/deepseek_v41/model.h"

namespace {

using nlohmann::json;

std::string fixture() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  return (std::filesystem::path(src ? src : ".") / "tests" / "fixtures" / "deepseek-v41-flash").string();
}

TEST(ModelDeepseekV41Config, ReleasedConfigCache) {
  const gannet::io::ModelConfig cfg = gannet::io::load_model_config(fixture());
  ASSERT_TRUE(cfg.deepseek_v41);
  const auto& c = *cfg.deepseek_v41;
  EXPECT_EQ(c.kv_source_layer_ids, (std::vector<int64_t>{2, 8, 14, 20}));
  EXPECT_EQ(c.candidate_source_layer_id, 20);
  EXPECT_EQ(c.compress_ratios.size(), 43u);
  EXPECT_EQ(c.compress_scaling.kind, gannet::io::RopeScaling::Kind::kYarn);
  EXPECT_EQ(c.compress_scaling.attention_factor, 1.0);  // no YaRN mscale
  const auto lay = gannet::model::deepseek_v41::make_cache_layout(c);
  EXPECT_EQ(lay.kv_bytes, 288);
  EXPECT_EQ(lay.key_bytes, 68);
  EXPECT_EQ(lay.win_bytes, 528);
  EXPECT_DOUBLE_EQ(lay.spec.bytes_per_token(), 890.0);
  EXPECT_EQ(lay.spec.bytes_per_block(16), 890u * 16);
  // 40 window rings of 128 positions dominate the state.
  EXPECT_GE(lay.spec.state_bytes_per_seq, 40 * 128 * 528);
  std::vector<int64_t> identity(static_cast<size_t>(c.vocab_size));
  for (int64_t i = 0; i < c.vocab_size; ++i) identity[size_t(i)] = i;
  const auto eng = gannet::model::deepseek_v41::make_engram_layout(c, identity);
  EXPECT_EQ(eng.rows, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(eng.primes[0][0], 16000057);  // the spec's first and last primes
  EXPECT_EQ(eng.primes[1].back(), 16000889);
  EXPECT_EQ(eng.multipliers[0][0], 76632096046245);
  const auto sz = gannet::model::deepseek_v41::size_summary(c);
  // The two Engram tables alone hold 2 x ~384M x 256 parameters.
  EXPECT_GT(sz.params, int64_t(700e9));
  EXPECT_LT(sz.params, int64_t(800e9));
}

gannet::io::DeepseekV41Config parse(const json& j) { return gannet::io::parse_deepseek_v41_config(j, "config.json"); }

std::string error_of(const json& j) {
  try {
    parse(j);
  } catch (const gannet::Error& e) {
    return e.what();
  }
  return "";
}

json tiny() {
  return json::parse(R"({"architectures": ["DeepseekV41ForCausalLM"], "text_config": {
    "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 4, "head_dim": 128,
    "qk_rope_head_dim": 32, "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64, "sliding_window": 8,
    "compress_ratios": [0, 2, 2, 1, 1, 1, 0, 0], "kv_source_layer_ids": [1, 3], "index_source_layer_ids": [1, 3, 5],
    "candidate_source_layer_id": 3, "index_n_heads": 4, "index_head_dim": 64, "index_topk": 4,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "num_nextn_predict_layers": 2}})");
}

TEST(ModelDeepseekV41Config, RefusesByName) {
  EXPECT_NO_THROW(parse(tiny()));
  json j = tiny();
  j["text_config"]["mystery_knob"] = 3;
  EXPECT_NE(error_of(j).find("'text_config.mystery_knob'"), std::string::npos) << error_of(j);
  j = tiny();
  j["text_config"]["compress_ratios"] = {0, 4, 4, 1, 1, 1, 0, 0};
  EXPECT_NE(error_of(j).find("compress_ratios[1]"), std::string::npos) << error_of(j);
  j = tiny();
  j["text_config"]["num_key_value_heads"] = 2;
  EXPECT_NE(error_of(j).find("num_key_value_heads"), std::string::npos);
  j = tiny();
  j["text_config"]["candidate_source_layer_id"] = 2;
  EXPECT_NE(error_of(j).find("candidate_source_layer_id"), std::string::npos);
  j = tiny();
  j["text_config"]["kv_source_layer_ids"] = {2, 3};  // index source 1 would read no source
  EXPECT_NE(error_of(j).find("index_source_layer_ids' entry 1 has no KV source"), std::string::npos) << error_of(j);
  j["text_config"]["index_source_layer_ids"] = {2, 3, 5};  // then layer 1 still reads none
  EXPECT_NE(error_of(j).find("layer 1 has a compressed branch"), std::string::npos) << error_of(j);
  j = tiny();
  j["text_config"]["engram_pad_id"] = 2;
  j["text_config"]["engram_pad_token_id"] = 3;
  EXPECT_NE(error_of(j).find("disagree"), std::string::npos);
  j = tiny();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}, {"expert_dtype", "fp8"}};
  EXPECT_NE(error_of(j).find("expert_dtype"), std::string::npos);
  j = tiny();
  j["text_config"]["hidden_act"] = "gelu";
  EXPECT_NE(error_of(j).find("hidden_act"), std::string::npos);
  j = tiny();
  j["text_config"]["compress_ratios"] = {0, 2, 2, 1, 1, 1, 0, 1};  // a DSpark layer with a ratio
  EXPECT_NE(error_of(j).find("compress_ratios[7]"), std::string::npos) << error_of(j);
  // The pad id may be spelled either way; both agreeing is fine.
  j = tiny();
  j["text_config"]["engram_pad_token_id"] = 5;
  EXPECT_EQ(parse(j).engram_pad_id, 5);
}

}  // namespace
