#include "io/deepseek_v4_config.h"

#include <set>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/quant_config.h"

namespace gannet::io {

using nlohmann::json;
using namespace json_fields;

DeepseekV4Config parse_deepseek_v4_config(const json& j, const std::string& file) {
  static const std::set<std::string> known = {
      "architectures", "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "qk_rope_head_dim", "q_lora_rank", "o_groups", "o_lora_rank",
      "sliding_window", "compress_ratios", "compress_rope_theta", "rope_theta", "rope_scaling",
      "max_position_embeddings", "index_n_heads", "index_head_dim", "index_topk", "n_routed_experts",
      "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size", "num_hash_layers", "scoring_func",
      "topk_method", "norm_topk_prob", "routed_scaling_factor", "swiglu_limit", "hc_mult", "hc_sinkhorn_iters",
      "hc_eps", "rms_norm_eps", "num_nextn_predict_layers", "expert_dtype", "quantization_config",
      "tie_word_embeddings", "bos_token_id", "eos_token_id", "hidden_act", "torch_dtype", "dtype",
      "transformers_version", "_name_or_path", "use_cache", "initializer_range", "attention_bias",
      "attention_dropout", "pad_token_id", "first_k_dense_replace", "n_group", "topk_group"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key()))
      fail(file, ": '", it.key(), "' is not a DeepSeek-V4 config key gannet knows (refused rather than ignored)");
  DeepseekV4Config c;
  auto geti = [&](const char* key, int64_t& dst, int64_t max = int64_t(1) << 30) {
    const int64_t v = get_int(j, {key}, file, max);
    if (v >= 0) dst = v;
  };
  for (auto [k, p] : std::initializer_list<std::pair<const char*, int64_t*>>{
           {"vocab_size", &c.vocab_size}, {"hidden_size", &c.hidden_size}, {"num_hidden_layers", &c.num_hidden_layers},
           {"num_attention_heads", &c.num_attention_heads}, {"head_dim", &c.head_dim},
           {"qk_rope_head_dim", &c.qk_rope_head_dim}, {"q_lora_rank", &c.q_lora_rank}, {"o_groups", &c.o_groups},
           {"o_lora_rank", &c.o_lora_rank}, {"sliding_window", &c.sliding_window},
           {"max_position_embeddings", &c.max_position_embeddings}, {"index_n_heads", &c.index_n_heads},
           {"index_head_dim", &c.index_head_dim}, {"index_topk", &c.index_topk},
           {"n_routed_experts", &c.n_routed_experts}, {"num_experts_per_tok", &c.num_experts_per_tok},
           {"n_shared_experts", &c.n_shared_experts}, {"moe_intermediate_size", &c.moe_intermediate_size},
           {"num_hash_layers", &c.num_hash_layers}, {"hc_mult", &c.hc_mult}, {"hc_sinkhorn_iters", &c.hc_sinkhorn_iters},
           {"num_nextn_predict_layers", &c.num_nextn_predict_layers}})
    geti(k, *p);
  c.rope_theta = get_double(j, "rope_theta", c.rope_theta, file);
  c.compress_rope_theta = get_double(j, "compress_rope_theta", c.compress_rope_theta, file);
  c.routed_scaling_factor = get_double(j, "routed_scaling_factor", c.routed_scaling_factor, file);
  c.swiglu_limit = get_double(j, "swiglu_limit", c.swiglu_limit, file);
  c.hc_eps = get_double(j, "hc_eps", c.hc_eps, file);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", c.rms_norm_eps, file);
  c.norm_topk_prob = get_bool(j, "norm_topk_prob", true, file);
  if (auto s = get_string(j, "scoring_func", file)) {
    if (*s != "sqrtsoftplus" && *s != "softmax" && *s != "sigmoid")
      fail(file, ": 'scoring_func' = \"", *s, "\" is not supported (sqrtsoftplus, softmax, sigmoid)");
    c.scoring_func = *s;
  }
  if (auto s = get_string(j, "topk_method", file); s && *s != "noaux_tc")
    fail(file, ": 'topk_method' = \"", *s, "\" is not supported (noaux_tc)");
  if (auto s = get_string(j, "hidden_act", file); s && *s != "silu")
    fail(file, ": 'hidden_act' = \"", *s, "\" is not supported (silu)");
  if (auto s = get_string(j, "expert_dtype", file); s && *s != "fp4")
    fail(file, ": 'expert_dtype' = \"", *s, "\" is not supported (fp4)");
  if (get_int(j, {"num_key_value_heads"}, file, 4096) > 1) fail(file, ": 'num_key_value_heads' must be 1");
  if (get_bool(j, "tie_word_embeddings", false, file)) fail(file, ": 'tie_word_embeddings' = true is not supported");
  if (get_bool(j, "attention_bias", false, file)) fail(file, ": 'attention_bias' = true is not supported");
  if (get_int(j, {"first_k_dense_replace"}, file) > 0) fail(file, ": 'first_k_dense_replace' > 0 is not supported");
  for (const char* k : {"n_group", "topk_group"})
    if (get_int(j, {k}, file) > 1) fail(file, ": '", k, "' > 1 (group-limited routing) is not supported");
  const int64_t n = c.num_hidden_layers;
  auto it = j.find("compress_ratios");
  if (it == j.end() || !it->is_array()) fail(file, ": 'compress_ratios' (one per layer) is missing");
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) fail(file, ": 'compress_ratios' must be non-negative integers");
    c.compress_ratios.push_back(v.get<int64_t>());
  }
  if (int64_t(c.compress_ratios.size()) < n)
    fail(file, ": 'compress_ratios' has ", c.compress_ratios.size(), " entries for ", n, " layers");
  c.compress_ratios.resize(size_t(n));  // the rest are the MTP layers (window only)
  if (c.num_hash_layers > n) fail(file, ": 'num_hash_layers' exceeds num_hidden_layers");
  if (c.head_dim % 2 || c.qk_rope_head_dim % 2 || c.qk_rope_head_dim > c.head_dim ||
      c.qk_rope_head_dim > c.index_head_dim || c.num_attention_heads % c.o_groups)
    fail(file, ": head_dim / qk_rope_head_dim / index_head_dim / o_groups are inconsistent");
  json r = json::object();
  r["rope_theta"] = c.compress_rope_theta;
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) r["rope_scaling"] = j["rope_scaling"];
  c.compress_scaling = parse_rope_config(r, c.qk_rope_head_dim, c.max_position_embeddings, file).scaling;
  if (c.compress_scaling.kind == RopeScaling::Kind::kYarn && c.compress_scaling.attention_factor == 0.0)
    c.compress_scaling.attention_factor = 1.0;
  if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
    json q = j["quantization_config"];
    q.erase("expert_dtype");
    const WeightQuantization wq = parse_quantization_config(q, file);
    if (wq.method != WeightQuantization::Method::kFp8Block)
      fail(file, ": 'quantization_config.quant_method' must be fp8 for DeepSeek-V4");
    c.weight_block = wq.block;
  }
  c.bos_token_id = get_int(j, {"bos_token_id"}, file);
  if (auto e = j.find("eos_token_id"); e != j.end() && e->is_number_integer()) c.eos_token_ids = {e->get<int64_t>()};
  return c;
}

}  // namespace gannet::io
