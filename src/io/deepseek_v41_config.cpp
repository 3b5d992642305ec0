#include "io/deepseek_v41_config.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/quant_config.h"

namespace gannet::io {

using nlohmann::json;
using namespace json_fields;

namespace {

constexpr int64_t kMaxDim = int64_t(1) << 22;

std::vector<int64_t> int_list(const json& t, const char* key, const std::string& file, const std::string& where,
                              int64_t max = kMaxDim) {
  std::vector<int64_t> out;
  auto it = t.find(key);
  if (it == t.end() || it->is_null()) return out;
  if (!it->is_array()) fail(file, ": '", where, key, "' must be a list of integers, got ", it->dump());
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max)
      fail(file, ": '", where, key, "' must be a list of integers in [0, ", max, "], got ", it->dump());
    out.push_back(v.get<int64_t>());
  }
  return out;
}

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Keys of the text config that are read below, or accepted because they change nothing
// gannet computes (training-only settings, derived values transformers recomputes).
const std::set<std::string>& known_text_keys() {
  static const std::set<std::string> k = {
      "model_type", "architectures", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "q_lora_rank", "qk_rope_head_dim", "rope_theta", "compress_rope_theta",
      "rope_scaling", "max_position_embeddings", "attention_bias", "attention_dropout", "sliding_window",
      "compress_ratios", "kv_source_layer_ids", "index_source_layer_ids", "candidate_source_layer_id",
      "candidate_topk_blocks", "candidate_block_size", "index_n_heads", "index_head_dim", "index_topk", "o_groups",
      "o_lora_rank", "moe_intermediate_size", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
      "scoring_func", "gate_temp", "norm_topk_prob", "routed_scaling_factor", "topk_method", "swiglu_limit",
      "hc_mult", "hc_sinkhorn_iters", "hc_eps", "engram_layer_ids", "engram_vocab_size", "engram_num_embeddings",
      "engram_max_ngram_size", "engram_n_heads", "engram_head_dim", "engram_pad_id", "engram_pad_token_id",
      "engram_compressed_vocab_size", "num_nextn_predict_layers", "dspark_block_size", "dspark_noise_token_id",
      "dspark_target_layer_ids", "dspark_markov_rank", "dspark_n_routed_experts", "dspark_num_experts_per_tok",
      "hidden_act", "initializer_range", "rms_norm_eps", "use_cache", "tie_word_embeddings", "pad_token_id",
      "bos_token_id", "eos_token_id", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
      "layer_types", "torch_dtype", "dtype", "quantization_config", "transformers_version", "expert_dtype",
      "_name_or_path", "num_hash_layers"};
  return k;
}

// Top-level keys of the composite config besides text_config.
const std::set<std::string>& known_top_keys() {
  static const std::set<std::string> k = {"architectures", "model_type", "quantization_config", "text_config",
                                          "vision_config", "image_token_id", "tie_word_embeddings", "bos_token_id",
                                          "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
                                          "transformers_version", "_name_or_path", "use_cache"};
  return k;
}

std::vector<int64_t> id_list(const json& j, const char* key, const std::string& file, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (it->is_number_integer()) return {it->get<int64_t>()};
  return int_list(j, key, file, where, int64_t(1) << 40);
}

void parse_vision_config(const json& v, DeepseekV41Config& c, const std::string& file) {
  const std::string w = "vision_config.";
  if (!v.is_object()) fail(file, ": 'vision_config' must be an object");
  static const std::set<std::string> known = {"model_type",        "hidden_size",      "intermediate_size",
                                              "num_hidden_layers", "num_attention_heads", "patch_size",
                                              "downsample_ratio",  "rope_theta",       "max_image_tokens",
                                              "min_pixels",        "max_wh_ratio",     "torch_dtype",
                                              "dtype",             "transformers_version"};
  for (auto it = v.begin(); it != v.end(); ++it)
    if (!known.count(it.key()))
      fail(file, ": '", w, it.key(), "' is not a DeepSeek-V4.1 vision config key gannet knows (refused rather than ignored)");
  if (const auto mt = get_string(v, "model_type", file, w); mt && *mt != "deepseek_v41_vision")
    fail(file, ": '", w, "model_type' = \"", *mt, "\" (expected deepseek_v41_vision)");
  DeepseekV41Config::Vision& x = c.vision;
  x.present = true;
  auto geti = [&](const char* key, int64_t& dst, int64_t max) {
    const int64_t val = get_int(v, {key}, file, max, w);
    if (val >= 0) dst = val;
    if (dst <= 0) fail(file, ": '", w, key, "' must be positive");
  };
  geti("hidden_size", x.hidden_size, kMaxDim);
  geti("intermediate_size", x.intermediate_size, kMaxDim);
  geti("num_hidden_layers", x.num_hidden_layers, 1024);
  geti("num_attention_heads", x.num_attention_heads, 1024);
  geti("patch_size", x.patch_size, 1024);
  geti("downsample_ratio", x.downsample_ratio, 64);
  geti("max_image_tokens", x.max_image_tokens, int64_t(1) << 24);
  geti("min_pixels", x.min_pixels, int64_t(1) << 40);
  x.rope_theta = get_double(v, "rope_theta", x.rope_theta, file, w);
  if (!(x.rope_theta > 0)) fail(file, ": '", w, "rope_theta' must be positive");
  if (const auto r = get_number(v, "max_wh_ratio", file, w)) {
    if (!(*r > 0)) fail(file, ": '", w, "max_wh_ratio' must be positive or null");
    x.max_wh_ratio = *r;
  }
  const int64_t hd = x.hidden_size / x.num_attention_heads;
  if (hd * x.num_attention_heads != x.hidden_size || hd % 4 != 0)
    fail(file, ": '", w, "hidden_size' ", x.hidden_size, " must split into num_attention_heads (", x.num_attention_heads,
         ") heads of a width divisible by 4 (the 2D RoPE's two halves of pairs)");
  if (x.max_image_tokens < 4) fail(file, ": '", w, "max_image_tokens' must be at least 4 (one row and its delimiters)");
}

}  // namespace

bool DeepseekV41Config::is_kv_source(int64_t layer) const { return contains(kv_source_layer_ids, layer); }
bool DeepseekV41Config::is_index_source(int64_t layer) const { return contains(index_source_layer_ids, layer); }

int64_t DeepseekV41Config::kv_source_of(int64_t layer) const {
  if (layer < 0 || layer >= int64_t(compress_ratios.size()) || compress_ratios[size_t(layer)] == 0) return -1;
  int64_t best = -1;
  for (int64_t s : kv_source_layer_ids)
    if (s <= layer) best = std::max(best, s);
  return best;
}

int64_t DeepseekV41Config::engram_index(int64_t layer) const {
  for (size_t i = 0; i < engram_layer_ids.size(); ++i)
    if (engram_layer_ids[i] == layer) return int64_t(i);
  return -1;
}

DeepseekV41Config parse_deepseek_v41_config(const json& j, const std::string& file) {
  DeepseekV41Config c;
  const bool composite = j.contains("text_config");
  std::string w = composite ? "text_config." : "";
  if (composite) {
    if (!j["text_config"].is_object()) fail(file, ": 'text_config' must be an object");
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!known_top_keys().count(it.key()))
        fail(file, ": '", it.key(), "' is not a DeepSeek-V4.1 config key gannet knows (refused rather than ignored)");
  }
  const json& t = composite ? j["text_config"] : j;
  for (auto it = t.begin(); it != t.end(); ++it)
    if (!known_text_keys().count(it.key()))
      fail(file, ": '", w, it.key(), "' is not a DeepSeek-V4.1 config key gannet knows (refused rather than ignored)");

  auto geti = [&](const char* key, int64_t& dst, int64_t max = kMaxDim) {
    const int64_t v = get_int(t, {key}, file, max, w);
    if (v >= 0) dst = v;
  };
  auto getd = [&](const char* key, double& dst) { dst = get_double(t, key, dst, file, w); };
  geti("vocab_size", c.vocab_size, int64_t(1) << 24);
  geti("hidden_size", c.hidden_size);
  geti("num_hidden_layers", c.num_hidden_layers, 4096);
  geti("num_attention_heads", c.num_attention_heads, 4096);
  geti("head_dim", c.head_dim);
  geti("qk_rope_head_dim", c.qk_rope_head_dim);
  geti("q_lora_rank", c.q_lora_rank);
  geti("o_groups", c.o_groups, 4096);
  geti("o_lora_rank", c.o_lora_rank);
  geti("sliding_window", c.sliding_window, int64_t(1) << 24);
  geti("candidate_topk_blocks", c.candidate_topk_blocks, int64_t(1) << 30);
  geti("candidate_block_size", c.candidate_block_size, int64_t(1) << 20);
  geti("index_n_heads", c.index_n_heads, 4096);
  geti("index_head_dim", c.index_head_dim);
  geti("index_topk", c.index_topk, int64_t(1) << 30);
  getd("rope_theta", c.rope_theta);
  getd("compress_rope_theta", c.compress_rope_theta);
  geti("max_position_embeddings", c.max_position_embeddings, int64_t(1) << 30);
  geti("n_routed_experts", c.n_routed_experts, 1 << 16);
  geti("num_experts_per_tok", c.num_experts_per_tok, 1 << 16);
  geti("n_shared_experts", c.n_shared_experts, 64);
  geti("moe_intermediate_size", c.moe_intermediate_size);
  getd("gate_temp", c.gate_temp);
  c.norm_topk_prob = get_bool(t, "norm_topk_prob", c.norm_topk_prob, file, w);
  getd("routed_scaling_factor", c.routed_scaling_factor);
  getd("swiglu_limit", c.swiglu_limit);
  geti("hc_mult", c.hc_mult, 64);
  geti("hc_sinkhorn_iters", c.hc_sinkhorn_iters, 1 << 16);
  getd("hc_eps", c.hc_eps);
  getd("rms_norm_eps", c.rms_norm_eps);
  geti("engram_vocab_size", c.engram_vocab_size, int64_t(1) << 40);
  geti("engram_max_ngram_size", c.engram_max_ngram_size, 64);
  geti("engram_n_heads", c.engram_n_heads, 4096);
  geti("engram_head_dim", c.engram_head_dim);
  geti("engram_compressed_vocab_size", c.engram_compressed_vocab_size, int64_t(1) << 30);
  geti("num_nextn_predict_layers", c.num_nextn_predict_layers, 64);
  geti("dspark_block_size", c.dspark_block_size, 4096);
  geti("dspark_noise_token_id", c.dspark_noise_token_id, int64_t(1) << 30);
  geti("dspark_markov_rank", c.dspark_markov_rank);
  geti("dspark_n_routed_experts", c.dspark_n_routed_experts, 1 << 16);
  geti("dspark_num_experts_per_tok", c.dspark_num_experts_per_tok, 1 << 16);

  // The pad id: the released config spells it engram_pad_id, the spec engram_pad_token_id.
  {
    const int64_t a = get_int(t, {"engram_pad_id"}, file, int64_t(1) << 30, w);
    const int64_t b = get_int(t, {"engram_pad_token_id"}, file, int64_t(1) << 30, w);
    if (a >= 0 && b >= 0 && a != b)
      fail(file, ": '", w, "engram_pad_id' (", a, ") and '", w, "engram_pad_token_id' (", b, ") disagree");
    if (a >= 0) c.engram_pad_id = a;
    else if (b >= 0) c.engram_pad_id = b;
  }

  for (const char* k : {"hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "q_lora_rank",
                        "o_groups", "o_lora_rank", "sliding_window", "vocab_size", "moe_intermediate_size",
                        "n_routed_experts", "num_experts_per_tok", "hc_mult", "hc_sinkhorn_iters"}) {
    const int64_t v = get_int(t, {k}, file, int64_t(1) << 40, w);
    if (v == 0) fail(file, ": '", w, k, "' must be positive");
  }
  const int64_t kv_heads = get_int(t, {"num_key_value_heads"}, file, 4096, w);
  if (kv_heads >= 0 && kv_heads != 1)
    fail(file, ": '", w, "num_key_value_heads' = ", kv_heads, " is not supported (V4.1 attention has one shared K=V head)");
  if (get_bool(t, "attention_bias", false, file, w)) fail(file, ": '", w, "attention_bias' = true is not supported");
  if (get_bool(t, "tie_word_embeddings", false, file, w) || get_bool(j, "tie_word_embeddings", false, file))
    fail(file, ": 'tie_word_embeddings' = true is not supported (V4.1 has its own head.weight)");
  if (auto act = get_string(t, "hidden_act", file, w); act && *act != "silu")
    fail(file, ": '", w, "hidden_act' = \"", *act, "\" is not supported (silu)");
  if (auto tm = get_string(t, "topk_method", file, w); tm && *tm != "noaux_tc")
    fail(file, ": '", w, "topk_method' = \"", *tm, "\" is not supported (noaux_tc)");
  if (auto sf = get_string(t, "scoring_func", file, w)) {
    if (*sf != "sqrtsoftplus" && *sf != "softmax" && *sf != "sigmoid")
      fail(file, ": '", w, "scoring_func' = \"", *sf, "\" is not supported (sqrtsoftplus, softmax, sigmoid)");
    c.scoring_func = *sf;
  }
  if (get_int(t, {"num_hash_layers"}, file, 4096, w) > 0)
    fail(file, ": '", w, "num_hash_layers' > 0 (hash-routed MoE) is not part of V4.1");
  if (c.head_dim % 2 || c.qk_rope_head_dim % 2 || c.qk_rope_head_dim > c.head_dim)
    fail(file, ": '", w, "qk_rope_head_dim' must be even and at most head_dim");
  if (c.qk_rope_head_dim > c.index_head_dim)
    fail(file, ": '", w, "qk_rope_head_dim' (", c.qk_rope_head_dim, ") exceeds index_head_dim (", c.index_head_dim, ")");
  if (c.num_attention_heads % c.o_groups)
    fail(file, ": '", w, "num_attention_heads' (", c.num_attention_heads, ") must be a multiple of o_groups (", c.o_groups, ")");
  if (c.num_experts_per_tok > c.n_routed_experts)
    fail(file, ": '", w, "num_experts_per_tok' exceeds n_routed_experts");
  if (!(c.gate_temp > 0)) fail(file, ": '", w, "gate_temp' must be positive");
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) fail(file, ": '", w, "rms_norm_eps' must be in (0, 1)");
  if (!(c.hc_eps >= 0 && c.hc_eps < 1)) fail(file, ": '", w, "hc_eps' must be in [0, 1)");
  if (!(c.swiglu_limit >= 0)) fail(file, ": '", w, "swiglu_limit' must not be negative");

  // Layer schedule, as transformers derives and checks it.
  const int64_t n = c.num_hidden_layers, n_next = c.num_nextn_predict_layers;
  std::vector<int64_t> ratios = int_list(t, "compress_ratios", file, w, int64_t(1) << 20);
  const std::vector<int64_t> released = [] {
    std::vector<int64_t> r = {0, 0};
    r.insert(r.end(), 18, 2);
    r.insert(r.end(), 20, 1);
    return r;
  }();
  if (!t.contains("compress_ratios") || t["compress_ratios"].is_null()) {
    if (n == int64_t(released.size())) ratios = released;
    else {
      const int64_t slide = std::min<int64_t>(2, n), enc = std::max<int64_t>(0, (n - slide + 1) / 2);
      ratios.assign(size_t(slide), 0);
      ratios.insert(ratios.end(), size_t(enc), 2);
      ratios.insert(ratios.end(), size_t(std::max<int64_t>(0, n - slide - enc)), 1);
    }
  }
  if (int64_t(ratios.size()) < n)
    fail(file, ": '", w, "compress_ratios' needs at least num_hidden_layers (", n, ") entries, got ", ratios.size());
  if (int64_t(ratios.size()) > n + n_next)
    fail(file, ": '", w, "compress_ratios' has ", ratios.size(), " entries for ", n, " layers + ", n_next,
         " DSpark layers");
  for (int64_t i = n; i < int64_t(ratios.size()); ++i)
    if (ratios[size_t(i)] != 0)
      fail(file, ": '", w, "compress_ratios[", i, "]' = ", ratios[size_t(i)], ": DSpark layers are window-only (0)");
  ratios.resize(size_t(n + n_next), 0);
  c.compress_ratios = ratios;
  const std::vector<int64_t> backbone(ratios.begin(), ratios.begin() + n);
  for (int64_t i = 0; i < n; ++i)
    if (backbone[size_t(i)] > 2)
      fail(file, ": '", w, "compress_ratios[", i, "]' = ", backbone[size_t(i)],
           " is not supported (V4.1 pools 2 tokens at most; 0 window only, 1 one entry per token)");

  const bool has_kv = t.contains("kv_source_layer_ids") && !t["kv_source_layer_ids"].is_null();
  c.kv_source_layer_ids = int_list(t, "kv_source_layer_ids", file, w, 4096);
  if (!has_kv) {
    if (std::vector<int64_t>(released.begin(), released.begin() + std::min<size_t>(released.size(), size_t(n))) ==
            backbone &&
        n == int64_t(released.size()))
      c.kv_source_layer_ids = {2, 8, 14, 20};
    else
      for (int64_t i = 0; i < n; ++i)
        if (backbone[size_t(i)] > 0 && (i == 0 || backbone[size_t(i - 1)] != backbone[size_t(i)]))
          c.kv_source_layer_ids.push_back(i);
  }
  const bool has_index = t.contains("index_source_layer_ids") && !t["index_source_layer_ids"].is_null();
  c.index_source_layer_ids = int_list(t, "index_source_layer_ids", file, w, 4096);
  if (!has_index)
    c.index_source_layer_ids = c.kv_source_layer_ids == std::vector<int64_t>{2, 8, 14, 20}
                                   ? std::vector<int64_t>{2, 8, 14, 20, 24, 28, 32, 36}
                                   : c.kv_source_layer_ids;
  for (int64_t s : c.kv_source_layer_ids) {
    if (s >= n) fail(file, ": '", w, "kv_source_layer_ids' entry ", s, " is not a layer (0..", n - 1, ")");
    if (backbone[size_t(s)] == 0) fail(file, ": '", w, "kv_source_layer_ids' entry ", s, " has compress ratio 0");
  }
  for (int64_t s : c.index_source_layer_ids) {
    if (s >= n) fail(file, ": '", w, "index_source_layer_ids' entry ", s, " is not a layer (0..", n - 1, ")");
    if (backbone[size_t(s)] == 0) fail(file, ": '", w, "index_source_layer_ids' entry ", s, " has compress ratio 0");
    bool ok = false;
    for (int64_t k : c.kv_source_layer_ids) ok |= k <= s;
    if (!ok) fail(file, ": '", w, "index_source_layer_ids' entry ", s, " has no KV source at or before it");
  }
  for (int64_t i = 0; i < n; ++i)
    if (backbone[size_t(i)] > 0 && c.kv_source_of(i) < 0)
      fail(file, ": layer ", i, " has a compressed branch but no 'kv_source_layer_ids' entry at or before it");
  for (int64_t i = 0; i < n; ++i) {
    // A layer reads the compressed entries of its source: their ratio must be its own.
    const int64_t s = c.kv_source_of(i);
    if (s >= 0 && backbone[size_t(s)] != backbone[size_t(i)])
      fail(file, ": layer ", i, " (compress ratio ", backbone[size_t(i)], ") reads KV source ", s,
           " of compress ratio ", backbone[size_t(s)]);
  }
  {
    auto it = t.find("candidate_source_layer_id");
    const bool negative = it != t.end() && it->is_number_integer() && it->get<int64_t>() < 0;
    const int64_t cs = negative ? -1 : get_int(t, {"candidate_source_layer_id"}, file, 4096, w);
    if (negative) c.candidate_source_layer_id = -1;
    else if (cs >= 0) c.candidate_source_layer_id = cs;
    else c.candidate_source_layer_id = c.kv_source_layer_ids.empty() ? -1 : c.kv_source_layer_ids.back();
    if (c.candidate_source_layer_id >= 0 && !c.is_index_source(c.candidate_source_layer_id))
      fail(file, ": '", w, "candidate_source_layer_id' (", c.candidate_source_layer_id,
           ") must be one of index_source_layer_ids");
  }
  if (c.candidate_block_size <= 0 || c.candidate_topk_blocks <= 0 || c.index_topk <= 0)
    fail(file, ": '", w, "candidate_block_size', 'candidate_topk_blocks' and 'index_topk' must be positive");

  c.dspark_target_layer_ids = int_list(t, "dspark_target_layer_ids", file, w, 4096);
  if (!t.contains("dspark_target_layer_ids") || t["dspark_target_layer_ids"].is_null()) {
    std::vector<int64_t> cand;
    for (int64_t i = 0; i < n; ++i)
      if (!c.is_kv_source(i)) cand.push_back(i);
    if (cand.size() > 3) cand.erase(cand.begin(), cand.end() - 3);
    c.dspark_target_layer_ids = cand;
  }
  for (int64_t s : c.dspark_target_layer_ids)
    if (s >= n) fail(file, ": '", w, "dspark_target_layer_ids' entry ", s, " is not a layer");

  c.engram_layer_ids = int_list(t, "engram_layer_ids", file, w, 4096);
  c.engram_num_embeddings = int_list(t, "engram_num_embeddings", file, w, int64_t(1) << 40);
  if (c.engram_num_embeddings.empty()) c.engram_num_embeddings.assign(c.engram_layer_ids.size(), 0);
  if (c.engram_num_embeddings.size() != c.engram_layer_ids.size())
    fail(file, ": '", w, "engram_num_embeddings' (", c.engram_num_embeddings.size(),
         " entries) must match engram_layer_ids (", c.engram_layer_ids.size(), ")");
  for (int64_t l : c.engram_layer_ids)
    if (l >= n) fail(file, ": '", w, "engram_layer_ids' entry ", l, " is not a layer");
  if (!c.engram_layer_ids.empty() && (c.engram_max_ngram_size < 2 || c.engram_n_heads <= 0 || c.engram_head_dim <= 0))
    fail(file, ": '", w, "engram_max_ngram_size' must be at least 2 and engram_n_heads / engram_head_dim positive");

  // RoPE: the main table is plain rope_theta; rope_scaling (YaRN) shapes only the compress
  // table, with no attention factor unless the config sets one (transformers' V4.1).
  {
    json r = json::object();
    r["rope_theta"] = c.compress_rope_theta;
    if (t.contains("rope_scaling") && !t["rope_scaling"].is_null()) r["rope_scaling"] = t["rope_scaling"];
    const RopeConfig rc = parse_rope_config(r, c.qk_rope_head_dim, c.max_position_embeddings, file);
    c.compress_scaling = rc.scaling;
    if (c.compress_scaling.kind == RopeScaling::Kind::kYarn && c.compress_scaling.attention_factor == 0.0)
      c.compress_scaling.attention_factor = 1.0;
  }

  // Token ids: text_config first, then the top level.
  c.bos_token_id = get_int(t, {"bos_token_id"}, file, int64_t(1) << 30, w);
  if (c.bos_token_id < 0) c.bos_token_id = get_int(j, {"bos_token_id"}, file, int64_t(1) << 30);
  c.eos_token_ids = id_list(t, "eos_token_id", file, w);
  if (c.eos_token_ids.empty()) c.eos_token_ids = id_list(j, "eos_token_id", file, "");

  // The vision tower (composite configs only) and the image placeholder id.
  if (composite && j.contains("vision_config") && !j["vision_config"].is_null()) {
    parse_vision_config(j["vision_config"], c, file);
    c.image_token_id = 129264;  // transformers' DeepseekV41Config default (the release)
  }
  if (const int64_t id = get_int(j, {"image_token_id"}, file, int64_t(1) << 30); id >= 0) {
    if (id >= c.vocab_size) fail(file, ": 'image_token_id' ", id, " is outside the vocabulary (", c.vocab_size, ")");
    c.image_token_id = id;
  }

  // quantization_config (top level, or inside a flat config): fp8 32x32 E8M0, experts fp4.
  const json* q = nullptr;
  if (j.contains("quantization_config") && !j["quantization_config"].is_null()) q = &j["quantization_config"];
  else if (t.contains("quantization_config") && !t["quantization_config"].is_null()) q = &t["quantization_config"];
  if (q) {
    if (!q->is_object()) fail(file, ": 'quantization_config' must be an object");
    json rest = *q;
    if (rest.contains("expert_dtype")) {
      if (!rest["expert_dtype"].is_string() || rest["expert_dtype"] != "fp4")
        fail(file, ": 'quantization_config.expert_dtype' = ", rest["expert_dtype"].dump(),
             " is not supported (fp4: MXFP4 routed experts)");
      rest.erase("expert_dtype");
    }
    const WeightQuantization wq = parse_quantization_config(rest, file);
    if (wq.method != WeightQuantization::Method::kFp8Block)
      fail(file, ": 'quantization_config.quant_method' must be fp8 for DeepSeek-V4.1");
    c.weight_block = wq.block;
  }
  return c;
}

}  // namespace gannet::io
